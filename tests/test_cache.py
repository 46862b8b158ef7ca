"""The result cache: a cell is answered from it only while every file its job read, hfexport and the versions are
the same; touching any of them runs the cell again. End to end on a real checkout, with the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from checkout_fixture import LLAMA, commit, make_checkout
from click.testing import CliRunner

from hfexport.cli import main
from hfexport.gate import dispatch
from hfexport.gate.cache import ResultCache

# One of the two classes the file selects: the cache's behaviour is a cell's, and each check here runs it again
# (without the export health diff, whose base run would double each uncached check).
ARGS = ["check", LLAMA, "--only", "LlamaModel", "--backends", "dynamo", "--no-generation", "--no-health"]


def _check(repo: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    monkeypatch.chdir(repo)
    out = repo.parent / "report"
    result = CliRunner().invoke(main, [*ARGS, "--cache-dir", str(cache), "--report-dir", str(out)])
    assert result.exit_code == 0, result.output
    return {c["model_class"]: c for c in json.loads((out / "report.json").read_text())["cells"]}


def test_cells_come_from_the_cache_until_a_file_they_read_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, cache = make_checkout(tmp_path / "transformers", heads=1), tmp_path / "cache"
    first = _check(repo, cache, monkeypatch)
    assert sorted(first) == ["LlamaModel"]
    assert all(c["status"] == "pass" and not c["cached"] for c in first.values())

    # Every cell cached: no job worker starts (no torch import, no model built).
    with monkeypatch.context() as no_worker:
        no_worker.setattr(dispatch, "_start", lambda *_: pytest.fail("a job worker started for cached cells"))
        again = _check(repo, cache, monkeypatch)
    assert all(c["cached"] for c in again.values())
    assert {k: c["max_abs_diff"] for k, c in again.items()} == {k: c["max_abs_diff"] for k, c in first.items()}

    # A file of the checkout no job imported: still cached.
    bert = "src/transformers/models/bert/modeling_bert.py"
    commit(repo, {bert: (repo / bert).read_text() + "\n# unrelated\n"}, "touch bert")
    assert all(c["cached"] for c in _check(repo, cache, monkeypatch).values())

    # The model's own file, then a shared module it imports: both run again.
    commit(repo, {LLAMA: (repo / LLAMA).read_text() + "\n# touched\n"}, "touch llama")
    assert not any(c["cached"] for c in _check(repo, cache, monkeypatch).values())
    assert all(c["cached"] for c in _check(repo, cache, monkeypatch).values())
    shared = "src/transformers/cache_utils.py"
    commit(repo, {shared: (repo / shared).read_text() + "\n# touched\n"}, "touch cache_utils")
    assert not any(c["cached"] for c in _check(repo, cache, monkeypatch).values())

    monkeypatch.chdir(repo)
    result = CliRunner().invoke(main, [*ARGS, "--no-cache"])
    assert result.exit_code == 0 and "[cached]" not in result.output


def _entry(tmp_path: Path, environment: dict) -> tuple[ResultCache, dict, dict]:
    source = tmp_path / "site" / "transformers" / "models" / "llama" / "modeling_llama.py"
    source.parent.mkdir(parents=True, exist_ok=True)
    if not source.exists():
        source.write_text("# model\n")
    cache = ResultCache(tmp_path / "cache", environment, {"checkout": None, "site": tmp_path / "site"})
    job = {"model_class": "LlamaModel", "backend": "onnx"}
    result = {"status": "pass", "max_abs_diff": 1e-7, "sources": ["site:transformers/models/llama/modeling_llama.py"]}
    return cache, job, result


ENVIRONMENT = {"python": "3.11.7", "hfexport": "abc", "packages": {"torch": "2.13.0", "onnxruntime": "1.32.0"}}


@pytest.mark.parametrize(
    "changed",
    [
        {"hfexport": "def"},
        {"python": "3.12.0"},
        {"packages": {**ENVIRONMENT["packages"], "torch": "2.14.0"}},
        {"packages": {**ENVIRONMENT["packages"], "onnxruntime": "1.33.0"}},
        {"engine": "transformers"},
    ],
    ids=["hfexport code", "python", "torch", "onnxruntime", "engine"],
)
def test_any_other_version_or_hfexport_code_misses(tmp_path: Path, changed: dict) -> None:
    cache, job, result = _entry(tmp_path, ENVIRONMENT)
    cache.put(job, result)
    assert cache.get(job) == {"status": "pass", "max_abs_diff": 1e-7}
    other, _, _ = _entry(tmp_path, {**ENVIRONMENT, **changed})
    assert other.get(job) is None


def test_only_deterministic_outcomes_are_kept(tmp_path: Path) -> None:
    cache, job, result = _entry(tmp_path, ENVIRONMENT)
    for status in ("crash", "timeout", "oom", "tool_error"):
        cache.put(job, {**result, "status": status})
        assert cache.get(job) is None
    cache.put(job, {**result, "status": "fail", "error": "boom"})
    assert cache.get(job)["status"] == "fail"


def test_base_and_head_versions_of_a_file_keep_an_entry_each(tmp_path: Path) -> None:
    cache, job, result = _entry(tmp_path, ENVIRONMENT)
    source = tmp_path / "site" / "transformers" / "models" / "llama" / "modeling_llama.py"
    cache.put(job, {**result, "max_abs_diff": 1.0})
    source.write_text("# head\n")
    fresh, _, _ = _entry(tmp_path, ENVIRONMENT)  # a new run hashes the files again
    assert fresh.get(job) is None
    fresh.put(job, {**result, "max_abs_diff": 2.0})
    assert fresh.get(job)["max_abs_diff"] == 2.0
    source.write_text("# model\n")
    base, _, _ = _entry(tmp_path, ENVIRONMENT)
    assert base.get(job)["max_abs_diff"] == 1.0


def test_without_a_budget_cells_start_longest_first_by_their_last_run(tmp_path: Path) -> None:
    cache, job, result = _entry(tmp_path, ENVIRONMENT)
    jobs = [{"model_class": "LlamaModel", "backend": backend} for backend in ("dynamo", "onnx", "executorch")]
    # Nothing known yet: each backend's usual length, ExecuTorch's the longest.
    assert dispatch._longest_first([[0], [1], [2]], jobs, cache) == [[2], [1], [0]]
    assert dispatch._longest_first([[0], [1], [2]], jobs, None) == [[2], [1], [0]]
    # A job of several cells (dynamo and ONNX sharing a trace) is as long as its cells together.
    assert dispatch._longest_first([[2], [0, 1]], jobs, None) == [[2], [0, 1]]
    assert dispatch._longest_first([[0], [1, 2]], jobs, None) == [[1, 2], [0]]
    # The cell's own last run decides once the cache holds one, whatever its files were then.
    assert cache.last_seconds(job) is None
    cache.put(jobs[1], {**result, "timings": {"total": 95.0}})
    source = tmp_path / "site" / "transformers" / "models" / "llama" / "modeling_llama.py"
    source.write_text("# changed since\n")
    later, _, _ = _entry(tmp_path, ENVIRONMENT)
    assert later.get(jobs[1]) is None and later.last_seconds(jobs[1]) == 95.0
    assert dispatch._longest_first([[0], [1], [2]], jobs, later) == [[1], [2], [0]]


def test_a_cell_is_keyed_on_the_checkout_test_files_its_tiny_config_came_from(tmp_path: Path) -> None:
    # The ModelTester's module is imported and dropped again; the cache still learns which files it was read from.
    from tester_checkout import make_tester_checkout

    from hfexport.gate.cache import imported_sources
    from hfexport.tiny_models import tiny_config
    from hfexport.tiny_models.configs import checkout_test_files

    checkout = make_tester_checkout(tmp_path / "checkout")
    tiny_config("llama", checkout=checkout)
    sources = imported_sources(checkout, [], [], checkout_test_files)
    assert "checkout:tests/models/llama/test_modeling_llama.py" in sources
    assert "checkout:tests/causal_lm_tester.py" in sources
    assert imported_sources(tmp_path / "other", [], [], checkout_test_files) == []  # another checkout's files: not ours
