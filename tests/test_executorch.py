"""ExecutorchExporter end to end: export, save, reload and run on the ExecuTorch runtime against eager PyTorch."""

from __future__ import annotations

import copy
import dataclasses
import subprocess
import sys
import types

import pytest
import torch
from sweeps import core_params

pytest.importorskip("executorch")

from support import PHRASE_IDS, PhraseMasks, StudentTLoss, max_abs_diff, student_t_inputs

from hfexport.exporters import ExportedModel, ExportStageError, registry
from hfexport.exporters.exporter_executorch import (
    ExecutorchConfig,
    ExecutorchExporter,
    prepare_for_cuda,
    program_bytes,
)
from hfexport.exporters.workarounds import onnx_and_executorch as shared_workarounds
from hfexport.exporters.workarounds.executorch import fast_lowering as fast_lowering_workarounds
from hfexport.exporters.workarounds.executorch import fixes as executorch_fixes
from hfexport.exporters.workarounds.executorch import kernel_node_fixes, kernel_patches
from hfexport.exporters.workarounds.executorch import patches as executorch_patches
from hfexport.exporters.workarounds.executorch import xnnpack as xnnpack_workarounds
from hfexport.gate.model_sets import CORE_MODEL_TYPES
from hfexport.tiny_models import sample_inputs, tiny_model

TOLERANCE = 1e-3
# Every architecture family the issue names, on XNNPACK with static shapes (the CI default).
XNNPACK_MODELS = core_params(list(CORE_MODEL_TYPES))
PORTABLE_MODELS = ["llama", "bert", "vit"]


def export_roundtrip(name: str, tmp_path, **options):
    """Export a tiny model, save it, load it back; return (model, inputs, eager outputs, loaded export)."""
    model = tiny_model(name)
    inputs = sample_inputs(model)
    with torch.no_grad():
        expected = model(**inputs)
    exported = ExecutorchExporter().export(model, inputs, ExecutorchConfig(**options))
    exported.save_pretrained(tmp_path / "export")
    return model, inputs, expected, ExportedModel.from_pretrained(tmp_path / "export")


def check_against_eager(name: str, tmp_path, **options) -> dict:
    _, inputs, expected, loaded = export_roundtrip(name, tmp_path, **options)
    assert sorted(p.name for p in (tmp_path / "export").iterdir()) == ["config.json", "export.json", "model.pte"]
    outputs = loaded(**inputs)
    assert type(outputs) is type(expected)
    diff = max_abs_diff(outputs, expected)
    print(f"{name} {options}: max abs diff {diff:.2e}")
    assert diff <= TOLERANCE
    metadata = loaded.components["model"]
    assert "executorch" in loaded.manifest["versions"]
    assert {"torch.export", "to_edge_transform_and_lower", "to_executorch"} <= set(metadata["timings"])
    return metadata


@pytest.mark.parametrize("name", XNNPACK_MODELS)
def test_xnnpack_matches_eager(name, tmp_path):
    metadata = check_against_eager(name, tmp_path)
    assert metadata["backend"] == "xnnpack"
    assert metadata["delegate_partitions"] > 0
    assert b"XnnpackBackend" in (tmp_path / "export" / "model.pte").read_bytes()
    if name in FEWEST_PARTITIONS:  # the partition workarounds keep the delegate whole
        assert metadata["delegate_partitions"] == FEWEST_PARTITIONS[name]
        applied = set(metadata["workarounds"]["fixes"]) | patch_names(metadata)
        assert {workaround for workaround, model in PARTITION_WORKAROUNDS if model == name} <= applied


@pytest.mark.parametrize("name", PORTABLE_MODELS)
def test_portable_matches_eager(name, tmp_path):
    metadata = check_against_eager(name, tmp_path, backend="portable")
    assert metadata["delegate_partitions"] == 0
    # A workaround registered under "executorch.xnnpack" runs only when the XNNPACK delegate lowers.
    keys = {record["key"] for record in metadata["workarounds"]["patches"]}
    assert "executorch" in keys and "executorch.xnnpack" not in keys
    xnnpack_only = {w.name for w in registry.all_workarounds("executorch") if w.delegate == "xnnpack"}
    assert not xnnpack_only & set(metadata["workarounds"]["fixes"])


@pytest.mark.parametrize("name", ["llama", "bert"])
def test_dynamic_shapes_within_bounds_and_clear_error_outside(name, tmp_path):
    model, inputs, expected, loaded = export_roundtrip(name, tmp_path, dynamic=True, dynamic_upper_bound=16)
    assert max_abs_diff(loaded(**inputs), expected) <= TOLERANCE
    bounds = loaded.components["model"]["dynamic_dims"]
    assert bounds["input_ids"]["1"][1] == 16
    for batch, length in [(3, 11), (2, 16)]:
        other = sample_inputs(model, batch_size=batch, seq_length=length, seed=1)
        with torch.no_grad():
            assert max_abs_diff(loaded(**other), model(**other)) <= TOLERANCE
    too_long = sample_inputs(model, seq_length=17, seed=1)
    with pytest.raises(ValueError, match=r"'input_ids' dimension 1 is 17, outside the exported bounds \[\d+, 16\]"):
        loaded(**too_long)


class ScaledSoftmax(torch.nn.Module):
    def forward(self, x):
        return x.softmax(-1) * 2


def test_dynamic_bound_is_lowered_until_planned_memory_fits_the_budget():
    module, traced = ScaledSoftmax(), torch.randn(2, 5, 6)
    # Three dynamic dims at 256 plan 2 x 64 MiB; at 64 they plan 2 x 1 MiB.
    config = ExecutorchConfig(dynamic=True, planned_memory_budget_gib=0.01)
    program, metadata = ExecutorchExporter().export_program(module, {"x": traced}, config)
    assert metadata["dynamic_dims"]["x"] == {"0": [2, 64], "1": [2, 64], "2": [2, 64]}
    assert metadata["planned_memory_bytes"] <= 0.01 * 2**30
    fed = torch.randn(64, 3, 64)
    output = execute(program, fed)[0]
    torch.testing.assert_close(output, module(fed))
    unbudgeted = dataclasses.replace(config, planned_memory_budget_gib=None)
    _, metadata = ExecutorchExporter().export_program(module, {"x": traced}, unbudgeted)
    assert metadata["dynamic_dims"]["x"]["0"] == [2, 256]
    assert metadata["planned_memory_bytes"] > 0.01 * 2**30


def test_a_bound_the_traced_graph_shows_too_large_is_narrowed_before_any_lowering(monkeypatch):
    from hfexport.exporters import exporter_dynamo, exporter_executorch

    lowerings, traces = [], []
    lower = exporter_executorch.to_edge_transform_and_lower
    monkeypatch.setattr(
        exporter_executorch, "to_edge_transform_and_lower", lambda *a, **k: lowerings.append(1) or lower(*a, **k)
    )
    trace = exporter_dynamo.torch.export.export
    monkeypatch.setattr(exporter_dynamo.torch.export, "export", lambda *a, **k: traces.append(1) or trace(*a, **k))
    module, traced = ScaledSoftmax(), torch.randn(2, 5, 6)
    config = ExecutorchConfig(dynamic=True, planned_memory_budget_gib=0.01)
    program, foreseen = ExecutorchExporter().export_program(module, {"x": traced}, config)
    # One trace: the program traced up to 256 is narrowed to 64, which it is valid for too.
    assert (len(traces), len(lowerings)) == (1, 1) and foreseen["dynamic_dims"]["x"]["0"] == [2, 64]
    fed = torch.randn(64, 3, 64)
    torch.testing.assert_close(execute(program, fed)[0], module(fed))
    # Without foresight the same bound is reached by lowering twice, tracing again at 64: the same plan.
    monkeypatch.setattr(exporter_executorch, "_PLANNER_OVERHEAD", 0)
    _, planned = ExecutorchExporter().export_program(module, {"x": traced}, config)
    assert (len(traces), len(lowerings)) == (3, 3) and planned["dynamic_dims"] == foreseen["dynamic_dims"]
    assert planned["planned_memory_bytes"] == foreseen["planned_memory_bytes"]


class Unshuffled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.unshuffle = torch.nn.PixelUnshuffle(2)

    def forward(self, x):
        return self.unshuffle(x).relu()


