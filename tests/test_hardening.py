"""Issue 50: shards that never arrived, mixed merges, corrupted caches, and what a log line can carry.

The tests drive the real CLI (click's CliRunner) on real report files, cache directories, links and FIFOs; the
result cache's end-to-end test runs a real check of LlamaModel.
"""

from __future__ import annotations

import json
import os
import unicodedata
from pathlib import Path
from typing import Any

import pytest
from checkout_fixture import make_checkout
from click.testing import CliRunner
from test_github_comment import commands_in

from hfexport.cli import main
from hfexport.gate.cache import ResultCache
from hfexport.gate.cells import Cell
from hfexport.gate.escaping import escape_inline
from hfexport.gate.report import Report
from hfexport.gate.views import github_annotations
from hfexport.github import actions
from hfexport.github.comment import CommentError, resolve_target

HEAD, BASE = "a" * 40, "b" * 40
# One passing cell's summary as schema 2 wrote it (before the counts of cells not run).
SCHEMA_2_SUMMARY = dict.fromkeys(("failed", "new_failures", "pre_existing", "fixed", "skipped", "tool_errors"), 0) | {
    "total": 1,
    "passed": 1,
    "not_checked": 0,
}
SELECTION = {"mode": "all", "model_types": ["llama"], "representative": False, "reason": "--all"}


def shard(index: int, count: int, **header: Any) -> dict[str, Any]:
    """Shard ``index/count`` of one sweep of PR #7: one passing cell of its own, ``header`` overriding the rest."""
    backends = header.pop("backends", ["dynamo", "onnx"])
    repository = {"root": None, "base": BASE, "head": HEAD}
    part = Report(
        "hfexport", backends, SELECTION, repository, {"number": 7, "head_sha": HEAD}, {"index": index, "count": count}
    )
    part.cells = [Cell("llama", f"Class{index}", backends[0], status="pass", max_abs_diff=1e-6)]
    return part.finalize().as_dict() | header


def merge(tmp_path: Path, shards: list[dict[str, Any]], *args: str, env: dict[str, str] | None = None) -> Any:
    paths = []
    for number, data in enumerate(shards):
        paths.append(tmp_path / f"shard{number}.json")
        paths[-1].write_text(json.dumps(data))
    out = tmp_path / "merged"
    return CliRunner().invoke(main, ["merge", *map(str, paths), "--report-dir", str(out), *args], env=env)


def refusal(result: Any) -> str:
    """The one line of a refusal (exit 2, no traceback)."""
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit | None) and "Traceback" not in result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith("error: ")
    return line


# ── hfexport merge: one complete set of shards of one run ──


def test_a_complete_set_merges(tmp_path: Path) -> None:
    result = merge(tmp_path, [shard(k, 3) for k in (2, 3, 1)])
    assert result.exit_code == 0, result.output
    merged = json.loads((tmp_path / "merged" / "report.json").read_text())
    assert merged["summary"]["total"] == 3 and "incomplete" not in merged


@pytest.mark.parametrize(
    ("indices", "count", "message"),
    [
        ((1,), 16, "shards 2\u201316 missing (of 16)"),
        ((1, 2, 4, 7), 8, "shards 3, 5\u20136, 8 missing (of 8)"),
        ((1, 3, 3, 2), 3, "shard 3/3 given twice"),
        ((2,), 2, "shard 1 missing (of 2)"),
    ],
)
def test_missing_or_doubled_shards_are_refused(
    tmp_path: Path, indices: tuple[int, ...], count: int, message: str
) -> None:
    line = refusal(merge(tmp_path, [shard(k, count) for k in indices]))
    assert message in line
    assert not (tmp_path / "merged").exists()


def test_shards_of_different_counts_are_refused(tmp_path: Path) -> None:
    assert "shards of 2 and of 3" in refusal(merge(tmp_path, [shard(1, 2), shard(2, 3)]))


def test_allow_partial_merges_but_never_passes(tmp_path: Path) -> None:
    result = merge(tmp_path, [shard(1, 16)], "--allow-partial")
    assert result.exit_code == 2, result.output
    assert "incomplete: shards 2\u201316 missing (of 16)" in result.output
    merged = json.loads((tmp_path / "merged" / "report.json").read_text())
    assert merged["incomplete"] == {"shards": 16, "missing": list(range(2, 17))} and merged["exit_code"] == 2
    markdown = (tmp_path / "merged" / "report.md").read_text()
    verdict = markdown.split("\n\n")[1]
    assert "incomplete: shards 2\u201316 missing (of 16)" in verdict and "✅" not in verdict
    # A doubled shard is refused even then: its cells would count twice.
    assert "given twice" in refusal(merge(tmp_path, [shard(1, 2), shard(1, 2)], "--allow-partial"))


