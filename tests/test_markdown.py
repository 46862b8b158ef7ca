"""The markdown report: what a reviewer reads on the PR, rendered with a real CommonMark+tables parser."""

from __future__ import annotations

import html as html_module
import re
from typing import Any

import pytest
from markdown_it import MarkdownIt
from support import load_script

from hfexport.gate.cells import Cell, Frame
from hfexport.gate.escaping import line_url, repository_url, text_size
from hfexport.gate.markdown import MARKER, render_markdown
from hfexport.gate.report import Report
from hfexport.github import actions

HOSTILE = (
    "Evil<img src=x onerror=alert(1)>|@octocat `code` [link](https://evil.example) ![i](x.png) **b** $x$\n| a | b |"
)


def cell(model_class: str, backend: str, status: str = "pass", **extra: Any) -> dict[str, Any]:
    failed = status not in ("pass", "skipped")
    base = {
        "model_type": "llama",
        "model_class": model_class,
        "backend": backend,
        "status": status,
        "regression": "new" if failed else None,
        "stage": f"{backend} · stage 4 ONNX translations" if failed else None,
        "error_type": "RuntimeError" if failed else None,
        "error": "aten::foo has no lowering" if failed else None,
        "max_abs_diff": None if failed else 1.5e-6,
        "max_rel_diff": None if failed else 2e-5,
        "tolerance": 1e-4,
        "timings": {"export": 1.0, "run": 0.1, "total": 1.2},
        "workarounds": [],
        "skip_reason": None,
        "source": {"file": "src/transformers/models/llama/modeling_llama.py", "line": 10},
        "generation": None,
    }
    return base | extra


def report(cells: list[dict[str, Any]], backends: tuple[str, ...] = ("dynamo", "onnx", "executorch")) -> dict[str, Any]:
    """A schema-1 report (no tool_error / not_checked counts), as a foreign report file holds it."""
    failed = [c for c in cells if c["status"] not in ("pass", "skipped")]
    return {
        "schema": "hfexport-report",
        "schema_version": 1,
        "hfexport_version": "0.1.0",
        "created_at": "2026-01-01T00:00:00Z",
        "engine": "hfexport",
        "repository": {"root": "/repo", "base": "b" * 40, "head": "a" * 40},
        "pr": {"number": 7, "head_sha": "a" * 40},
        "backends": list(backends),
        "selection": {"mode": "diff", "model_types": ["llama"], "representative": False, "reason": "llama changed"},
        "shard": {"index": 1, "count": 1},
        "cells": cells,
        "summary": {
            "total": len(cells),
            "passed": sum(c["status"] == "pass" for c in cells),
            "failed": len(failed),
            "new_failures": sum(c["regression"] == "new" for c in failed),
            "pre_existing": sum(c["regression"] == "pre-existing" for c in failed),
            "fixed": sum(c["regression"] == "fixed" for c in cells),
            "skipped": sum(c["status"] == "skipped" for c in cells),
        },
        "exit_code": 1 if any(c["regression"] == "new" for c in failed) else 0,
    }


def render(data: dict[str, Any], **options: Any) -> str:
    """The comment of a report file's JSON, typed as ``load_report`` types it."""
    return render_markdown(Report.from_dict(data), **options)


def html(markdown: str) -> str:
    return MarkdownIt("commonmark").enable("table").enable("strikethrough").render(markdown)


def table_rows(rendered: str) -> list[list[str]]:
    body = rendered.split("<tbody>")[1].split("</tbody>")[0]
    return [re.findall(r"<td>(.*?)</td>", row, re.S) for row in re.findall(r"<tr>(.*?)</tr>", body, re.S)]


