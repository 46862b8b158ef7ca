"""Generation on the caches and export paths users run: transformers' StaticCache and its exportable modules.

The gate's default generation part exports with hfexport's slot cache; ``generation_static`` exports prefill and
decode around a real ``transformers.StaticCache`` (its layers' own update code is traced), and ``export_module``
exports through ``TorchExportableModuleForDecoderOnlyLM(...).export()``. A checkout whose ``StaticLayer.update``
branches on data must fail in the static-cache part, at that line.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from checkout_fixture import commit, make_checkout
from click.testing import CliRunner
from support import without_workaround

from hfexport.cli import main
from hfexport.exporters import (
    AutoExportConfig,
    AutoHfExporter,
    ExportStageError,
    exporter_dynamo,  # noqa: F401  (registers the patch taken out below)
)
from hfexport.exporters.generation import export as generation_export
from hfexport.exporters.generation.components import DecoderPrefill, DecoderStep, generate_passes_positions
from hfexport.gate.blame import blame
from hfexport.gate.cells import Cell
from hfexport.gate.checks.cell import run_cell
from hfexport.gate.checks.export_module import ModuleDeclined, export_module_program
from hfexport.gate.checks.generation import GENERATION_TOKENS, eager_tokens
from hfexport.gate.schema import validate_cell
from hfexport.tiny_models import sample_inputs, tiny_model

NEW_TOKENS = GENERATION_TOKENS  # the gate's greedy tokens, compared by eager_tokens
CACHE_UTILS = "src/transformers/cache_utils.py"
# The top of StaticLayer.update in transformers 5.23 (the first lines after its docstring).
STATIC_UPDATE_TOP = """        # Lazy initialization
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)

        # Create a tensor to slice the static kv at the correct indices
"""
DATA_DEPENDENT_BRANCH = """        if key_states.isnan().any():  # a data-dependent branch
            raise ValueError("NaN keys")
