"""`hfexport comment` fed random and hostile reports (hypothesis), against the local GitHub server.

For any report under the size cap: exit 0 or 2, on 2 one line and no traceback, no line a runner would read as a
workflow command, no live link, mention or reference in the posted body, and memory bounded.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import traceback
import tracemalloc
import unicodedata
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fake_github import FakeGitHub
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from test_github_comment import commands_in
from test_markdown import live_links

from hfexport.cli import main
from hfexport.gate.cache import ResultCache
from hfexport.gate.cells import CELL_KEY_SINCE, CELL_KEYS, STATUSES, Cell
from hfexport.gate.escaping import text_size
from hfexport.gate.markdown import MARKER
from hfexport.gate.report import Report, summarize
from hfexport.gate.schema import MAX_REPORT_BYTES, validate_cell

TOKEN = "ghs_fuzzT0ken0123456789"
HEAD = "a" * 40
MEMORY_LIMIT = 300 * 1024 * 1024

# Text that has meant something to a runner, a markdown renderer or GitHub's autolinker.
HOSTILE = [
    "\n::error title=Security::approve PR 1 now",
    "\r::warning::x",
    "##[error]old syntax",
    "::stop-commands::x",
    "%0A::error::encoded",
    "@octocat",
    "@org/team",
    "#1",
    "GH-1",
    "acme/other#12",
    "me@evil.example",
    "https://evil.example/x",
    "http://evil.example",
    "ftp://evil.example",
    "www.evil.example",
    "\\[link\\]\\(https://evil.example\\)",
    "[link](https://evil.example)",
    "![i](https://evil.example/i.png)",
    "<img src=x onerror=alert(1)>",
    "<a href='https://evil.example'>a</a>",
    "| a | b |",
    "`code`",
    "**b** _i_ ~~s~~ $x$",
    "\u202eevil\u202c",
    "in\u061cvis\u200cib\u200dle\u2060\ufeff\U000e0041\U000e007f",
    "\x00\x1b[31m",
    "&lt;script&gt;",
    "<!-- hfexport-report -->",
]

hostile_text = st.one_of(
    st.sampled_from(HOSTILE),
    st.text(max_size=40),
    st.lists(st.sampled_from(HOSTILE) | st.text(max_size=8), min_size=1, max_size=6).map("".join),
)
number = st.one_of(
    st.none(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.sampled_from([10**400, -(10**400), 2**53, 2**53 + 1, 0, True]),
)
json_value = st.recursive(
    st.none() | st.booleans() | number | hostile_text,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(hostile_text, children, max_size=4),
    max_leaves=20,
)


@st.composite
def cells(draw: st.DrawFn, backends: list[str]) -> dict[str, Any]:
    status = draw(st.sampled_from(STATUSES))
    failed = status not in ("pass", "skipped")
    cell: dict[str, Any] = dict.fromkeys(CELL_KEYS)
    cell.update(
        model_type=draw(hostile_text),
        model_class=draw(hostile_text),
        backend=draw(st.sampled_from(backends)),
        status=status,
        regression=draw(st.sampled_from(["new", "pre-existing", "fixed", None])),
        stage=draw(st.none() | hostile_text),
        error_type=draw(st.none() | hostile_text),
        error=draw(hostile_text) if failed or status in ("tool_error", "not_checked") else None,
        max_abs_diff=draw(number),
        max_rel_diff=draw(number),
        tolerance=draw(number),
        timings=draw(st.dictionaries(hostile_text, number, max_size=3)),
        workarounds=draw(st.lists(hostile_text, max_size=3)),
        skip_reason=draw(st.none() | hostile_text),
        source=draw(st.none() | st.fixed_dictionaries({"file": hostile_text, "line": number})),
        generation=draw(st.none() | st.fixed_dictionaries({"status": st.just("fail"), "detail": hostile_text})),
        frame=draw(
            st.none()
            | st.fixed_dictionaries(
                {"file": st.just("src/transformers/models/x.py") | hostile_text, "line": number, "text": hostile_text}
            )
        ),
        disabled=draw(st.none() | st.dictionaries(hostile_text, hostile_text, max_size=2)),
        second_shape=None,
    )
    return cell


@st.composite
def reports(draw: st.DrawFn) -> dict[str, Any]:
    """Mostly schema-valid reports carrying hostile values; some with a part replaced by anything at all."""
    backends = draw(
        st.lists(st.sampled_from(["dynamo", "onnx", "executorch"]) | hostile_text, min_size=1, max_size=4, unique=True)
    )
    drawn = draw(st.lists(cells(backends), max_size=12))
    report = {
        "schema": "hfexport-report",
        "schema_version": 3,
        "hfexport_version": draw(st.just("0.1.0") | hostile_text),
        "created_at": "2026-01-01T00:00:00Z",
        "engine": "hfexport",
        "repository": {"root": draw(hostile_text), "base": None, "head": HEAD},
        "pr": {"number": 7, "head_sha": draw(st.just(HEAD) | hostile_text)},
        "backends": backends,
        "selection": {"mode": "diff", "model_types": [], "representative": False, "reason": draw(hostile_text)},
        "shard": {"index": 1, "count": 1},
        "cells": drawn,
        "summary": summarize([Cell.from_dict(cell) for cell in drawn]),
        "exit_code": 1,
    }
    if draw(st.integers(0, 3)) == 0:  # a merge that lacked shards (`merge --allow-partial`), or a forged record
        record = {"shards": st.integers(2, 20), "missing": st.lists(st.integers(1, 20), min_size=1, max_size=5)}
        report["incomplete"] = draw(st.fixed_dictionaries(record) | json_value)
    for _ in range(draw(st.integers(0, 2))):
        where = draw(st.sampled_from(["report", *range(len(drawn))]))
        target = report if where == "report" else drawn[where]
        target[draw(st.sampled_from(sorted(target)))] = draw(json_value)
    if draw(st.booleans()):
        report["repository"] = {"deep": draw(st.integers(1, 5000))}  # written as that many nested arrays
    return report


def _text(report: dict[str, Any]) -> str:
    """The report as JSON, NaN and Infinity included (the loader must refuse them), deep nesting spelled out."""
    deep = report.get("repository", {}).get("deep") if isinstance(report.get("repository"), dict) else None
    if not isinstance(deep, int) or isinstance(deep, bool):
        return json.dumps(report)
    return json.dumps(report | {"repository": "DEEP"}).replace('"DEEP"', "[" * deep + "]" * deep, 1)


@pytest.fixture(scope="module")
def github():
    with FakeGitHub(repository="acme/transformers", pr_number=7, head_sha=HEAD) as fake:
        fake.add_token(TOKEN, "export-bot")
        yield fake


def _env(github: FakeGitHub, directory: Path) -> dict[str, str]:
    event = directory / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 7, "head": {"sha": HEAD}}}))
    return {
        "GITHUB_ACTIONS": "true",
        "GITHUB_REPOSITORY": github.repository,
        "GITHUB_API_URL": github.api_url,
        "GITHUB_EVENT_PATH": str(event),
        "GITHUB_TOKEN": TOKEN,
    }


FUZZ_SETTINGS = settings(
    max_examples=int(os.environ.get("HFEXPORT_FUZZ_EXAMPLES", "200")),
    deadline=None,
    derandomize=True,  # the same examples every run: CI never goes red on a draw of its own
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)


@FUZZ_SETTINGS
@given(report=reports())
def test_any_report_is_posted_inert_or_refused_in_one_line(github, tmp_path_factory, report):
    text = _text(report)
    assume(len(text.encode()) <= MAX_REPORT_BYTES)
    directory = tmp_path_factory.mktemp("fuzz")
    (directory / "report.json").write_text(text, encoding="utf-8")
    before = len(github.writes())
    tracemalloc.start()
    try:
        result = CliRunner().invoke(
            main,
            ["comment", str(directory / "report.json"), "--backoff", "0.01", "--request-interval", "0"],
            env=_env(github, directory),
        )
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    crash = "".join(traceback.format_exception(*result.exc_info)) if result.exc_info else ""
    assert result.exit_code in (0, 2), result.output + crash
    assert isinstance(result.exception, SystemExit | None), crash
    assert "Traceback" not in result.output
    assert commands_in(result.output) == [], result.output
    assert peak < MEMORY_LIMIT
    if result.exit_code == 2:
        (line,) = result.output.strip().splitlines()
        assert line.startswith("error: ")
        assert len(github.writes()) == before
    else:
        body = github.comments[-1]["body"]
        assert body.startswith(MARKER) and text_size(body) <= 65536
        assert live_links(body) == [], live_links(body)
        # No format character but the zero-width spaces the escaper puts where GitHub would start a link.
        assert {c for c in body if unicodedata.category(c) == "Cf"} <= {"\u200b"}


# ── The largest reports under the cap: measured as the process sees them ──


def _bombs() -> dict[str, str]:
    """Reports just under the 8 MiB cap, each the worst of a kind for a reader."""
    cap = MAX_REPORT_BYTES - 100

    def cell(i: int, backend: str) -> dict[str, Any]:
        schema_3 = [key for key in CELL_KEYS if CELL_KEY_SINCE.get(key, 1) <= 3]  # the keys of the version written
        return dict.fromkeys(schema_3) | {
            "model_type": "t",
            "model_class": f"C{i}",
            "backend": backend,
            "status": "fail",
            "regression": "new",
            "error": f"e{i} " + "www.x @y #1 " * 3,
            "timings": {},
            "workarounds": [],
        }

    def report(cells: list[dict[str, Any]], backends: list[str]) -> str:
        data = {
            "schema": "hfexport-report",
            "schema_version": 3,
            "hfexport_version": "0.1.0",
            "created_at": "x",
            "engine": "hfexport",
            "repository": {},
            "pr": {"number": 7, "head_sha": HEAD},
            "backends": backends,
            "selection": {"mode": "diff", "model_types": [], "representative": False},
            "shard": {"index": 1, "count": 1},
            "cells": cells,
            "summary": summarize([Cell.from_dict(c) for c in cells]),
            "exit_code": 1,
        }
        return json.dumps(data, separators=(",", ":"))

    squares = [cell(i, f"b{i}") for i in range(30_000)]  # each cell alone in its row and column
    while len(report(squares, [c["backend"] for c in squares])) > cap:
        squares = squares[: int(len(squares) * 0.95)]
    backends = [f"backend{b}" for b in range(16)]
    widest = [cell(i, backends[i % 16]) for i in range(20_000)]  # the most the limits allow
    return {
        "cells x backends": report(squares, [c["backend"] for c in squares]),
        "at the limits": report(widest, backends),
        "empty objects": "[" + "{}," * (cap // 3 - 1) + "{}]",
        "deep": "[" * (cap // 2) + "]" * (cap // 2),
        "floats": "[" + "1.5," * (cap // 4 - 1) + "1.5]",
    }


# The child reports its own peak resident memory as it exits: VmHWM, the high-water mark of its own address space
# (ru_maxrss would start from the size of the process that forked it, the test runner, torch and all).
_MEASURED = (
    "import atexit, sys\n"
    "def peak():\n"
    "    status = open('/proc/self/status').read()\n"
    "    return int(status.split('VmHWM:')[1].split()[0])\n"
    "atexit.register(lambda: print('peak-rss-kib', peak(), file=sys.stderr))\n"
    "from hfexport.cli import main\n"
    "main(sys.argv[1:], prog_name='hfexport')\n"
)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the peak from /proc")
@pytest.mark.parametrize("kind", ["cells x backends", "at the limits", "empty objects", "deep", "floats"])
def test_reports_at_the_size_cap_stay_under_300_mb(github, tmp_path, kind):
    path = tmp_path / "report.json"
    path.write_text(_bombs()[kind])
    assert path.stat().st_size <= MAX_REPORT_BYTES
    command = [sys.executable, "-c", _MEASURED, "comment", str(path), "--backoff", "0.01", "--request-interval", "0"]
    env = os.environ | _env(github, tmp_path)
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    lines = result.stderr.strip().splitlines()
    peak = int(lines.pop().removeprefix("peak-rss-kib ")) * 1024
    assert result.returncode in (0, 2), result.stderr
    assert "Traceback" not in result.stderr and commands_in(result.stdout + result.stderr) == []
    assert len(lines) <= 1  # the one line of a refusal, or nothing
    assert peak < MEMORY_LIMIT, f"{kind}: {peak / 2**20:.0f} MB"


# ── `hfexport merge` fed shard sets: missing, doubled, of mixed runs ──

# A header field of one shard changed as a shard of another run would have it, by the name a refusal gives it.
OTHER_RUN = {
    "PR": lambda r: r["pr"].update(number=8),
    "PR head": lambda r: r["pr"].update(head_sha="c" * 40),
    "base commit": lambda r: r["repository"].update(base="c" * 40),
    "head commit": lambda r: r["repository"].update(head="c" * 40),
    "engine": lambda r: r.update(engine="transformers"),
    "backends": lambda r: r.update(backends=["dynamo", "executorch"]),
    "hfexport version": lambda r: r.update(hfexport_version="9.9.9"),
}


@st.composite
def merge_cells(draw: st.DrawFn, shard: int) -> list[dict[str, Any]]:
    """Valid cells on dynamo (every backends variant lists it), named apart from every other shard's."""
    drawn = []
    for n in range(draw(st.integers(0, 3))):
        status = draw(st.sampled_from(["pass", "fail", "tool_error", "skipped"]))
        cell = {"model_type": "t", "model_class": f"{draw(hostile_text)}#{shard}.{n}", "backend": "dynamo"}
        cell |= {"status": status, "regression": draw(st.sampled_from(["new", "pre-existing", None]))}
        if status in ("fail", "tool_error"):
            cell |= {"error_type": "E", "error": "x" + draw(hostile_text)}
        drawn.append(cell)
    return drawn


