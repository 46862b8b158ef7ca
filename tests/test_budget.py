"""A time budget for huge changes: cells start in an order that covers every model type on every backend first, none
starts past the budget, and those left are reported "not run (budget)", never as passes."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from checkout_fixture import LLAMA, llama_source
from click.testing import CliRunner

from hfexport.cli import main
from hfexport.gate import schema
from hfexport.gate.cells import Cell
from hfexport.gate.changes import SelectedClass
from hfexport.gate.dispatch import _sharing_jobs
from hfexport.gate.run import _by_priority
from hfexport.gate.worker_parent import JobOptions, WorkerProcess


def test_priority_covers_every_type_and_backend_before_second_classes() -> None:
    classes = {"llama": ["LlamaModel", "LlamaForCausalLM", "LlamaForSequenceClassification"], "bert": ["BertModel"]}
    pairs = [
        (Cell(t, name, backend), SelectedClass(t, name))
        for t, names in classes.items()
        for name in names
        for backend in ("dynamo", "onnx")
    ]
    order = [(c.model_class, c.backend) for c, _ in _by_priority(pairs)]
    assert order[:4] == [
        ("LlamaModel", "dynamo"),
        ("LlamaModel", "onnx"),
        ("BertModel", "dynamo"),
        ("BertModel", "onnx"),
    ]
    assert order[4:] == [(n, b) for n in classes["llama"][1:] for b in ("dynamo", "onnx")]
    assert _by_priority(list(reversed(pairs))) != _by_priority(pairs)  # the selection's order decides, nothing else
    assert _by_priority(pairs) == _by_priority(list(pairs))


def test_a_class_dynamo_and_onnx_cells_share_a_job_in_the_order_of_its_first_cell() -> None:
    cells = [("LlamaModel", "onnx"), ("BertModel", "dynamo"), ("LlamaModel", "executorch"), ("LlamaModel", "dynamo")]
    jobs = [{"model_class": name, "backend": backend} for name, backend in cells]
    # Dynamo first in its job (its trace is handed on); ExecuTorch on its own; a class with one such cell alone.
    assert _sharing_jobs([0, 1, 2, 3], jobs, "hfexport") == [[3, 0], [1], [2]]
    assert _sharing_jobs([1, 2, 3], jobs, "hfexport") == [[1], [2], [3]]
    # transformers.exporters traces every cell for itself.
    assert _sharing_jobs([0, 1, 2, 3], jobs, "transformers") == [[0], [1], [2], [3]]


def _llama_checkout_whose_trace(tmp_path: Path, *statements: str) -> Path:
    """A checkout whose LlamaModel runs ``statements`` first in each traced forward (eager runs are untouched)."""
    source = llama_source(1) + (
        "\n\nimport functools as _functools\nimport os as _os\nimport time as _time\n\n"
        "_forward = LlamaModel.forward\n\n\n"
        "@_functools.wraps(_forward)\n"
        "def _traced(self, *args, **kwargs):\n"
        "    if torch.compiler.is_exporting():\n"
        + "".join(f"        {statement}\n" for statement in statements)
        + "    return _forward(self, *args, **kwargs)\n\n\n"
        "LlamaModel.forward = _traced\n"
    )
    (tmp_path / LLAMA).parent.mkdir(parents=True)
    (tmp_path / LLAMA).write_text(source)
    return tmp_path


def test_no_job_starts_past_the_deadline(tmp_path: Path) -> None:
    checkout = _llama_checkout_whose_trace(tmp_path, "_time.sleep(2)")  # the first job ends past the 1 s deadline
    jobs = [
        {"model_type": "llama", "model_class": name, "module": None, "backends": ["dynamo"], "generation": False}
        for name in ("LlamaModel", "LlamaForCausalLM", "LlamaForSequenceClassification", "LlamaForTokenClassification")
    ]
    with WorkerProcess(checkout, JobOptions(jobs=1, backends=("dynamo",))) as worker:
        # One job running and one queued are handed over at once; when the first finishes the deadline has passed:
        # the job the worker holds queued never starts, nor do the last two.
        results = {index: cell for index, _, cell in worker.run(jobs, deadline=time.monotonic() + 1.0)}
    assert [results[i]["status"] for i in range(4)] == ["pass", "not_run", "not_run", "not_run"]
    assert results[1]["error"] == results[2]["error"] == "not run: the time budget ran out"


def test_cells_a_crash_leaves_are_not_run_again_past_the_deadline(tmp_path: Path) -> None:
    # LlamaModel's first trace aborts the child after the deadline; its ONNX cell, never started, would run again
    # in a job of its own: past the budget it must not start.
    checkout = _llama_checkout_whose_trace(tmp_path, "_time.sleep(4)", "_os.abort()")
    job = {"model_type": "llama", "model_class": "LlamaModel", "module": None, "generation": False}
    job["backends"] = ["dynamo", "onnx"]
    with WorkerProcess(checkout, JobOptions(jobs=1, backends=("dynamo", "onnx"))) as worker:
        deadline = time.monotonic() + 2
        results = {
            backend: cell for _, backend, cell in worker.run([{**job, "backends": ["dynamo", "onnx"]}], deadline)
        }
    assert results["dynamo"]["status"] == "crash" and results["dynamo"]["error_type"] == "SIGABRT", results["dynamo"]
    assert results["onnx"]["status"] == "not_run", results["onnx"]


def test_cells_left_by_the_budget_are_reported_not_run_never_passed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "report"
    # A budget that is over before the job worker is even up: no cell starts.
    args = ["check", "--models", "llama,bert", "--backends", "dynamo,onnx", "--budget", "0.0001", "--no-generation"]
    result = CliRunner().invoke(main, [*args, "--report-dir", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads((out / "report.json").read_text())
    assert schema.validate_report(data) == []
    assert {c["status"] for c in data["cells"]} == {"not_run"}
    assert data["summary"]["passed"] == 0 and data["summary"]["not_run"] == len(data["cells"])
    markdown = (out / "report.md").read_text()
    assert f"⏸️ **{len(data['cells'])} checks not run within the time budget**" in markdown
    assert "every export passed" not in markdown and "✅" not in markdown
    # Not a cause: one line, and how to run every cell.
    assert "<details" not in markdown and "hfexport check --shard K/N" in markdown.replace("\\", "")
    assert f"{len(data['cells'])} not run (budget)" in result.output
    assert 'skipped message="not run' in (out / "junit.xml").read_text()