@pytest.mark.parametrize(
    ("header", "named"),
    [
        ({"pr": {"number": 99, "head_sha": HEAD}}, "PR"),
        ({"pr": {"number": 7, "head_sha": "c" * 40}}, "PR head"),
        ({"repository": {"root": None, "base": "c" * 40, "head": HEAD}}, "base commit"),
        ({"repository": {"root": None, "base": BASE, "head": "c" * 40}}, "head commit"),
        ({"engine": "transformers"}, "engine"),
        ({"backends": ["dynamo"]}, "backends"),
        ({"hfexport_version": "9.9.9"}, "hfexport version"),
        ({"schema_version": 2, "summary": SCHEMA_2_SUMMARY}, "schema version"),
    ],
)
def test_shards_of_different_runs_are_refused(tmp_path: Path, header: dict[str, Any], named: str) -> None:
    line = refusal(merge(tmp_path, [shard(1, 2), shard(2, 2, **header)]))
    assert f"{named} differs" in line and "shard 1/2" in line and "shard 2/2" in line


# ── The result cache: an entry it did not write is removed, and its cell runs ──

ENVIRONMENT = {"python": "3.11.7", "hfexport": "abc", "packages": {"torch": "2.13.0"}}
JOB = {"model_class": "LlamaModel", "backend": "onnx"}
SOURCE = "site:transformers/models/llama/modeling_llama.py"
RESULT = {"status": "pass", "max_abs_diff": 1e-7, "timings": {"total": 2.0}, "sources": [SOURCE]}


def result_cache(tmp_path: Path) -> ResultCache:
    source = tmp_path / "site" / "transformers" / "models" / "llama" / "modeling_llama.py"
    source.parent.mkdir(parents=True, exist_ok=True)
    source.write_text("# model\n")
    return ResultCache(tmp_path / "cache", ENVIRONMENT, {"checkout": None, "site": tmp_path / "site"})


def entry_file(cache: ResultCache) -> Path:
    cache.put(JOB, RESULT)
    (path,) = (cache.directory / cache.key(JOB)).glob("*.json")
    return path


BROKEN: dict[str, Any] = {
    "a list": lambda e: [],
    "no result": lambda e: {k: v for k, v in e.items() if k != "result"},
    "timings not an object": lambda e: e | {"result": e["result"] | {"timings": "x"}},
    "a failure without its error": lambda e: e | {"result": e["result"] | {"status": "fail"}},
    "a crash (never kept)": lambda e: e | {"result": e["result"] | {"status": "crash", "error": "x"}},
    "an error over the report's limit": lambda e: (
        e | {"result": e["result"] | {"status": "fail", "error": "x" * 20_001}}
    ),
    "a frame that is text": lambda e: e | {"result": e["result"] | {"frame": "src/x.py"}},
    "another cell's": lambda e: e | {"job": {**JOB, "backend": "dynamo"}},
    "hashes not text": lambda e: e | {"sources": {SOURCE: 1}},
    "another schema": lambda e: e | {"schema": 99},
}


@pytest.mark.parametrize("break_it", BROKEN.values(), ids=BROKEN.keys())
def test_a_malformed_entry_is_removed_and_missed(
    tmp_path: Path, break_it: Any, caplog: pytest.LogCaptureFixture
) -> None:
    cache = result_cache(tmp_path)
    path = entry_file(cache)
    path.write_text(json.dumps(break_it(json.loads(path.read_text()))))
    assert cache.get(JOB) is None and cache.last_seconds(JOB) is None
    assert not path.exists() and "result cache: removing a broken entry" in caplog.text
    cache.put(JOB, RESULT)  # the cell's run writes a good one again
    assert cache.get(JOB) == {"status": "pass", "max_abs_diff": 1e-7, "timings": {"total": 2.0}}


@pytest.mark.parametrize(
    "text",
    ["", "{", '{"schema": NaN}', "[" * 100_000 + "]" * 100_000, "1" + "0" * 5000, "\xff"],
    ids=["empty", "cut short", "NaN", "nested too deeply", "an int too long", "not UTF-8"],
)
def test_an_entry_that_is_no_json_is_removed(tmp_path: Path, text: str) -> None:
    cache = result_cache(tmp_path)
    path = entry_file(cache)
    path.write_bytes(text.encode("latin-1"))
    assert cache.get(JOB) is None and not path.exists()


def test_an_entry_that_is_a_link_fifo_or_directory_is_never_read(tmp_path: Path) -> None:
    cache = result_cache(tmp_path)
    path = entry_file(cache)
    secret = tmp_path / "secret.json"
    secret.write_text(path.read_text())  # a valid entry: only the link must keep it from being read
    path.unlink()
    path.symlink_to(secret)
    assert cache.get(JOB) is None and not path.is_symlink() and secret.exists()
    os.mkfifo(path)  # opened for reading, a FIFO would block until a writer came
    assert cache.get(JOB) is None and not path.exists()
    path.mkdir()
    assert cache.get(JOB) is None