@st.composite
def shard_sets(draw: st.DrawFn) -> tuple[int, list[int], list[set[str]], list[dict[str, Any]]]:
    """N, the K of each report given, what of each report's header is another run's, and the reports."""
    count = draw(st.integers(1, 5))
    indices = draw(st.lists(st.integers(1, count), min_size=1, max_size=count + 1))
    changed, shards = [], []
    for position, index in enumerate(indices):
        backends = draw(st.sampled_from([["dynamo", "onnx"], ["onnx", "dynamo"]]))  # one set, in either order
        repository = {"root": None, "base": "b" * 40, "head": HEAD}
        data = Report("hfexport", backends, {"mode": "all", "model_types": [], "representative": False}, repository,
                      {"number": 7, "head_sha": HEAD}, {"index": index, "count": count})  # fmt: skip
        data.cells = [Cell.from_dict(cell) for cell in draw(merge_cells(position))]
        shard = data.finalize().as_dict()
        other = draw(st.sets(st.sampled_from(sorted(OTHER_RUN)), max_size=2)) if draw(st.integers(0, 3)) == 0 else set()
        for name in other:
            OTHER_RUN[name](shard)
        changed.append(other)
        shards.append(shard)
    return count, indices, changed, shards


def _expected_exit(cells: list[dict[str, Any]]) -> int:
    if any(c["status"] == "tool_error" for c in cells):
        return 2
    return int(any(c["status"] == "fail" and c["regression"] != "pre-existing" for c in cells))