def test_every_cell_state_has_its_icon_and_facts():
    text = render(
        report(
            [
                cell("LlamaModel", "dynamo"),
                cell("LlamaModel", "onnx", "crash"),
                cell("LlamaModel", "executorch", "fail", regression="pre-existing"),
                cell("LlamaForCausalLM", "dynamo", regression="fixed"),
                cell("LlamaForCausalLM", "onnx", "skipped", skip_reason="data-dependent loop in the router"),
            ]
        )
    )
    assert text.startswith(MARKER + "\n")
    assert "❌ **1 new export failure, 1 cause:** crash in stage 4 ONNX translations\n" in text
    # Only the counts that are not zero.
    assert "5 checks: 2 passed, 2 failed (1 new, 1 pre-existing), 1 fixed, 1 skipped · on dynamo" in text
    rows = {r[0]: r[1:] for r in table_rows(html(text))}
    assert rows["LlamaModel"] == ["✅", "❌ crash ①", "⚠️ pre-existing ②"]  # each failure names its cause
    assert rows["LlamaForCausalLM"] == ["🔧 fixed", "⏭️ skipped", "—"]
    assert list(rows) == ["LlamaModel", "LlamaForCausalLM"]  # rows with a new failure come first
    assert "<details open><summary>❌ ① crash in stage 4 ONNX translations · 1 check</summary>" in text
    assert (
        "<details open><summary>⚠️ ② no translation in stage 4 ONNX translations · 1 check · pre-existing</summary>"
        in text
    )
    # Internals stay out of the comment: diffs, timings, workaround names.
    assert "1.5e-06" not in text and "Where the time went" not in text


def test_hostile_text_renders_inert_and_keeps_the_table_shape():
    hostile = cell(HOSTILE, "onnx", "crash", error=HOSTILE, error_type="Error`|", stage="onnx · stage 1 <b>@x</b>")
    text = render(report([cell(HOSTILE, "dynamo"), hostile, cell(HOSTILE, "executorch", "skipped")]))
    rendered = html(text)
    for tag in ("<img", "<a ", "<script", "<em", "<code", "<del", "<b>"):
        assert tag not in rendered, tag
    # Bold is hfexport's own words only: the verdict and the cause section's labels.
    strong = re.findall(r"<strong>(.*?)</strong>", rendered)
    assert strong == ["1 new export failure, 1 cause:", "Error:", "Breaks 1 check:"], strong
    assert not re.search(r"@octocat|@x", rendered), "a mention would ping"
    rows = table_rows(rendered)
    assert len(rows) == 1 and len(rows[0]) == 4, "a | or newline in a name split the row"
    # The reader still sees the original characters.
    assert "Evil&lt;img src=x onerror=alert(1)&gt;|@\u200boctocat `code` [link](https:\u200b//evil.example)" in rendered
    summary = re.search(r"<summary>(.*?)</summary>", text).group(1)
    assert "<" not in summary.replace("&lt;", "") and "@\u200b" in summary


def test_bidi_and_control_characters_are_removed():
    text = render(report([cell("Llama\u202eledoM\x1b[31m", "dynamo")]))
    assert "\u202e" not in text and "\x1b" not in text


@pytest.mark.parametrize("icon_heavy", [False, True])
def test_oversized_report_is_cut_under_the_limit_keeping_marker_and_summary(icon_heavy):
    status = "pass" if icon_heavy else "crash"
    extra = {"regression": "fixed"} if icon_heavy else {"error": "x" * 2000}
    cells = [cell(f"Model{i:04d}ForCausalLM", b, status, **extra) for i in range(2000) for b in ("dynamo", "onnx")]
    text = render(report(cells, ("dynamo", "onnx")), max_chars=65000, details_url="https://github.com/a/b/runs/1")
    assert text_size(text) <= 65000 and len(text) <= 65000
    assert text.startswith(MARKER)
    assert "4000 checks: " in text
    assert "left out to stay under GitHub's size limit" in text
    assert "[the job summary](https://github.com/a/b/runs/1)" in text
    assert "| Model0000ForCausalLM |" in text  # the table keeps its first rows
    assert "<details>" not in text or "</details>" in text.split("<details>")[-1]  # never a cut section


def test_sections_go_before_rows():
    cells = [cell(f"M{i}", "onnx", "crash", error=f"{i} " + "e" * 1500) for i in range(30)]
    full = render(report(cells, ("onnx",)), max_chars=1_000_000)
    cut = render(report(cells, ("onnx",)), max_chars=len(full) - 1)
    assert cut.count("<details>") < full.count("<details>") and cut.count("| M") == 30
    assert "1 detail section left out" in cut or "detail sections left out" in cut


