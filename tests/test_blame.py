"""Whose failure a cell is, decided from real exceptions' traceback frames: one test per kind of owner and status."""

from __future__ import annotations

import types

import pytest
import torch

from hfexport import compat
from hfexport.exporters import AutoExportConfig, AutoHfExporter
from hfexport.exporters.registry import watch_patches
from hfexport.exporters.workarounds.dynamo.patches import _patch_sdpa_math_kernel_on_cpu
from hfexport.exporters.workarounds.onnx_and_executorch import _patch_rotary_frequencies_as_cos_sin
from hfexport.gate.blame import blame
from hfexport.gate.checks import second_shape
from hfexport.gate.checks.comparing import OutputMismatch
from hfexport.gate.checks.failures import CellFailure, frame_record, step


def _raised(function, *args) -> BaseException:
    with pytest.raises(Exception) as info:
        function(*args)
    return info.value


def test_an_error_raised_by_hfexport_code_is_a_tool_error() -> None:
    error = _raised(compat.resolve, "transformers.cache_utils.NoSuchLayer")
    found = blame(error)
    assert (found.owner, found.workaround) == ("hfexport", None)
    assert found.frame.file.endswith("hfexport/compat.py")


def test_an_error_in_transformers_code_is_the_model() -> None:
    import transformers

    error = _raised(transformers.AutoConfig.for_model, "no_such_model_type")
    found = blame(error)
    assert found.owner == "model"
    assert "/transformers/" in found.frame.file and found.frame.module.startswith("transformers.")


def test_an_error_raised_by_a_workaround_is_a_tool_error_naming_it() -> None:
    # The rotary patch's forward reads self.inv_freq: a module without it breaks inside hfexport's replacement.
    forward = _patch_rotary_frequencies_as_cos_sin(None)
    module = types.SimpleNamespace(rope_type="default", config=None)
    error = _raised(forward, module, torch.ones(1, 2, 4), torch.arange(2)[None])
    found = blame(error)
    assert (found.owner, found.workaround) == ("hfexport", "_patch_rotary_frequencies_as_cos_sin")


def test_torch_raising_under_a_thin_workaround_is_the_export_naming_the_workaround() -> None:
    # The SDPA patch passes through to torch's op: torch's shape error is the export's failure, not hfexport's.
    sdpa = _patch_sdpa_math_kernel_on_cpu(torch.nn.functional.scaled_dot_product_attention)
    error = _raised(sdpa, torch.ones(1, 2, 3, 4), torch.ones(1, 2, 3, 5), torch.ones(1, 2, 3, 4))
    found = blame(error)
    assert (found.owner, found.workaround) == ("toolchain", "_patch_sdpa_math_kernel_on_cpu")


def test_a_model_call_through_a_thin_workaround_is_the_models_line() -> None:
    # SDPA's own shape check, reached from a model's attention through the patch: the line that broke is the model's.
    namespace = {"__name__": "transformers.models.fake.modeling_fake", "torch": torch}
    exec(compile("def attention(sdpa, q, k, v):\n    return sdpa(q, k, v)\n", "modeling_fake.py", "exec"), namespace)
    sdpa = _patch_sdpa_math_kernel_on_cpu(torch.nn.functional.scaled_dot_product_attention)
    query, mismatched_key = torch.ones(1, 2, 3, 4), torch.ones(1, 2, 3, 5)
    error = _raised(namespace["attention"], sdpa, query, mismatched_key, query)
    found = blame(error)
    assert (found.owner, found.workaround) == ("model", "_patch_sdpa_math_kernel_on_cpu")
    assert (found.frame.file, found.frame.line, found.frame.function) == ("modeling_fake.py", 2, "attention")


def test_a_model_call_through_the_shared_trace_watch_is_the_models_line() -> None:
    # A trace shared with ONNX watches ONNX's patch targets with pass-throughs: transparent, like a thin workaround.
    namespace = {"__name__": "transformers.models.fake.modeling_fake", "torch": torch}
    exec(compile("def delimiters(x):\n    return torch.cummax(x, dim=5)\n", "modeling_fake.py", "exec"), namespace)
    reached: set[tuple[str, str]] = set()
    with watch_patches("onnx", reached):
        error = _raised(namespace["delimiters"], torch.ones(2, 3))
    assert reached == {("onnx", "_patch_cummax_as_masked_max")}
    found = blame(error)
    assert (found.owner, found.workaround) == ("model", None)
    assert (found.frame.file, found.frame.line, found.frame.function) == ("modeling_fake.py", 2, "delimiters")


class _BranchOnValue(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2 if x.sum() > 0 else x


def test_a_toolchain_error_while_hfexport_drives_it_is_the_export() -> None:
    config = AutoExportConfig.from_dict({"export_format": "dynamo", "dynamic": True})
    exporter = AutoHfExporter.from_config(config)
    error = _raised(exporter.export_program, _BranchOnValue(), {"x": torch.ones(2, 3)}, config)
    assert blame(error).owner == "toolchain"


def _cell_failure(stage: str, function, *args, building: bool = False) -> CellFailure:
    with pytest.raises(CellFailure) as info, step(stage, {}, "key", building=building):
        function(*args)
    return info.value


def test_statuses_follow_the_owner_and_the_step() -> None:
    import transformers

    assert _cell_failure("build", compat.resolve, "transformers.nope.X", building=True).status == "tool_error"
    model_error = _cell_failure("build", transformers.AutoConfig.for_model, "no_such_type", building=True)
    assert model_error.status == "not_checked"
    assert _cell_failure("onnx · export", transformers.AutoConfig.for_model, "no_such_type").status == "fail"

    def mismatch() -> None:
        raise OutputMismatch("logits: max abs diff 1 > 0.0001")

    # hfexport's own finding about an export is the model's result, not a tool error.
    assert _cell_failure("compare", mismatch).status == "fail"


def test_a_class_no_tiny_model_runs_is_not_checked_with_its_reason() -> None:
    from hfexport import tiny_models

    failure = _cell_failure("build", tiny_models.tiny_model, "DinatModel", building=True)
    assert failure.status == "not_checked"
    assert failure.first_line == f"DinatModel: {tiny_models.UNRUNNABLE['DinatModel']}"


def test_a_tool_error_cell_records_the_hfexport_frame() -> None:
    failure = _cell_failure("build", compat.resolve, "transformers.nope.X", building=True)
    record = frame_record(failure.frame, None, failure.workaround)
    assert record["file"] == "hfexport/compat.py"
    assert record["function"] == "resolve_path" and record["text"].startswith("raise UnresolvedPathError")


def test_second_shape_skips_what_the_model_cannot_run_but_reports_our_builders_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from hfexport import tiny_models

    model = tiny_models.tiny_model("BertModel", seed=0)
    inputs = tiny_models.sample_inputs(model)
    cell: dict = {}

    def refuses_batch_3(**kwargs):
        raise RuntimeError("this model only takes batch 2")

    original = model.forward
    model.forward = refuses_batch_3
    second_shape.check_second_shape(model, inputs, original, 1e-4, cell, {})
    assert cell["second_shape"]["status"] == "skipped"

    # A shape hfexport's input builder refuses to make (its own ValueError): a tool error, never a skip.
    model.forward = original
    monkeypatch.setattr(second_shape, "SECOND_SHAPE", {"batch_size": 1, "seq_length": 11})
    with pytest.raises(CellFailure) as raised:
        second_shape.check_second_shape(model, inputs, original, 1e-4, {}, {})
    assert raised.value.status == "tool_error" and raised.value.step == "second shape"
