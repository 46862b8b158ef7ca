"""The compatibility matrix (``scripts/compat_check.py``): a checkout built from a released wheel, and its document.

The wheels come from ``$HFEXPORT_WHEEL_DIR`` (or ``~/.cache/hfexport/wheels``); a missing one is downloaded with pip.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from support import load_script

from hfexport.gate import report as gate_report
from hfexport.gate import schema as gate_schema
from hfexport.gate.cells import Cell

ROOT = Path(__file__).resolve().parent.parent
VERSION = "5.22.0"


def _cell(model_class: str, backend: str, status: str, **fields: Any) -> dict[str, Any]:
    """A cell as the gate writes it (schema 2): every key present, None where unknown."""
    model_type = model_class.split("For")[0].removesuffix("Model").lower()
    cell = {
        "model_type": model_type,
        "model_class": model_class,
        "backend": backend,
        "status": status,
        "regression": None,
        "stage": None,
        "error_type": None,
        "error": None,
        "max_abs_diff": 0.0 if status == "pass" else None,
        "max_rel_diff": 0.0 if status == "pass" else None,
        "tolerance": 1e-4,
        "timings": {"build": 0.2, "export": 3.1, "total": 6.4},
        "workarounds": [],
        "skip_reason": None,
        "source": {"file": f"src/transformers/models/{model_type}/modeling_{model_type}.py", "line": 400},
        "generation": None,
        "frame": None,
        "disabled": {},
    }
    cell.update(fields)
    return cell


def _summary_v2(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """The summary a schema 2 report carries: the gate's, before health entries (schema 4) existed."""
    summary = gate_report.summarize([Cell.from_dict(c) for c in cells])
    return {key: value for key, value in summary.items() if not key.startswith("health_")}


def _report(backends: list[str], cells: list[dict[str, Any]], selection: dict[str, Any], when: str) -> dict[str, Any]:
    return {
        "schema": "hfexport-report",
        "schema_version": 2,
        "hfexport_version": "0.1.0",
        "created_at": when,
        "engine": "hfexport",
        "repository": {"root": "/tmp/compat-x", "base": None, "head": None},
        "pr": {"number": None, "head_sha": None},
        "backends": backends,
        "selection": selection,
        "shard": {"index": 1, "count": 1},
        "cells": cells,
        "summary": _summary_v2(cells),  # for validity: render counts the cells itself
        "exit_code": 0,
    }


def _write_results(results: Path) -> None:
    """5.22.0 representative (one tool error) and 5.22.0 one-model change (one not checked, one new failure)."""
    representative = [
        _cell("LlamaForCausalLM", "dynamo", "pass"),
        _cell("LlamaForCausalLM", "onnx", "pass"),
        _cell("BertForMaskedLM", "dynamo", "pass"),
        _cell(
            "BertForMaskedLM",
            "onnx",
            "tool_error",
            stage="onnx · ONNX IR fixes",
            error_type="KeyError",
            error="'attention_mask'\nTraceback (most recent call last): ...",
            frame={
                "file": "hfexport/exporters/exporter_onnx.py",
                "line": 812,
                "function": "_fix_ir_topk",
                "text": "node.attributes['sorted']",
                "workaround": "_fix_ir_topk",
            },
        ),
    ]
    change = [
        _cell("LlamaForCausalLM", "dynamo", "pass"),
        _cell(
            "LlamaForSequenceClassification",
            "dynamo",
            "not_checked",
            stage="eager",
            error_type="ValueError",
            error="Cannot handle batch sizes > 1 if no padding token is defined.",
        ),
        _cell(
            "LlamaModel",
            "dynamo",
            "fail",
            regression="new",
            stage="dynamo · export",
            error_type="TorchRuntimeError",
            error="Dynamo failed | to run",
        ),
    ]
    models = {"mode": "models", "model_types": ["llama", "bert"], "representative": True, "reason": "--models x"}
    diff = {"mode": "diff", "model_types": ["llama"], "representative": False, "reason": "modeling_llama.py changed"}
    runs = {
        "representative": _report(["dynamo", "onnx"], representative, models, "2026-11-30T10:00:00Z"),
        "change": _report(["dynamo"], change, diff, "2026-11-30T10:05:00Z"),
    }
    for run, report in runs.items():
        assert gate_schema.validate_report(report) == []  # what the gate would write
        (results / VERSION / run).mkdir(parents=True)
        (results / VERSION / run / "report.json").write_text(json.dumps(report))