def test_unsafe_details_url_is_not_linked():
    # Distinct errors: one detail section per cell (the same error would be one cause, one section).
    cells = [cell(f"M{i}", "onnx", "crash", error=f"{i} " + "e" * 1500) for i in range(60)]
    text = render(report(cells, ("onnx",)), max_chars=20000, details_url="javascript:alert(1)")
    assert "javascript" not in text and "job's `report.md`" in text


def test_summary_verdicts():
    assert "✅ **every export passed**" in render(report([cell("A", "onnx")]))
    old = render(report([cell("A", "onnx", "fail", regression="pre-existing")]))
    assert "✅ **no new export failures** (1 pre-existing)" in old
    # A failure with no base to compare against (pre-commit) is a failure, not "no new failures".
    verdict = "❌ **1 export failure, 1 cause:** no translation in stage 4 ONNX translations"
    assert verdict in render(report([cell("A", "onnx", "fail", regression=None)]))


def test_max_chars_below_the_minimum_is_refused():
    with pytest.raises(ValueError, match="at least"):
        render(report([]), max_chars=100)


def test_tool_errors_and_classes_not_checked_are_shown_apart():
    from hfexport.gate import report as gate_report
    from hfexport.gate import schema as gate_schema
    from hfexport.gate import views as gate_views

    frame = Frame("hfexport/exporters/exporter_dynamo.py", 262, "_is_walkable_object", "from transformers import …")
    cells = [
        Cell("llama", "LlamaModel", "dynamo", status="pass", max_abs_diff=1e-6),
        Cell(
            "llama", "LlamaForCausalLM", "dynamo", status="tool_error", stage="dynamo · stage 2 model patches",
            error_type="ImportError", error="cannot import name 'DummyLayer'", frame=frame,
            disabled={"transformers.cache_utils.DummyLayer": "placeholder cache layers"},
        ),
        Cell(
            "llama", "LlamaForTokenClassification", "dynamo", status="not_checked", stage="eager",
            error_type="ValueError", error="Cannot handle batch sizes > 1 if no padding token is defined.",
        ),
    ]  # fmt: skip
    data = gate_report.new_report(
        "hfexport", ["dynamo"], {"mode": "models", "model_types": [], "representative": False}, {}
    )
    data.cells = cells
    data = data.finalize()
    assert gate_schema.validate_report(data.as_dict()) == []
    assert data.exit_code == 2 and data.summary["tool_errors"] == 1 and data.summary["not_checked"] == 1
    assert data.summary["failed"] == 0 and data.summary["new_failures"] == 0
    text = render_markdown(data)
    assert "💥 **hfexport itself failed in 1 check**" in text
    assert "3 checks: 1 passed, 1 tool error, 1 not checked · on dynamo" in text
    rows = {r[0]: r[1:] for r in table_rows(html(text))}
    assert list(rows) == ["LlamaForCausalLM", "LlamaForTokenClassification"]  # a tool error comes first
    assert rows == {"LlamaForCausalLM": ["💥 tool error ①"], "LlamaForTokenClassification": ["❔ not checked"]}
    assert "✅ 1 class passes on every backend: LlamaModel" in text and "1 not checked (llama)" in text
    assert "hfexport itself failed in stage 2 model patches; the job log names its code" in text
    assert "hfexport/" not in text  # hfexport's own code is the job log's, never the reviewer's
    assert "Off in this transformers (internals it lacks): transformers.cache\\_utils.DummyLayer" in text
    summary = render_markdown(data, internals=True)
    assert "hfexport frame: hfexport/exporters/exporter\\_dynamo.py:262 in \\_is\\_walkable\\_object" in summary
    assert "| LlamaModel | ✅ |" in summary  # the job summary keeps every row
    terminal = gate_views.terminal_table(data)
    assert "tool error · stage 2 model patches" in terminal and "not checked" in terminal
    assert "(at hfexport/exporters/exporter_dynamo.py:262 in _is_walkable_object)" in terminal
    junit = gate_views.junit_xml(data)
    assert 'type="hfexport tool error"' in junit and 'message="not checked · eager: ValueError' in junit
    annotations = actions.annotation_commands(gate_views.github_annotations(data))
    assert [a.split(" ", 1)[0] for a in annotations] == ["::error", "::notice"]


