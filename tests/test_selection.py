"""What a change selects, at function precision, on real git repositories.

Most tests run on the installed transformers 5.23.0 laid out as a checkout (``make_release_checkout``) and change
one function the way a PR would; they read the selection only (no export). The ``slow`` ones run the whole check,
on dynamo, narrowed with ``--only`` to a few of the selected types.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from checkout_fixture import INSTALLED, commit, commit_prepended, git, make_checkout, make_release_checkout, prepend_to
from click.testing import CliRunner

from hfexport.cli import main
from hfexport.gate import changes, markdown, report, schema, touched
from hfexport.gate.impact import ClassRecord, CodeUnit, ExecutedUnit, ImpactMap, expected_versions
from hfexport.gate.targets import target_for

MASKING = "src/transformers/masking_utils.py"
LAYERS = "src/transformers/modeling_layers.py"
GEMMA3_MODULAR = "src/transformers/models/gemma3/modular_gemma3.py"
# A tensor-valued branch: eager runs it, torch.export refuses it (a data-dependent guard).
DATA_DEPENDENT = "if {0}.sum() > 1e30:\n    {0} = {0} * 2"


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """transformers 5.23.0 (the installed one) as a checkout on branch main."""
    return make_release_checkout(tmp_path_factory.mktemp("release") / "transformers")


@pytest.fixture(scope="module")
def facts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One result-cache folder for the module: the source facts read once serve every test."""
    return tmp_path_factory.mktemp("cache")


def _branch(repo: Path, name: str) -> None:
    git(repo, "checkout", "-q", "main")
    git(repo, "checkout", "-q", "-B", name)


def _selected(repo: Path, cache: Path, **kwargs: object) -> changes.Selection:
    return target_for(repo, [], [], False, "main", None, cache_dir=cache, **kwargs).selection


# ── Diff -> touched code units ──

MODULE = '''"""A module."""
import torch

LIMIT = 3


@register
def helper(x):
    """Doubles."""
    # why: a comment
    return x * 2


class Layer(torch.nn.Module):
    scale = 2

    def forward(self, x):
        return helper(x) * self.scale
'''


def _touches(tmp_path: Path, before: str, after: str) -> touched.Touches:
    repo = tmp_path / "repo"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    base = commit(repo, {"src/transformers/thing.py": before}, "base")
    commit(repo, {"src/transformers/thing.py": after}, "head")
    return changes.diff_touches(repo, base, "HEAD", ["src/transformers/thing.py"])


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("    return x * 2", "    return x * 3", [("function", "helper", ("helper",))]),
        (
            "        return helper(x) * self.scale",
            "        return helper(x)",
            [("function", "Layer.forward", ("Layer",))],
        ),
        ("    scale = 2", "    scale = 3", [("class", "Layer", ("Layer",))]),
        ("@register", "@register(2)", [("module", "", ("helper",))]),
        ("LIMIT = 3", "LIMIT = 4", [("module", "", ("LIMIT",))]),
        ("    # why: a comment", "    # why: another comment\n    # and more", []),
        ('    """Doubles."""', '    """Doubles its input.\n\n    Really."""', []),
        ("LIMIT = 3\n", "LIMIT = 3\n\n\n", []),
    ],
    ids=["function", "method", "class-attribute", "decorator", "module-level", "comment", "docstring", "blank"],
)
def test_changed_lines_map_to_the_code_unit_they_touch(tmp_path: Path, old: str, new: str, expected: list) -> None:
    found = _touches(tmp_path, MODULE, MODULE.replace(old, new))
    assert sorted({(t.kind, t.qualname, t.names) for t in found.touches}) == expected
    assert {t.module for t in found.touches} <= {"transformers.thing"}
    assert found.files == (["src/transformers/thing.py"] if expected else [])


def test_both_sides_count_a_deleted_function_and_an_unparseable_file_is_whole(tmp_path: Path) -> None:
    found = _touches(tmp_path, MODULE, MODULE.replace("class Layer(", "def (broken\nclass Layer("))
    assert [(t.kind, t.qualname, t.side) for t in found.touches] == [("module", "", "head")]
    assert found.notes == ["src/transformers/thing.py does not parse at head (SyntaxError): it counts as changed whole"]
    removed = _touches(tmp_path / "second", MODULE, MODULE[: MODULE.index("@register")])
    sides = {(t.qualname, t.side) for t in removed.touches}
    assert sides == {("", "base"), ("helper", "base"), ("Layer", "base"), ("Layer.forward", "base")}