"""


def _static_export(model: torch.nn.Module, backend: str = "dynamo", cache: str = "static"):
    config = AutoExportConfig.from_dict({"export_format": backend, "dynamic": False})
    return AutoHfExporter.from_config(config).export_for_generation(model, sample_inputs(model), config, cache=cache)


def _static_generation_cache(name: str) -> dict:
    """Export ``name``'s tiny model for generation on transformers' StaticCache, assert four greedy tokens equal
    eager's, and return the exported cache's manifest entry."""
    model = tiny_model(name, seed=0)
    input_ids = sample_inputs(model)["input_ids"]
    expected = eager_tokens(model, input_ids)
    exported = _static_export(model)
    assert exported.generate(input_ids, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS).tolist() == (
        expected.tolist()
    )
    return exported.manifest["generation"]["cache"]


def test_static_cache_generation_with_linear_attention_layers_matches_eager() -> None:
    # FalconH1's layers (LinearAttentionAndStaticFullAttentionLayer) keep conv and recurrent states beside keys and
    # values: all of them go in and out of the decode program, so four greedy tokens equal eager's.
    cache = _static_generation_cache("FalconH1ForCausalLM")
    assert cache["layout"] == "transformers-static"
    assert {name for _, name, _ in cache["entries"]} == {"keys", "values", "conv_states", "recurrent_states"}


def test_static_cache_generation_of_an_alibi_model_matches_eager() -> None:
    # Bloom builds its alibi bias from the 2D mask, one entry per key: the mask covers every slot of the StaticCache,
    # as generate's does (the bias was as long as the tokens seen: "expanded size 128 must match 7").
    _static_generation_cache("BloomForCausalLM")


def test_static_cache_generation_of_a_sparse_attention_model_carries_the_indexer_keys() -> None:
    # DeepSeek V3.2's StaticIndexedLayer keeps the indexer's keys beside keys and values: they go in and out of the
    # decode program too (the part declined the model before, "holds indexer_keys").
    cache = _static_generation_cache("DeepseekV32ForCausalLM")
    assert {name for _, name, _ in cache["entries"]} == {"keys", "values", "indexer_keys"}


@pytest.mark.parametrize("cache", ["slots", "static"])
def test_gpt_neo_local_window_on_a_fixed_size_cache_matches_eager(cache: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The tiny GPT-Neo's local window (4) is shorter than prompt and new tokens (11). Its attention takes the window
    # at the last rows of the keys, the cache's capacity on a fixed-size cache: the last token differed from eager's.
    model = tiny_model("GPTNeoForCausalLM", seed=0)
    input_ids = sample_inputs(model)["input_ids"]
    expected = eager_tokens(model, input_ids).tolist()

    def greedy() -> list:
        exported = _static_export(model, cache=cache)
        return exported.generate(input_ids, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS).tolist()

    with monkeypatch.context() as patched:
        without_workaround(patched, "dynamo", "_patch_gpt_neo_window_at_query_positions")
        assert greedy() != expected
    assert greedy() == expected


@pytest.mark.parametrize(
    ("name", "backend", "error"),
    [
        # TrOCR's learned positions: the trace guards on the difference of the bounds.
        ("TrOCRForCausalLM", "dynamo", r"Eq\(u0 - u1, 1\)"),
        # RoFormer's sinusoidal ones trace, and ExecuTorch plans no memory for the difference.
        pytest.param(
            "RoFormerForCausalLM",
            "executorch",
            r"Cannot evaluate a finite upper bound for symbolic expression -u",
            marks=pytest.mark.slow,  # two ExecuTorch exports, 45 s
        ),
    ],
    ids=["trocr", "roformer"],
)
def test_positions_after_the_cached_count_on_a_static_cache_match_eager(
    name: str, backend: str, error: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Positions arange(past, past + seq_len): on StaticCache's tensor count both bounds were data-dependent.
    model = tiny_model(name, seed=0)
    input_ids = sample_inputs(model)["input_ids"]
    patch = f"_patch_{name.removesuffix('ForCausalLM').lower()}_positions_offset_by_the_cached_count"
    with monkeypatch.context() as patched:
        without_workaround(patched, "dynamo", patch)
        with pytest.raises(ExportStageError, match=error):
            _static_export(model, backend)
    exported = _static_export(model, backend)
    new_tokens = {"max_new_tokens": NEW_TOKENS, "min_new_tokens": NEW_TOKENS}
    assert exported.generate(input_ids, **new_tokens).tolist() == eager_tokens(model, input_ids).tolist()


@pytest.mark.parametrize("cache", ["slots", pytest.param("static", marks=pytest.mark.slow)])
def test_a_model_whose_generate_drops_position_ids_counts_its_own(cache: str) -> None:
    # Kosmos-2.5's prepare_inputs_for_generation drops position_ids: its own start at padding_idx + 1, and the
    # mask's (0, 1, ...) shifted every sinusoid, 4 greedy tokens off on every backend.
    model = tiny_model("Kosmos2_5ForConditionalGeneration", seed=0)
    assert not generate_passes_positions(model)
    input_ids = sample_inputs(model)["input_ids"]
    exported = _static_export(model, cache=cache)
    new_tokens = {"max_new_tokens": NEW_TOKENS, "min_new_tokens": NEW_TOKENS}
    assert exported.generate(input_ids, **new_tokens).tolist() == eager_tokens(model, input_ids).tolist()


def test_position_ids_reach_the_model_where_generate_passes_them() -> None:
    # Llama's generate makes them from the mask; Bloom's forward takes none (its alibi reads the mask).
    assert generate_passes_positions(tiny_model("LlamaForCausalLM", seed=0))
    assert not generate_passes_positions(tiny_model("BloomForCausalLM", seed=0))


@pytest.mark.parametrize(
    ("name", "error"),
    [
        # GIT widens its mask over cached image tokens once there are any (`past_key_values_length > 0`).
        ("GitForCausalLM", "GuardOnDataDependentSymNode"),
        # MPT cuts its alibi at `max(0, 1 - query_length)`, the query length counting the cached tokens.
        ("MptForCausalLM", r"The size of tensor a \(7\) must match the size of tensor b \(u\d+\)"),
    ],
    ids=["git", "mpt"],
)
def test_a_model_using_the_cached_count_generates_on_the_slot_cache(
    name: str, error: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On a tensor count, StaticCache's kind, the trace fails; the slot cache then counts as DynamicCache does.
    model = tiny_model(name, seed=0)
    input_ids = sample_inputs(model)["input_ids"]
    with monkeypatch.context() as patched:  # the tensor count alone
        patched.setattr(generation_export, "DecoderPrefill", lambda model, layout, _: DecoderPrefill(model, layout))
        patched.setattr(generation_export, "DecoderStep", lambda model, _: DecoderStep(model))
        with pytest.raises(ExportStageError, match=error):
            _static_export(model, cache="slots")
    exported = _static_export(model, cache="slots")
    new_tokens = {"max_new_tokens": NEW_TOKENS, "min_new_tokens": NEW_TOKENS}
    assert exported.generate(input_ids, **new_tokens).tolist() == eager_tokens(model, input_ids).tolist()


def test_gits_guard_on_the_cached_count_is_a_finding_of_the_static_cache_part() -> None:
    # transformers' StaticCache counts in a tensor: GIT's `past_key_values_length > 0` cannot trace there.
    with pytest.raises(ExportStageError, match="GuardOnDataDependentSymNode"):
        _static_export(tiny_model("GitForCausalLM", seed=0))


@pytest.mark.parametrize("name", ["JambaForCausalLM", "FalconH1ForCausalLM"])
def test_transformers_module_declines_linear_attention_layers_with_the_reason(name: str) -> None:
    # Its wrapper raised on Jamba's layers ("'LinearAttentionLayer' object has no attribute 'keys'") and lost
    # FalconH1's conv state between calls (tokens differ from eager): a cache it does not carry, not the model's bug.
    with pytest.raises(ModuleDeclined, match=r"attention keys and values only; \w+ \(layer \d+\) also keeps conv"):
        export_module_program(tiny_model(name, seed=0), torch.ones(1, 7, dtype=torch.long))


def test_static_cache_decode_serves_every_step_of_a_sliding_window_model() -> None:
    # StaticSlidingWindowLayer counts its tokens in a Python int: the decode program takes it from the mask's length,
    # so the one program traced at the first step gives eager's tokens at the later ones too.
    model = tiny_model("MistralForCausalLM", seed=0)
    input_ids = sample_inputs(model)["input_ids"]
    exported = _static_export(model)
    produced = exported.generate(input_ids, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS)
    assert produced.tolist() == eager_tokens(model, input_ids).tolist()


def test_a_window_shorter_than_the_prompt_is_declined_with_the_reason() -> None:
    model = tiny_model("MistralForCausalLM", seed=0)
    model.config.sliding_window = 5
    with pytest.raises(NotImplementedError, match=r"sample prompt \(7 tokens\) does not fit a 5-token window"):
        _static_export(model)


def test_the_slot_cache_declines_linear_attention_and_blames_itself_in_transformers() -> None:
    # Handed to transformers, the slot cache made FalconH1 fail inside cache_utils (no conv state on a SlotCacheLayer):
    # that is hfexport's limit, never the model's failure.
    from hfexport.exporters.generation.cache import slot_cache

    cache = slot_cache([torch.zeros(1, 1, 4, 2)], [torch.zeros(1, 1, 4, 2)], torch.arange(1))
    with pytest.raises(ValueError, match="SlotCacheLayer") as raised:
        cache.get_conv_state(0)
    found = blame(raised.value)
    assert found.owner == "hfexport"
    assert found.frame is not None and found.frame.module == "transformers.cache_utils"
    model = tiny_model("FalconH1ForCausalLM", seed=0)
    config = AutoExportConfig.from_dict({"export_format": "dynamo", "dynamic": False})
    with pytest.raises(NotImplementedError, match="slot cache holds attention keys and values only"):
        AutoHfExporter.from_config(config).export_for_generation(model, sample_inputs(model), config)


def test_a_model_keeping_a_cache_of_its_own_is_declined_by_both_caches_with_the_reason() -> None:
    # MiniMax keeps linear-attention states on its MiniMaxCache and refuses any other cache ("uses cache of its
    # own"): both parts failed the cell with that ValueError, a cache the model does not take, not its failure.
    model = tiny_model("MiniMaxForCausalLM", seed=0)
    with pytest.raises(NotImplementedError, match=r"MiniMaxCache also keeps state .* get_linear_cache, set_linear"):
        _static_export(model, cache="slots")
    with pytest.raises(NotImplementedError, match=r"MiniMaxForCausalLM does not run on a StaticCache .*uses cache of"):
        _static_export(model)


def test_gate_cell_runs_the_static_cache_and_export_module_parts() -> None:
    job = {"model_type": "llama", "model_class": "LlamaForCausalLM", "module": None, "backend": "dynamo"}
    cell = run_cell({**job, "generation": True}, None)
    assert cell["status"] == "pass", cell["error"]
    for part in ("generation", "generation_static", "export_module"):
        assert cell[part] == {"status": "pass", "detail": f"{NEW_TOKENS} greedy tokens match eager"}, part
    assert {"generation_static", "export_module"} <= set(cell["timings"])
    # The report's typed cell carries both parts; the schema takes not_checked and refuses a status of its own.
    typed = Cell.from_dict({**cell, **job})
    assert [label for label, _ in typed.generation_parts()] == [
        "generation",
        "generation · static cache",
        "transformers export module",
    ]
    assert validate_cell(typed.as_dict()) == []
    declined = {"status": "not_checked", "detail": "not checked: why"}
    assert validate_cell({**typed.as_dict(), "generation_static": declined}) == []
    assert validate_cell({**typed.as_dict(), "export_module": {"status": "maybe"}}) == [
        "cell.export_module.status: expected pass, fail, skipped, not_checked"
    ]


# Run apart: a step reading freed memory ends its process with SIGSEGV. The freed allocations are written over
# before the calls, as the gate's later parts do.
STEP_AFTER_GARBAGE_COLLECTION = """
import gc, sys, torch
from hfexport.gate.checks.export_module import export_module_program, runtime_step
from hfexport.tiny_models import tiny_model
prompt = torch.arange(1, 8).unsqueeze(0)
program = export_module_program(tiny_model("LlamaForCausalLM", seed=0), prompt)
on_torch, on_executorch = runtime_step(program, prompt, "dynamo"), runtime_step(program, prompt, "executorch")
gc.collect()
scribbles = [bytes([255]) * 2**size for size in range(10, 24) for _ in range(4)]
for position in range(3):
    token, at = prompt[:, position : position + 1], torch.tensor([position])
    print((on_torch(token, at) - on_executorch(token, at)).abs().max().item())