def test_a_dimension_declared_a_multiple_is_traced_and_bounded_in_multiples(monkeypatch):
    # PixelUnshuffle takes heights and widths in multiples of its factor only: declared so, each is traced as the factor
    # times a dynamic root, and narrowing the bound narrows the root.
    monkeypatch.setitem(registry._REGISTRY, "dynamo", list(registry._REGISTRY["dynamo"]))

    @registry.register_dim_multiples("dynamo", "torch.nn.PixelUnshuffle")
    def _factor_multiples_of_pixel_unshuffle(name, value, module):
        """Stands in for a model taking image sizes in multiples of its windows."""
        return dict.fromkeys((2, 3), module.downscale_factor)

    module = Unshuffled()
    config = ExecutorchConfig(dynamic=True, planned_memory_budget_gib=0.01)
    program, metadata = ExecutorchExporter().export_program(module, {"x": torch.randn(2, 3, 8, 6)}, config)
    assert metadata["declared_dim_multiples"] == {"x": {"2": 2, "3": 2}}
    # The budget narrows 256 to 16: H and W twice a root of [2, 8].
    assert metadata["dynamic_dims"]["x"] == {"0": [2, 16], "1": [2, 16], "2": [4, 16], "3": [4, 16]}
    fed = torch.randn(3, 3, 16, 10)
    torch.testing.assert_close(execute(program, fed)[0], module(fed))


class CroppedChannelsLast(torch.nn.Module):
    """Convolves in channels-last and crops all of it, as swin2sr's super-resolution head does."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 3, 1)

    def forward(self, x):
        convolved = self.conv(x.contiguous(memory_format=torch.channels_last))
        return convolved[:, :, : x.shape[2], : x.shape[3]]


@pytest.mark.parametrize("dynamic", [False, True])
def test_a_whole_crop_of_a_channels_last_tensor_runs(monkeypatch, dynamic):
    module, traced = CroppedChannelsLast(), torch.randn(2, 3, 4, 5)
    config = ExecutorchConfig(dynamic=dynamic)
    program, metadata = ExecutorchExporter().export_program(module, {"x": traced}, config)
    assert "_fix_whole_view_as_its_tensor" in metadata["workarounds"]["fixes"]
    torch.testing.assert_close(execute(program, traced)[0], module(traced))
    monkeypatch.setitem(
        registry._REGISTRY,
        "executorch",
        [w for w in registry._REGISTRY["executorch"] if w.name != "_fix_whole_view_as_its_tensor"],
    )
    program, _ = ExecutorchExporter().export_program(module, {"x": traced}, config)
    with pytest.raises(RuntimeError, match="0x12"):  # the copy planned contiguous: "different dim orders"
        execute(program, traced)


def test_a_crop_from_a_data_dependent_start_is_kept_without_a_guard():
    # MPT cuts its alibi at the cached count, an unbacked size in a StaticCache's decode: `start in (None, 0)` guarded
    # on it ("Could not guard on data-dependent expression Eq(u0, 0)", stage 5 of the static-cache part).
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    from hfexport.exporters.workarounds.executorch.fixes import _keeps_whole_dim

    start = ShapeEnv().create_unbacked_symint()
    assert not _keeps_whole_dim(torch.zeros(4, 3), 0, start, None)
    assert _keeps_whole_dim(torch.zeros(4, 3), 0, 0, None)


class RescaledOnFirstCall(torch.nn.Module):
    """Divides its weight in place on its first forward, as RWKV's _rescale_layers does."""

    def __init__(self):
        super().__init__()
        self.linear, self.rescaled = torch.nn.Linear(4, 4), False

    def forward(self, x):
        if not self.rescaled:
            self.linear.weight.div_(2)
            self.rescaled = True
        return self.linear(x)


def test_a_weight_rescaled_in_place_is_rescaled_on_every_call(monkeypatch):
    torch.manual_seed(0)
    module, x = RescaledOnFirstCall(), torch.randn(2, 4)
    reference = copy.deepcopy(module)
    with torch.no_grad():
        expected = reference(x)  # eager's first call rescales; later calls use the rescaled weight
        assert torch.equal(reference(x), expected)
    config = ExecutorchConfig(dynamic=False)
    program, metadata = ExecutorchExporter().export_program(copy.deepcopy(module), {"x": x}, config)
    assert "_fix_parameter_mutation_recomputed_each_call" in metadata["workarounds"]["fixes"]
    for _ in range(2):
        (actual,) = execute(program, x)
        torch.testing.assert_close(actual, expected)
    without_workaround(monkeypatch, "_fix_parameter_mutation_recomputed_each_call")
    program, _ = ExecutorchExporter().export_program(copy.deepcopy(module), {"x": x}, config)
    assert len(execute(program, x)) == 2  # the new weight returned as one more output


def test_static_export_rejects_other_shapes(tmp_path):
    model, _, _, loaded = export_roundtrip("bert", tmp_path)
    expected = r"'input_ids' dimension 1 has size 9, but the program accepts only size 7 \(exported static"
    with pytest.raises(ValueError, match=expected):
        loaded(**sample_inputs(model, seq_length=9))


def test_unknown_backend_fails_in_stage_one():
    model = tiny_model("bert")
    with pytest.raises(ExportStageError, match="executorch · stage 1 backend preparation: ValueError"):
        ExecutorchExporter().export_program(model, sample_inputs(model), ExecutorchConfig(backend="tpu"))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message given on machines without a GPU")
def test_cuda_backend_needs_a_gpu():
    with pytest.raises(RuntimeError, match=r"'cuda' backend .* this machine has none"):
        prepare_for_cuda(torch.nn.Linear(2, 2), {})


def test_importing_hfexport_does_not_import_executorch():
    code = "import sys, hfexport, hfexport.exporters; assert 'executorch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# ── One test per registered workaround: it fails once the workaround is taken out of the registry ──


class SizeSquared(torch.nn.Module):
    def forward(self, x):
        return x.new_ones(x.shape[1] ** 2) * x.sum()


class SizeAtLeastFour(torch.nn.Module):
    def forward(self, x):
        return x.new_ones(torch.sym_max(x.shape[1], 4)) * x.sum()


def execute(program, *inputs: torch.Tensor) -> list[torch.Tensor]:
    """``program``'s forward run on the ExecuTorch runtime."""
    from executorch.runtime import Runtime

    return Runtime.get().load_program(program_bytes(program)).load_method("forward").execute(list(inputs))


def run_module(module: torch.nn.Module, traced: torch.Tensor, fed: torch.Tensor, **options) -> torch.Tensor:
    config = ExecutorchConfig(dynamic=True, **options)
    program, metadata = ExecutorchExporter().export_program(module, {"x": traced}, config)
    return execute(program, fed)[0], metadata


class PaddingToFour(torch.nn.Module):
    def forward(self, x):
        return x.new_ones(-x.shape[1] % 4 + 1)


@pytest.mark.parametrize(
    ("module", "fix", "error", "options"),
    [
        (SizeSquared(), "_fix_sym_pow_as_mul", "invalid target for call_function <built-in function pow>", {}),
        # Only the edge verifier rejects sym_max, and fast lowering skips it: check with IR validation on.
        (SizeAtLeastFour(), "_fix_python_sym_op", "AssertionError", {"fast_lowering": False}),
    ],
)
def test_sym_op_fixes(module, fix, error, options, monkeypatch):
    traced, fed = torch.randn(2, 5), torch.randn(2, 6)
    output, metadata = run_module(module, traced, fed, **options)
    assert fix in metadata["workarounds"]["fixes"]
    torch.testing.assert_close(output, module(fed))
    without_workaround(monkeypatch, fix)
    with pytest.raises(ExportStageError, match=error):
        run_module(module, traced, fed, **options)


