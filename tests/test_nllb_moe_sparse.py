"""NllbMoe with sparse layers on dynamo: the builder's default config (a sparse layer every fourth of two) has none.

Every second layer sparse runs the router and the experts; three dynamo patches make that export and save. Each one
is taken out in turn, and the export fails where it lives.
"""

from __future__ import annotations

import pytest
import torch
from support import max_abs_diff
from transformers.models.nllb_moe.modeling_nllb_moe import NllbMoeSparseMLP

from hfexport.exporters import AutoExportConfig, AutoHfExporter, ExportedModel, registry
from hfexport.tiny_models import sample_inputs, tiny_model

SPARSE_CONFIG = {
    "num_experts": 4,
    "expert_capacity": 16,
    "encoder_sparse_step": 2,
    "decoder_sparse_step": 2,
    "d_model": 64,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "vocab_size": 128,
    "encoder_ffn_dim": 64,
    "decoder_ffn_dim": 64,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
}
TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    return tiny_model("NllbMoeForConditionalGeneration", overrides=SPARSE_CONFIG)


def _export_and_reload(model: torch.nn.Module, directory) -> ExportedModel:
    config = AutoExportConfig.from_dict({"export_format": "dynamo", "dynamic": True})
    exported = AutoHfExporter.from_config(config).export(model, sample_inputs(model), config)
    return ExportedModel.from_pretrained(exported.save_pretrained(directory / "export"))


def test_sparse_layers_round_trip_on_dynamo(model: torch.nn.Module, tmp_path) -> None:
    assert sum(isinstance(module, NllbMoeSparseMLP) for module in model.modules()) == 2
    loaded = _export_and_reload(model, tmp_path)
    # The sample size, then more tokens than the expert capacity of 16 (33 tokens).
    for inputs in (sample_inputs(model), sample_inputs(model, batch_size=3, seq_length=11, seed=1)):
        with torch.no_grad():
            expected = model(**inputs)
        assert max_abs_diff(loaded(**inputs), expected) <= TOLERANCE


@pytest.mark.parametrize(
    ("patch", "error"),
    [
        ("_patch_nllb_moe_router_cast_when_needed", "Couldn't swap Linear.weight"),
        ("_patch_nllb_moe_experts_dense", "data-dependent"),
        ("_patch_nllb_moe_ceil_as_sym_ite", "Failed serializing node ceil"),
    ],
)
def test_each_patch_is_needed(model: torch.nn.Module, tmp_path, monkeypatch, patch: str, error: str) -> None:
    kept = [w for w in registry._REGISTRY["dynamo"] if w.name != patch]
    assert len(kept) == len(registry._REGISTRY["dynamo"]) - 1
    monkeypatch.setitem(registry._REGISTRY, "dynamo", kept)
    with pytest.raises(Exception, match=error):
        _export_and_reload(model, tmp_path)