"""


def test_the_executorch_step_of_transformers_module_outlives_the_call_that_loaded_it() -> None:
    result = subprocess.run([sys.executable, "-c", STEP_AFTER_GARBAGE_COLLECTION], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    differences = [float(line) for line in result.stdout.split()]
    assert len(differences) == 3 and max(differences) < 1e-4, result.stdout


def _checkout_with_branch(root: Path) -> tuple[Path, int]:
    """A checkout whose StaticLayer.update starts with a data-dependent branch; the branch's line number."""
    repo = make_checkout(root, heads=1)
    source = (repo / CACHE_UTILS).read_text()
    if source.count(STATIC_UPDATE_TOP) != 1:
        pytest.skip("this transformers' StaticLayer.update does not start as 5.23's does")
    broken = source.replace(STATIC_UPDATE_TOP, DATA_DEPENDENT_BRANCH + STATIC_UPDATE_TOP)
    commit(repo, {CACHE_UTILS: broken}, "a data-dependent branch in StaticLayer.update")
    return repo, broken[: broken.index(DATA_DEPENDENT_BRANCH)].count("\n") + 1


def _check(repo: Path, report_dir: Path, monkeypatch: pytest.MonkeyPatch, models: str, backends: str) -> tuple:
    monkeypatch.chdir(repo)
    args = ["check", "--models", models, "--backends", backends, "--no-cache", "--no-health", "-j", "1"]
    result = CliRunner().invoke(main, [*args, "--report-dir", str(report_dir)])
    return result.exit_code, result.output, json.loads((report_dir / "report.json").read_text())


