"""The ONNX backend: export -> save -> from_pretrained -> onnxruntime, compared with eager, and its workarounds."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import onnx_ir as ir
import pytest
import torch
from sweeps import core_params
from transformers import PretrainedConfig

onnxruntime = pytest.importorskip("onnxruntime")

from support import PHRASE_IDS, PhraseMasks, StudentTLoss, max_abs_diff, student_t_inputs  # noqa: E402

from hfexport.exporters import (  # noqa: E402
    AutoExportConfig,
    AutoHfExporter,
    ExportedModel,
    ExportStageError,
    exporter_onnx,
)
from hfexport.exporters.exporter_onnx import OnnxConfig, OnnxExporter  # noqa: E402
from hfexport.exporters.registry import _REGISTRY, Workaround, all_workarounds  # noqa: E402
from hfexport.exporters.runner_onnx import OnnxRunner  # noqa: E402
from hfexport.gate.checks.failures import root_cause  # noqa: E402
from hfexport.gate.model_sets import CORE_MODEL_TYPES  # noqa: E402
from hfexport.tiny_models import sample_inputs, tiny_model  # noqa: E402

TOLERANCE = 1e-4
# CLIPModel rather than clip's default head: the dual encoder (text and image towers) is what CLIP exports are for.
MODELS = core_params(["CLIPModel" if name == "clip" else name for name in CORE_MODEL_TYPES])


def assert_matches_eager(exported: ExportedModel, model: torch.nn.Module, inputs: dict) -> float:
    outputs = exported(**inputs)
    with torch.no_grad():
        expected = model(**inputs)
    assert type(outputs) is type(expected)
    # Same fields and leaves (a cache's non-tensor context, e.g. a sliding window's length, is the traced one).
    assert list(outputs.keys()) == list(expected.keys()) if hasattr(expected, "keys") else True
    diff = max_abs_diff(outputs, expected)
    assert diff <= TOLERANCE, diff
    return diff


@pytest.fixture(scope="module", params=MODELS)
def round_trip(request, tmp_path_factory):
    """One dynamic export per model, saved and loaded back: every test of a model shares it."""
    model = tiny_model(request.param)
    config = AutoExportConfig.from_dict({"export_format": "onnx", "dynamic": True})
    exported = AutoHfExporter.from_config(config).export(model, sample_inputs(model), config)
    directory = exported.save_pretrained(tmp_path_factory.mktemp(request.param) / "export")
    return model, ExportedModel.from_pretrained(directory), directory


def test_round_trip_equals_eager(round_trip):
    model, loaded, _ = round_trip
    diff = assert_matches_eager(loaded, model, sample_inputs(model, seed=1))
    print(f"{type(model).__name__}: max abs diff {diff:.2e}")


def test_other_batch_and_sequence_length(round_trip):
    model, loaded, _ = round_trip
    assert_matches_eager(loaded, model, sample_inputs(model, batch_size=3, seq_length=5, seed=2))


def test_saved_files_and_readable_names(round_trip):
    _, loaded, directory = round_trip
    assert {"model.onnx", "export.json", "config.json"} <= {p.name for p in directory.iterdir()}
    manifest = json.loads((directory / "export.json").read_text())
    assert {"onnx", "onnxscript", "onnxruntime"} <= set(manifest["versions"])
    component = manifest["components"]["model"]
    assert component["timings"]["torch.onnx.export"] > 0
    graph = loaded.programs["model"].graph
    assert [v.name for v in graph.outputs] == component["output_names"]
    assert {v.name for v in graph.inputs} <= set(component["input_names"])
    first = graph.inputs[0]
    assert first.shape[0] == exporter_onnx.ir.SymbolicDim("batch_size"), first.shape


def test_llm_names_and_cache_outputs():
    model = tiny_model("llama")
    exported = OnnxExporter().export(model, sample_inputs(model), OnnxConfig(dynamic=True))
    graph = exported.programs["model"].graph
    assert [v.name for v in graph.inputs] == ["input_ids", "attention_mask"]
    assert [str(d) for d in graph.inputs[0].shape] == ["batch_size", "sequence_length"]
    assert [v.name for v in graph.outputs][:3] == ["logits", "past_key_values.0.key", "past_key_values.0.value"]


def test_output_named_like_an_input_keeps_the_input_fed(tmp_path):
    # qwen2_audio returns its attention_mask: the optimizer would rename the input to attention_mask_orig, which
    # the runner then never feeds.
    model = tiny_model("Qwen2AudioForConditionalGeneration")
    inputs = sample_inputs(model)
    exported = OnnxExporter().export(model, inputs, OnnxConfig(dynamic=True))
    graph = exported.programs["model"].graph
    assert [v.name for v in graph.inputs] == ["input_ids", "attention_mask"]
    assert graph.outputs[-1].name == "attention_mask.output"
    loaded = ExportedModel.from_pretrained(exported.save_pretrained(tmp_path / "qwen2_audio"))
    with torch.no_grad():
        expected = model(**inputs)
    assert max_abs_diff(loaded(**inputs).logits, expected.logits) < 1e-4


def test_none_outputs_come_back_where_the_model_returned_them(tmp_path):
    # pe_audio's nested text outputs hold None hidden states: torch.onnx leaves them out of the graph's outputs.
    model = _module(lambda self, x: {"inner": ((x * 2, None), None), "last": x + 1})
    inputs = {"x": torch.randn(2, 5)}
    exported = OnnxExporter().export(model, inputs, OnnxConfig(dynamic=True))
    component = exported.components["model"]
    assert component["none_outputs"] == [1, 2]
    assert [v.name for v in exported.programs["model"].graph.outputs] == component["output_names"]
    assert component["output_names"] == ["inner.0.0", "last"]
    loaded = ExportedModel.from_pretrained(exported.save_pretrained(tmp_path / "nested"))
    outputs = loaded(**inputs)
    assert outputs["inner"][0][1] is None and outputs["inner"][1] is None
    torch.testing.assert_close(outputs["inner"][0][0], inputs["x"] * 2)
    torch.testing.assert_close(outputs["last"], inputs["x"] + 1)


def test_python_constant_outputs_come_back_where_the_model_returned_them(tmp_path):
    # maskformer-swin returns its stages' spatial sizes as Python ints next to the hidden states.
    model = _module(lambda self, x: {"hidden": x * 2, "sizes": (4, None, 2), "scale": 0.5})
    inputs = {"x": torch.randn(2, 5)}
    exported = OnnxExporter().export(model, inputs, OnnxConfig(dynamic=True))
    component = exported.components["model"]
    assert component["constant_outputs"] == [[1, 4], [3, 2], [4, 0.5]] and component["none_outputs"] == [2]
    assert component["output_names"] == ["hidden"]
    outputs = ExportedModel.from_pretrained(exported.save_pretrained(tmp_path / "sizes"))(**inputs)
    assert outputs["sizes"] == (4, None, 2) and outputs["scale"] == 0.5
    torch.testing.assert_close(outputs["hidden"], inputs["x"] * 2)
    with (
        without("_patch_constant_outputs_left_to_the_runner"),
        pytest.raises(ExportStageError, match="Failed to convert"),
    ):
        OnnxExporter().export(model, inputs, OnnxConfig(dynamic=True))


def test_external_data_and_session_options(tmp_path, monkeypatch):
    model = tiny_model("bert")
    inputs = sample_inputs(model)
    exported = OnnxExporter().export(model, inputs, OnnxConfig(optimize=False))
    monkeypatch.setattr(exporter_onnx, "EXTERNAL_DATA_THRESHOLD_BYTES", 0)
    directory = exported.save_pretrained(tmp_path / "bert")
    assert (directory / "model.onnx.data").is_file()
    assert "model.onnx.data" in json.loads((directory / "export.json").read_text())["files"]
    loaded = ExportedModel.from_pretrained(directory)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    loaded.runner = OnnxRunner(loaded, providers=["CPUExecutionProvider"], session_options=options)
    assert loaded.runner.session("model").get_providers() == ["CPUExecutionProvider"]
    assert_matches_eager(loaded, model, inputs)
    assert loaded.components["model"]["optimized"] is False


def test_failure_names_its_stage():
    class Unsupported(torch.nn.Module):
        def forward(self, x):
            return torch.linalg.eigvals(x).real  # no ONNX lowering exists for eigvals

    with pytest.raises(ExportStageError) as raised:
        OnnxExporter().export_program(Unsupported(), {"x": torch.randn(3, 3)}, OnnxConfig())
    assert str(raised.value).startswith("onnx · stage 4 ONNX translations")


def test_import_hfexport_does_not_import_onnx():
    code = "import sys, hfexport, hfexport.exporters; assert 'onnx' not in sys.modules, 'onnx imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[1])


def test_registry_lists_tables():
    kinds = {(w.kind, w.name) for w in all_workarounds("onnx")}
    assert ("onnx_translation", "_aten_grouped_mm") in kinds
    assert ("ir_fix", "_fix_ir_bool_where") in kinds


# ── One test per workaround: the export fails or is wrong without it ──


@contextlib.contextmanager
def without(name: str) -> Iterator[None]:
    """Take one "onnx" workaround (a patch, fix, translation or IR fix) out of the registry for the block."""
    registered = _REGISTRY["onnx"]
    removed = [workaround for workaround in registered if workaround.name == name]
    assert removed, name
    for workaround in removed:
        registered.remove(workaround)
    try:
        yield
    finally:
        registered.extend(removed)


def _module(forward) -> torch.nn.Module:
    """A one-function module with the config attribute ``HfExporter.export`` records."""
    module = type("Op", (torch.nn.Module,), {"forward": forward})()
    module.config = PretrainedConfig()
    return module


def test_torchlib_registry_is_built_once_and_each_export_gets_its_own_copy(monkeypatch):
    from torch.onnx._internal.exporter._registration import ONNXRegistry

    from hfexport.exporters.workarounds.onnx import patches as onnx_workarounds

    built = []
    build = ONNXRegistry.from_torchlib.__func__
    monkeypatch.setattr(
        ONNXRegistry, "from_torchlib", classmethod(lambda cls, *a, **k: built.append(1) or build(cls, *a, **k))
    )
    monkeypatch.setattr(onnx_workarounds, "_TORCHLIB_REGISTRIES", {})
    model = _module(lambda self, x: torch.cumsum(x, dim=-1) * 2)
    inputs = {"x": torch.randn(2, 5)}
    config = OnnxConfig(dynamic=True)
    first, _ = OnnxExporter().export_program(model, inputs, config)
    second, _ = OnnxExporter().export_program(model, inputs, config)
    assert len(built) == 1  # two exports, one registry built
    # A custom translation registered by one export stays out of the registry the next one gets.
    (registry,) = onnx_workarounds._TORCHLIB_REGISTRIES.values()
    assert not any(meta.is_custom for decompositions in registry.functions.values() for meta in decompositions)
    with without("_patch_torchlib_registry_built_once"):
        separate, _ = OnnxExporter().export_program(model, inputs, config)
    assert len(built) == 2
    assert [str(graph) for graph in (first.graph, second.graph)] == [str(separate.graph)] * 2


class MaskedConversions(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, x, mask):
        scale = torch.tensor(2.0)  # lift_fresh_copy, then an in-place detach_
        kept = (mask > 0) & (x.sum(-1) > 0)  # aten.__and__
        # aten.index_copy, as a static cache is written: its last two positions
        written = x.index_copy(-2, torch.arange(2) + x.shape[-2] - 2, x[:, :2] * 3)
        # swin's pooler (aten.adaptive_avg_pool1d to 1) of an in-place ReLU after a Linear (aten.relu_)
        pooled = torch.nn.functional.adaptive_avg_pool1d(torch.relu_(self.proj(x)).transpose(1, 2), 1)
        return (written * scale).to(torch.float64).sum(-1).to(torch.float32) * kept + pooled.sum((1, 2))[:, None]


def test_a_program_with_nothing_to_decompose_is_not_retraced(monkeypatch):
    from torch.export import ExportedProgram

    decompositions, run_decompositions = [], ExportedProgram.run_decompositions
    monkeypatch.setattr(
        ExportedProgram, "run_decompositions", lambda *a, **k: decompositions.append(1) or run_decompositions(*a, **k)
    )
    module, config = MaskedConversions(), OnnxConfig(dynamic=True)
    module.config = PretrainedConfig()
    traced = {"x": torch.randn(2, 5, 4), "mask": torch.ones(2, 5, dtype=torch.long)}
    direct = OnnxExporter().export(module, traced, config)
    fixes = {
        "_fix_conversion_as_copy",
        "_fix_bitwise_operator_as_its_op",
        "_fix_in_place_detach_dropped",
        "_fix_index_copy_as_index_put",
        "_fix_adaptive_avg_pool1d_to_one_as_mean",
        "_fix_inplace_relu_of_an_unshared_value",
    }
    assert fixes <= set(direct.components["model"]["workarounds"]["fixes"])
    assert decompositions == []  # the fixes leave nothing for the table: translated as traced
    with without("_patch_decomposition_only_when_needed"):
        retraced = OnnxExporter().export(module, traced, config)
    assert len(decompositions) == 1
    with without("_fix_bitwise_operator_as_its_op"):  # aten.__and__ left for the table: the program is re-traced
        OnnxExporter().export(module, traced, config)
    assert len(decompositions) == 2
    fed = {"x": torch.randn(3, 7, 4), "mask": (torch.arange(21).reshape(3, 7) % 3).long()}
    expected = module(**fed)
    for exported in (direct, retraced):  # float32 sums of values up to ~10: a few ulps apart
        assert max_abs_diff(exported(**fed), expected) < 1e-5


def test_inplace_relu_of_a_value_with_a_view_is_left_to_the_table():
    # A view taken before relu_ writes into its base reads the written values: relu is not relu_ there, so the fix
    # leaves it (torch.onnx's re-trace makes it functional).
    def forward(self, x):
        doubled = x * 2
        head = doubled[:, :1]
        return doubled.relu_() + head

    module = _module(forward)
    exported = OnnxExporter().export(module, {"x": torch.randn(2, 5)}, OnnxConfig(dynamic=True))
    assert "_fix_inplace_relu_of_an_unshared_value" not in exported.components["model"]["workarounds"]["fixes"]
    fed = torch.randn(3, 6)
    assert max_abs_diff(exported(x=fed), module(x=fed)) < 1e-6


def test_a_detached_constant_returned_as_an_output_keeps_its_name():
    # Reformer's cache hands back a `torch.tensor(...)` (lift_fresh_copy, then detach_) as an output: erasing the
    # detach_ left the program's signature naming a value that was gone ("KeyError: 'detach_'" in the translation).
    module = _module(lambda self, x: (x * 2, torch.tensor([3, 4])))
    exported = OnnxExporter().export(module, {"x": torch.randn(2, 5)}, OnnxConfig(dynamic=True))
    assert "_fix_in_place_detach_dropped" in exported.components["model"]["workarounds"]["fixes"]
    fed = torch.randn(3, 6)
    doubled, constant = exported(x=fed)
    assert max_abs_diff(doubled, fed * 2) == 0 and constant.tolist() == [3, 4]


def test_type_promotion_runs_only_where_an_input_needs_a_cast(monkeypatch):
    from torch.onnx._internal.fx.passes.type_promotion import InsertTypePromotion

    runs, run = [], InsertTypePromotion.run
    monkeypatch.setattr(InsertTypePromotion, "run", lambda *a, **k: runs.append(1) or run(*a, **k))
    same_dtypes = _module(lambda self, x, mask: (x * 2.0).softmax(-1) * mask.float())
    mixed = _module(lambda self, x, mask: (x * 2.0).softmax(-1) + mask)  # float + int64: the int input gets a cast
    traced = {"x": torch.randn(2, 5), "mask": torch.ones(2, 5, dtype=torch.long)}
    config = OnnxConfig(dynamic=True)
    skipped = OnnxExporter().export(same_dtypes, traced, config)
    patches = {record["name"] for record in skipped.components["model"]["workarounds"]["patches"]}
    assert "_patch_type_promotion_only_when_needed" in patches
    assert runs == []
    promoted = OnnxExporter().export(mixed, traced, config)
    assert runs == [1]
    with without("_patch_type_promotion_only_when_needed"):
        every = OnnxExporter().export(same_dtypes, traced, config)
    assert runs == [1, 1]
    assert [node.op_type for node in skipped.programs["model"].graph] == [
        node.op_type for node in every.programs["model"].graph
    ]
    fed = {"x": torch.randn(3, 4), "mask": (torch.arange(12).reshape(3, 4) % 2).long()}
    assert max_abs_diff(skipped(**fed), same_dtypes(**fed)) < 1e-6
    assert max_abs_diff(promoted(**fed), mixed(**fed)) < 1e-6


def test_rewrite_rules_are_tried_on_their_root_op_only_and_rewrite_the_same(monkeypatch):
    from onnxscript.rewriter._rewrite_rule import RewriteRule

    tries = []
    try_rewrite = RewriteRule.try_rewrite
    monkeypatch.setattr(RewriteRule, "try_rewrite", lambda *a, **k: tries.append(1) or try_rewrite(*a, **k))
    model = tiny_model("llama")
    inputs = sample_inputs(model)
    pruned, metadata = OnnxExporter().export_program(model, inputs, OnnxConfig(dynamic=True))
    assert "_patch_rewrite_rule_tried_on_its_root_op_only" in {p["name"] for p in metadata["workarounds"]["patches"]}
    matched = len(tries)  # the patch wraps the counter: these are the tries that got past the op check
    tries.clear()
    with without("_patch_rewrite_rule_tried_on_its_root_op_only"):
        every, _ = OnnxExporter().export_program(model, inputs, OnnxConfig(dynamic=True))
    assert matched * 5 < len(tries)
    assert ir.to_proto(pruned).SerializeToString() == ir.to_proto(every).SerializeToString()


def test_slice_pairs_are_matched_among_the_consumers_of_their_input_and_rewrite_the_same(monkeypatch):
    from onnxscript.rewriter._matcher import SimplePatternMatcher

    def halves(self, x):  # nemotron3_5_transcribe's audio chunks: many tensors, each cut into two slices
        return torch.cat([(x * i)[..., :3] * (x * i)[..., 3:].sum(-1, keepdim=True) for i in range(1, 25)], -1)

    pairs = []
    multi_match = SimplePatternMatcher._multi_match
    monkeypatch.setattr(SimplePatternMatcher, "_multi_match", lambda *a, **k: pairs.append(1) or multi_match(*a, **k))
    module, inputs = _module(halves), {"x": torch.randn(2, 8)}
    among_consumers, metadata = OnnxExporter().export_program(module, inputs, OnnxConfig())
    patch = "_patch_output_nodes_of_one_input_matched_among_its_consumers"
    assert patch in {p["name"] for p in metadata["workarounds"]["patches"]}
    tried = len(pairs)
    pairs.clear()
    with without(patch):
        every, _ = OnnxExporter().export_program(module, inputs, OnnxConfig())
    assert tried * 10 < len(pairs)
    assert ir.to_proto(among_consumers).SerializeToString() == ir.to_proto(every).SerializeToString()


def test_fix_view_of_transpose_is_needed_by_t5():
    # T5 reshapes its transposed attention output (jetmoe's case is in test_coverage_workarounds).
    model = tiny_model("t5")
    inputs = sample_inputs(model)
    with without("_fix_view_of_transpose"), pytest.raises(ExportStageError) as raised:
        OnnxExporter().export_program(model, inputs, OnnxConfig(dynamic=True))
    assert str(raised.value).startswith("onnx · stage 2 ONNX patches") and "Cannot view" in str(raised.value)
    # With the fix, t5 round-trips in test_round_trip_equals_eager[t5].


def test_patch_refix_after_decompositions_reruns_node_fixes_on_the_decomposed_graph():
    # torch.onnx decomposes the program itself; without the stage 2 hook the node fixes never see that graph.
    seen: list[set[str]] = []

    def _fix_record(graph_module, node):
        seen[-1].add(str(id(graph_module)))
        return False

    # hardshrink is in torch.onnx's decomposition table: the program is decomposed (re-traced into a new graph).
    module = _module(lambda self, x: torch.nn.functional.hardshrink(torch.nn.functional.silu(x)).softmax(-1))
    recorder = Workaround("onnx", "fx_node_fix", _fix_record)
    _REGISTRY["onnx"].append(recorder)
    try:
        seen.append(set())
        OnnxExporter().export_program(module, {"x": torch.randn(2, 8)}, OnnxConfig())
        with without("_patch_refix_after_decompositions"):
            seen.append(set())
            OnnxExporter().export_program(module, {"x": torch.randn(2, 8)}, OnnxConfig())
    finally:
        _REGISTRY["onnx"].remove(recorder)
    # With the hook: the traced graph and the decomposed one; without it: the traced graph only.
    assert [len(graphs) for graphs in seen] == [2, 1]


def test_aten_sym_floordiv_is_needed():
    # The ceil-div idiom on a dynamic size, as minimax_m3_vl counts key blocks.
    module = _module(lambda self, x: x.new_zeros(x.shape[0], -(-x.shape[1] // 3)) + 1)
    x = torch.randn(3, 10)
    with without("_aten_sym_floordiv"):
        wrong = OnnxExporter().export(module, {"x": torch.randn(2, 8)}, OnnxConfig(dynamic=True))
        assert wrong(x=x).shape != module(x=x).shape
    exported = OnnxExporter().export(module, {"x": torch.randn(2, 8)}, OnnxConfig(dynamic=True))
    assert exported(x=x).shape == module(x=x).shape == (3, 4)


def _checked_double(self, x):
    torch._check_tensor_all(x.isfinite(), lambda: "x has a NaN or an infinity")  # torch_compilable_check
    return x * 2


def test_aten_is_all_true_is_needed():
    module, inputs = _module(_checked_double), {"x": torch.randn(2, 5)}
    with without("_aten_is_all_true"), pytest.raises(ExportStageError, match="stage 4 ONNX translations"):
        OnnxExporter().export_program(module, inputs, OnnxConfig(dynamic=True))
    exported = OnnxExporter().export(module, inputs, OnnxConfig(dynamic=True))
    fed = torch.randn(3, 4)
    assert max_abs_diff(exported(x=fed), module(fed)) == 0


def test_aten_grouped_mm_is_needed():
    model = tiny_model("mixtral")
    inputs = sample_inputs(model)
    with without("_aten_grouped_mm"), pytest.raises(ExportStageError) as raised:
        OnnxExporter().export_program(model, inputs, OnnxConfig(dynamic=True))
    assert str(raised.value).startswith("onnx · stage 4 ONNX translations")
    exported = OnnxExporter().export(model, inputs, OnnxConfig(dynamic=True))
    assert_matches_eager(exported, model, sample_inputs(model, batch_size=3, seq_length=5, seed=1))


def test_fix_ir_bool_where_is_needed():
    module = _module(lambda self, x: (x > 0).masked_fill(x.abs() > 1, True))
    inputs = {"x": torch.randn(4, 8)}
    with without("_fix_ir_bool_where"):
        broken = OnnxExporter().export(module, inputs, OnnxConfig(dynamic=True))
        with pytest.raises(Exception, match="Where"):
            broken(**inputs)
    exported = OnnxExporter().export(module, inputs, OnnxConfig(dynamic=True))
    x = torch.randn(3, 5)
    assert torch.equal(exported(x=x), module(x=x))


def _byte_group_hashes(self, ids):
    # blt's rolling hash over groups of 4 tokens: token * prime**i summed in int64 (wrapping), modulo the vocabulary.
    powers = torch.tensor(1000000007, dtype=torch.int64) ** torch.arange(4)
    products = ids * powers
    hashes = products.sum(-1) % 30000
    return hashes, products.sum(dim=(0, 2), keepdim=True), products.sum(), ids.int().sum(-1, dtype=torch.int32)


def test_fix_ir_integer_reduce_sum_as_cumsum_is_needed():
    module, inputs = _module(_byte_group_hashes), {"ids": torch.randint(0, 256, (2, 5, 4))}
    with without("_fix_ir_integer_reduce_sum_as_cumsum"):
        inexact = OnnxExporter().export(module, inputs, OnnxConfig(dynamic=True))
        assert not torch.equal(inexact(**inputs)[0], module(**inputs)[0])
    exported = OnnxExporter().export(module, inputs, OnnxConfig(dynamic=True))
    for ids in (inputs["ids"], torch.randint(0, 256, (3, 7, 4))):
        for actual, expected in zip(exported(ids=ids), module(ids), strict=True):
            assert actual.dtype == expected.dtype and torch.equal(actual, expected)


def test_repeat_interleave_by_a_symbolic_count_needs_its_translation():
    # instructblipvideo repeats its Q-Former ids once per frame: torchlib's Expand put the count on the wrong axis.
    def forward(self, ids, frames):
        frame_count = frames.shape[1]
        return (
            ids.repeat_interleave(frame_count, dim=0),
            ids.repeat_interleave(frame_count),
            ids.repeat_interleave(3, 1),
        )

    module = _module(forward)
    inputs = {"ids": torch.arange(6).view(2, 3), "frames": torch.zeros(2, 4)}
    with without("_aten_repeat_interleave_self_int"):
        broken = OnnxExporter().export(module, inputs, OnnxConfig(dynamic=True))
        with pytest.raises(Exception, match="invalid expand shape"):
            broken(**inputs)
    exported = OnnxExporter().export(module, inputs, OnnxConfig(dynamic=True))
    for ids, frames in [(inputs["ids"], inputs["frames"]), (torch.arange(15).view(3, 5), torch.zeros(3, 2))]:
        for actual, expected in zip(exported(ids=ids, frames=frames), module(ids, frames), strict=True):
            assert torch.equal(actual, expected)


def test_fix_ir_unregistered_constants_registers_them_as_initializers():
    # The optimizer left gemma4 audio's Clip bounds as constants no initializer holds: the checker rejected the graph.
    import numpy as np
    import onnx
    import onnx_ir as ir

    from hfexport.exporters.workarounds.onnx.ir_fixes import _fix_ir_unregistered_constants

    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([2]))
    bounds = []
    for name, bound in (("low", -np.inf), ("high", np.inf)):
        value = ir.Value(name=name, type=x.type, shape=ir.Shape([]))
        value.const_value = ir.tensor(np.array(bound, dtype=np.float32), name=name)
        bounds.append(value)
    clip = ir.node("Clip", [x, *bounds])
    clip.outputs[0].type, clip.outputs[0].shape = x.type, x.shape
    model = ir.Model(ir.Graph([x], clip.outputs, nodes=[clip], opset_imports={"": 18}, name="g"), ir_version=10)
    with pytest.raises(onnx.checker.ValidationError, match="topologically sorted"):
        onnx.checker.check_model(ir.serde.serialize_model(model))
    assert _fix_ir_unregistered_constants(model)
    assert sorted(model.graph.initializers) == ["high", "low"]
    onnx.checker.check_model(ir.serde.serialize_model(model), full_check=True)
    assert not _fix_ir_unregistered_constants(model)


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("_patch_isin_as_comparison", "searchsorted"),
        ("_patch_cummax_as_masked_max", "cummax"),
        ("_patch_cummin_as_masked_min", "cummin"),
    ],
)
def test_isin_cummax_and_cummin_patches_are_needed(name: str, error: str):
    module = PhraseMasks()
    module.config = PretrainedConfig()
    traced = {"input_ids": PHRASE_IDS[0]}
    with without(name), pytest.raises(ExportStageError, match="stage 4 ONNX translations") as raised:
        OnnxExporter().export_program(module, traced, OnnxConfig(dynamic=True))
    assert f"op='aten.{error}'" in str(root_cause(raised.value))
    exported = OnnxExporter().export(module, traced, OnnxConfig(dynamic=True))
    for input_ids in PHRASE_IDS:
        for actual, expected in zip(exported(input_ids=input_ids), module(input_ids), strict=True):
            assert torch.equal(actual, expected)


def test_lgamma_patch_exports_the_student_t_loss():
    # autoformer/informer *ForPrediction: the Student-T loss's lgamma has no ONNX function.
    module, traced = StudentTLoss(), student_t_inputs(2, 5)
    module.config = PretrainedConfig()
    with without("_patch_lgamma_as_lanczos_series"), pytest.raises(ExportStageError, match="stage 4 ONNX translations"):
        OnnxExporter().export_program(module, traced, OnnxConfig(dynamic=True))
    exported = OnnxExporter().export(module, traced, OnnxConfig(dynamic=True))
    for inputs in (traced, student_t_inputs(3, 11)):
        for actual, expected in zip(exported(**inputs), module(**inputs), strict=True):
            torch.testing.assert_close(actual, expected.detach(), atol=1e-5, rtol=1e-5)
