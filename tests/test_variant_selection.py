"""Config variants in the gate's selection: a change that only a variant's check runs selects that variant's cells
(``Class@variant``), recorded in the impact map under that name, and the budget runs them after every default cell.

The checkout is ``checkout_fixture.make_checkout`` (llama's first classes, overlaid on the installed transformers 5.23)
with transformers' own ``modeling_rope_utils.py``, whose rope functions are what the rope variants run.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from checkout_fixture import INSTALLED, LLAMA, commit, commit_prepended, git, llama_source, make_checkout
from click.testing import CliRunner

from hfexport.cli import main
from hfexport.gate import changes
from hfexport.gate.cells import Cell
from hfexport.gate.changes import SelectedClass
from hfexport.gate.impact import ClassRecord, CodeUnit, ExecutedUnit, ImpactMap, ImpactMapError, expected_versions
from hfexport.gate.run import _by_priority
from hfexport.gate.targets import target_for
from hfexport.gate.worker_child import resolve

ROPE = "src/transformers/modeling_rope_utils.py"
ROPE_MODULE = "transformers.modeling_rope_utils"
DYNAMIC = "_compute_dynamic_ntk_parameters"  # rope_dynamic's frequencies: no other rope type computes them
SHARED = "RotaryEmbeddingConfigMixin.standardize_rope_params"  # every rope config, default or variant, runs it
VARIANT = "LlamaForCausalLM@rope_dynamic"


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = make_checkout(tmp_path_factory.mktemp("variants") / "transformers", heads=1)
    commit(repo, {ROPE: (INSTALLED / "modeling_rope_utils.py").read_text()}, "rope utils")
    return repo


@pytest.fixture(scope="module")
def small_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """For selection alone: a checkout holding transformers' ``__init__.py``, so that static analysis reads its few
    files only (a partial checkout is read over the whole installed transformers, a minute and more)."""
    repo = tmp_path_factory.mktemp("small") / "transformers"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    files = {
        "src/transformers/__init__.py": (INSTALLED / "__init__.py").read_text(),
        ROPE: (INSTALLED / "modeling_rope_utils.py").read_text(),
        LLAMA: llama_source(1),
    }
    commit(repo, files, "base")
    return repo


def _branch(repo: Path, name: str) -> None:
    git(repo, "checkout", "-q", "main")
    git(repo, "checkout", "-q", "-B", name)


def _unit(qualname: str) -> ExecutedUnit:
    return ExecutedUnit(CodeUnit(ROPE_MODULE, qualname), "transformers/modeling_rope_utils.py", 1, 2)


def _selection(repo: Path, impact: Path, cache: Path) -> dict[str, SelectedClass]:
    selection = target_for(repo, [], [], False, "main", None, impact_map=impact, cache_dir=cache).selection
    return {c.model_class: c for c in selection.classes}


def test_a_change_only_a_variant_runs_selects_that_variant_alone(small_tree: Path, tmp_path: Path) -> None:
    checkout = small_tree
    records = {
        "LlamaForCausalLM": ClassRecord({_unit(SHARED)}, {ROPE_MODULE}),
        VARIANT: ClassRecord({_unit(SHARED), _unit(DYNAMIC)}, {ROPE_MODULE}),
        "LlamaForCausalLM@rope_linear": ClassRecord({_unit(SHARED)}, {ROPE_MODULE}),
    }
    path = tmp_path / "map.json"
    ImpactMap(expected_versions(checkout), records).dump(path)

    _branch(checkout, "dynamic")
    commit_prepended(checkout, ROPE, DYNAMIC, "seen = True")
    selected = _selection(checkout, path, tmp_path / "cache")
    assert selected[VARIANT].reason == f"modeling_rope_utils.{DYNAMIC} changed (config variant rope_dynamic runs it)"
    assert (selected[VARIANT].model_type, selected[VARIANT].rank) == ("llama", changes.RANK_MAP)
    assert selected[VARIANT].file == LLAMA  # where its class is defined
    # The default's record and the linear variant's show they never ran it.
    assert "LlamaForCausalLM" not in selected and "LlamaForCausalLM@rope_linear" not in selected

    _branch(checkout, "shared")
    commit_prepended(checkout, ROPE, SHARED, "seen = True")
    selected = _selection(checkout, path, tmp_path / "cache")
    assert selected["LlamaForCausalLM"].rank == changes.RANK_MAP
    assert not [name for name in selected if "@" in name]  # the default class checks what every variant runs


def test_variants_run_in_the_rounds_after_every_default_cell() -> None:
    names = [("llama", "LlamaForCausalLM@rope_dynamic"), ("llama", "LlamaForCausalLM"), ("bert", "BertModel")]
    names.append(("llama", "LlamaModel"))
    pairs = [(Cell(t, n, b), SelectedClass(t, n)) for t, n in names for b in ("dynamo", "onnx")]
    order = [(c.model_class, c.backend) for c, _ in _by_priority(pairs)]
    assert order[-2:] == [(VARIANT, "dynamo"), (VARIANT, "onnx")]
    first_round = [("LlamaForCausalLM", "dynamo"), ("LlamaForCausalLM", "onnx"), ("BertModel", "dynamo")]
    assert order[:4] == [*first_round, ("BertModel", "onnx")]  # the variant, listed first, did not take its place


def test_the_map_keeps_variant_records_and_refuses_malformed_names() -> None:
    built = ImpactMap({"transformers": "5.23.0", "hfexport": "0.1.0"})
    record = {"units": [[ROPE_MODULE, DYNAMIC, "transformers/modeling_rope_utils.py", 1, 2]], "modules": []}
    built.add(VARIANT, record)
    again = ImpactMap.from_json(json.loads(json.dumps(built.to_json())))
    assert again.classes_running(CodeUnit(ROPE_MODULE, DYNAMIC)) == {VARIANT}
    for name in ("LlamaForCausalLM@", "LlamaForCausalLM@rope@dynamic", "@rope_dynamic"):
        with pytest.raises(ImpactMapError, match="no class name"):
            built.add(name, record)


def test_resolving_with_variants_adds_the_default_heads_variants_only() -> None:
    resolved = resolve(["llama", "BertModel"], False, variants=True)
    assert resolved["errors"] == []
    names = [entry["model_class"] for entry in resolved["classes"]]
    assert {"LlamaModel", "LlamaForCausalLM", VARIANT, "LlamaForCausalLM@rope_yarn", "BertModel"} <= set(names)
    # Variants of llama's default head (its causal LM) only; BERT's model is no type's default head here.
    assert {name.partition("@")[0] for name in names if "@" in name} == {"LlamaForCausalLM"}
    entry = next(e for e in resolved["classes"] if e["model_class"] == VARIANT)
    assert (entry["model_type"], entry["module"]) == ("llama", "transformers.models.llama.modeling_llama")
    assert [e["model_class"] for e in resolve(["llama"], False)["classes"] if "@" in e["model_class"]] == []


@pytest.mark.slow  # about 200 s: static analysis of the partial checkout (twice), three recorded checks, the variant
def test_an_edit_in_dynamic_ntk_rope_checks_the_dynamic_variant_end_to_end(checkout: Path, tmp_path: Path) -> None:
    _branch(checkout, "main")
    path, cache = tmp_path / "map.json", tmp_path / "cache"
    names = f"LlamaForCausalLM,{VARIANT},LlamaForCausalLM@rope_linear"
    build = ["impact", "build", "--models", names, "--backends", "dynamo", "--cache-dir", str(cache), "-o", str(path)]
    with contextlib.chdir(checkout):
        built = CliRunner().invoke(main, build)
    assert built.exit_code == 0, built.output
    recorded = ImpactMap.load(path, expected_versions(checkout))
    assert recorded.classes_running(CodeUnit(ROPE_MODULE, DYNAMIC)) == {VARIANT}
    assert {"LlamaForCausalLM", VARIANT} <= recorded.classes_running(CodeUnit(ROPE_MODULE, SHARED))

    _branch(checkout, "dynamic-check")
    commit_prepended(checkout, ROPE, DYNAMIC, "seen = True")
    # Without generation: the variant's context of 8 (variants.SHORT_CONTEXT) is shorter than the gate's 11 tokens.
    args = ["check", "--base", "main", "--backends", "dynamo", "--no-health", "--no-generation"]
    args += ["--impact-map", str(path)]
    with contextlib.chdir(checkout):
        # Narrowed to llama's causal LM and its variant: unmapped classes are selected by static analysis.
        result = CliRunner().invoke(main, [*args, "--only", f"LlamaForCausalLM,{VARIANT}"])
    assert result.exit_code == 0, result.output
    assert f"{VARIANT} · dynamo: pass" in result.output
    assert "LlamaForCausalLM · dynamo" not in result.output  # its record shows the default never runs that function


RECORDED_ROPE_LOOKUP = """
import transformers.models.llama.modeling_llama as llama
from hfexport.exporters.workarounds.dynamo.patches import _rope_update_wrapper
from hfexport.gate.impact_recorder import ImpactRecorder

before = _rope_update_wrapper(vars(llama.LlamaRotaryEmbedding)["forward"])
ImpactRecorder(None).instrument_loaded()
import transformers.models.mistral.modeling_mistral as mistral  # its wrappers made by the instrumented decorator

rotaries = (llama.LlamaRotaryEmbedding, mistral.MistralRotaryEmbedding)
after = [_rope_update_wrapper(vars(rotary)["forward"]) for rotary in rotaries]
print(before is not None, *(found is not None for found in after))
"""


def test_the_dynamic_rope_patch_finds_its_wrappers_in_a_recorded_job() -> None:
    """Recording (a gate run with a result cache) gives transformers' functions new code: the patch that exports
    rope_dynamic still finds every dynamic_rope_update wrapper, made before the recording started or after."""
    command = [sys.executable, "-c", RECORDED_ROPE_LOOKUP]
    done = subprocess.run(command, cwd=Path(__file__).parent.parent, capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["True", "True", "True"]