def test_a_branch_in_static_layer_update_fails_the_static_cache_part_at_its_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, line = _checkout_with_branch(tmp_path / "transformers")
    code, output, report = _check(repo, tmp_path / "report", monkeypatch, "LlamaForCausalLM", "dynamo")
    assert code == 1, output
    (cell,) = report["cells"]
    assert (cell["status"], cell["stage"]) == ("fail", "dynamo · generation · static cache")
    assert (cell["frame"]["file"], cell["frame"]["line"]) == (CACHE_UTILS, line)
    assert cell["frame"]["function"] == "StaticLayer.update"
    assert cell["generation"]["status"] == "pass"  # the slot cache never runs StaticLayer
    assert cell["generation_static"] == {"status": "fail", "detail": cell["error"]}


@pytest.mark.slow
def test_three_decoder_lms_on_every_backend_clean_then_with_the_branch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The acceptance run: clean, every new part passes; with the branch, LlamaForCausalLM fails in the
    # static-cache part at the branch's line on every backend.
    models, backends = "LlamaForCausalLM,MistralForCausalLM,Gemma3ForCausalLM", "dynamo,onnx,executorch"
    repo, line = _checkout_with_branch(tmp_path / "transformers")
    clean = make_checkout(tmp_path / "clean", heads=1)
    code, output, report = _check(clean, tmp_path / "clean-report", monkeypatch, models, backends)
    assert code == 0, output
    for cell in report["cells"]:
        assert cell["status"] == "pass", cell
        assert cell["generation_static"]["status"] == "pass", cell
        assert (cell["export_module"] or {"status": "pass"})["status"] == "pass", cell
    code, output, report = _check(repo, tmp_path / "report", monkeypatch, models, backends)
    assert code == 1, output
    llama = [cell for cell in report["cells"] if cell["model_class"] == "LlamaForCausalLM"]
    assert len(llama) == 3
    for cell in llama:
        assert cell["stage"] == f"{cell['backend']} · generation · static cache", cell
        assert (cell["frame"]["file"], cell["frame"]["line"]) == (CACHE_UTILS, line)