# What GitHub turns into a link, a ping or a cross-reference in a comment's text (after markdown is rendered).
LIVE = re.compile(
    r"(?i:\b(?:https?|ftp)://)|(?i:(?<![\w.])www\.)|(?<![\w`])@[A-Za-z0-9]|(?<![\w&])#\d|(?i:\bGH-\d)"
    r"|[\w.-]+/[\w.-]+#\d|[\w.+-]+@[\w-]+\.\w"
)


def live_links(markdown: str) -> list[str]:
    """Every live link, mention or reference in a body: HTML anchors and images, and autolinks in the text."""
    rendered = html(markdown)
    found = re.findall(r"<(?:a|img)\b[^>]*>", rendered)
    # GitHub links, pings and references nothing inside code (a code block shows the broken line as it is).
    text = re.sub(r"<[^>]+>", " ", re.sub(r"<code\b[^>]*>.*?</code>", " ", rendered, flags=re.S))
    return found + [m.group(0) for m in LIVE.finditer(html_module.unescape(text))]


AUTOLINKED = (
    "see https://evil.example/x, www.evil.example, GH-1, acme/other#12, #3, @team, mail me@evil.example, "
    "escaped \\[link\\]\\(https://evil.example\\), ftp://evil.example"
)


def test_links_mentions_and_references_are_not_live():
    hostile = cell("Model https://evil.example", "onnx", "crash", error=AUTOLINKED, stage=f"onnx · {AUTOLINKED}")
    text = render(report([hostile, cell("www.evil.example GH-2", "dynamo")], ("dynamo", "onnx")))
    assert live_links(text) == []
    # What the reader sees is still the text, with a zero-width space where a link would start.
    assert "https:\u200b//evil.example" in html(text) and "GH-\u200b1" in html(text) and "www\u200b.evil" in html(text)
    assert live_links("see https://evil.example and GH-1") != []  # the checker sees them when they are there


def test_rendering_is_linear_in_cells_and_backends(monkeypatch: pytest.MonkeyPatch):
    # Each cell alone in its row and its column: rows x columns grew with the square of the cells. Counted, not timed:
    # the table slots and cells the renderer builds, which a quadratic renderer multiplies by 16 for 4x the cells.
    import hfexport.gate.markdown as markdown

    built = {"slots": 0, "cells": 0}
    table_rows, render_cell = markdown._table_rows, markdown.render_cell

    def counted_rows(backends: list[str], rows: list, numbers: dict) -> Any:
        for row in table_rows(backends, rows, numbers):
            built["slots"] += len(backends)
            yield row

    def counted_cell(one: Any, cause: int | None = None) -> str:
        built["cells"] += 1
        return render_cell(one, cause)

    monkeypatch.setattr(markdown, "_table_rows", counted_rows)
    monkeypatch.setattr(markdown, "render_cell", counted_cell)

    def hostile(count: int) -> dict[str, Any]:
        # Failures: a class that passes everywhere is one line, not a row.
        cells = [cell(f"C{i}", f"b{i}", "fail", error=f"e{i % 50}") for i in range(count)]
        return report(cells, tuple(f"b{i}" for i in range(count)))

    work = []
    for count in (2000, 8000):
        built.update(slots=0, cells=0)
        body = render(hostile(count))
        work.append(dict(built))
        assert text_size(body) <= 65000 and body.startswith(MARKER) and f"{count} checks" in body
    for kind in ("slots", "cells"):
        assert work[1][kind] <= 4 * work[0][kind] + 8000, work  # 4x the cells: about 4x the work, never 16x


# ── What a reviewer sees: GitHub's renderer (cmark-gfm, scripts/render_comment.py) ──

LLAMA_FILE = "src/transformers/models/llama/modeling_llama.py"
SERVER_REPO = ("https://github.com", "huggingface/transformers")


def github_html(markdown: str) -> str:
    return load_script("render_comment").to_html(markdown)


def broken_at(model_class: str, backend: str, text: str, file: str = LLAMA_FILE, **extra: Any) -> dict[str, Any]:
    frame = {"file": file, "line": 62, "function": "LlamaRMSNorm.forward", "text": text, "workaround": None}
    error = "Could not guard on data-dependent expression u0 > 1 (unhinted: u0 > 1).  (Size-like symbols: none)"
    fields = {"stage": "dynamo · torch.export trace", "error_type": "GuardOnDataDependentSymNode", "error": error}
    return cell(model_class, backend, "fail", frame=frame, **(fields | extra))