@pytest.mark.xdist_group("wheels")  # one download of a release's wheel at a time
def test_checkout_from_wheel_and_render(tmp_path: Path) -> None:
    compat = load_script("compat_check")
    checkout = compat.make_checkout(VERSION, tmp_path / "checkout", compat.DEFAULT_WHEEL_DIR)
    assert (checkout / "src" / "transformers" / "__init__.py").is_file()
    assert f'__version__ = "{VERSION}"' in (checkout / "src" / "transformers" / "__init__.py").read_text()
    assert (checkout / "src" / "transformers" / "models" / "llama" / "modeling_llama.py").is_file()
    assert compat.git(checkout, "log", "--format=%s") == f"transformers {VERSION}"
    assert compat.git(checkout, "status", "--porcelain") == ""

    _write_results(tmp_path / "results")
    text = compat.render(tmp_path / "results", tmp_path / "compatibility.md")
    assert text == (tmp_path / "compatibility.md").read_text()
    assert text == compat.render(tmp_path / "results", tmp_path / "again.md")  # reproducible
    # passed | failed | tool errors | not checked (no skipped column: nothing was skipped)
    assert "| transformers | backend | passed | failed | tool errors | not checked | gate exit | gate s |" in text
    assert "| 5.22.0 | dynamo | 2 | 0 | 0 | 0 | — | — |" in text
    assert "| 5.22.0 | onnx | 1 | 0 | 1 | 0 | — | — |" in text
    assert "| 5.22.0 | dynamo | 1 | 1 | 0 | 1 | 1 | — | — |" in text  # change run, with its new failures
    assert "| 5.22.0 | representative | BertForMaskedLM | onnx | tool error | onnx · ONNX IR fixes " in text
    assert "`KeyError: 'attention_mask'` at hfexport/exporters/exporter_onnx.py:812 |" in text
    assert "| 5.22.0 | change | LlamaModel | dynamo | fail, new | dynamo · export | `TorchRuntimeError: Dynamo" in text
    assert "Results of 2026-11-30T10:05:00Z." in text
    assert "each class's source file is the checkout's" in text  # the representative cells name src/transformers/
    assert "python scripts/compat_check.py run 5.22.0 --backends dynamo,onnx -j 2" in text


def test_outcomes_and_ci_versions() -> None:
    compat = load_script("compat_check")
    assert compat.outcome({"status": "error", "tool_error": True}) == "tool error"  # a field instead of a status
    assert compat.outcome({"status": "crash"}) == "failed"
    assert compat.outcome({"status": "something new"}) == "failed"
    available = ["5.24.0", "5.25.0rc1", "5.23.0", "5.22.2", "5.22.0", "4.57.6"]
    assert compat.neighbours("5.23.0", available) == ["5.22.2", "5.24.0"]
    assert compat.neighbours("5.24.0", available) == ["5.23.0"]


