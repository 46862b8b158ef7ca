"""The markdown report: what a reviewer reads on the PR, rendered with a real CommonMark+tables parser."""

from __future__ import annotations

import re
from typing import Any

import pytest
from markdown_it import MarkdownIt

from hfexport.gate.cells import Cell, Frame
from hfexport.gate.markdown import MARKER, render_markdown, text_size
from hfexport.gate.report import Report

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
    assert "❌ **1 new export failure**" in text
    rows = {r[0]: r[1:] for r in table_rows(html(text))}
    assert rows["LlamaModel"][0] == "✅ 1.5e-06"
    assert rows["LlamaModel"][1] == "❌ crash · stage 4 ONNX translations · RuntimeError: aten::foo has no lowering"
    assert rows["LlamaModel"][2].startswith("⚠️ pre-existing fail · ")
    assert rows["LlamaForCausalLM"] == ["🔧 fixed · 1.5e-06", "⏭️ skipped: data-dependent loop in the router", "—"]
    assert list(rows) == ["LlamaModel", "LlamaForCausalLM"]  # rows with a new failure come first
    assert "<details><summary>❌ LlamaModel · onnx · crash</summary>" in text


def test_hostile_text_renders_inert_and_keeps_the_table_shape():
    hostile = cell(HOSTILE, "onnx", "crash", error=HOSTILE, error_type="Error`|", stage="onnx · stage 1 <b>@x</b>")
    text = render(report([cell(HOSTILE, "dynamo"), hostile, cell(HOSTILE, "executorch", "skipped")]))
    rendered = html(text)
    for tag in ("<img", "<a ", "<script", "<em", "<code", "<del", "<b>"):
        assert tag not in rendered, tag
    assert rendered.count("<strong>") == 1  # the verdict's own bold only
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
    cells = [cell(f"Model{i:04d}ForCausalLM", b, status, **extra) for i in range(700) for b in ("dynamo", "onnx")]
    text = render(report(cells, ("dynamo", "onnx")), max_chars=65000, details_url="https://github.com/a/b/runs/1")
    assert text_size(text) <= 65000 and len(text) <= 65000
    assert text.startswith(MARKER)
    assert "1400 checks: " in text
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
    assert "❌ **1 export failure**" in render(report([cell("A", "onnx", "fail", regression=None)]))


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
    assert "1 tool errors, 1 not checked" in text
    rows = {r[0]: r[1:] for r in table_rows(html(text))}
    assert next(iter(rows)) == "LlamaForCausalLM"  # a tool error comes first
    assert rows["LlamaForCausalLM"][0].startswith("💥 hfexport tool error · stage 2 model patches · ImportError")
    assert rows["LlamaForTokenClassification"][0].startswith("❔ not checked · eager · ValueError")
    assert "hfexport code: hfexport/exporters/exporter\\_dynamo.py:262 in \\_is\\_walkable\\_object" in text
    assert "off in this transformers: transformers.cache\\_utils.DummyLayer" in text
    terminal = gate_views.terminal_table(data)
    assert "TOOL ERROR stage 2 model patches" in terminal and "not checked" in terminal
    assert "(at hfexport/exporters/exporter_dynamo.py:262 in _is_walkable_object)" in terminal
    junit = gate_views.junit_xml(data)
    assert 'type="hfexport tool error"' in junit and "not checked:" in junit
    annotations = gate_views.github_annotations(data)
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
    text = re.sub(r"<[^>]+>", " ", rendered)
    import html as html_module

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

    def counted_rows(backends: list[str], rows: list) -> Any:
        for row in table_rows(backends, rows):
            built["slots"] += len(backends)
            yield row

    def counted_cell(one: Any) -> str:
        built["cells"] += 1
        return render_cell(one)

    monkeypatch.setattr(markdown, "_table_rows", counted_rows)
    monkeypatch.setattr(markdown, "render_cell", counted_cell)

    def hostile(count: int) -> dict[str, Any]:
        return report([cell(f"C{i}", f"b{i}") for i in range(count)], tuple(f"b{i}" for i in range(count)))

    work = []
    for count in (2000, 8000):
        built.update(slots=0, cells=0)
        body = render(hostile(count))
        work.append(dict(built))
        assert text_size(body) <= 65000 and body.startswith(MARKER) and f"{count} checks" in body
    for kind in ("slots", "cells"):
        assert work[1][kind] <= 4 * work[0][kind] + 8000, work  # 4x the cells: about 4x the work, never 16x
