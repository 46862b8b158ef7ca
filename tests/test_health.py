"""Export health: what a change does to the exported programs of passing cells, head against base.

Real exports on real runtimes: a cell's program measured where the gate saved it, the head's program kept and timed
beside the base's in one process, and the whole gate on a git checkout of transformers 5.23.0's llama (the slow tests:
a commit computing LlamaMLP twice, and a no-op line checked cached and with --no-cache).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from checkout_fixture import LLAMA, commit, git, llama_source, make_checkout
from click.testing import CliRunner

from hfexport.cli import main
from hfexport.gate import health, schema
from hfexport.gate.cells import Cell, Health, Metrics
from hfexport.gate.checks.cell import run_cell
from hfexport.gate.markdown import render_markdown
from hfexport.gate.report import Report, new_report

MLP = "        down_proj = self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))\n        return down_proj\n"
MLP_TWICE = (
    "        down_proj = self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))\n"
    "        again = self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))\n"
    "        return (down_proj + again) / 2\n"
)
NO_OP = MLP.replace("        return", "        unused = 0  # a no-op line\n        return")
LLAMA_JOB = {
    "model_type": "llama",
    "model_class": "LlamaForCausalLM",
    "module": "transformers.models.llama.modeling_llama",
    "generation": False,
}


# ── Measuring (real exports, real runtimes) ──


@pytest.mark.parametrize("backend", ["dynamo", "onnx"])
def test_a_passing_cell_measures_its_program_and_times_it_beside_the_heads(backend: str, tmp_path: Path) -> None:
    store = health.ProgramStore(tmp_path)
    job = {**LLAMA_JOB, "backend": backend}
    head = run_cell({**job, **store.job_fields("LlamaForCausalLM")}, None)
    assert head["status"] == "pass", head
    metrics = head["metrics"]
    assert metrics["nodes"] == sum(metrics["ops"].values()) > 50
    kept = tmp_path / "LlamaForCausalLM" / backend  # the saved export, left for the base job
    files = json.loads((kept / "export.json").read_text())["files"]
    saved = sum((kept / name).stat().st_size for name in files)
    assert 0.1 * saved < metrics["bytes"] < 0.8 * saved  # the nodes' stack traces and scopes left out
    assert metrics["latency_ms"] > 0 and metrics["dynamic_dims"] == 4  # batch and length of both inputs
    assert "paired_latency" not in head

    base = run_cell({**job, **store.for_base().job_fields("LlamaForCausalLM")}, None)
    paired = base["paired_latency"]
    assert paired["rounds"] == 7 and 0 <= paired["head_slower_rounds"] <= 7
    assert paired["head_ms"] > 0 and paired["base_ms"] > 0
    assert math.isclose(paired["ratio"], paired["head_ms"] / paired["base_ms"], rel_tol=1e-3)
    assert base["metrics"]["ops"] == metrics["ops"]  # the same code: the same program


def test_the_competitors_engine_is_not_measured() -> None:
    # transformers.exporters' ExportedModel has no manifest: measuring it made every cell a tool error.
    cell = run_cell({**LLAMA_JOB, "model_class": "LlamaModel", "backend": "dynamo"}, None, "transformers")
    assert cell["status"] == "pass", cell
    assert "metrics" not in cell and "health" not in cell["timings"]


# ── Comparing ──


def _cell(backend: str = "onnx", **head: object) -> Cell:
    base = Metrics(nodes=400, bytes=1_000_000, ops={"MatMul": 20, "Add": 10}, dynamic_dims=4, partitions=3)
    cell = Cell("llama", "LlamaForCausalLM", backend, status="pass", metrics=Metrics(**{**vars(base), **head}))
    cell.base_metrics = base
    return cell


TIMED_TOGETHER = {"head_ms": 1.0, "base_ms": 1.0, "ratio": 1.0, "rounds": 7, "head_slower_rounds": 3}


def test_growth_past_a_threshold_is_a_regression_and_shrinking_an_improvement() -> None:
    cell = _cell(nodes=655, bytes=1_050_000, ops={"MatMul": 26, "Add": 10, "Transpose": 2}, partitions=5)
    health.assess(cell, TIMED_TOGETHER, health.Thresholds())
    assert cell.health.regressions == [
        "400 → 655 nodes (+64 %)",
        "MatMul 20 → 26 (+30 %)",
        "Transpose 0 → 2 (new)",
        "3 → 5 delegated partitions",
    ]  # bytes +5 %: under the 10 % threshold
    assert cell.health.improvements == []
    assert cell.health.latency == {"head_ms": 1.0, "base_ms": 1.0, "ratio": 1.0}

    smaller = _cell(nodes=300, bytes=500_000, dynamic_dims=2)
    health.assess(smaller, TIMED_TOGETHER, health.Thresholds.parse("bytes=60"))
    assert smaller.health.regressions == ["4 → 2 dynamic dimensions"]  # a dynamic dimension lost
    assert smaller.health.improvements == ["400 → 300 nodes (-25 %)"]  # bytes -50 %: within bytes=60


@pytest.mark.parametrize(
    ("timing", "found"),
    [
        ({"head_ms": 1.4, "base_ms": 1.0, "ratio": 1.4, "head_slower_rounds": 7}, "regression"),
        ({"head_ms": 1.4, "base_ms": 1.0, "ratio": 1.4, "head_slower_rounds": 5}, None),  # not steady: noise
        ({"head_ms": 0.014, "base_ms": 0.01, "ratio": 1.4, "head_slower_rounds": 7}, None),  # under the floor
        ({"head_ms": 1.1, "base_ms": 1.0, "ratio": 1.1, "head_slower_rounds": 7}, None),  # under the ratio
        ({"head_ms": 0.5, "base_ms": 1.0, "ratio": 0.5, "head_slower_rounds": 0}, "improvement"),
    ],
)
def test_latency_counts_only_past_ratio_floor_and_in_nearly_every_round(timing: dict, found: str | None) -> None:
    cell = _cell()
    health.assess(cell, {"rounds": 7, **timing}, health.Thresholds())
    latency_findings = {
        "regression": [t for t in cell.health.regressions if t.startswith("latency")],
        "improvement": [t for t in cell.health.improvements if t.startswith("latency")],
    }
    assert {kind for kind, texts in latency_findings.items() if texts} == ({found} if found else set())
    if found == "regression":
        assert latency_findings["regression"] == ["latency ×1.4 (1 → 1.4 ms)"]  # noqa: RUF001


def test_latency_from_the_cache_or_another_process_is_not_compared() -> None:
    cell = _cell()
    health.assess(cell, None, health.Thresholds())
    assert cell.health.latency is None and "not compared" in cell.health.note
    assert cell.health.regressions == cell.health.improvements == []


@pytest.mark.parametrize(
    "text", ["nodes=ten", "nodes=-1", "latency=inf", "speed=2", "nodes=nan"], ids=lambda text: text.split("=")[0]
)
def test_a_bad_threshold_is_one_line_with_exit_code_2(text: str) -> None:
    result = CliRunner().invoke(main, ["check", "--models", "llama", "--health-thresholds", text])
    assert result.exit_code == 2
    assert "--health-thresholds" in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


# ── Reporting ──


def _report(cells: list[Cell]) -> Report:
    report = new_report("hfexport", ["dynamo", "onnx"], {"mode": "diff", "model_types": ["llama"]}, {})
    report.selection.update(representative=False, reason="modeling_llama.py changed")
    report.cells = cells
    return report.finalize()


def test_the_comment_has_a_health_section_only_when_something_moved() -> None:
    grown = _cell("onnx", nodes=655)
    unchanged = _cell("dynamo")
    for cell in (grown, unchanged):
        health.assess(cell, TIMED_TOGETHER, health.Thresholds())
    report = _report([grown, unchanged])
    assert report.summary["health_regressions"] == [
        {"model_class": "LlamaForCausalLM", "backend": "onnx", "what": "400 → 655 nodes (+64 %)"}
    ]
    data = json.loads(json.dumps(report.as_dict()))
    assert schema.validate_report(data) == []
    markdown = render_markdown(Report.from_dict(data))
    assert "### Export health" in markdown
    assert "LlamaForCausalLM · onnx: 400 → 655 nodes \\(+64 %\\)" in markdown
    assert "LlamaForCausalLM · dynamo:" not in markdown.split("### Export health")[1]

    quiet = _report([unchanged])
    assert quiet.summary["health_regressions"] == [] and "Export health" not in render_markdown(quiet)


@pytest.mark.parametrize("bad", [None, -1, math.inf, math.nan, "many"], ids=repr)
def test_metrics_missing_negative_or_not_finite_render_without_them_and_say_so(bad: object) -> None:
    cell = _cell("onnx", nodes=655)
    cell.health = Health(regressions=["400 → 655 nodes (+64 %)"], improvements=[])
    cell.metrics.nodes = bad
    unusable_base = _cell("dynamo")
    unusable_base.health = Health(regressions=["400 → 655 nodes (+64 %)"], improvements=[])
    unusable_base.base_metrics.bytes = bad if bad is not None else -1
    report = _report([cell, unusable_base])
    assert report.summary["health_regressions"] == []
    markdown = render_markdown(report)
    assert "655 nodes" not in markdown
    shown = "metrics missing or invalid, shown without them: LlamaForCausalLM · dynamo, LlamaForCausalLM · onnx"
    assert shown in markdown
    data = report.as_dict()  # as a report file holds it (JSON reads 1e400 as inf)
    assert schema.validate_report(data) == []
    assert "metrics missing or invalid" in render_markdown(Report.from_dict(data))


# ── The gate, end to end on a 5.23.0 checkout ──


def _check(repo: Path, args: list[str], out: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, dict, str]:
    monkeypatch.chdir(repo)
    # --models: the classes a change to LlamaMLP reaches are a hundred (every modular copy of it): llama's head alone.
    command = ["check", "--models", "LlamaForCausalLM", "--base", "HEAD~1", *args, "--report-dir", str(out)]
    result = CliRunner().invoke(main, command)
    return result.exit_code, json.loads((out / "report.json").read_text()), result.output


def _mlp_checkout(root: Path, new: str) -> Path:
    repo = make_checkout(root / "transformers", heads=1)
    source = llama_source(1)
    assert source.count(MLP) == 1
    commit(repo, {LLAMA: source.replace(MLP, new)}, "LlamaMLP")
    assert git(repo, "rev-list", "--count", "HEAD") == "2"
    return repo


def test_mlp_twice_on_dynamo_is_named_and_no_health_skips_the_base(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = _mlp_checkout(tmp_path, MLP_TWICE)
    args = ["--backends", "dynamo", "--no-generation", "--cache-dir", str(tmp_path / "cache")]
    code, data, output = _check(repo, args, tmp_path / "out", monkeypatch)
    assert code == 0, output
    [cell] = data["cells"]
    assert cell["status"] == "pass" and cell["base_metrics"]["ops"]["aten.linear.default"] == 15
    assert cell["metrics"]["ops"]["aten.linear.default"] == 21  # the second MLP's three, in each of 2 layers
    whats = [e["what"] for e in data["summary"]["health_regressions"]]
    assert "aten.linear.default 15 → 21 (+40 %)" in whats, whats
    assert "health · LlamaForCausalLM · dynamo: aten.linear.default 15 → 21" in output
    assert "LlamaForCausalLM · dynamo: aten.linear.default 15 → 21" in (tmp_path / "out" / "report.md").read_text()

    code, quiet, output = _check(repo, [*args, "--no-health"], tmp_path / "quiet", monkeypatch)
    assert code == 0 and "at base" not in output  # a passing cell is not run at base
    assert quiet["cells"][0]["metrics"]["ops"] == cell["metrics"]["ops"] and quiet["cells"][0]["base_metrics"] is None
    assert quiet["summary"]["health_regressions"] == []


@pytest.mark.slow
@pytest.mark.parametrize("backends", ["dynamo,onnx,executorch"])
def test_computing_the_mlp_twice_passes_and_is_named_a_health_regression(
    backends: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = _mlp_checkout(tmp_path, MLP_TWICE)
    args = ["--backends", backends, "--no-generation", "-j", "2", "--cache-dir", str(tmp_path / "cache")]
    code, data, output = _check(repo, args, tmp_path / "out", monkeypatch)
    assert code == 0, output
    assert schema.validate_report(data) == []
    cells = [c for c in data["cells"] if c["model_class"] == "LlamaForCausalLM"]
    assert [c["status"] for c in cells] == ["pass"] * len(backends.split(","))
    assert all(c["metrics"]["nodes"] > c["base_metrics"]["nodes"] for c in cells)
    assert all(c["health"]["latency"]["ratio"] > 0 for c in cells)  # timed together: neither side was cached
    named = {e["backend"] for e in data["summary"]["health_regressions"] if e["model_class"] == "LlamaForCausalLM"}
    assert len(named) >= 2, data["summary"]
    assert "### Export health" in (tmp_path / "out" / "report.md").read_text()

    # Checked again: every cell from the cache, the same growth named (no latency: nothing was timed together), and
    # --fail-on-health fails the gate on it.
    code, again, output = _check(repo, [*args, "--fail-on-health"], tmp_path / "again", monkeypatch)
    assert code == 1, output
    assert all(c["cached"] for c in again["cells"])
    structural = [e for e in data["summary"]["health_regressions"] if not e["what"].startswith("latency")]
    assert again["summary"]["health_regressions"] == structural


@pytest.mark.slow
def test_a_no_op_line_is_no_health_regression_cached_or_not(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = _mlp_checkout(tmp_path, NO_OP)
    common = ["--backends", "dynamo,onnx", "--no-generation", "-j", "2"]
    cache = ["--cache-dir", str(tmp_path / "cache")]
    for name, args in (("first", cache), ("cached", cache), ("fresh", ["--no-cache"])):
        code, data, output = _check(repo, [*common, *args], tmp_path / name, monkeypatch)
        assert code == 0, output
        assert data["summary"]["health_regressions"] == [], (name, data["summary"])
        assert [c["status"] for c in data["cells"]] == ["pass", "pass"]
        assert all(c["metrics"]["ops"] == c["base_metrics"]["ops"] for c in data["cells"])