@FUZZ_SETTINGS
@given(drawn=shard_sets(), allow_partial=st.booleans())
def test_merge_takes_one_complete_run_or_says_why_not(tmp_path_factory, drawn, allow_partial):
    count, indices, changed, shards = drawn
    directory = tmp_path_factory.mktemp("merge")
    paths = []
    for position, shard in enumerate(shards):
        paths.append(directory / f"{position}.json")
        paths[-1].write_text(json.dumps(shard))
    args = ["merge", *map(str, paths), "--report-dir", str(directory / "out")] + ["--allow-partial"] * allow_partial
    result = CliRunner().invoke(main, args, env={"GITHUB_ACTIONS": "true"})
    crash = "".join(traceback.format_exception(*result.exc_info)) if result.exc_info else ""
    assert isinstance(result.exception, SystemExit | None), crash
    assert not [c for c in result.output if unicodedata.category(c) == "Cf"]
    differing = [name for name in OTHER_RUN if len({name in other for other in changed}) > 1]
    missing = sorted(set(range(1, count + 1)) - set(indices))
    if differing or len(set(indices)) < len(indices) or (missing and not allow_partial):
        (line,) = result.output.strip().splitlines()
        assert result.exit_code == 2 and line.startswith("error: ") and commands_in(line) == []
        if differing:
            assert f"the {differing[0]} differs" in line
        elif len(set(indices)) < len(indices):
            assert "given twice" in line
        else:
            assert "missing" in line and "--allow-partial" in line
        return
    start, *inside, end = commands_in(result.output)  # the table between its markers: nothing a runner runs
    assert start.startswith("::stop-commands::") and end == f"::{start.removeprefix('::stop-commands::')}::"
    assert inside == [] or all(line in result.output.split(start)[1].split(end)[0] for line in inside)
    merged = json.loads((directory / "out" / "report.json").read_text())
    verdict = (directory / "out" / "report.md").read_text().split("\n\n")[1]
    if missing:
        assert result.exit_code == 2 and merged["incomplete"]["missing"] == missing
        assert verdict.startswith("⚠️ **incomplete: ") and "✅" not in verdict
    else:
        assert result.exit_code == _expected_exit([c for s in shards for c in s["cells"]]), result.output
        assert "incomplete" not in merged and "incomplete" not in verdict


