"""Workarounds for config variants the default tiny configs leave off (issue 53): each one is taken out and the
variant it exists for fails; with it, the export matches eager at the traced shape and at another one."""

from __future__ import annotations

import pytest
import torch
from support import export_dynamic, without_workaround

from hfexport.exporters import (
    ExportStageError,
    exporter_dynamo,  # noqa: F401  (registers the "dynamo" workarounds)
    registry,
)
from hfexport.tiny_models import sample_inputs, tiny_model

# Dynamic NTK rope past a context of 8 positions: traced at 7 (the original frequencies), run at 13 (grown ones).
DYNAMIC_ROPE = {"max_position_embeddings": 8, "rope_parameters": {"rope_type": "dynamic", "factor": 2.0}}
TRACED, LONGER = {"batch_size": 2, "seq_length": 7}, {"batch_size": 3, "seq_length": 13}


def _logits_diff(model: torch.nn.Module, exported, inputs: dict) -> float:
    with torch.no_grad():
        expected = model(**inputs).logits
    return float((exported(**inputs).logits - expected).abs().max())


def test_dynamic_rope_grows_past_the_original_context() -> None:
    # The check below means something: eager's logits past the context differ from default rope's, not within it.
    dynamic, default = tiny_model("LlamaForCausalLM", overrides=DYNAMIC_ROPE), tiny_model("LlamaForCausalLM")
    for shape, differs in ((TRACED, False), (LONGER, True)):
        inputs = sample_inputs(dynamic, seed=1, **shape)
        with torch.no_grad():
            assert (not torch.equal(dynamic(**inputs).logits, default(**inputs).logits)) is differs


@pytest.mark.parametrize("backend", ["dynamo", "onnx", pytest.param("executorch", marks=pytest.mark.slow)])
def test_dynamic_rope_matches_eager_within_and_past_the_context(backend: str) -> None:
    model = tiny_model("LlamaForCausalLM", overrides=DYNAMIC_ROPE)
    exported = export_dynamic(model, sample_inputs(model, **TRACED), backend)
    for shape in (TRACED, LONGER):
        assert _logits_diff(model, exported, sample_inputs(model, seed=1, **shape)) < 1e-4


def test_dynamic_rope_needs_its_patch(monkeypatch: pytest.MonkeyPatch) -> None:
    model = tiny_model("LlamaForCausalLM", overrides=DYNAMIC_ROPE)
    without_workaround(monkeypatch, "dynamo", "_patch_dynamic_rope_as_tensor_select")
    with pytest.raises(ExportStageError, match="Could not guard on data-dependent expression"):
        export_dynamic(model, sample_inputs(model, **TRACED), "dynamo")


def test_dynamic_rope_patch_is_installed_on_every_loaded_rotary_class() -> None:
    # Its targets are the rotary forwards of the modeling modules loaded when an export starts, each one patched (the
    # second model of a gate worker's jobs was left unpatched while installing changed the list being walked).
    tiny_model("LlamaForCausalLM"), tiny_model("MistralForCausalLM")
    with registry.apply_patches("dynamo") as report:
        installed = {r["target"] for r in report.installed if r["name"] == "_patch_dynamic_rope_as_tensor_select"}
    assert {
        "transformers.models.llama.modeling_llama.LlamaRotaryEmbedding.forward",
        "transformers.models.mistral.modeling_mistral.MistralRotaryEmbedding.forward",
    } <= installed
    assert not any("RMSNorm" in target for target in installed)


def test_falcon_alibi_runs_on_onnxruntime_only_with_float32_products(monkeypatch: pytest.MonkeyPatch) -> None:
    model = tiny_model("FalconForCausalLM", overrides={"alibi": True})
    inputs = sample_inputs(model, **TRACED)
    with monkeypatch.context() as patched:
        without_workaround(patched, "onnx", "_fix_bfloat16_product_in_float32")
        with pytest.raises(Exception, match=r"Could not find an implementation for Mul\(14\)"):
            export_dynamic(model, inputs, "onnx")(**inputs)
    exported = export_dynamic(model, inputs, "onnx")
    for shape in (TRACED, LONGER):
        assert _logits_diff(model, exported, sample_inputs(model, seed=1, **shape)) < 1e-4