def test_a_failure_whose_diff_is_nan_is_kept(tmp_path: Path) -> None:
    cache = result_cache(tmp_path)
    cache.put(JOB, RESULT | {"status": "fail", "error": "NaN where eager has none", "max_abs_diff": float("nan")})
    found = cache.get(JOB)  # as the report records it: null
    assert found is not None and found["status"] == "fail" and found["max_abs_diff"] is None


def test_entries_may_carry_an_impact_record(tmp_path: Path) -> None:
    cache = result_cache(tmp_path)
    path = entry_file(cache)
    entry = json.loads(path.read_text())
    path.write_text(json.dumps(entry | {"impact": {"functions": ["a.b"]}, "result": entry["result"] | {"x": [1]}}))
    assert cache.get(JOB)["status"] == "pass" and path.exists()


def test_a_cache_path_that_cannot_be_a_directory_is_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "file").write_text("")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["check", "--models", "LlamaModel", "--cache-dir", str(tmp_path / "file" / "c")])
    line = refusal(result)  # before any cell ran
    assert line == f"error: cannot use {tmp_path / 'file' / 'c'} as the result cache: Not a directory"


def test_a_check_runs_the_cells_whose_entries_are_broken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.chdir(tmp_path)  # no checkout: the installed transformers
    check = ["check", "--models", "LlamaModel", "--backends", "dynamo", "--no-generation", "--cache-dir", "cache"]
    first = CliRunner().invoke(main, check)
    assert first.exit_code == 0, first.output
    (entry,) = (tmp_path / "cache").rglob("*.json")
    entry.write_text(json.dumps(json.loads(entry.read_text()) | {"result": {"status": "pass", "timings": "x"}}))
    again = CliRunner().invoke(main, check)
    assert again.exit_code == 0, again.output
    assert "LlamaModel · dynamo: pass" in again.output and "[cached]" not in again.output
    assert caplog.text.count("removing a broken entry") == 1
    assert json.loads(entry.read_text())["result"]["timings"]["total"] > 0  # the cell's new result, kept


# ── What a log line, an annotation and the comment can carry ──

# Format characters (Unicode category Cf): bidi marks and overrides, zero-width (non-)joiners, word joiner, BOM, tags.
INVISIBLE = "\u061c\u200c\u200d\u2060\ufeff\U000e0041\U000e007f\u202e\u2066\u00ad"


def format_characters(text: str) -> list[str]:
    return [f"U+{ord(c):04X}" for c in text if unicodedata.category(c) == "Cf"]


def test_the_reports_line_goes_through_the_one_writer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = make_checkout(tmp_path / "transformers", heads=1)
    (repo / "notes.txt").write_text("no model here\n")
    monkeypatch.chdir(repo)
    out = f"{tmp_path}/x\n::error title=Injected::approve{INVISIBLE}"
    result = CliRunner().invoke(main, ["check", "notes.txt", "--report-dir", out], env={"GITHUB_ACTIONS": "true"})
    assert result.exit_code == 0, result.output
    start, end = commands_in(result.output)  # only the markers around the table
    assert start.startswith("::stop-commands::") and end.startswith("::hfexport-")
    assert "reports: " in result.output and format_characters(result.output) == []


def test_a_free_text_line_keeps_its_percent_signs_and_stays_inert() -> None:
    # A progress line's "+59 %" printed as "+59 %25": only a command's data is unescaped by the runner.
    printed = actions.line("nodes 412 -> 655 (+59 %)\n::error::x ##[group]")
    assert printed == "nodes 412 -> 655 (+59 %)%0A::error::x #%23[group]"
    assert commands_in(printed) == []


def test_merge_prints_no_format_characters(tmp_path: Path) -> None:
    part = shard(1, 1)
    part["cells"][0]["model_class"] = f"Evil{INVISIBLE}Class"
    result = merge(tmp_path, [part], env={"GITHUB_ACTIONS": "true"})
    assert result.exit_code == 0, result.output
    assert "EvilClass" in result.output and format_characters(result.output) == []


def test_markdown_drops_format_characters_but_keeps_its_own_zero_width_spaces() -> None:
    text = escape_inline(f"@octocat{INVISIBLE} www.example.com a\u200bb")
    assert format_characters(text) == ["U+200B", "U+200B"]  # after "@" and in "www." (the input's own is dropped)
    assert text == "@\u200boctocat www\u200b.example.com ab"