# ── Result-cache entries as a restored cache can hold them ──

CACHE_JOB = {"model_class": "LlamaModel", "backend": "onnx"}


@pytest.fixture(scope="module")
def cache_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cache")
    source = root / "site" / "transformers" / "modeling_llama.py"
    source.parent.mkdir(parents=True)
    source.write_text("# model\n")
    return root


def _fresh_cache(root: Path) -> tuple[ResultCache, Path]:
    """An empty cache holding one good entry for CACHE_JOB: the file to overwrite."""
    directory = root / "entries"
    shutil.rmtree(directory, ignore_errors=True)
    cache = ResultCache(directory, {"python": "3"}, {"checkout": None, "site": root / "site"})
    result = {
        "status": "fail",
        "error": "x",
        "timings": {"total": 1.0},
        "sources": ["site:transformers/modeling_llama.py"],
    }
    cache.put(CACHE_JOB, result)
    (path,) = (directory / cache.key(CACHE_JOB)).glob("*.json")
    return cache, path


@FUZZ_SETTINGS
@given(data=st.data())
def test_any_cache_entry_is_used_valid_or_dropped(cache_root, data):
    cache, path = _fresh_cache(cache_root)
    entry = json.loads(path.read_text())
    for _ in range(data.draw(st.integers(1, 3))):
        where = data.draw(st.sampled_from(["entry", "result", "sources"]))
        target = entry if where == "entry" else entry[where] if isinstance(entry.get(where), dict) else entry
        key = data.draw(st.sampled_from([*sorted(target), "impact", *CELL_KEYS]))
        target[key] = data.draw(json_value)
    text = data.draw(st.just(json.dumps(entry)) | st.text(max_size=50) | st.just("[" * 5000 + "]" * 5000))
    path.write_text(text)
    result = cache.get(CACHE_JOB)  # never raises
    if result is not None:
        cell = {key: result.get(key) for key in CELL_KEYS} | {"model_type": "t", "model_class": "C", "backend": "onnx"}
        cell |= {"timings": result.get("timings") or {}, "workarounds": result.get("workarounds") or []}
        assert validate_cell(cell) == [] and result["status"] in ("pass", "fail", "not_checked")
    cache.put(CACHE_JOB, {"status": "pass", "timings": {}, "sources": ["site:transformers/modeling_llama.py"]})
    assert cache.get(CACHE_JOB) is not None  # whatever was there, the cell's new result is kept and found
