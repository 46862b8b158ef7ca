"""DynamoExporter end to end: export -> save_pretrained -> from_pretrained -> run equals eager, static and dynamic."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from support import max_abs_diff
from sweeps import core_params

from hfexport.exporters import (
    AutoExportConfig,
    AutoHfExporter,
    DynamoConfig,
    DynamoExporter,
    ExportedModel,
    ExportStageError,
    registry,
)
from hfexport.gate.model_sets import CORE_MODEL_TYPES
from hfexport.tiny_models import sample_inputs, tiny_model

MODELS = core_params(list(CORE_MODEL_TYPES))
TOLERANCE = 1e-4


@pytest.fixture(scope="module", params=MODELS)
def dynamic_export(request, tmp_path_factory):
    model = tiny_model(request.param)
    inputs = sample_inputs(model)
    config = AutoExportConfig.from_dict({"export_format": "dynamo", "dynamic": True})
    exported = AutoHfExporter.from_config(config).export(model, inputs, config)
    directory = exported.save_pretrained(tmp_path_factory.mktemp(request.param) / "export")
    return request.param, model, directory


def test_round_trip_equals_eager(dynamic_export):
    name, model, directory = dynamic_export
    inputs = sample_inputs(model)
    loaded = ExportedModel.from_pretrained(directory)
    with torch.no_grad():
        expected = model(**inputs)
    diff = max_abs_diff(loaded(**inputs), expected)
    print(f"{name}: max abs diff {diff:.2e}")
    assert diff <= TOLERANCE


def test_dynamic_export_runs_at_other_sizes(dynamic_export):
    _name, model, directory = dynamic_export
    loaded = ExportedModel.from_pretrained(directory)
    inputs = sample_inputs(model, batch_size=3, seq_length=11, seed=1)
    with torch.no_grad():
        expected = model(**inputs)
    assert max_abs_diff(loaded(**inputs), expected) <= TOLERANCE


def test_loading_swaps_read_the_same_program_asking_typing_and_sympy_less(dynamic_export, monkeypatch):
    # fast_loading's memos: the program loaded is torch's own, with far fewer calls reaching typing and sympy.
    import typing

    import sympy

    _name, model, directory = dynamic_export
    calls = {"typing": 0, "sympy": 0}

    def counted(module, name, key):
        original = getattr(module, name)

        def call(*args, **kwargs):
            calls[key] += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(module, name, call)

    counted(typing, "get_type_hints", "typing")
    counted(sympy, "sympify", "sympy")
    plain = torch.export.load(directory / "model.pt2")
    plain_calls, calls = dict(calls), {"typing": 0, "sympy": 0}
    swapped = DynamoExporter.load_program(directory / "model.pt2")
    assert calls["typing"] * 10 < plain_calls["typing"], (calls, plain_calls)
    assert calls["sympy"] <= plain_calls["sympy"], (calls, plain_calls)
    assert swapped.graph_module.code == plain.graph_module.code
    assert str(swapped.graph_signature) == str(plain.graph_signature)
    assert str(swapped.range_constraints) == str(plain.range_constraints)
    assert typing.get_type_hints.__name__ == "call" and sympy.sympify.__name__ == "call"  # the swaps were undone
    inputs = sample_inputs(model, batch_size=3, seq_length=11, seed=1)
    print(f"calls reaching typing and sympy: {plain_calls} -> {calls}")
    assert max_abs_diff(swapped.module()(**inputs), plain.module()(**inputs)) == 0


def test_saved_files_and_manifest(dynamic_export):
    _name, model, directory = dynamic_export
    manifest = json.loads((directory / "export.json").read_text())
    assert sorted(p.name for p in directory.iterdir()) == ["config.json", "export.json", "model.pt2"]
    assert manifest["schema_version"] == 2
    assert manifest["export_format"] == "dynamo"
    assert manifest["export_config"]["dynamic"] is True
    assert manifest["model_class"].endswith(type(model).__qualname__)
    assert {"torch", "transformers"} <= set(manifest["versions"])
    component = manifest["components"]["model"]
    assert component["input_names"] == list(sample_inputs(model))
    assert component["output_names"]
    assert json.loads((directory / "config.json").read_text())["model_type"] == model.config.model_type


def test_cache_outputs_are_rebuilt_with_readable_names(tmp_path):
    model = tiny_model("llama")
    inputs = sample_inputs(model)
    exported = DynamoExporter().export(model, inputs, DynamoConfig())
    names = exported.components["model"]["output_names"]
    assert names[0] == "logits"
    assert "past_key_values.0.key" in names and "past_key_values.1.value" in names
    loaded = ExportedModel.from_pretrained(exported.save_pretrained(tmp_path / "llama"))
    outputs = loaded(**inputs)
    assert type(outputs.past_key_values).__name__ == "DynamicCache"
    assert outputs.past_key_values.get_seq_length() == inputs["input_ids"].shape[1]


def _saved_and_reloaded_outputs(name: str, tmp_path) -> tuple[torch.nn.Module, object]:
    """The tiny ``name`` and what its static dynamo export, saved and loaded back, returns on its sample inputs."""
    model = tiny_model(name)
    inputs = sample_inputs(model)
    exported = DynamoExporter().export(model, inputs, DynamoConfig())
    return model, ExportedModel.from_pretrained(exported.save_pretrained(tmp_path / "export"))(**inputs)


def test_cache_outside_cache_class_is_rebuilt(tmp_path):
    # ReformerDynamicCache does not derive from Cache: stage 3 registers it from _OTHER_CACHE_TYPES.
    model, outputs = _saved_and_reloaded_outputs("ReformerModelWithLMHead", tmp_path)
    with torch.no_grad():
        expected = model(**sample_inputs(model))
    assert type(outputs.past_buckets_states).__name__ == "ReformerDynamicCache"
    assert max_abs_diff(outputs.logits, expected.logits) <= TOLERANCE
    states = outputs.past_buckets_states.states_cache, expected.past_buckets_states.states_cache
    assert max_abs_diff(*states) <= TOLERANCE


@pytest.mark.parametrize(
    ("name", "cache"),
    [("xLSTMForCausalLM", "cache_params"), ("VoxtralRealtimeForConditionalGeneration", "padding_cache")],
)
def test_recurrent_state_outside_cache_class_is_rebuilt(name: str, cache: str, tmp_path) -> None:
    # xLSTMCache (holding its config) and voxtral_realtime's conv padding cache are not Cache subclasses either.
    model, outputs = _saved_and_reloaded_outputs(name, tmp_path)
    with torch.no_grad():
        expected = model(**sample_inputs(model))
    assert type(getattr(outputs, cache)) is type(getattr(expected, cache))
    assert max_abs_diff(outputs.logits, expected.logits) <= TOLERANCE
    if name.startswith("xLSTM"):
        assert getattr(outputs, cache).config.to_dict() == model.config.to_dict()
        states = getattr(outputs, cache).rnn_state[0][0], getattr(expected, cache).rnn_state[0][0]
        assert max_abs_diff(*states) <= TOLERANCE


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("AutoformerModel", r"shape '\[s\d+, 2, 4, 4\]' is invalid"),
        ("InformerModel", "Attention mask should be of size"),
    ],
)
def test_no_padding_mask_patch_keeps_time_series_encoders_traceable(name, error, monkeypatch):
    # Their encoders' attention takes no materialized mask: eager passes None, exporting always materializes one.
    model = tiny_model(name)
    inputs = sample_inputs(model)
    exported = DynamoExporter().export(model, inputs, DynamoConfig(dynamic=True))
    with torch.no_grad():
        assert max_abs_diff(exported(**inputs), model(**inputs)) <= TOLERANCE
    kept = [w for w in registry._REGISTRY["dynamo"] if w.name != "_patch_no_padding_mask_as_none"]
    monkeypatch.setitem(registry._REGISTRY, "dynamo", kept)
    with pytest.raises(ExportStageError, match=error):
        DynamoExporter().export(model, inputs, DynamoConfig(dynamic=True))


class StudentTLogLikelihood(torch.nn.Module):
    def forward(self, x):
        # time-series ForPrediction heads: the loss builds a distribution from the predicted parameters.
        distribution = torch.distributions.StudentT(x[..., 0].exp() + 2, x[..., 1], x[..., 2].exp())
        return distribution.log_prob(x[..., 3])


def test_distributions_patch_exports_a_distribution_of_computed_parameters(monkeypatch):
    module, inputs = StudentTLogLikelihood(), {"x": torch.randn(2, 5, 4)}
    program, _ = DynamoExporter().export_program(module, inputs, DynamoConfig(dynamic=True))
    fed = torch.randn(3, 7, 4)
    torch.testing.assert_close(program.module()(x=fed), module(fed))
    kept = [w for w in registry._REGISTRY["dynamo"] if w.name != "_patch_distributions_unvalidated"]
    monkeypatch.setitem(registry._REGISTRY, "dynamo", kept)
    with pytest.raises(ExportStageError, match="data-dependent expression"):
        DynamoExporter().export_program(module, inputs, DynamoConfig(dynamic=True))


def test_manifest_records_patches_and_schema_1_exports_still_load(tmp_path):
    from hfexport.gate.checks.engines import workarounds_used

    model = tiny_model("llama")
    inputs = sample_inputs(model)
    exported = DynamoExporter().export(model, inputs, DynamoConfig())
    directory = exported.save_pretrained(tmp_path / "llama")
    manifest = json.loads((directory / "export.json").read_text())
    patches = manifest["components"]["model"]["workarounds"]["patches"]
    sdpa = "torch.nn.functional.scaled_dot_product_attention"
    assert {"name": "_patch_sdpa_math_kernel_on_cpu", "key": "dynamo", "target": sdpa} in patches
    assert workarounds_used(exported, "torch.nn.functional.modeling") == ["_patch_sdpa_math_kernel_on_cpu"]
    # Schema 1 wrote "name -> target" strings: such an export still loads, and the gate still reads its patches.
    manifest["schema_version"] = 1
    manifest["components"]["model"]["workarounds"]["patches"] = [f"{p['name']} -> {p['target']}" for p in patches]
    (directory / "export.json").write_text(json.dumps(manifest))
    loaded = ExportedModel.from_pretrained(directory)
    assert workarounds_used(loaded, "torch.nn.functional.modeling") == ["_patch_sdpa_math_kernel_on_cpu"]
    with torch.no_grad():
        assert max_abs_diff(loaded(**inputs), model(**inputs)) <= TOLERANCE


def test_output_type_with_required_fields_reloads(tmp_path):
    # DPRQuestionEncoderOutput has no default for pooler_output: loading must not instantiate output types.
    model, outputs = _saved_and_reloaded_outputs("DPRQuestionEncoder", tmp_path)
    assert type(outputs).__name__ == "DPRQuestionEncoderOutput"
    with torch.no_grad():
        assert max_abs_diff(outputs.pooler_output, model(**sample_inputs(model)).pooler_output) < TOLERANCE


def test_static_export_specializes_shapes(tmp_path):
    model = tiny_model("bert")
    inputs = sample_inputs(model)
    loaded = ExportedModel.from_pretrained(DynamoExporter().export(model, inputs).save_pretrained(tmp_path / "b"))
    assert max_abs_diff(loaded(**inputs), model(**inputs)) <= TOLERANCE
    with pytest.raises(Exception, match=r"(?i)shape|size|expected"):
        loaded(**sample_inputs(model, batch_size=3, seq_length=5))


def test_wrong_input_names_are_a_clear_error(tmp_path):
    model = tiny_model("bert")
    exported = DynamoExporter().export(model, sample_inputs(model))
    with pytest.raises(ValueError, match="missing: \\['attention_mask'\\]"):
        exported(input_ids=sample_inputs(model)["input_ids"])


def test_failed_save_leaves_no_partial_directory(tmp_path):
    model = tiny_model("bert")
    exported = DynamoExporter().export(model, sample_inputs(model))
    exported.programs["model"] = object()  # torch.export.save cannot serialize this
    with pytest.raises(Exception):  # noqa: B017 - whatever torch raises, nothing may be left behind
        exported.save_pretrained(tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def test_auto_classes_report_bad_input():
    from hfexport.exporters import ModelRunner, register_backend

    with pytest.raises(ValueError, match="unknown export format 'nope'"):
        AutoExportConfig.from_dict({"export_format": "nope"})
    with pytest.raises(ValueError, match="needs an 'export_format'"):
        AutoExportConfig.from_dict({"dynamic": True})
    with pytest.raises(ValueError, match="unknown option"):
        AutoExportConfig.from_dict({"export_format": "dynamo", "dynamik": True})
    with pytest.raises(TypeError, match="HfExporter subclass"):
        register_backend(object)
    with pytest.raises(TypeError, match="ModelRunner subclass"):
        register_backend(DynamoExporter, runner=object)
    assert issubclass(AutoHfExporter.from_config(DynamoConfig()).__class__, DynamoExporter)
    assert ModelRunner is not None


def test_stateful_attributes_are_restored_after_export():
    from hfexport.exporters.exporter_dynamo import _STATEFUL_CACHE_ATTRS, stateful_attributes_cleared

    module = torch.nn.Linear(2, 2)
    sentinel = torch.ones(1)
    setattr(module, _STATEFUL_CACHE_ATTRS[0], sentinel)
    with stateful_attributes_cleared(module):
        assert getattr(module, _STATEFUL_CACHE_ATTRS[0]) is None
    assert getattr(module, _STATEFUL_CACHE_ATTRS[0]) is sentinel


def test_a_dynamic_export_after_the_preload_imports_no_torch_or_transformers_module():
    # The gate forks each job from a worker that ran preload(): what a job imports, every job imports again.
    script = (
        "import sys\n"
        "from hfexport.exporters import DynamoConfig, DynamoExporter\n"
        "from hfexport.tiny_models import sample_inputs, tiny_model\n"
        "DynamoExporter.preload()\n"
        "model = tiny_model('bert', seed=0)\n"
        "before = set(sys.modules)\n"
        "DynamoExporter().export_program(model, sample_inputs(model), DynamoConfig(dynamic=True))\n"
        "print(json.dumps(sorted(set(sys.modules) - before)))\n"
    )
    done = subprocess.run([sys.executable, "-c", "import json\n" + script], capture_output=True, text=True, check=True)
    imported = json.loads(done.stdout.splitlines()[-1])
    assert [name for name in imported if name.split(".")[0] in ("torch", "transformers")] == []


def _ops(program: torch.export.ExportedProgram) -> list[str]:
    return [str(node.target) for node in program.graph.nodes]


def _tensor_layouts(program: torch.export.ExportedProgram) -> list[list[tuple[int, ...]]]:
    """Each tensor's sizes, strides and offset at a few values of the program's symbols (the same layout may be written
    as different expressions: Max(1, 16*a*b) and Max(1, 4*a)*Max(1, 4*b))."""
    symbols = sorted(program.range_constraints, key=str)
    points = [{symbol: 2 + (index * step) % 9 for index, symbol in enumerate(symbols)} for step in (0, 1, 4)]

    def at(value: object, point: dict) -> int:
        return int(value.node.expr.xreplace(point)) if isinstance(value, torch.SymInt) else int(value)

    values = [node.meta.get("val") for node in program.graph.nodes]
    return [
        [tuple(at(x, point) for x in (*v.shape, *v.stride(), v.storage_offset())) for point in points]
        for v in values
        if isinstance(v, torch.Tensor)
    ]


@pytest.mark.parametrize("model_class", ["Swin2SRForImageSuperResolution", "SwinModel"])
def test_dynamic_traces_skip_the_fake_cache_and_the_view_walk_and_trace_the_same_program(model_class, monkeypatch):
    from torch._subclasses.fake_tensor import FakeTensorMode

    speedups = {"_patch_symbolic_fake_dispatch_uncached", "_patch_view_of_contiguous_as_strided"}
    model = tiny_model(model_class, seed=0)  # swin2sr: batch, height and width dynamic; swin: batch
    inputs = sample_inputs(model)

    def trace() -> tuple[torch.export.ExportedProgram, dict, int]:
        lookups = FakeTensorMode.cache_hits + FakeTensorMode.cache_misses
        program, metadata = DynamoExporter().export_program(model, inputs, DynamoConfig(dynamic=True))
        return program, metadata, FakeTensorMode.cache_hits + FakeTensorMode.cache_misses - lookups

    fast, metadata, fast_lookups = trace()
    assert speedups <= {record["name"] for record in metadata["workarounds"]["patches"]}
    kept = [w for w in registry._REGISTRY["dynamo"] if w.name not in speedups]
    monkeypatch.setitem(registry._REGISTRY, "dynamo", kept)
    reference, _, lookups = trace()
    assert fast_lookups == 0 < lookups  # every symbolic op went around the cache
    assert _ops(fast) == _ops(reference)  # node for node (sym_size nodes are numbered on from earlier traces)
    assert _tensor_layouts(fast) == _tensor_layouts(reference)  # same sizes and strides, size-1 dims' too
    # Another batch; swin2sr, whose height and width stay dynamic, another image size too.
    size = (36, 28) if model_class.startswith("Swin2SR") else inputs["pixel_values"].shape[2:]
    pixel_values = torch.randn(3, 3, *size)
    with torch.no_grad():
        expected = model(pixel_values=pixel_values)
    assert max_abs_diff(fast.module()(pixel_values=pixel_values), expected) < TOLERANCE


@pytest.mark.parametrize("fixed", [True, False])
def test_rwkv_rescaled_in_place_on_its_first_forward_is_rescaled_on_every_call(monkeypatch, fixed, tmp_path):
    # RWKV divides its weights in place on its first inference forward (_rescale_layers); with rescale_every=1 the
    # second block's weights are halved. The program must halve the loaded weights on every call, and only once.
    model = tiny_model("RwkvForCausalLM", seed=0)
    model.config.rescale_every = 1
    inputs = sample_inputs(model)
    reference = copy.deepcopy(model)
    with torch.no_grad():
        expected = reference(**inputs).logits
    if not fixed:
        kept = [w for w in registry._REGISTRY["dynamo"] if w.name != "_fix_parameter_mutation_recomputed_each_call"]
        monkeypatch.setitem(registry._REGISTRY, "dynamo", kept)
    config = AutoExportConfig.from_dict({"export_format": "dynamo", "dynamic": True})
    AutoHfExporter.from_config(config).export(model, inputs, config).save_pretrained(tmp_path)
    loaded = ExportedModel.from_pretrained(tmp_path)
    calls = [max_abs_diff(loaded(**inputs).logits, expected) for _ in range(2)]
    assert calls[0] < 1e-5
    assert (calls[1] < 1e-5) is fixed, calls  # unfixed, the second call divides the weights again


class _IntOfLength(torch.nn.Module):
    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        length = int(input_ids.shape[1])  # fixes the length: the program takes the traced one only
        return input_ids[:, :length] * 2


def test_a_dimension_tracing_fixed_is_recorded_with_the_line_that_fixed_it():
    from hfexport.exporters.exporter_dynamo import specialized_dim_lines

    shapes = {"input_ids": {0: torch.export.Dim.AUTO, 1: torch.export.Dim.AUTO}}
    program = torch.export.export(_IntOfLength(), (), {"input_ids": torch.ones(2, 7)}, dynamic_shapes=shapes)
    source = Path(__file__).read_text().splitlines()
    line = next(n for n, text in enumerate(source, 1) if "length = int(" in text)
    # The batch stays dynamic; the length is fixed at the int(), which the runner's refusal then names.
    where = {"file": __file__, "line": line, "function": "forward"}
    assert specialized_dim_lines(program) == {"input_ids": {"1": where}}


class Doubling(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


def test_a_patch_of_the_exported_class_own_forward_is_traced(monkeypatch):
    # vits (ExecuTorch) patches VitsModel.forward, the class of the model exported: the trace calls the patched forward.
    monkeypatch.setitem(registry._REGISTRY, "dynamo", list(registry._REGISTRY["dynamo"]))

    @registry.register_patch("dynamo", f"{__name__}.Doubling.forward")
    def _patch_plus_one(original):
        return lambda self, x: original(self, x) + 1

    program, _ = DynamoExporter().export_program(Doubling(), {"x": torch.ones(2, 3)}, DynamoConfig(dynamic=True))
    assert torch.equal(program.module()(x=torch.ones(3, 4)), torch.full((3, 4), 3.0))


def test_dynamic_dims_are_read_past_a_python_int_input():
    # An int or bool input (BLT's num_patches, a use_cache flag) is a constant argument of the program, listed in
    # graph_signature.user_inputs by its value: pairing names with placeholders by that list failed with "zip()
    # argument 2 is shorter" after every trace with one.
    from hfexport.exporters.exporter_dynamo import dynamic_dim_bounds

    class Scale(torch.nn.Module):
        def forward(self, x: torch.Tensor, n: int, y: torch.Tensor) -> torch.Tensor:
            return x * n + y

    batch = torch.export.Dim("batch")
    inputs = {"x": torch.randn(2, 3), "n": 3, "y": torch.randn(2, 3)}
    program = torch.export.export(Scale(), (), inputs, dynamic_shapes={"x": {0: batch}, "n": None, "y": {0: batch}})
    assert dynamic_dim_bounds(program, ["x", "n", "y"]) == {"x": {"0": [0, None]}, "y": {"0": [0, None]}}


def test_an_attribute_a_trace_creates_is_removed_so_the_next_trace_does_not_read_a_fake_tensor():
    # A longrope rotary keeps its long-context frequencies as a plain attribute made on the first long sequence: made
    # inside one trace, it was a fake tensor the next trace read ("fake mode ... doesn't match mode"), failing the
    # generation components of FalconForCausalLM@rope_longrope after its export's trace.
    from hfexport.exporters.exporter_dynamo import stateful_attributes_cleared

    class LongRope(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if getattr(self, "full_attention_long_inv_freq", None) is None:
                self.full_attention_long_inv_freq = torch.arange(4.0) + 1
            return x * self.full_attention_long_inv_freq

    rope = LongRope()
    for _ in range(2):
        with stateful_attributes_cleared(rope):
            program = torch.export.export(rope, (torch.ones(2, 4),))
        assert "full_attention_long_inv_freq" not in vars(rope)
    assert torch.equal(program.module()(torch.ones(2, 4)), torch.arange(4.0).expand(2, 4) + 1)