def test_annotations_are_capped_per_kind_new_failures_first() -> None:
    data = Report("hfexport", ["onnx"], SELECTION, {"root": None, "base": BASE, "head": HEAD})
    frame = "src/transformers/models/llama/modeling_llama.py"
    failing = {"status": "fail", "regression": "new", "error_type": "E", "error": "x"}
    data.cells = [
        *(Cell.from_dict({"model_type": "t", "model_class": f"Tool{i}", "backend": "onnx", "status": "tool_error",
                          "error": "boom"}) for i in range(15)),
        *(Cell.from_dict({"model_type": "t", "model_class": f"New{i}", "backend": "onnx", **failing,
                          "frame": {"file": frame, "line": i + 1}}) for i in range(30)),
        *(Cell.from_dict({"model_type": "t", "model_class": f"Odd{i}", "backend": "onnx", "status": "not_checked",
                          "error": "no tiny model"}) for i in range(3)),
    ]  # fmt: skip
    lines = actions.annotation_commands(github_annotations(data.finalize()))
    assert len(lines) == 10 + 10 + 3 + 1
    assert all(line.startswith("::error file=") and "does not export" in line for line in lines[:10])
    assert all("hfexport failed checking Tool" in line for line in lines[10:20])
    assert all(line.startswith("::notice") and "not checked" in line for line in lines[20:23])
    assert lines[-1].startswith("::notice title=more annotations than shown here::20 new failures, 5 tool errors:")


# ── Reports read without following links; the token sent over plain http only to loopback ──


@pytest.mark.parametrize("command", ["comment", "merge"])
def test_a_report_that_is_a_link_or_fifo_is_refused_unread(tmp_path: Path, command: str) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text('{"aws_secret_access_key": "AKIAsecretvalue0123456789"}')
    link = tmp_path / "report.json"
    link.symlink_to(secret)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    env = {"GITHUB_TOKEN": "ghs_x", "GITHUB_REPOSITORY": "acme/transformers"}
    for path, why in ((link, "a symbolic link: not followed"), (fifo, "not a regular file")):
        args = [str(path)] + (["--pr", "7"] if command == "comment" else ["--report-dir", str(tmp_path / "out")])
        line = refusal(CliRunner().invoke(main, [command, *args], env=env))
        assert why in line and "secret" not in line.replace(str(tmp_path), "")


@pytest.mark.parametrize(
    ("url", "sent"),
    [
        ("https://ghe.example.com/api/v3/", True),
        ("http://127.0.0.1:8080", True),
        ("http://127.1.2.3", True),
        ("http://[::1]:8080/api", True),
        ("http://localhost:3000", True),
        ("http://api.github.com", False),
        ("http://127.0.0.1.evil.example", False),
        ("http://10.0.0.1", False),
        ("ftp://127.0.0.1", False),
        ("api.github.com", False),
        ("http://[::1", False),
    ],
)
def test_the_token_goes_over_plain_http_only_to_loopback(url: str, sent: bool) -> None:
    environ = {"GITHUB_TOKEN": "ghs_x", "GITHUB_REPOSITORY": "acme/transformers", "GITHUB_API_URL": url}
    if sent:
        assert resolve_target(environ, pr_number=7).api_url == url.rstrip("/")
    else:
        with pytest.raises(CommentError, match="API URL"):
            resolve_target(environ, pr_number=7)


def test_comment_refuses_a_plain_http_api_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    path.write_text(json.dumps(shard(1, 1)))
    env = {"GITHUB_TOKEN": "ghs_s3cr3t", "GITHUB_REPOSITORY": "acme/transformers"}
    line = refusal(CliRunner().invoke(main, ["comment", str(path), "--api-url", "http://ghe.example/api/v3"], env=env))
    assert "not sending the token to http://ghe.example" in line and "ghs_s3cr3t" not in line


def test_a_bug_in_hfexport_exits_2_not_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(report: Report) -> str:
        raise KeyError("a bug\n::error::x")

    monkeypatch.setattr("hfexport.gate.views.terminal_table", broken)
    result = merge(tmp_path, [shard(1, 1)], env={"GITHUB_ACTIONS": "true"})
    assert result.exit_code == 2 and commands_in(result.output) == []
    *trace, last = result.output.strip().splitlines()
    assert trace[0] == "Traceback (most recent call last):" and "in broken" in result.output
    assert last.startswith("error: hfexport failed: KeyError: ") and "(a bug in hfexport" in last


def test_a_report_dir_that_cannot_be_written_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    path = tmp_path / "shard.json"
    path.write_text(json.dumps(shard(1, 1)))
    result = CliRunner().invoke(main, ["merge", str(path), "--report-dir", str(tmp_path / "file" / "out")])
    *_, line = result.output.strip().splitlines()  # after the table
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert line == f"error: cannot write the reports to {tmp_path / 'file' / 'out'}: Not a directory"
