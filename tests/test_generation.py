"""export_for_generation + ExportedModel.generate: greedy generation on every runtime equals eager generate."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from hfexport.cli import main
from hfexport.exporters import AutoExportConfig, AutoHfExporter, ExportedModel
from hfexport.exporters.generation import GenerationLengthError
from hfexport.tiny_models import sample_inputs, tiny_model

DECODER_MODELS = ["llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "phi3", "gpt2", "mixtral", "bloom"]
DECODER_MODELS += ["LlamaForCausalLM@rope_dynamic"]
SEQ2SEQ_MODELS = ["t5", "whisper"]
BACKENDS = ["dynamo", "onnx", "executorch"]
SEQ2SEQ_BACKENDS = ["dynamo", "onnx"]
# CI's representative subset; everything else runs with -m slow.
FAST = {("llama", "dynamo"), ("llama", "onnx"), ("llama", "executorch"), ("gemma2", "dynamo"), ("t5", "dynamo")}
FAST |= {("bloom", "onnx")}  # alibi: its bias is built from a mask over every cache slot
# dynamic NTK rope with a context of 8: prompt and new tokens run past it, and its frequencies change as they do
FAST |= {("LlamaForCausalLM@rope_dynamic", "dynamo")}
# ExecuTorch is exported with static shapes (its dynamic lowering costs far more time): the loop pads prompts.
DYNAMIC = {"dynamo": True, "onnx": True, "executorch": False}
NEW_TOKENS = 16
ROOT = Path(__file__).parents[1]


def _cells(models: list[str], backends: list[str]) -> list:
    return [
        pytest.param(name, backend, marks=() if (name, backend) in FAST else pytest.mark.slow, id=f"{name}-{backend}")
        for name in models
        for backend in backends
    ]


def _require(backend: str) -> None:
    modules = {"onnx": "onnxruntime", "executorch": "executorch"}
    if backend in modules:
        pytest.importorskip(modules[backend])


def _widen_weights(model: torch.nn.Module) -> None:
    # At their default init the tiny encoder-decoders repeat one token forever, which would hide a broken cache.
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() >= 2:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.3)


@functools.cache
def _model(name: str) -> torch.nn.Module:
    model = tiny_model(name, seed=0)
    if getattr(model.config, "sliding_window", None):
        # A window shorter than prompt + new tokens, so the sliding layers really slide.
        model.config.sliding_window = 5
    if name == "t5":
        model.generation_config.decoder_start_token_id = 0  # as in every released T5 checkpoint
    if name in SEQ2SEQ_MODELS:
        _widen_weights(model)
    # Both sides run all NEW_TOKENS steps; EOS handling has its own test.
    model.generation_config.eos_token_id = None
    return model


@functools.cache
def _exported(name: str, backend: str, dynamic: bool | None = None) -> ExportedModel:
    _require(backend)
    model = _model(name)
    config = AutoExportConfig.from_dict(
        {"export_format": backend, "dynamic": DYNAMIC[backend] if dynamic is None else dynamic}
    )
    return AutoHfExporter.from_config(config).export_for_generation(model, sample_inputs(model), config)


def _prompts(model: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """Two prompts of 7 and 4 tokens, the shorter one left-padded."""
    input_ids = sample_inputs(model, batch_size=2, seq_length=7, seed=1)["input_ids"]
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, :3] = 0
    return input_ids.masked_fill(attention_mask == 0, model.generation_config.pad_token_id or 0), attention_mask


def _eager(model: torch.nn.Module, *args: torch.Tensor, **kwargs) -> torch.Tensor:
    with torch.no_grad():
        return model.generate(*args, **kwargs, max_new_tokens=NEW_TOKENS, do_sample=False)


@pytest.mark.parametrize(("name", "backend"), _cells(DECODER_MODELS, BACKENDS))
def test_decoder_only_generation_matches_eager(name: str, backend: str) -> None:
    model, exported = _model(name), _exported(name, backend)
    input_ids, attention_mask = _prompts(model)
    expected = _eager(model, input_ids, attention_mask=attention_mask)
    actual = exported.generate(input_ids, max_new_tokens=NEW_TOKENS, attention_mask=attention_mask)
    assert actual.shape == (2, 7 + NEW_TOKENS)
    assert actual.tolist() == expected.tolist()


def _seq2seq_inputs(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    inputs = {k: v for k, v in sample_inputs(model, seed=1).items() if not k.startswith("decoder_")}
    if "attention_mask" in inputs:
        inputs["attention_mask"][1, -3:] = 0  # the second source is 3 tokens shorter
    return inputs


@pytest.mark.parametrize(("name", "backend"), _cells(SEQ2SEQ_MODELS, SEQ2SEQ_BACKENDS))
def test_encoder_decoder_generation_matches_eager(name: str, backend: str) -> None:
    model, exported = _model(name), _exported(name, backend)
    inputs = _seq2seq_inputs(model)
    expected = _eager(model, **inputs)
    actual = exported.generate(
        inputs[model.main_input_name], max_new_tokens=NEW_TOKENS, attention_mask=inputs.get("attention_mask")
    )
    assert actual.shape == (2, 1 + NEW_TOKENS)
    # Whisper's own generate returns the new tokens only; GenerationMixin's keeps the decoder start token.
    assert actual[:, -expected.shape[1] :].tolist() == expected.tolist()


def test_eos_stops_finished_sequences_like_eager() -> None:
    model, exported = _model("llama"), _exported("llama", "dynamo")
    input_ids, attention_mask = _prompts(model)
    free_run = _eager(model, input_ids, attention_mask=attention_mask)
    # EOS ids the two rows first reach at different steps: the early one pads, then both stop before the limit.
    eos = [int(free_run[0, 7 + 2]), int(free_run[1, 7 + 5])]
    expected = _eager(model, input_ids, attention_mask=attention_mask, eos_token_id=eos, pad_token_id=0)
    actual = exported.generate(
        input_ids, max_new_tokens=NEW_TOKENS, attention_mask=attention_mask, eos_token_id=eos, pad_token_id=0
    )
    assert actual.shape[1] < 7 + NEW_TOKENS
    assert actual.tolist() == expected.tolist()


def test_min_new_tokens_keeps_generating_past_eos_like_eager() -> None:
    model, exported = _model("llama"), _exported("llama", "dynamo")
    input_ids, attention_mask = _prompts(model)
    free_run = _eager(model, input_ids, attention_mask=attention_mask)
    eos = int(free_run[0, 7])  # the first row's first new token: eager would stop there at once
    common = {"attention_mask": attention_mask, "eos_token_id": eos, "pad_token_id": 0}
    expected = _eager(model, input_ids, **common, min_new_tokens=NEW_TOKENS)
    actual = exported.generate(input_ids, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, **common)
    assert actual.shape == (2, 7 + NEW_TOKENS) and eos not in actual[:, 7:].tolist()[0]
    assert actual.tolist() == expected.tolist()
    # Without it, the export stops at EOS as eager does: the two rules must not be mixed.
    stopped = exported.generate(input_ids, max_new_tokens=NEW_TOKENS, **common)
    assert stopped.tolist() == _eager(model, input_ids, **common).tolist() != expected.tolist()


def test_forced_eos_ends_the_last_token_like_eager() -> None:
    # BART-like configs set forced_eos_token_id: eager's last token is EOS whatever greedy would pick.
    model = tiny_model("BartForCausalLM", seed=0)
    forced = model.generation_config.forced_eos_token_id
    assert forced is not None
    config = AutoExportConfig.from_dict({"export_format": "dynamo", "dynamic": True})
    exported = AutoHfExporter.from_config(config).export_for_generation(model, sample_inputs(model), config)
    input_ids, attention_mask = _prompts(model)
    rule = {"max_new_tokens": NEW_TOKENS, "min_new_tokens": NEW_TOKENS, "attention_mask": attention_mask}
    with torch.no_grad():
        expected = model.generate(input_ids, do_sample=False, **rule)
    actual = exported.generate(input_ids, **rule)
    assert actual[:, -1].tolist() == [forced, forced]
    assert actual.tolist() == expected.tolist()


def test_manifest_lists_components_and_cache_layout(tmp_path: Path) -> None:
    exported = _exported("llama", "dynamo")
    saved = exported.save_pretrained(tmp_path / "gen")
    manifest = json.loads((saved / "export.json").read_text())
    assert set(manifest["components"]) == {"prefill", "decode"}
    assert {"prefill.pt2", "decode.pt2"} <= set(manifest["files"])
    generation = manifest["generation"]
    assert generation["kind"] == "decoder-only"
    assert generation["components"] == {"prefill": "prefill", "decode": "decode"}
    assert generation["batch_size"] is None and generation["prefill_length"] is None
    cache = generation["cache"]
    assert cache["layout"] == "static-slots" and cache["num_layers"] == model_layers("llama")
    assert cache["key_shapes"][0][1] == generation["max_cache_len"]
    decode_inputs = manifest["components"]["decode"]["input_names"]
    assert decode_inputs[:4] == ["input_ids", "attention_mask", "position_ids", "cache_position"]
    assert "past_keys.0" in decode_inputs and "present_values.1" in manifest["components"]["decode"]["output_names"]


def model_layers(name: str) -> int:
    return _model(name).config.num_hidden_layers


def test_decode_works_at_every_cache_length_up_to_the_maximum() -> None:
    model = _model("llama")
    config = AutoExportConfig.from_dict({"export_format": "dynamo", "dynamic": True})
    exported = AutoHfExporter.from_config(config).export_for_generation(
        model, sample_inputs(model), config, max_cache_len=40
    )
    input_ids, attention_mask = _prompts(model)
    # 7 prompt tokens + 33 new ones: every slot of the 40 is used.
    with torch.no_grad():
        expected = model.generate(input_ids, attention_mask=attention_mask, max_new_tokens=33, do_sample=False)
    assert exported.generate(input_ids, max_new_tokens=33, attention_mask=attention_mask).tolist() == expected.tolist()
    with pytest.raises(GenerationLengthError, match=r"needs 41 cache slots .* max_cache_len=40"):
        exported.generate(input_ids, max_new_tokens=34, attention_mask=attention_mask)


def test_static_export_pads_short_prompts_and_feeds_long_ones_through_decode() -> None:
    model, exported = _model("llama"), _exported("llama", "dynamo", dynamic=False)
    assert exported.manifest["generation"]["prefill_length"] == 7
    assert exported.manifest["generation"]["batch_size"] == 2
    for length in (3, 7, 10):
        input_ids = sample_inputs(model, batch_size=2, seq_length=length, seed=2)["input_ids"]
        expected = _eager(model, input_ids)
        assert exported.generate(input_ids, max_new_tokens=NEW_TOKENS).tolist() == expected.tolist(), length
    with pytest.raises(GenerationLengthError, match="static batch of 2, got 3"):
        exported.generate(sample_inputs(model, batch_size=3)["input_ids"], max_new_tokens=2)


def test_dynamic_export_takes_other_batch_sizes_and_one_token_prompts() -> None:
    model, exported = _model("llama"), _exported("llama", "dynamo")
    for batch_size, length in ((3, 5), (1, 1)):
        input_ids = torch.randint(3, 100, (batch_size, length), generator=torch.Generator().manual_seed(3))
        expected = _eager(model, input_ids)
        assert exported.generate(input_ids, max_new_tokens=NEW_TOKENS).tolist() == expected.tolist()


def test_generate_needs_generation_components() -> None:
    model = _model("llama")
    config = AutoExportConfig.from_dict({"export_format": "dynamo"})
    exported = AutoHfExporter.from_config(config).export(model, sample_inputs(model), config)
    with pytest.raises(ValueError, match="export_for_generation"):
        exported.generate(torch.ones(1, 3, dtype=torch.long))


@pytest.mark.parametrize(
    "backend", [pytest.param(b, marks=() if b == "dynamo" else pytest.mark.slow) for b in BACKENDS]
)
def test_saved_export_generates_in_a_fresh_process(tmp_path: Path, backend: str) -> None:
    model, exported = _model("llama"), _exported("llama", backend)
    saved = exported.save_pretrained(tmp_path / f"llama-{backend}")
    input_ids, attention_mask = _prompts(model)
    expected = _eager(model, input_ids, attention_mask=attention_mask)
    code = (
        "import sys, torch; from hfexport.exporters import ExportedModel\n"
        f"exported = ExportedModel.from_pretrained({str(saved)!r}, trust_remote_code=True)\n"
        f"ids = torch.tensor({input_ids.tolist()}); mask = torch.tensor({attention_mask.tolist()})\n"
        f"print(exported.generate(ids, max_new_tokens={NEW_TOKENS}, attention_mask=mask).tolist())"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == expected.tolist()


def test_cli_exports_for_generation(tmp_path: Path) -> None:
    target = tmp_path / "llama-gen"
    command = ["export", "llama", "--for-generation", "--max-cache-len", "32", "-o", str(target)]
    result = CliRunner().invoke(main, command)
    assert result.exit_code == 0, result.output
    exported = ExportedModel.from_pretrained(target)
    assert set(exported.components) == {"prefill", "decode"}
    assert exported.manifest["generation"]["max_cache_len"] == 32
    model = tiny_model("llama", seed=0)
    input_ids, attention_mask = _prompts(model)
    expected = _eager(model, input_ids, attention_mask=attention_mask)
    assert exported.generate(input_ids, max_new_tokens=NEW_TOKENS, attention_mask=attention_mask).tolist() == (
        expected.tolist()
    )


def test_cli_max_cache_len_needs_for_generation(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["export", "llama", "--max-cache-len", "32", "-o", str(tmp_path / "x")])
    assert result.exit_code == 2
    assert "--max-cache-len only applies with --for-generation" in result.output


def test_gate_records_generation_as_skipped_when_eager_cannot_generate_text() -> None:
    # Higgs-Audio v2 is a decoder LM whose generate() emits audio codebooks and rejects min_new_tokens: the gate's
    # greedy comparison has no eager reference, so the cell passes on its forward check and says why.
    from hfexport.gate.checks.cell import run_cell

    job = {"model_type": "higgs_audio_v2", "model_class": "HiggsAudioV2ForConditionalGeneration"}
    cell = run_cell({**job, "module": None, "backend": "dynamo", "generation": True}, None)
    assert cell["status"] == "pass", cell["error"]
    assert cell["generation"]["status"] == "skipped"
    assert "eager generate() fails" in cell["generation"]["detail"]


def test_a_decoder_without_past_key_values_is_declined_and_the_gate_says_so() -> None:
    # xLSTM keeps its recurrent state in cache_params: reading past_key_values raised AttributeError, a tool error.
    from hfexport.exporters.generation.export import _eager_cache
    from hfexport.gate.checks.cell import run_cell

    model = tiny_model("xLSTMForCausalLM")
    with pytest.raises(NotImplementedError, match="returns no transformers Cache"):
        _eager_cache(model, sample_inputs(model))
    job = {"model_type": "xlstm", "model_class": "xLSTMForCausalLM", "module": None, "backend": "dynamo"}
    cell = run_cell({**job, "generation": True}, None)
    assert cell["status"] == "pass", cell["error"]
    assert cell["generation"]["status"] == "not_checked"
    assert "returns no transformers Cache" in cell["generation"]["detail"]
    # Nor does transformers' StaticCache hold its state: the static-cache and export-module parts say so.
    assert cell["generation_static"]["status"] == cell["export_module"]["status"] == "not_checked"
    assert "left the StaticCache empty" in cell["generation_static"]["detail"]


def test_a_decoder_whose_forward_fails_with_a_cache_is_declined() -> None:
    # BLT builds DynamicCache(config=...) from a config without num_hidden_layers: with use_cache=True its own forward
    # fails, so there is no cache to export generation with (eager generate ran without one): declined, not a failure.
    from hfexport.exporters.generation.export import _eager_cache

    model = tiny_model("BltForCausalLM")
    with pytest.raises(NotImplementedError, match=r"does not run with use_cache=True \(AttributeError"):
        _eager_cache(model, sample_inputs(model))


@pytest.mark.parametrize(
    ("name", "methods"),
    [
        ("AXK2ForCausalLM", "lazy_initialization_indexer, update_indexer"),
        ("DeepseekV32ForCausalLM", "lazy_initialization_indexer, update_indexer"),
        ("DeepseekV4ForCausalLM", "store_compression_weights, update_compressor_states"),
    ],
)
def test_the_slot_cache_declines_a_cache_layer_with_state_of_its_own_with_the_reason(name: str, methods: str) -> None:
    # A sparse-attention indexer's keys, DeepSeek V4's compressor states: the slot cache's trace raised in
    # update_indexer / store_compression_weights, a tool error of the gate's generation part, where the part must
    # say it does not carry them.
    from hfexport.exporters.generation.cache import layout_from_cache
    from hfexport.exporters.generation.export import _eager_cache

    model = tiny_model(name)
    cache = _eager_cache(model, sample_inputs(model))
    with pytest.raises(NotImplementedError, match=f"also keeps state its model updates through {methods}"):
        layout_from_cache(cache, 16, torch.float32)


def test_a_model_whose_generate_feeds_the_whole_sequence_each_step_is_declined_with_the_reason() -> None:
    # CpmAnt's forward slices the cached prefix off the whole sequence, branching on the past length: its decode
    # trace failed on "Could not guard on data-dependent expression Eq(u0, 1)", a failure of the cell's generation.
    from hfexport.exporters.generation.export import _decline_whole_sequence_steps, _eager_cache

    for name, declined in (("CpmAntForCausalLM", True), ("LlamaForCausalLM", False)):
        model = tiny_model(name)
        input_ids = sample_inputs(model)["input_ids"]
        cache = _eager_cache(model, {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)})
        if declined:
            with pytest.raises(NotImplementedError, match="feeds it the whole sequence at every step"):
                _decline_whole_sequence_steps(model, input_ids, cache)
        else:
            _decline_whole_sequence_steps(model, input_ids, cache)


@pytest.mark.parametrize(
    ("name", "detail"),
    [
        # Sesame CSM's generate returns (batch, frames, codebooks) codes: compared with the exported text tokens, the
        # cell failed with "4 greedy tokens differ from eager".
        ("CsmForConditionalGeneration", "emits 3-D audio codes, not token ids"),
        # DiffusionGemma denoises blocks of tokens: its generate returns an output object ("... has no attribute
        # 'dim'", a tool error), and the slot cache's greedy loop is not its decoding.
        ("DiffusionGemmaForBlockDiffusion", "returns a DiffusionGemmaGenerationOutput, not greedy token ids"),
    ],
)
def test_gate_records_generation_as_skipped_where_eager_generate_emits_no_token_stream(name: str, detail: str) -> None:
    # Nothing is exported for a comparison that cannot be made.
    from hfexport.gate.checks.generation import check_generation

    def no_export(*args, **kwargs):
        raise AssertionError("exported for a generation that is not compared")

    model = tiny_model(name)
    cell: dict = {"generation": None}
    check_generation(model, model, sample_inputs(model), no_export, "dynamo", cell, {})
    assert cell["generation"] == {"status": "skipped", "detail": f"not compared: eager generate() {detail}"}


def test_a_model_without_a_position_table_is_declined_for_its_cache_not_its_length() -> None:
    # XLNet's max_position_embeddings is -1 (relative positions): read as the cache's length it was a tool error,
    # "the sample prompt (7 tokens) does not fit max_cache_len=-1". It keeps memories, not a transformers Cache.
    model = tiny_model("XLNetLMHeadModel")
    config = AutoExportConfig.from_dict({"export_format": "dynamo", "dynamic": False})
    with pytest.raises(NotImplementedError, match="XLNetLMHeadModel returns no transformers Cache"):
        AutoHfExporter.from_config(config).export_for_generation(model, sample_inputs(model), config)