def test_the_grid_names_the_cause_and_the_section_shows_the_line_as_code_with_its_link():
    cells = [
        broken_at(c, b, "if hidden_states.sum() > 1e30:") for c in ("A", "B") for b in ("dynamo", "onnx", "executorch")
    ]
    text = render(report(cells), repository=repository_url(*SERVER_REPO))
    page = github_html(text)
    verdict = page.split("</p>")[0]
    assert "6 new export failures, 1 cause:</strong> data-dependent at modeling_llama.py:62" in verdict
    widths = [len(re.sub(r"<[^>]+>", "", c)) for c in re.findall(r"<td>(.*?)</td>", page, re.S)]
    assert max(widths) <= 40, widths  # three backends fit a 900 px comment
    assert '<pre lang="python"><code>if hidden_states.sum() &gt; 1e30:\n</code></pre>' in page
    link = f"https://github.com/huggingface/transformers/blob/{'a' * 40}/{LLAMA_FILE}#L62"
    assert f'<a href="{link}"><code>{LLAMA_FILE}:62</code></a>' in page
    assert "<details open><summary>❌ ① data-dependent at modeling_llama.py:62 · 6 checks</summary>" in page
    assert "<code>torch._check(...)</code>" in page  # hfexport's own advice keeps its markdown
    assert "hfexport/" not in page


def test_a_broken_line_with_backticks_stays_one_code_block():
    line = "x = f'```{y}``` ````' + `z` # </code></pre><img src=x onerror=alert(1)> @octocat https://evil.example"
    page = github_html(render(report([broken_at("A", "onnx", line)], ("onnx",))))
    block = re.search(r'<pre lang="python"><code>(.*?)</code></pre>', page, re.S)
    assert block and html_module.unescape(block.group(1)) == line + "\n"
    assert (
        "<img" not in page.replace("&lt;img", "") and live_links(render(report([broken_at("A", "onnx", line)]))) == []
    )


@pytest.mark.parametrize(
    ("server", "repository", "sha", "path", "line"),
    [
        ("javascript:alert(1)//", "a/b", "a" * 40, LLAMA_FILE, 3),
        ("http://github.com", "a/b", "a" * 40, LLAMA_FILE, 3),  # https only
        ("https://github.com", "a/b/c", "a" * 40, LLAMA_FILE, 3),
        ("https://github.com", "../b", "a" * 40, LLAMA_FILE, 3),
        ("https://github.com", "a/b", "main", LLAMA_FILE, 3),  # a full commit, never a branch
        ("https://github.com", "a/b", "a" * 40, "src/../../x.py", 3),
        ("https://github.com", "a/b", "a" * 40, "src/x.py)[y](javascript:1", 3),
        ("https://github.com", "a/b", "a" * 40, "/etc/passwd", 3),
        ("https://github.com", "a/b", "a" * 40, LLAMA_FILE, 0),
    ],
)
def test_line_links_are_built_from_validated_parts_only(server, repository, sha, path, line):
    assert line_url(repository_url(server, repository), sha, path, line) is None
    assert line_url(repository_url(*SERVER_REPO), "b" * 40, LLAMA_FILE, 9) == (
        f"https://github.com/huggingface/transformers/blob/{'b' * 40}/{LLAMA_FILE}#L9"
    )


def test_a_hostile_path_is_shown_as_text_never_linked():
    path = "src/transformers/x.py)[y](javascript:alert(1)"
    page = github_html(
        render(report([broken_at("A", "onnx", "x", file=path)], ("onnx",)), repository=repository_url(*SERVER_REPO))
    )
    assert "<a " not in page and "javascript:alert(1)" in page  # the text is there, inert


def test_classes_not_checked_or_skipped_are_one_line_each():
    cells = [
        cell(f"C{i}", "onnx", "not_checked", error="no tiny model", model_type="bark" if i else "timm")
        for i in range(3)
    ]
    cells += [cell("S", "onnx", "skipped", skip_reason="loops", model_type="longformer")]
    text = render(report(cells, ("onnx",)))
    assert "3 not checked (bark ×2, timm) · 1 skipped (longformer)" in text  # noqa: RUF001
    assert "<details" not in text  # neither is a cause
