"""Config variants (issue 53): found from the config class and the modeling code, built by name, listed with the
reason when the builder cannot make one, checked by the gate and swept into docs/coverage.md."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from support import load_script

from hfexport.exporters import AutoExportConfig, AutoHfExporter
from hfexport.gate import report, views
from hfexport.gate.cells import Cell, Generation
from hfexport.tiny_models import config_variants, resolve_model_class, sample_inputs, tiny_model
from hfexport.tiny_models.variants import UnknownVariantError

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("model_type", "expected"),
    [
        ("llama", {"rope_dynamic", "rope_yarn", "rope_longrope", "mqa", "wide_head_dim", "tied_embeddings"}),
        ("qwen2", {"sliding_window", "mqa"}),  # its tiny config has no window: the variant switches one on
        ("falcon", {"alibi", "no_parallel_residual", "new_decoder_architecture"}),
        ("mixtral", {"top1_routing"}),
        ("t5", {"gated_gelu"}),
    ],
)
def test_variants_are_found_from_config_and_modeling_code(model_type: str, expected: set[str]) -> None:
    found = {variant.name for variant in config_variants(model_type)}
    assert expected <= found
    assert "alibi" not in found or model_type == "falcon"  # a flag the config lacks gives no variant


def test_a_variant_the_config_refuses_is_listed_with_its_reason() -> None:
    # Phi-3 takes longrope only: the other rope types are listed, not made, and building one by name says why.
    variants = {variant.name: variant for variant in config_variants("phi3")}
    assert variants["rope_longrope"].unmade is None
    assert "must be one of ['longrope']" in variants["rope_linear"].unmade
    with pytest.raises(UnknownVariantError, match=r"Phi3ForCausalLM@rope_linear cannot be made: .*longrope"):
        tiny_model("Phi3ForCausalLM@rope_linear")
    with pytest.raises(UnknownVariantError, match=r"has no variant 'bogus' \(its variants: rope_linear"):
        tiny_model("LlamaForCausalLM@bogus")


def test_a_variant_name_builds_its_class_at_the_variant_config() -> None:
    assert resolve_model_class("MistralForCausalLM@sliding_window").__name__ == "MistralForCausalLM"
    model = tiny_model("MistralForCausalLM@sliding_window")
    default = tiny_model("MistralForCausalLM")
    assert model.config.sliding_window < sample_inputs(model)["input_ids"].shape[1] < default.config.sliding_window
    inputs = sample_inputs(model)
    with torch.no_grad():  # the window masks part of the sequence: other logits, same weights
        assert not torch.allclose(model(**inputs).logits, default(**inputs).logits)
    assert tiny_model("FalconForCausalLM@alibi").config.alibi is True
    # gpt_neox rotates a quarter of its tiny head: 2 dims, where NTK divides by dim - 2. The variant rotates half.
    neox = tiny_model("GPTNeoXForCausalLM@rope_dynamic")
    with torch.no_grad():
        assert neox(**sample_inputs(neox, seq_length=11)).logits.isfinite().all()


def test_gate_checks_a_variant_by_name(tmp_path: Path) -> None:
    # The real CLI: the variant's cell is named by it, and dynamic rope passes past its context at the second shape.
    result = subprocess.run(
        [
            *(sys.executable, "-m", "hfexport.cli", "check", "--models", "LlamaForCausalLM@rope_dynamic"),
            *("--backends", "dynamo", "--no-generation", "--no-cache", "--report-dir", str(tmp_path)),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "LlamaForCausalLM@rope_dynamic · dynamo: pass" in result.stdout


def test_render_puts_variants_in_their_own_table_with_the_unmade_ones(tmp_path: Path) -> None:
    sweep = load_script("coverage_sweep")
    results = tmp_path / "results"
    results.mkdir()
    for stamp, engine, status in (("20260101T000000", "hfexport", "pass"), ("20260101T000001", "transformers", "fail")):
        data = report.new_report(engine, ["onnx"], {"mode": "models"}, {}, (1, 1), None)
        unmade = {"Phi3ForCausalLM@rope_linear": "ValueError: type field must be one of ['longrope'], got `linear`"}
        data.extra["sweep"] = {
            "set": "variants",
            "seconds": 60.0,
            "argv": ["run", "--set", "variants"],
            "unmade": unmade,
        }
        variant = Cell("falcon", "FalconForCausalLM@alibi", "onnx", status=status, timings={"export": 2.0})
        variant.stage = None if status == "pass" else "onnx · x"
        data.cells = [variant, Cell("llama", "LlamaForCausalLM", "onnx", status="pass", timings={"export": 1.0})]
        (results / f"{stamp}-{engine}.json").write_text(views.to_json(data.finalize()))
    text = sweep.render(results, tmp_path / "coverage.md", tmp_path / "coverage.json")
    assert "| hfexport | — | 1 / 1 (100 %) | — |" in text
    assert "| falcon | FalconForCausalLM@alibi | — | pass / fail · onnx · x" in text
    assert "| onnx | 1 | **1** | **1** |" in text  # the main totals count the plain class only
    assert "- Phi3ForCausalLM@rope_linear: ValueError: type field must be one of ['longrope'], got 'linear'" in text
    assert "FalconForCausalLM@alibi" in (tmp_path / "coverage.json").read_text()


# ── Sub-module classes a modeling file defines and the gate selects ──


@pytest.mark.parametrize(
    ("module", "name", "config_class"),
    [
        ("transformers.models.t5gemma.modeling_t5gemma", "T5GemmaDecoder", "T5GemmaModuleConfig"),
        ("transformers.models.t5gemma2.modeling_t5gemma2", "T5Gemma2Decoder", "T5Gemma2DecoderConfig"),
    ],
)
def test_a_decoder_builds_from_the_sub_config_its_parent_hands_it(module: str, name: str, config_class: str) -> None:
    # T5GemmaDecoder's config_class is the composite T5GemmaConfig ("no attribute 'hidden_size'"); the parent builds
    # it as T5GemmaDecoder(config.decoder). It cross-attends: it is given encoder states.
    model = tiny_model(getattr(importlib.import_module(module), name))
    assert type(model.config).__name__ == config_class
    inputs = sample_inputs(model)
    assert inputs["encoder_hidden_states"].shape == (2, 7, model.config.hidden_size)
    with torch.no_grad():
        assert model(**inputs).last_hidden_state.shape == (2, 7, model.config.hidden_size)


def test_a_multiple_choice_head_scores_a_choices_dimension() -> None:
    model = tiny_model("BertForMultipleChoice")
    inputs = sample_inputs(model)
    assert {name: tuple(value.shape) for name, value in inputs.items()} == {
        "input_ids": (2, 2, 7),
        "attention_mask": (2, 2, 7),
    }
    with torch.no_grad():
        logits = model(**inputs).logits
    assert logits.shape == (2, 2) and not torch.equal(logits[:, 0], logits[:, 1])


@pytest.mark.parametrize("name", ["BertForMultipleChoice", "T5GemmaDecoder"])
def test_sub_module_classes_export_and_match_eager_at_two_shapes(name: str) -> None:
    from transformers.models.t5gemma.modeling_t5gemma import T5GemmaDecoder

    model = tiny_model(T5GemmaDecoder if name == "T5GemmaDecoder" else name)
    config = AutoExportConfig.from_dict({"export_format": "dynamo", "dynamic": True})
    exported = AutoHfExporter.from_config(config).export(model, sample_inputs(model), config)
    for inputs in (sample_inputs(model, seed=1), sample_inputs(model, seed=1, batch_size=3, seq_length=11)):
        with torch.no_grad():
            expected = model(**inputs)[0]
        assert float((exported(**inputs)[0] - expected).abs().max()) < 1e-5


def test_render_shows_generation_as_its_own_column(tmp_path: Path) -> None:
    # A sweep run with --generation records each decoder LM's generation; one without it says "not run".
    sweep = load_script("coverage_sweep")
    results = tmp_path / "results"
    results.mkdir()
    for stamp, engine in (("20260101T000000", "hfexport"), ("20260101T000001", "transformers")):
        data = report.new_report(engine, ["dynamo"], {"mode": "models"}, {}, (1, 1), None)
        data.extra["sweep"] = {"set": "models", "seconds": 1.0, "argv": ["run"], "generation": engine == "hfexport"}
        generated = Cell("falcon_h1", "FalconH1ForCausalLM", "dynamo", status="pass", timings={"export": 1.0})
        if engine == "hfexport":  # as the gate records it: a generation failure fails the cell
            generated.status = "fail"
            generated.generation = Generation("fail", "ValueError: Cannot get conv state for non linear attention")
        data.cells = [generated, Cell("bert", "BertForMaskedLM", "dynamo", status="pass", timings={"export": 1.0})]
        (results / f"{stamp}-{engine}.json").write_text(views.to_json(data.finalize()))
    text = sweep.render(results, tmp_path / "coverage.md", tmp_path / "coverage.json")
    falcon = next(line for line in text.splitlines() if line.startswith("| falcon_h1 | FalconH1ForCausalLM | fail"))
    assert falcon.endswith("| generation fail: ValueError: Cannot get conv state for non linear attention |")
    assert "| BertForMaskedLM | pass | pass | — / — | 1.0 / 1.0 | — |" in text  # not a decoder LM
    # dynamo: 1 decoder-LM cell, swept with generation, 0 passing with it (0 %), none declined, none left unrun
    assert "| dynamo | 1 | 1 | **0** | 0.0 % | 0 | 0 |" in text
    assert '"generation": {"status": "fail"' in (tmp_path / "coverage.json").read_text()