class SquareScoresViewed(torch.nn.Module):
    """GPT-NeoX-Japanese's attention: scores of every position against every one, viewed back with -1."""

    def forward(self, x):
        batch, length, width = x.shape
        heads = x.view(batch, length, 2, width // 2).transpose(1, 2)
        flat = heads.reshape(batch * 2, length, width // 2)
        scores = torch.bmm(flat, flat.transpose(1, 2)).view(batch, 2, length, -1)
        return torch.matmul(scores.softmax(-1), heads)


def test_a_size_inferred_as_a_power_is_the_tensors_own():
    # The fast view took -1 as length**2 // length, which ExecuTorch cannot emit ("invalid target for call_function
    # <built-in function pow>"); the dim walk takes the scores' own length.
    module, fed = SquareScoresViewed(), torch.randn(3, 6, 4)
    output, _ = run_module(module, torch.randn(2, 5, 4), fed)
    torch.testing.assert_close(output, module(fed))


def test_sdpa_patch_keeps_gpt2_lowerable(monkeypatch):
    # The math attention patch keeps SDPA out of the graph; without it the SDPA op needs the contiguous copy.
    without_workaround(monkeypatch, "_patch_sdpa_contiguous_output")
    without_workaround(monkeypatch, "_patch_sdpa_as_math_attention")
    model = tiny_model("gpt2")
    with pytest.raises(ExportStageError, match="Cannot view a tensor with shape"):
        ExecutorchExporter().export_program(model, sample_inputs(model), ExecutorchConfig())


def test_experts_patch_keeps_moe_lowerable(tmp_path, monkeypatch):
    check_against_eager("mixtral", tmp_path)
    without_workaround(monkeypatch, "_patch_experts_batched_mm")
    model = tiny_model("mixtral")
    with pytest.raises(ExportStageError, match=r"Missing out variants: .*grouped_mm_fallback"):
        ExecutorchExporter().export_program(model, sample_inputs(model), ExecutorchConfig())


# Each keeps ops XNNPACK rejects from cutting a model into several delegate partitions (llama: 14 without any).
FEWEST_PARTITIONS = {"llama": 1}
PARTITION_WORKAROUNDS = [
    ("_patch_sdpa_as_math_attention", "llama"),
    ("_patch_repeat_kv_as_broadcast", "llama"),
    ("_fix_mean_last_dim_as_4d", "llama"),
    ("_fix_cat_without_empty_tensors", "llama"),
    ("_fix_cat_repeated_input", "llama"),
    ("_fix_unsqueeze_as_view", "llama"),
    ("_fix_whole_view_as_its_tensor", "llama"),
]


def without_workaround(monkeypatch, name: str) -> None:
    """Take the workaround ``name`` an ExecuTorch export runs (key "executorch", "executorch.xnnpack" or "dynamo") out
    of the registry."""
    keys = ("executorch", "executorch.xnnpack", "dynamo")
    key = next(k for k in keys if any(w.name == name for w in registry._REGISTRY[k]))
    kept = [w for w in registry._REGISTRY[key] if w.name != name]
    assert len(kept) == len(registry._REGISTRY[key]) - 1
    monkeypatch.setitem(registry._REGISTRY, key, kept)


def patch_names(metadata: dict) -> set[str]:
    return {record["name"] for record in metadata["workarounds"]["patches"]}


@pytest.mark.parametrize(("name", "model_name"), PARTITION_WORKAROUNDS)
def test_each_partition_workaround_saves_a_split(name, model_name, monkeypatch):
    without_workaround(monkeypatch, name)
    model = tiny_model(model_name)
    _, metadata = ExecutorchExporter().export_program(model, sample_inputs(model), ExecutorchConfig())
    print(f"{model_name} without {name}: {metadata['delegate_partitions']} partitions")
    assert metadata["delegate_partitions"] > FEWEST_PARTITIONS[model_name]


def test_convert_to_sdpa_patch_keeps_t5_lowerable(monkeypatch):
    without_workaround(monkeypatch, "_patch_convert_to_sdpa_noop")
    model = tiny_model("t5")
    with pytest.raises(ExportStageError, match="ConvertToSDPAPass"):
        ExecutorchExporter().export_program(model, sample_inputs(model), ExecutorchConfig())


class Conv1d(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(4, 4, 3)

    def forward(self, x):
        return self.conv(x)


def test_conv1d_patch_keeps_dynamic_conv1d_lowerable(monkeypatch):
    conv = Conv1d().eval()
    traced, fed = torch.randn(2, 4, 16), torch.randn(3, 4, 20)
    output, _ = run_module(conv, traced, fed)
    torch.testing.assert_close(output, conv(fed).detach(), atol=1e-4, rtol=1e-4)
    without_workaround(monkeypatch, "_patch_conv1d_one_dynamic_dim")
    with pytest.raises(ExportStageError, match="XNNPACK reshape only supports 1 dynamic dimension"):
        run_module(conv, traced, fed)


class ScaleEachPosition(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.randn(4))

    def forward(self, x):
        return x.unsqueeze(-1) * self.scale


def test_unsqueeze_patch_keeps_two_dynamic_dims_lowerable(monkeypatch):
    module = ScaleEachPosition().eval()
    traced, fed = torch.randn(2, 5), torch.randn(3, 7)
    output, _ = run_module(module, traced, fed)
    torch.testing.assert_close(output, module(fed).detach())
    without_workaround(monkeypatch, "_patch_unsqueeze_one_dynamic_dim")
    with pytest.raises(ExportStageError, match="XNNPACK reshape only supports 1 dynamic dimension"):
        run_module(module, traced, fed)


class TubeletEmbedding(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.projection = torch.nn.Conv3d(3, 8, kernel_size=(2, 4, 4), stride=(2, 4, 4))

    def forward(self, x):
        return self.projection(x).flatten(2)


def test_conv3d_patch_runs_a_tubelet_embedding(monkeypatch):
    # videomae, vivit: ExecuTorch has no kernel for a 3-D convolution.
    module, traced = TubeletEmbedding().eval(), torch.randn(1, 3, 4, 8, 8)
    program, _ = ExecutorchExporter().export_program(module, {"x": traced}, ExecutorchConfig())
    output = execute(program, traced)[0]
    torch.testing.assert_close(output, module(traced).detach(), atol=1e-5, rtol=1e-5)
    without_workaround(monkeypatch, "_patch_conv3d_as_conv2d")
    program, _ = ExecutorchExporter().export_program(module, {"x": traced}, ExecutorchConfig())
    with pytest.raises(RuntimeError, match="failed with error 0x12"):
        execute(program, traced)


class FourierMixing(torch.nn.Module):
    def __init__(self):
        super().__init__()
        from transformers import FNetConfig
        from transformers.models.fnet.modeling_fnet import FNetBasicFourierTransform

        self.fourier = FNetBasicFourierTransform(FNetConfig(hidden_size=8))

    def forward(self, x):
        return self.fourier(x)[0] * 2


def test_fnet_fourier_patch_runs_without_an_fft_kernel(monkeypatch):
    # fnet's token mixing, fftn(x, dim=(1, 2)).real: the runtime has no FFT kernel.
    module, traced, fed = FourierMixing(), torch.randn(2, 5, 8), torch.randn(3, 7, 8)
    output, _ = run_module(module, traced, fed)
    torch.testing.assert_close(output, module(fed), atol=1e-5, rtol=1e-5)
    without_workaround(monkeypatch, "_patch_fnet_fourier_as_real_dft")
    with pytest.raises(RuntimeError, match=r"Failed to load method forward, error: 0x:14"):
        run_module(module, traced, fed)


class SegmentReductions(torch.nn.Module):
    def forward(self, x):
        flat = x.flatten()
        segments = (flat * 3).floor().long().clamp(0, 3) * 2  # odd segments stay empty
        out = torch.full((8,), 0.5)
        reduced = [
            out.scatter_reduce(0, segments, (flat * 8).floor() / 8, reduce, include_self=include_self)  # with ties
            for reduce in ("amin", "amax", "mean", "sum")
            for include_self in (False, True)
        ]
        return torch.stack(reduced)


def test_scatter_reduce_patch_reduces_segments_without_a_kernel(monkeypatch):
    # tapas's segment min/max/mean (reduce_min, ...) over a flattened 1-D cell index.
    module, traced, fed = SegmentReductions(), torch.rand(2, 5), torch.rand(3, 7)
    output, _ = run_module(module, traced, fed)
    torch.testing.assert_close(output, module(fed))
    without_workaround(monkeypatch, "_patch_scatter_reduce_as_scatter_add")
    with pytest.raises(RuntimeError, match=r"Failed to load method forward, error: 0x:14"):
        run_module(module, traced, fed)


@pytest.mark.parametrize("name", ["_patch_cummax_as_masked_max", "_patch_cummin_as_masked_min"])
def test_cummax_and_cummin_patches_run_without_a_kernel(name, monkeypatch):
    # grounding_dino's phrase masks: the portable runtime has no cummax or cummin kernel (its isin decomposes).
    module, (traced, fed) = PhraseMasks(), PHRASE_IDS
    program, _ = ExecutorchExporter().export_program(module, {"input_ids": traced}, ExecutorchConfig(dynamic=True))
    for input_ids in PHRASE_IDS:
        for actual, expected in zip(execute(program, input_ids), module(input_ids), strict=True):
            assert torch.equal(actual, expected)
    without_workaround(monkeypatch, name)
    program, _ = ExecutorchExporter().export_program(module, {"input_ids": traced}, ExecutorchConfig(dynamic=True))
    with pytest.raises(RuntimeError, match=r"Failed to load method forward, error: 0x:14"):
        execute(program, fed)


def test_lgamma_patch_runs_the_student_t_loss_without_a_kernel(monkeypatch):
    # autoformer/informer *ForPrediction: the Student-T loss's lgamma has no portable kernel.
    module, traced, fed = StudentTLoss(), student_t_inputs(2, 5), student_t_inputs(3, 11)
    program, _ = ExecutorchExporter().export_program(module, traced, ExecutorchConfig(dynamic=True))
    for actual, expected in zip(execute(program, *fed.values()), module(**fed), strict=True):
        torch.testing.assert_close(actual, expected.detach(), atol=1e-5, rtol=1e-5)
    without_workaround(monkeypatch, "_patch_lgamma_as_lanczos_series")
    program, _ = ExecutorchExporter().export_program(module, traced, ExecutorchConfig(dynamic=True))
    with pytest.raises(RuntimeError, match=_KERNEL_MISSING):
        execute(program, *fed.values())


class ResizedGrid(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.grid = torch.nn.Parameter(torch.randn(1, 4, 6, 6))

    def forward(self, x, shape):
        height, width = shape.tolist()  # siglip2's patch grid of each image
        torch._check(height > 0)
        torch._check(width > 0)
        torch._check(height * width <= x.shape[1])
        resized = torch.nn.functional.interpolate(self.grid, size=(height, width), mode="bilinear", antialias=True)
        return x[:, : height * width] + resized.flatten(2).transpose(1, 2)


def test_antialiased_resize_patch_runs_a_size_read_from_data(monkeypatch):
    # siglip2's position embeddings, resized (antialiased) to a grid read from spatial_shapes.
    module, traced = ResizedGrid().eval(), (torch.randn(2, 16, 4), torch.tensor([3, 5]))
    program, _ = ExecutorchExporter().export_program(module, {"x": traced[0], "shape": traced[1]}, ExecutorchConfig())
    for fed in (traced, (torch.randn(2, 16, 4), torch.tensor([8, 2]))):
        torch.testing.assert_close(execute(program, *fed)[0], module(*fed).detach(), atol=1e-5, rtol=1e-5)
    without_workaround(monkeypatch, "_patch_antialiased_bilinear_as_matmuls")
    program, _ = ExecutorchExporter().export_program(module, {"x": traced[0], "shape": traced[1]}, ExecutorchConfig())
    with pytest.raises(RuntimeError, match="failed with error 0x12"):
        execute(program, *traced)


class MaxNormalized(torch.nn.Module):
    def forward(self, x):
        return x - x.max(dim=-1, keepdim=True).values


def test_max_dim_patch_leaves_a_negative_dim_max_to_portable(monkeypatch):
    # gpt_oss attention sinks: a max over dim -1 of 4D scores.
    module, traced = MaxNormalized(), torch.randn(2, 3, 5, 6)
    program, metadata = ExecutorchExporter().export_program(module, {"x": traced}, ExecutorchConfig())
    assert "_patch_max_dim_two_or_three" in patch_names(metadata)
    output = execute(program, traced)[0]
    torch.testing.assert_close(output, module(traced))
    without_workaround(monkeypatch, "_patch_max_dim_two_or_three")
    with pytest.raises(ExportStageError, match=r"amax\.default only supports dim == 2 or dim == 3"):
        ExecutorchExporter().export_program(module, {"x": traced}, ExecutorchConfig())


class TimeShift(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.shift = torch.nn.ZeroPad2d((0, 0, 1, -1))

    def forward(self, x):
        return self.shift(x) * 2


class FilledShift(torch.nn.Module):
    def forward(self, x):
        return torch.constant_pad_nd(x, [0, 0, 1, -1], 0.5) * 2


class Int32Scatter(torch.nn.Module):
    def forward(self, x):
        index = (torch.arange(x.shape[1]) % 3).to(torch.int32).expand_as(x)
        counts = torch.zeros(x.shape[0], 3, dtype=torch.int32)
        counts.scatter_add_(-1, index, (x > 0).to(torch.int32))  # glm5_next's form: in place
        return torch.zeros(x.shape[0], 3).scatter_add(1, index, x) * counts


class SortedTokens(torch.nn.Module):
    def forward(self, x):
        scores, order = x.sum(-1).sort(dim=-1, descending=True)
        restored = torch.argsort(order, dim=-1)  # vjepa2's unsort_tokens
        reordered = x.gather(1, order.unsqueeze(-1).expand_as(x))
        return reordered.gather(1, restored.unsqueeze(-1).expand_as(x)) * scores.unsqueeze(-1)


class BucketedPositions(torch.nn.Module):
    def forward(self, x):
        fractions = torch.arange(x.shape[1]) / x.shape[1]
        boundaries = torch.arange(1 / 4, 1, 1 / 4)  # idefics3's patch position buckets
        buckets = torch.bucketize(fractions, boundaries, right=True) * 4 + torch.bucketize(fractions, boundaries)
        return x + buckets.unsqueeze(-1)


_KERNEL_REFUSES = "failed with error 0x12"
_KERNEL_MISSING = r"Failed to load method forward, error: 0x:14"


@pytest.mark.parametrize(
    ("module", "fix", "traced", "fed", "refusal"),
    [
        # glm5_next's indexer scatters by an int32 index; the runtime's kernels take int64 only.
        (Int32Scatter(), "_fix_int32_index_as_int64", torch.randn(2, 5), torch.randn(3, 7), _KERNEL_REFUSES),
        # long_t5's block padding: with C++'s sign the result's length is -2, and the runtime refuses it.
        (PaddingToFour(), "_fix_sym_mod_of_negative", torch.randn(2, 5), torch.randn(3, 7), _KERNEL_REFUSES),
        # rwkv's time shift: the runtime's constant_pad_nd refuses negative padding.
        (TimeShift(), "_fix_negative_pad_as_slice", torch.randn(2, 5, 4), torch.randn(3, 7, 4), _KERNEL_REFUSES),
        # The same crop written as constant_pad_nd, whose third argument is a fill value rather than a mode.
        (FilledShift(), "_fix_negative_pad_as_slice", torch.randn(2, 5, 4), torch.randn(3, 7, 4), _KERNEL_REFUSES),
        # vjepa2's token (arg)sorts, jetmoe's expert grouping: the runtime has no sort kernel.
        (SortedTokens(), "_fix_sort_as_topk", torch.randn(2, 5, 4), torch.randn(3, 7, 4), _KERNEL_MISSING),
        # idefics3/smolvlm's patch positions: the runtime has no bucketize kernel.
        (BucketedPositions(), "_fix_bucketize_as_count", torch.randn(2, 5, 4), torch.randn(3, 8, 4), _KERNEL_MISSING),
    ],
)
def test_node_fixes_the_runtime_needs(module, fix, traced, fed, refusal, monkeypatch):
    output, metadata = run_module(module, traced, fed)
    assert fix in metadata["workarounds"]["fixes"]
    torch.testing.assert_close(output, module(fed))
    without_workaround(monkeypatch, fix)
    with pytest.raises(RuntimeError, match=refusal):
        run_module(module, traced, fed)


class NgramHashes(torch.nn.Module):
    def forward(self, x):
        # blt's byte n-gram hashes: int64 products wrap around, their sums pass 2**53, some are negative.
        windows = torch.cat([x.new_zeros(x.shape[0], 2), x], dim=1).unfold(1, 3, 1)
        return (windows * torch.tensor(5915587277) ** torch.arange(3)).sum(-1) % 30000


@pytest.mark.parametrize(
    "fix",
    ["_fix_integer_power_by_squaring", "_fix_integer_sum_as_cumsum_end", "_fix_integer_remainder_from_floor_division"],
)
def test_integer_arithmetic_wraps_and_rounds_as_torch_does(fix, monkeypatch):
    module = NgramHashes()
    traced, fed = torch.randint(0, 256, (2, 5)), torch.randint(0, 256, (3, 9))
    output, metadata = run_module(module, traced, fed)
    assert fix in metadata["workarounds"]["fixes"]
    assert torch.equal(output, module(fed))
    # Without it the runtime's kernel computes another integer: saturated, rounded through double, or of C's sign.
    without_workaround(monkeypatch, fix)
    output, _ = run_module(module, traced, fed)
    assert not torch.equal(output, module(fed))


class PatchMaxima(torch.nn.Module):
    config = types.SimpleNamespace(max_position_embeddings=16)

    def forward(self, x):
        from transformers.models.blt.modeling_blt import BltLocalEncoder

        lengths = torch.tensor([[1, 3, 0, 2], [4, 1, 1, 1]])  # consecutive spans of tokens, as blt's patches are
        starts = torch.cat([lengths.new_zeros(2, 1), lengths.cumsum(-1)[:, :-1]], dim=-1)
        patch_ids = (starts.unsqueeze(1) <= torch.arange(x.shape[1]).view(1, -1, 1)).sum(-1) - 1
        return BltLocalEncoder.patch_reduce(self, x, 4, patch_ids)


def test_blt_patch_maxima_without_scatter_reduce(monkeypatch):
    # Loaded first, as building a blt model loads it: a patch of a modeling module nothing imported is not installed.
    # (The suite used to pass only because some earlier dynamic export in the worker imported blt's module.)
    import transformers.models.blt.modeling_blt  # noqa: F401

    module, traced, fed = PatchMaxima(), torch.randn(2, 7, 4), torch.randn(2, 9, 4)
    output, metadata = run_module(module, traced, fed)
    assert "_patch_blt_patch_max_by_doubling_strides" in patch_names(metadata)
    assert torch.equal(output, module(fed))
    without_workaround(monkeypatch, "_patch_blt_patch_max_by_doubling_strides")
    with pytest.raises(RuntimeError, match=_KERNEL_MISSING):
        run_module(module, traced, fed)


class ReassignedTable(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.table = torch.nn.Buffer(torch.randn(16, 4), persistent=False)

    def forward(self, x):
        self.table = self.table.to(device=x.device, dtype=x.dtype)  # ctrl's pos_encoding, reassigned in forward
        return x + self.table[: x.shape[1]]


def test_a_buffer_reassigned_to_itself_keeps_its_values(monkeypatch):
    module, traced, fed = ReassignedTable(), torch.randn(2, 5, 4), torch.randn(3, 7, 4)
    output, metadata = run_module(module, traced, fed)
    assert "_fix_buffer_reassigned_to_itself" in metadata["workarounds"]["fixes"]
    torch.testing.assert_close(output, module(fed))
    # Without it the copy_ becomes a buffer mutation, serialized without its values: the table reads as zeros.
    without_workaround(monkeypatch, "_fix_buffer_reassigned_to_itself")
    output, _ = run_module(module, traced, fed)
    torch.testing.assert_close(output, fed)


class InverseStft(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 18)  # 9 bins of magnitude and phase: n_fft 16

    def forward(self, x):
        magnitude, phase = self.linear(x).chunk(2, dim=-1)
        frames = torch.fft.irfft(torch.polar(magnitude.exp(), phase), 16, dim=-1).transpose(1, 2)
        length = (x.shape[1] - 1) * 4 + 16
        audio = torch.nn.functional.fold(frames, output_size=(1, length), kernel_size=(1, 16), stride=(1, 4))
        return audio[:, 0, 0, 6:-6]  # neucodec's ISTFT head: overlap-add, "same" padding


class AutoCorrelation(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 8)

    def forward(self, x):
        q, k = self.linear(x).transpose(1, 2).chunk(2, dim=1)  # autoformer's auto-correlation, along a static dim
        padded = torch.fft.irfft(torch.fft.rfft(q, n=6, dim=1) * torch.conj(torch.fft.rfft(k, n=6, dim=1)), 6, dim=1)
        cut = torch.fft.irfft(torch.fft.rfft(k, n=3, dim=1).conj() * torch.fft.rfft(q, n=3, dim=1), 3, dim=1)
        return torch.cat([padded, cut], dim=1)


class WeightedBags(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(10, 4))

    def forward(self, x):
        indices = (x.abs() * 10).long() % 10  # kimi_k25's position grid: 16 weighted taps per patch
        weighted = torch.nn.functional.embedding_bag(indices, self.table, per_sample_weights=x.softmax(-1), mode="sum")
        bags = [torch.nn.functional.embedding_bag(indices, self.table, mode=mode) for mode in ("mean", "max")]
        return torch.cat([weighted, *bags], dim=-1)


@pytest.mark.parametrize(
    ("module", "workaround", "traced", "fed", "refusal"),
    [
        # neucodec/xcodec2's ISTFT head: irfft of a polar spectrum (no polar kernel; its fold decomposes).
        (InverseStft(), "_fix_irfft_of_polar_as_real_dft", torch.randn(2, 5, 4), torch.randn(3, 7, 4), _KERNEL_MISSING),
        # kimi_k25's bicubic position resampling: embedding_bag (no kernel) over bags of 16 taps.
        (WeightedBags(), "_patch_embedding_bag_as_gather", torch.randn(5, 16), torch.randn(9, 16), _KERNEL_MISSING),
        # autoformer's auto-correlation: irfft(rfft(q) * conj(rfft(k))), zero-padded (n=6) and cut (n=3).
        (
            AutoCorrelation(),
            "_fix_irfft_of_spectra_product_as_circular_correlation",
            torch.randn(2, 5, 4),
            torch.randn(3, 7, 4),
            "_conj_copy does not support automatic differentiation",
        ),
    ],
)
def test_decompositions_of_ops_the_runtime_has_no_kernel_for(module, workaround, traced, fed, refusal, monkeypatch):
    output, metadata = run_module(module, traced, fed)
    assert workaround in {*metadata["workarounds"]["fixes"], *patch_names(metadata)}
    torch.testing.assert_close(output, module(fed).detach(), atol=1e-5, rtol=1e-5)
    without_workaround(monkeypatch, workaround)
    with pytest.raises(RuntimeError, match=refusal):
        run_module(module, traced, fed)


class RandomDraws(torch.nn.Module):
    def forward(self, x):
        noise = x + torch.randn_like(x)  # vits's prior sampling
        keys = torch.randint(x.shape[1], (x.shape[0] * 100,))  # informer's key sampling
        return noise, torch.rand_like(x), keys, torch.randint(3, 7, (400,))


@pytest.mark.parametrize("fix", ["_fix_random_like_as_sized_draw", "_fix_randint_as_scaled_rand"])
def test_random_draws_run_on_the_runtimes_rand_kernels(fix, monkeypatch):
    module, traced, fed = RandomDraws(), torch.zeros(2, 5), torch.zeros(30, 40)
    program, metadata = ExecutorchExporter().export_program(module, {"x": traced}, ExecutorchConfig(dynamic=True))
    assert fix in metadata["workarounds"]["fixes"]
    noise, uniform, keys, offset = execute(program, fed)
    assert noise.shape == uniform.shape == fed.shape and keys.shape == (3000,) and offset.shape == (400,)
    assert abs(noise.mean()) < 0.1 and abs(noise.std() - 1) < 0.1  # standard normal draws
    assert uniform.min() >= 0 and uniform.max() < 1 and abs(uniform.mean() - 0.5) < 0.05
    assert keys.dtype == torch.int64 and set(keys.tolist()) == set(range(40))  # every index, none past the range
    assert set(offset.tolist()) == {3, 4, 5, 6}
    without_workaround(monkeypatch, fix)
    with pytest.raises(RuntimeError, match=_KERNEL_MISSING):
        run_module(module, traced, fed)


class WindowPositions(torch.nn.Module):
    def forward(self, x, window_index):
        per_window = x.shape[0] // (x.shape[0] // 4)  # qwen2_5_vl's rows per window: a divisor ranging from 0
        return torch.arange(window_index.shape[0] * per_window) + x.sum()


def test_a_size_divided_by_a_size_gets_a_bound_not_the_traced_size(monkeypatch):
    module, traced = WindowPositions(), {"x": torch.ones(8, 3), "window_index": torch.arange(2)}
    fed = [torch.ones(12, 3), torch.arange(6)]  # 6 windows of 4 rows: past the traced 8 positions
    program, metadata = ExecutorchExporter().export_program(module, traced, ExecutorchConfig(dynamic=True))
    assert "_patch_upper_bound_of_a_floor_division" in patch_names(metadata)
    torch.testing.assert_close(execute(program, *fed)[0], module(*fed))
    without_workaround(monkeypatch, "_patch_upper_bound_of_a_floor_division")
    program, _ = ExecutorchExporter().export_program(module, traced, ExecutorchConfig(dynamic=True))
    with pytest.raises(RuntimeError, match=_KERNEL_REFUSES):
        execute(program, *fed)


class ValidFrames(torch.nn.Module):
    def forward(self, x):
        frames = (x > 0).flatten().nonzero().squeeze(-1)  # qwen3_asr's valid frames
        return x.flatten()[frames] * 2, (x > 0).nonzero() * 3


def test_nonzero_is_traced_as_its_kernel_writes_it(monkeypatch):
    module, traced, fed = ValidFrames(), torch.randn(2, 5), torch.randn(3, 7)
    program, metadata = ExecutorchExporter().export_program(module, {"x": traced}, ExecutorchConfig(dynamic=True))
    assert "_patch_nonzero_written_row_by_row" in patch_names(metadata)
    for actual, expected in zip(execute(program, fed), module(fed), strict=True):
        assert torch.equal(actual, expected)
    without_workaround(monkeypatch, "_patch_nonzero_written_row_by_row")
    program, _ = ExecutorchExporter().export_program(module, {"x": traced}, ExecutorchConfig(dynamic=True))
    with pytest.raises(RuntimeError, match=_KERNEL_REFUSES):
        execute(program, fed)


class UnpaddedRows(torch.nn.Module):
    def forward(self, features, mask):  # lfm2_vl's image features, cut to each image's .item() length
        return torch.stack([features[i, : mask[i].sum()].sum(0) for i in range(features.shape[0])]) * 2


def test_a_slice_to_an_item_is_lowered(monkeypatch):
    module = UnpaddedRows()
    traced = {"features": torch.randn(2, 6, 4), "mask": torch.tensor([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 0]])}
    fed = torch.randn(2, 9, 4), torch.tensor([[1] * 7 + [0, 0], [1, 1] + [0] * 7])
    program, metadata = ExecutorchExporter().export_program(module, traced, ExecutorchConfig(dynamic=True))
    assert "_patch_slice_copy_to_an_item_traced_like_a_slice" in patch_names(metadata)
    torch.testing.assert_close(execute(program, *fed)[0], module(*fed))
    without_workaround(monkeypatch, "_patch_slice_copy_to_an_item_traced_like_a_slice")
    with pytest.raises(ExportStageError, match=r"data-dependent expression u[0-9]+ < 0"):
        ExecutorchExporter().export_program(module, traced, ExecutorchConfig(dynamic=True))


class LocationVariableConvolution(torch.nn.Module):
    def forward(self, hidden, kernel):  # univnet's einsum: its decomposition permutes 7-D tensors
        return torch.einsum("bildsk,biokl->bolsd", hidden, kernel) * 2


def test_xnnpack_leaves_tensors_of_more_than_six_dims_to_portable(monkeypatch):
    module = LocationVariableConvolution()
    inputs = {"hidden": torch.randn(2, 3, 4, 1, 5, 2), "kernel": torch.randn(2, 3, 6, 2, 4)}
    program, metadata = ExecutorchExporter().export_program(module, inputs, ExecutorchConfig())
    assert "_patch_at_most_six_dims" in patch_names(metadata)
    torch.testing.assert_close(execute(program, *inputs.values())[0], module(**inputs))
    without_workaround(monkeypatch, "_patch_at_most_six_dims")
    program, _ = ExecutorchExporter().export_program(module, inputs, ExecutorchConfig())
    with pytest.raises(RuntimeError, match=r"Failed to load method forward, error: 0x:1$"):
        execute(program, *inputs.values())


class EmptyOfDynamicSize(torch.nn.Module):
    def forward(self, x):
        frames = x.new_empty(x.shape[0], x.shape[1] // 2, 2).copy_(x[:, : x.shape[1] // 2 * 2].unflatten(1, (-1, 2)))
        wrapped = torch.nn.functional.pad(x.unsqueeze(1), (1, 1), mode="circular")  # informer's circular conv
        return frames * 2, wrapped * 3  # nemotron3_5's frame buffer: new_empty, then filled


def test_an_empty_tensor_keeps_its_dynamic_size(monkeypatch):
    module, traced, fed = EmptyOfDynamicSize(), torch.randn(2, 5), torch.randn(3, 7)
    program, metadata = ExecutorchExporter().export_program(module, {"x": traced}, ExecutorchConfig(dynamic=True))
    assert "_patch_dynamic_empty_as_zeros" in patch_names(metadata)
    for actual, expected in zip(execute(program, fed), module(fed), strict=True):
        torch.testing.assert_close(actual, expected)
    without_workaround(monkeypatch, "_patch_dynamic_empty_as_zeros")
    program, _ = ExecutorchExporter().export_program(module, {"x": traced}, ExecutorchConfig(dynamic=True))
    with pytest.raises(RuntimeError, match=r"set_inputs.* failed with error 0x10"):  # batch 3: planned for 2
        execute(program, fed)


class RepeatToLastPosition(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.token = torch.nn.Parameter(torch.randn(4))

    def forward(self, x, positions):
        targets = self.token.repeat(x.shape[0], positions.max() + 1, 1)  # vjepa2's predictor
        return torch.cat([x, targets], dim=1) * 2


def test_data_dependent_size_gets_the_input_bound(monkeypatch):
    module = RepeatToLastPosition()
    inputs = {"x": torch.randn(2, 5, 4), "positions": torch.tensor([[0, 3], [1, 2]])}
    program, metadata = ExecutorchExporter().export_program(module, inputs, ExecutorchConfig(dynamic=True))
    assert "_fix_unbounded_data_dependent_sizes" in metadata["workarounds"]["fixes"]
    bound = ExecutorchConfig().dynamic_upper_bound
    for last in (6, bound - 1):
        fed = (torch.randn(3, 7, 4), torch.tensor([[0, last], [1, 2], [2, 0]]))
        torch.testing.assert_close(execute(program, *fed)[0], module(*fed))
    # Past the planned capacity the runtime refuses to grow the tensor: an error, never a write past its buffer.
    with pytest.raises(RuntimeError, match="failed with error 0x12"):
        execute(program, torch.randn(bound, 7, 4), torch.tensor([[0, 2 * bound]] * bound))
    without_workaround(monkeypatch, "_fix_unbounded_data_dependent_sizes")
    with pytest.raises(ExportStageError, match="Cannot evaluate a finite upper bound"):
        ExecutorchExporter().export_program(module, inputs, ExecutorchConfig(dynamic=True))


class RowsPerExpert(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(4, 4, 4))

    def forward(self, x, experts):  # jetmoe's parallel experts: token rows split by how many each expert got
        counts = torch.nn.functional.one_hot(experts.flatten(), 4).sum(0).tolist()
        rows = x.reshape(-1, x.shape[-1]).split(counts)
        return torch.cat([torch.nn.functional.linear(part, self.weight[expert]) for expert, part in enumerate(rows)])


def test_a_size_that_splits_a_dimension_is_bounded_by_it(monkeypatch):
    module, traced = RowsPerExpert(), {"x": torch.randn(2, 3, 4), "experts": torch.tensor([[0, 1, 2], [3, 0, 1]])}
    # One expert gets every row: more rows than any input dimension's bound, at most batch x sequence.
    bound = ExecutorchConfig().dynamic_upper_bound
    fed = (torch.randn(3, bound - 1, 4), torch.zeros(3, bound - 1, dtype=torch.int64))
    program, _ = ExecutorchExporter().export_program(module, traced, ExecutorchConfig(dynamic=True))
    torch.testing.assert_close(execute(program, *fed)[0], module(*fed))
    # Bounded at the largest input dimension instead, the split's output cannot grow to the rows it gets.
    monkeypatch.setattr(executorch_fixes, "_bound_as_a_part", lambda symbol, shape_env: None)
    program, _ = ExecutorchExporter().export_program(module, traced, ExecutorchConfig(dynamic=True))
    with pytest.raises(RuntimeError, match=_KERNEL_REFUSES):
        execute(program, *fed)


class FramesOfDurations(torch.nn.Module):
    def forward(self, durations):  # vits: the frames are the summed durations, checked against the token count
        frames = durations.sum(-1).max().item()
        torch._check(frames >= 1)
        torch._check(frames <= 8 * durations.shape[1])
        return torch.arange(frames) * 2


def test_a_size_checked_against_the_inputs_gets_the_checks_bound(monkeypatch):
    module, traced = FramesOfDurations(), {"durations": torch.tensor([[1, 2, 1], [2, 0, 1]])}
    config = ExecutorchConfig(dynamic=True, dynamic_upper_bound=16)
    fed = torch.full((3, 7), 8)  # 56 frames: past every input dimension's bound, within 8 per token
    program, _ = ExecutorchExporter().export_program(module, traced, config)
    torch.testing.assert_close(execute(program, fed)[0], module(fed))
    # Bounded at the largest input dimension instead, arange cannot grow to the frames it gets.
    monkeypatch.setattr(executorch_fixes, "_bound_by_a_check", lambda symbol, shape_env: None)
    program, _ = ExecutorchExporter().export_program(module, traced, config)
    with pytest.raises(RuntimeError, match=_KERNEL_REFUSES):
        execute(program, fed)


class TransposedAndContiguous(torch.nn.Module):
    def forward(self, x):
        transposed = (x * 2).transpose(1, 2)
        return transposed, transposed.contiguous()


def test_clone_patch_keeps_two_outputs_of_one_partition(monkeypatch):
    # bloom, xglm: a partition returning a tensor and a clone of it would return one node twice after clone removal.
    module = TransposedAndContiguous()
    traced, fed = torch.randn(2, 5, 4), torch.randn(3, 7, 4)
    program, metadata = ExecutorchExporter().export_program(module, {"x": traced}, ExecutorchConfig(dynamic=True))
    assert metadata["delegate_partitions"] == 1
    outputs = execute(program, fed)
    for output, expected in zip(outputs, module(fed), strict=True):
        torch.testing.assert_close(output, expected)
    without_workaround(monkeypatch, "_patch_keep_clone_of_an_output")
    with pytest.raises(ExportStageError, match="is already in the inputs"):
        ExecutorchExporter().export_program(module, {"x": traced}, ExecutorchConfig(dynamic=True))


class LinearOfComputedWeight(torch.nn.Module):
    def forward(self, x):
        return torch.nn.functional.linear(x, x[0, :4, :4])


def test_fast_lowering_runs_a_declined_linear_on_its_portable_kernel(monkeypatch):
    # XNNPACK declines a linear whose weight is not a constant; fast lowering kept it whole, and ExecuTorch's
    # check that every kept op was delegated would fail the export although the runtime has the kernel.
    module = LinearOfComputedWeight()
    traced, fed = torch.randn(2, 5, 4), torch.randn(3, 6, 4)
    output, metadata = run_module(module, traced, fed)
    torch.testing.assert_close(output, module(fed))
    assert metadata["delegate_partitions"] == 0
    without_workaround(monkeypatch, "_patch_undelegated_kept_op_warns")
    with pytest.raises(ExportStageError, match="was not decomposed or delegated"):
        run_module(module, traced, fed)


class OperatorPassesAtWork(torch.nn.Module):
    def forward(self, x):
        half = x.shape[0] * 0.5  # a SymFloat operand: SymToTensorPass
        moved = x.t() * 2  # aten.t: NormalizeTransposePass; a Python scalar operand: ScalarToTensorPass
        return (moved + half) * torch.arange(moved.shape[1])  # float times int64: RemoveMixedTypeOperators


def test_operator_passes_run_in_one_retrace_and_give_the_same_program(monkeypatch):
    from executorch.exir.pass_base import ExportPass

    retraces = []
    monkeypatch.setattr(ExportPass, "call", counting(ExportPass.call, retraces))
    module, traced, fed = OperatorPassesAtWork(), torch.randn(4, 3), torch.randn(6, 5)
    config = ExecutorchConfig(dynamic=True)
    fused, metadata = ExecutorchExporter().export_program(module, {"x": traced}, config)
    assert "_patch_operator_passes_in_one_retrace" in patch_names(metadata)
    torch.testing.assert_close(execute(fused, fed)[0], module(fed))
    with_swap = len(retraces)
    retraces.clear()
    without_workaround(monkeypatch, "_patch_operator_passes_in_one_retrace")
    separate, _ = ExecutorchExporter().export_program(module, {"x": traced}, config)
    assert len(retraces) == with_swap + 4  # five re-traces become one
    assert program_bytes(separate) == program_bytes(fused)


class ViewsAndMemoryFormats(torch.nn.Module):
    def forward(self, x):
        moved = x.transpose(0, 1).contiguous()  # a view op and a clone that takes a memory format
        return moved.view(-1).unsqueeze(0) * moved.to(torch.float64).sum().float()  # views; a _to_copy


def test_view_and_dim_order_renames_ride_other_retraces_and_give_the_same_program(monkeypatch):
    from executorch.exir.pass_base import ExportPass
    from torch._export.pass_base import _ExportPassBaseDeprecatedDoNotUse

    retraces = []
    for base in (ExportPass, _ExportPassBaseDeprecatedDoNotUse):
        monkeypatch.setattr(base, "call", counting(base.call, retraces))
    module, traced, fed = ViewsAndMemoryFormats(), torch.randn(4, 3), torch.randn(6, 5)
    config = ExecutorchConfig(dynamic=True)
    swapped, metadata = ExecutorchExporter().export_program(module, {"x": traced}, config)
    swaps = {"_patch_view_copies_renamed_in_place", "_patch_dim_orders_in_op_replace_retrace"}
    assert swaps | {"_patch_idle_dim_order_rename_skipped"} <= patch_names(metadata)
    torch.testing.assert_close(execute(swapped, fed)[0], module(fed))
    with_swaps = len(retraces)
    retraces.clear()
    for name in swaps:
        without_workaround(monkeypatch, name)
    separate, _ = ExecutorchExporter().export_program(module, {"x": traced}, config)
    assert len(retraces) == with_swaps + 2  # the view rename's and the dim-order rename's own re-traces
    assert program_bytes(separate) == program_bytes(swapped)


class ThreePartitions(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 3, 1)
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        x = torch.relu(self.conv(x)).cumsum(-1)  # NHWC conv: XNNPACK adds _to_copy pairs; cumsum cuts the partition
        x = self.linear(x).cumsum(-1)
        return x * 2 + 1  # neither a matrix product nor a copy


def test_xnnpack_linear_and_copy_passes_skip_partitions_without_their_ops(monkeypatch):
    from executorch.backends.xnnpack._passes.convert_to_linear import ConvertToLinearPass
    from executorch.backends.xnnpack._passes.remove_redundant_copy_pass import RemoveRedundantCopyPass

    ran = []
    for pass_class in (ConvertToLinearPass, RemoveRedundantCopyPass):
        monkeypatch.setattr(pass_class, "call", counting(pass_class.call, ran))
    module, traced = ThreePartitions(), torch.randn(1, 3, 4, 4)
    pruned, metadata = ExecutorchExporter().export_program(module, {"x": traced}, ExecutorchConfig())
    assert metadata["delegate_partitions"] == 3
    torch.testing.assert_close(execute(pruned, traced)[0], module(traced))
    assert sorted(ran) == ["ConvertToLinearPass", "RemoveRedundantCopyPass"]  # the only partitions needing them
    ran.clear()
    without_workaround(monkeypatch, "_patch_copy_removal_idle_without_copies")
    triggers = dict(xnnpack_workarounds._XNNPACK_PASS_TRIGGERS)
    del triggers["ConvertToLinearPass"]
    monkeypatch.setattr(xnnpack_workarounds, "_XNNPACK_PASS_TRIGGERS", triggers)
    every, _ = ExecutorchExporter().export_program(module, {"x": traced}, ExecutorchConfig())
    assert sorted(ran) == ["ConvertToLinearPass"] * 3 + ["RemoveRedundantCopyPass"] * 3
    assert program_bytes(every) == program_bytes(pruned)


def test_partitions_are_sorted_into_the_program_once(monkeypatch):
    from executorch.exir import lowered_backend_module
    from torch.fx.passes import tools_common

    sorts, legalize_graph = [], tools_common.legalize_graph

    def counted(graph_module):
        sorts.append(graph_module)
        return legalize_graph(graph_module)

    monkeypatch.setattr(tools_common, "legalize_graph", counted)
    # The swap's sort, once after the last partition: fast_lowering imported torch's function (through torch_compat).
    monkeypatch.setattr(fast_lowering_workarounds, "legalize_graph", counted)
    monkeypatch.setattr(lowered_backend_module, "legalize_graph", counted)  # ExecuTorch's, once per partition
    module, traced = ThreePartitions(), torch.randn(1, 3, 4, 4)
    once, metadata = ExecutorchExporter().export_program(module, {"x": traced}, ExecutorchConfig())
    assert "_patch_partitions_sorted_once" in patch_names(metadata)
    assert (metadata["delegate_partitions"], len(sorts)) == (3, 1)
    torch.testing.assert_close(execute(once, traced)[0], module(traced))
    sorts.clear()
    without_workaround(monkeypatch, "_patch_partitions_sorted_once")
    each, metadata = ExecutorchExporter().export_program(module, {"x": traced}, ExecutorchConfig())
    assert (metadata["delegate_partitions"], len(sorts)) == (3, 3)
    assert program_bytes(each) == program_bytes(once)


def test_idle_retraces_are_skipped_and_each_delegate_unlifted_once(monkeypatch):
    from executorch.exir.pass_base import ExportPass
    from torch.export import ExportedProgram

    retraces, unliftings, unlift = [], [], ExportedProgram.module

    def counted_unlift(self, *args, **kwargs):
        unliftings.append(self)
        return unlift(self, *args, **kwargs)

    monkeypatch.setattr(ExportPass, "call", counting(ExportPass.call, retraces))
    monkeypatch.setattr(ExportedProgram, "module", counted_unlift)
    module, traced = ThreePartitions(), torch.randn(1, 3, 4, 4)
    swapped, metadata = ExecutorchExporter().export_program(module, {"x": traced}, ExecutorchConfig())
    swaps = {
        "_patch_idle_constant_folding_skipped",
        "_patch_idle_dim_order_legalization_skipped",
        "_patch_delegate_program_unlifted_once",
    }
    assert swaps <= patch_names(metadata)
    torch.testing.assert_close(execute(swapped, traced)[0], module(traced))
    skipped = {"ConstPropPass", "LegalizePortableDimOrderPass"}
    assert not skipped & set(retraces)
    assert metadata["delegate_partitions"] == 3
    assert len(unliftings) == len(set(map(id, unliftings))) == 3 + 1  # each delegate's, and the decomposed program's
    retraces.clear()
    unliftings.clear()
    for name in swaps:
        without_workaround(monkeypatch, name)
    every, _ = ExecutorchExporter().export_program(module, {"x": traced}, ExecutorchConfig())
    assert sorted(name for name in retraces if name in skipped) == ["ConstPropPass"] * 3 + [
        "LegalizePortableDimOrderPass"
    ]
    assert len(unliftings) > 3  # the same delegate programs unlifted again for each later re-trace
    assert program_bytes(every) == program_bytes(swapped)


def test_constant_folding_runs_where_an_op_reads_only_constants():
    graph = torch.fx.Graph()
    x, weight = graph.placeholder("x"), graph.get_attr("weight")
    full = graph.call_function(torch.ops.aten.full.default, ([4], 2.0))  # literals only: folded
    scaled = graph.call_function(torch.ops.aten.mul.Tensor, (weight, full))
    transposed = graph.call_function(torch.ops.aten.t.default, (weight,))  # a constant tensor only: folded
    added = graph.call_function(torch.ops.aten.add.Tensor, (x, scaled))  # reads the input: kept
    reads_only_constants = fast_lowering_workarounds._reads_only_constants
    assert [reads_only_constants(node) for node in (full, transposed, added)] == [True, True, False]


def counting(call, calls: list[str]):
    """``call`` (a pass's) that first appends its pass's class name to ``calls``."""

    def counted(self, graph_module):
        calls.append(type(self).__name__)
        return call(self, graph_module)

    return counted


class NormalizedPatches(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.BatchNorm1d(4).eval()
        self.norm.running_mean.uniform_(-1, 1)

    def forward(self, x):
        return self.norm(x.transpose(1, 2)).transpose(1, 2) * 2  # patchtst's and conformers' BatchNorm1d


def test_fast_lowering_runs_the_passes_a_decomposed_batch_norm_needs(monkeypatch):
    # XNNPACK decomposes a batch norm it cannot fuse into a 1d convolution, which Conv1dUnsqueezePass makes 2d.
    module = NormalizedPatches()
    traced, fed = torch.randn(1, 5, 4), torch.randn(1, 7, 4)  # XNNPACK reshapes with one dynamic dimension
    output, metadata = run_module(module, traced, fed)
    torch.testing.assert_close(output, module(fed))
    assert metadata["delegate_partitions"] == 1
    triggers = {**xnnpack_workarounds._XNNPACK_PASS_TRIGGERS, "Conv1dUnsqueezePass": ("convolution",)}
    monkeypatch.setattr(xnnpack_workarounds, "_XNNPACK_PASS_TRIGGERS", triggers)
    with pytest.raises(ExportStageError, match="ChannelsLastTaggedReshapePass"):
        run_module(module, traced, fed)


def test_batch_norm_1d_with_two_dynamic_dims_runs_on_portable(monkeypatch):
    # parakeet, wav2vec2_conformer: batch and time both dynamic; XNNPACK's conv1d reshape takes one dynamic dim.
    module = NormalizedPatches()
    traced, fed = torch.randn(2, 5, 4), torch.randn(3, 7, 4)
    output, metadata = run_module(module, traced, fed)
    torch.testing.assert_close(output, module(fed))
    assert "_patch_batch_norm_1d_one_dynamic_dim" in patch_names(metadata)
    without_workaround(monkeypatch, "_patch_batch_norm_1d_one_dynamic_dim")
    with pytest.raises(ExportStageError, match="XNNPACK reshape only supports 1 dynamic dimension"):
        run_module(module, traced, fed)


class MaskedColumns(torch.nn.Module):
    def forward(self, x):
        kept = x[:, (x[..., 0] > 0).any(dim=0)]
        return kept * kept.sum(dim=-1, keepdim=True)


def test_dim_order_patch_sorts_strides_of_a_masked_selection(monkeypatch):
    # glm5_next's sparse-attention indexer: boolean-mask indexing leaves strides (16*u0, 16, 1).
    module, traced = MaskedColumns(), torch.randn(2, 6, 16)
    traced[:, :3, 0] = -1.0
    output, metadata = run_module(module, traced, traced)
    assert "_patch_dim_order_of_unbacked_strides" in patch_names(metadata)
    torch.testing.assert_close(output, module(traced), atol=1e-5, rtol=1e-5)
    without_workaround(monkeypatch, "_patch_dim_order_of_unbacked_strides")
    with pytest.raises(ExportStageError, match="data-dependent expression"):
        run_module(module, traced, traced)


@pytest.mark.slow  # two lowerings of a 4-stage PVT: 150 s
def test_view_dynamism_patch_keeps_pvt_lowerable(tmp_path, monkeypatch):
    # pvt's spatial-reduction attention views a static-shaped tensor with symbolic sizes.
    metadata = check_against_eager("PvtForImageClassification", tmp_path, dynamic=True)
    assert "_patch_view_as_dynamic_as_its_base" in patch_names(metadata)
    without_workaround(monkeypatch, "_patch_view_as_dynamic_as_its_base")
    with pytest.raises(ExportStageError, match="incompatible with its base"):
        export_roundtrip("PvtForImageClassification", tmp_path, dynamic=True)


def test_every_workaround_is_registered_and_named():
    registered = {(w.key, w.name) for w in registry.all_workarounds("executorch")}
    defined = {
        (key, name)
        for key, module in (
            ("executorch", executorch_patches),
            ("executorch", executorch_fixes),
            ("executorch", fast_lowering_workarounds),
            ("executorch", kernel_patches),
            ("executorch", kernel_node_fixes),
            ("executorch", shared_workarounds),
            ("executorch.xnnpack", xnnpack_workarounds),
        )
        for name in vars(module)
        if name.startswith(("_patch_", "_fix_"))
    }
    assert defined == registered


# ── Slow sweeps (run with -m slow) ──


@pytest.mark.slow
@pytest.mark.parametrize("name", XNNPACK_MODELS)
def test_xnnpack_dynamic_matches_eager(name, tmp_path):
    check_against_eager(name, tmp_path, dynamic=True)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["llama", "bert", "vit", "resnet"])
def test_reference_lowering_gives_the_same_program_semantics(name, tmp_path):
    metadata = check_against_eager(name, tmp_path, fast_lowering=False)
    assert metadata["delegate_partitions"] > 0


def test_graph_modules_write_their_python_code_only_when_called(monkeypatch):
    from torch.fx.graph import Graph

    written, python_code = [], Graph.python_code
    monkeypatch.setattr(Graph, "python_code", lambda *a, **k: written.append(1) or python_code(*a, **k))
    module, traced = ThreePartitions(), torch.randn(1, 3, 4, 4)
    lazy, metadata = ExecutorchExporter().export_program(module, {"x": traced}, ExecutorchConfig())
    assert "_patch_graph_modules_compiled_on_first_call" in patch_names(metadata)
    torch.testing.assert_close(execute(lazy, traced)[0], module(traced))
    on_call = len(written)
    written.clear()
    for key in ("dynamo", "executorch"):  # installed around the trace and around lowering
        kept = [w for w in registry._REGISTRY[key] if w.name != "_patch_graph_modules_compiled_on_first_call"]
        monkeypatch.setitem(registry._REGISTRY, key, kept)
    eager, _ = ExecutorchExporter().export_program(module, {"x": traced}, ExecutorchConfig())
    assert on_call * 10 < len(written)
    assert program_bytes(eager) == program_bytes(lazy)