def test_a_diff_that_cannot_be_read_says_so() -> None:
    with pytest.raises(touched.DiffError):
        touched.changed_lines("diff --git a/x.py b/x.py\n@@ -1 +1 @@\n")  # a hunk before its file's names


# ── Static selection on a release ──


@pytest.mark.slow  # about 80 s: the walk reaches 300 model types (their files parsed once)
def test_sliding_window_mask_selects_its_callers_first(release: Path, facts: Path) -> None:
    _branch(release, "sliding")
    commit_prepended(release, MASKING, "create_sliding_window_causal_mask", DATA_DEPENDENT.format("inputs_embeds"))
    selection = _selected(release, facts)
    by_class = {c.model_class: c for c in selection.classes}
    reason = "masking_utils.create_sliding_window_causal_mask changed"
    for direct in ("MistralModel", "Gemma2Model", "Qwen2Model", "Cohere2Model"):  # they call it in forward
        assert by_class[direct].reason == reason and by_class[direct].rank == changes.RANK_STATIC + 1
    assert "BertModel" not in by_class  # an encoder's mask is bidirectional: nothing reaches this function
    assert selection.reason_counts[reason] >= 4
    assert selection.reason.startswith(reason) or f"; {reason}" in selection.reason
    cells = {c.model_class: c.selected_because for c in _report_cells(selection)}
    assert cells["MistralModel"] == reason


def _report_cells(selection: changes.Selection) -> list:
    from hfexport.gate.run import _cells
    from hfexport.gate.targets import CheckOptions

    return [cell for cell, _ in _cells(selection, CheckOptions(backends=["dynamo"]))]


def test_a_method_selects_the_subclasses_that_run_it(release: Path, facts: Path) -> None:
    _branch(release, "sequence-classification")
    commit_prepended(release, LAYERS, "GenericForSequenceClassification.forward", DATA_DEPENDENT.format("input_ids"))
    selection = _selected(release, facts)
    names = {c.model_class for c in selection.classes}
    assert {"LlamaForSequenceClassification", "MistralForSequenceClassification"} <= names
    assert all(name.endswith("ForSequenceClassification") for name in names), names
    assert 20 < len(names) < 100  # the decoders using the generic head: not every class
    reason = "modeling_layers.GenericForSequenceClassification.forward changed (subclass)"
    assert selection.reason_counts == {reason: len(names)}


def test_a_function_one_model_calls_selects_only_that_model(release: Path, facts: Path) -> None:
    _branch(release, "orthogonal")
    commit_prepended(release, "src/transformers/initialization.py", "orthogonal_", "gain = gain * 1.0")
    selection = _selected(release, facts)
    assert selection.model_types == ["rwkv"]
    assert {c.model_class for c in selection.classes} == {"RwkvModel", "RwkvForCausalLM"}


def test_comment_and_docstring_changes_select_nothing(release: Path, facts: Path) -> None:
    _branch(release, "comments")
    source = (release / MASKING).read_text()
    commit(release, {MASKING: prepend_to(source, "create_causal_mask", "# a note, nothing else")}, "note")
    selection = _selected(release, facts)
    assert selection.classes == []
    assert selection.reason == "no code of a model's files or of shared code changed"