def test_bad_version_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    compat = load_script("compat_check")
    assert compat.main(["run", "not-a-version", "--results", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == "error: 'not-a-version' is not a version number"


@pytest.mark.slow
@pytest.mark.xdist_group("wheels")  # one download of a release's wheel at a time
def test_run_end_to_end(tmp_path: Path) -> None:
    compat = load_script("compat_check")
    results, doc = tmp_path / "results", tmp_path / "compatibility.md"
    argv = ["run", VERSION, "--backends", "dynamo", "-j", "2", "--results", str(results), "--output", str(doc)]
    assert compat.main([*argv, "--wheel-dir", str(compat.DEFAULT_WHEEL_DIR)]) == 0
    representative = json.loads((results / VERSION / "representative" / "report.json").read_text())
    change = json.loads((results / VERSION / "change" / "report.json").read_text())
    assert representative["cells"] and change["cells"]
    assert compat.imported_from_checkout(representative) is True  # the release's code, not the installed one
    assert change["selection"]["model_types"] == ["llama"]
    assert all(c["model_type"] == "llama" and c["backend"] == "dynamo" for c in change["cells"])
    meta = json.loads((results / VERSION / "change" / "compat.json").read_text())
    assert meta["command"][:4] == ["hfexport", "check", "--base", "HEAD~1"]
    text = doc.read_text()
    assert "## Representative set" in text and "## One-model change" in text
    assert f"| {VERSION} | dynamo | " in text


@pytest.mark.xdist_group("wheels")  # one download of a release's wheel at a time
def test_ci_releases_around_the_pin_have_no_tool_errors(tmp_path: Path) -> None:
    """CI's drift guard: the release before the pin and the newest one, representative set on dynamo and onnx."""
    compat = load_script("compat_check")
    argv = ["ci", "-j", "2", "--results", str(tmp_path), "--wheel-dir", str(compat.DEFAULT_WHEEL_DIR)]
    assert compat.main(argv) == 0
    versions = sorted(path.name for path in tmp_path.iterdir() if path.is_dir())
    assert len(versions) == 2
    for version in versions:
        data = json.loads((tmp_path / version / "representative" / "report.json").read_text())
        assert data["repository"]["transformers_version"] == version
        assert {c["status"] for c in data["cells"]} <= {"pass", "fail"}, data["cells"]


def _write_torch_axis(results: Path) -> None:
    """5.25.0's representative set on torch 2.14.1 (every cell passes) and 2.15.0 (one failure), as run_step writes."""
    models = {"mode": "models", "model_types": ["llama"], "representative": True, "reason": "--models x"}
    for torch, onnx_status in (("2.14.1", "pass"), ("2.15.0", "fail")):
        cells = [
            _cell("LlamaForCausalLM", "dynamo", "pass"),
            _cell("LlamaForCausalLM", "onnx", onnx_status, stage="onnx · export", error_type="RuntimeError", error="x"),
        ]
        report = _report(["dynamo", "onnx"], cells, models, f"2026-12-05T1{torch[-1]}:00:00Z")
        step = results / f"torch-{torch}" / "5.25.0" / "representative"
        step.mkdir(parents=True)
        (step / "report.json").write_text(json.dumps(report))
        meta = {"exit_code": 0, "seconds": 30.0, "packages": {"torch": f"{torch}+cu132", "onnx": "1.23.2"}}
        (step / "compat.json").write_text(json.dumps({**meta, "torch_axis": torch}))


def test_torch_axis_renders_its_own_part_and_keeps_the_other(tmp_path: Path) -> None:
    compat = load_script("compat_check")
    doc = tmp_path / "compatibility.md"
    _write_results(tmp_path / "releases")
    releases = compat.render(tmp_path / "releases", doc)
    _write_torch_axis(tmp_path / "torches")
    text = compat.render(tmp_path / "torches", doc)  # no release results there: the releases' part stays as it was
    assert text.startswith(releases) and text == doc.read_text()
    torch_part = text.removeprefix(releases)
    assert torch_part.startswith(load_script("compat_doc").TORCH_PART + "\n## torch releases\n")
    assert (
        "| torch | transformers | backend | passed | failed | tool errors | not checked | gate exit | gate s |" in text
    )
    assert "| 2.14.1+cu132 | 5.25.0 | onnx | 1 | 0 | 0 | 0 | 0 | 30 |" in text
    assert "| 2.15.0+cu132 | 5.25.0 | onnx | 0 | 1 | 0 | 0 | 0 | 30 |" in text
    assert "| 2.15.0+cu132 | 5.25.0 | representative | LlamaForCausalLM | onnx | fail | onnx · export |" in text
    assert "python scripts/compat_check.py run 5.25.0 --backends dynamo,onnx --runs representative --torch" not in text
    assert "python scripts/compat_check.py run 5.25.0 --backends dynamo,onnx --torch 2.14.1,2.15.0 --runs" in text
    assert compat.render(tmp_path / "releases", doc) == text  # and the other way round: the torch part stays
    assert compat.render(tmp_path / "torches", doc) == text  # reproducible


def test_torch_axis_environments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    compat, environments = load_script("compat_check"), load_script("compat_environments")
    pinned = environments.pinned_set_with_torch("2.15.0")
    assert [line for line in pinned.splitlines() if line.startswith("torch==")] == ["torch==2.15.0"]
    assert "transformers==" in pinned and "executorch==" in pinned  # the rest of the known-good set
    installed = environments.running_torch()
    assert environments.torch_python(installed, tmp_path) == sys.executable  # this Python's torch: nothing to build
    assert not any(tmp_path.iterdir())
    argv = ["run", "5.25.0", "--torch", "2.15,next", "--results", str(tmp_path)]
    with pytest.raises(SystemExit) as exited:
        compat.main(argv)
    assert exited.value.code == 2
    assert "'next' is not a version number" in capsys.readouterr().err