def test_impact_map_decides_for_the_classes_it_has(release: Path, facts: Path, tmp_path: Path) -> None:
    _branch(release, "mapped")
    commit_prepended(release, LAYERS, "GenericForSequenceClassification.forward", DATA_DEPENDENT.format("input_ids"))
    static = {c.model_class for c in _selected(release, facts).classes}
    unit = CodeUnit("transformers.modeling_layers", "GenericForSequenceClassification.forward")
    ran = ExecutedUnit(unit, "transformers/modeling_layers.py", 1, 2)
    other = ExecutedUnit(CodeUnit("transformers.modeling_layers", "GradientCheckpointingLayer.__call__"), "f.py", 3, 4)
    records = {
        "LlamaForSequenceClassification": ClassRecord({ran}, {"transformers.modeling_layers"}),
        "MistralForSequenceClassification": ClassRecord({other}, {"transformers.modeling_layers"}),
    }
    path = tmp_path / "map.json"
    ImpactMap(expected_versions(release), records).dump(path)
    mapped = _selected(release, facts, impact_map=path)
    by_class = {c.model_class: c for c in mapped.classes}
    assert by_class["LlamaForSequenceClassification"].rank == changes.RANK_MAP
    assert "MistralForSequenceClassification" not in by_class  # its record shows it never ran that method
    assert set(by_class) == static - {"MistralForSequenceClassification"}  # classes without a record: static analysis
    # A map that cannot be used: one line, and never fewer classes than static analysis selects.
    path.write_text("{not json")
    fallback = _selected(release, facts, impact_map=path)
    assert fallback.notes == [f"impact map {path}: not JSON: selecting by static analysis"]
    assert {c.model_class for c in fallback.classes} == static


@pytest.mark.slow  # about 40 s: statically, every attention class
def test_flex_only_function_with_a_map_selects_none(release: Path, facts: Path, tmp_path: Path) -> None:
    _branch(release, "flex")
    commit_prepended(release, "src/transformers/integrations/flex_attention.py", "flex_attention_forward", "x = 1")
    static = _selected(release, facts)
    assert static.classes  # ALL_ATTENTION_FUNCTIONS dispatches by config: statically, every attention may run it
    ran = ExecutedUnit(CodeUnit("transformers.integrations.sdpa_attention", "sdpa_attention_forward"), "f.py", 1, 2)
    records = {c.model_class: ClassRecord({ran}, set()) for c in static.classes}
    path = tmp_path / "map.json"
    ImpactMap(expected_versions(release), records).dump(path)
    assert _selected(release, facts, impact_map=path).classes == []


def test_report_and_comment_say_why_classes_were_selected() -> None:
    selection = changes.Selection("diff", reason="masking_utils.create_causal_mask changed: 2 classes")
    reason = "masking_utils.create_causal_mask changed"
    selection.classes = [
        changes.SelectedClass("llama", name, reason=reason) for name in ("LlamaModel", "LlamaForCausalLM")
    ]
    selection.classes.append(changes.SelectedClass("rwkv", "RwkvModel", reason="initialization.orthogonal_ changed"))
    data = report.new_report("hfexport", ["dynamo"], selection.as_report(), {})
    data.cells = _report_cells(selection)
    for cell in data.cells:
        cell.status = "pass"
    data.finalize()
    assert schema.validate_report(data.as_dict()) == []
    assert data.selection["reason_counts"] == {reason: 2, "initialization.orthogonal_ changed": 1}
    assert {c.model_class: c.selected_because for c in data.cells}["RwkvModel"] == "initialization.orthogonal_ changed"
    line = markdown.summary_line(data).splitlines()[-1]
    assert line.startswith("why selected: masking\\_utils.create\\_causal\\_mask changed: 2 classes run that code")
    assert line.endswith("orthogonal\\_ changed: 1 class runs that code")


# ── Modular files ──


def test_changed_modular_file_without_its_converter_is_not_checked_and_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = make_checkout(tmp_path / "transformers")
    modular = (INSTALLED / "models/gemma3/modular_gemma3.py").read_text()
    commit(repo, {GEMMA3_MODULAR: modular}, "gemma3's modular file")
    commit(repo, {GEMMA3_MODULAR: prepend_to(modular, "Gemma3RMSNorm.__init__", "eps = float(eps)")}, "edit")
    monkeypatch.chdir(repo)
    report_dir = tmp_path / "out"
    result = CliRunner().invoke(
        main, ["check", "--base", "HEAD~1", "--backends", "dynamo", "--no-cache", "--report-dir", str(report_dir)]
    )
    assert result.exit_code == 1, result.output
    cells = json.loads((report_dir / "report.json").read_text())["cells"]
    assert cells and {c["model_type"] for c in cells} == {"gemma3"}
    assert {c["status"] for c in cells} == {"not_checked"}
    expected = (
        "modeling_gemma3.py is not regenerated from modular_gemma3.py (the checkout has no "
        "utils/modular_model_converter.py); run: python utils/modular_model_converter.py --files " + GEMMA3_MODULAR
    )
    assert {c["error"] for c in cells} == {expected}
    assert {c["selected_because"] for c in cells} == {"modular_gemma3.py changed"}


def test_changed_modular_file_is_checked_through_its_regenerated_modeling_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The repository's converter is not on PyPI (the sdist has no utils/): this stand-in writes the modeling file from
    # the modular one by the same command line, which is all the gate relies on.
    converter = textwrap.dedent(
        """
        import argparse, pathlib, re
        parser = argparse.ArgumentParser()
        parser.add_argument("--files", nargs="+")
        for modular in parser.parse_args().files:
            path = pathlib.Path(modular)
            text = path.read_text()
            modeling = path.with_name(path.name.replace("modular_", "modeling_"))
            modeling.write_text(modeling.read_text() + text[text.index("# generated:"):])
        """
    )
    repo = make_checkout(tmp_path / "transformers", heads=1)
    modular = "src/transformers/models/llama/modular_llama.py"
    commit(repo, {"utils/modular_model_converter.py": converter, modular: "# generated:\n"}, "converter")
    appended = (
        "# generated:\n_forward = LlamaModel.forward\n\n\n"
        "def _checked(self, input_ids=None, **kwargs):\n"
        "    if input_ids.sum() > 1e30:\n"
        "        input_ids = input_ids * 2\n"
        "    return _forward(self, input_ids=input_ids, **kwargs)\n\n\n"
        "LlamaModel.forward = _checked\n"
    )
    commit(repo, {modular: appended}, "change llama's modular file")
    before = (repo / "src/transformers/models/llama/modeling_llama.py").read_text()
    monkeypatch.chdir(repo)
    result = CliRunner().invoke(
        main,
        ["check", "--base", "HEAD~1", "--backends", "dynamo", "--no-cache", "--no-generation", "--only", "LlamaModel"],
    )
    assert result.exit_code == 1, result.output
    assert "modular_llama.py: its modeling file regenerated" in result.output
    assert "LlamaModel · dynamo: fail" in result.output and "if input_ids.sum() > 1e30:" in result.output
    assert (repo / "src/transformers/models/llama/modeling_llama.py").read_text() == before  # the user's tree as it was


# ── End to end (export runs) ──


@pytest.mark.slow
def test_sliding_window_mask_branch_fails_the_models_that_call_it(release: Path, facts: Path, monkeypatch) -> None:
    _branch(release, "sliding-check")
    commit_prepended(release, MASKING, "create_sliding_window_causal_mask", DATA_DEPENDENT.format("inputs_embeds"))
    monkeypatch.chdir(release)
    args = ["check", "--base", "main", "--backends", "dynamo", "--no-generation", "--no-health", "--only", "mistral"]
    result = CliRunner().invoke(main, [*args, "--cache-dir", str(facts)])
    assert result.exit_code == 1, result.output
    assert "MistralModel · dynamo: fail" in result.output
    assert (
        "(at src/transformers/masking_utils.py:" in result.output and "if inputs_embeds.sum() > 1e30:" in result.output
    )


@pytest.mark.slow
def test_generic_sequence_classification_branch_fails_its_subclasses(release: Path, facts: Path, monkeypatch) -> None:
    _branch(release, "sequence-classification-check")
    commit_prepended(release, LAYERS, "GenericForSequenceClassification.forward", DATA_DEPENDENT.format("input_ids"))
    monkeypatch.chdir(release)
    only = "LlamaForSequenceClassification,MistralForSequenceClassification"
    args = ["check", "--base", "main", "--backends", "dynamo", "--no-generation", "--no-health", "--only", only]
    result = CliRunner().invoke(main, [*args, "--cache-dir", str(facts)])
    assert result.exit_code == 1, result.output
    for name in only.split(","):
        assert f"{name} · dynamo: fail" in result.output or f"{name} · dynamo; " in result.output
    assert "(at src/transformers/modeling_layers.py:" in result.output and "if input_ids.sum() > 1e30:" in result.output
