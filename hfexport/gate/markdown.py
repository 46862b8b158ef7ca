"""Render a gate report as GitHub markdown: the PR comment, report.md and the job summary.

The report may come from an untrusted pull-request run, so every string taken from it goes through one escaper
here: no raw HTML, no links or images, no autolinked URLs or ``www.`` addresses, no ``@mention`` pings and no
``#123``, ``GH-123`` or ``owner/repo#123`` cross-references, nothing that breaks a table row.
The body always fits ``max_chars``: detail sections are dropped first, then table rows; the marker and the
summary line are always kept. Rendering is linear in the report: each piece is rendered and measured once.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from . import health
from .causes import Cause, group, hint
from .cells import NOT_A_RESULT, Cell, disabled_features
from .report import Report
from .shards import incomplete_note

MARKER = "<!-- hfexport-report -->"
TITLE = "### hfexport export report"
MIN_CHARS = 2000  # room for the marker, the summary, the table header and the truncation notes

# Characters CommonMark/GFM give a meaning to inline (emphasis, links, images, math, strikethrough).
_MD_PUNCTUATION = frozenset("\\*_[]()!~$^{}")
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "|": "&#124;", "`": "&#96;"}
# A zero-width space where GitHub would start a link makes the text inert and reads the same: after "@" or "#"
# ("@user" pings, "#12" and "owner/repo#12" cross-reference), after "GH-" before a number, between a scheme's ":" and
# "//" (plain URLs are autolinked, even after a backslash), and between "www" and "." (so are www. addresses).
_AUTOLINK = re.compile(r"(?<=[@#])(?=\w)|(?i:(?<=\bGH-)(?=\d))|(?<=:)(?=//)|(?i:(?<=\bwww)(?=\.))")
_SAFE_URL = re.compile(r"https?://[A-Za-z0-9._~:/?#@!$&'*+,;=%-]+")


def text_size(text: str) -> int:
    """Length in UTF-16 code units: never less than ``len``, so a body that fits here fits GitHub's count."""
    return len(text.encode("utf-16-le")) // 2


def _plain(value: Any, limit: int) -> str:
    """One line of untrusted text cut to ``limit`` characters: control characters made spaces, format characters
    (Cf: bidi controls, zero-width and invisible characters, tags) dropped, as no reader sees them. The escapers'
    zero-width spaces are inserted after this."""
    text = ("" if value is None else str(value))[: 8 * limit + 1000]  # more than remains after collapsing spaces
    kinds = ((c, unicodedata.category(c)) for c in text)
    chars = (" " if kind == "Cc" else c for c, kind in kinds if kind != "Cf")
    text = " ".join("".join(chars).split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _inert(value: Any, limit: int) -> str:
    """One line of untrusted text with every place GitHub would start a link, ping or reference broken."""
    return _AUTOLINK.sub("\u200b", _plain(value, limit))


def escape_inline(value: Any, limit: int = 300) -> str:
    """Untrusted text for a markdown context (table cell, list item): rendered as the literal characters."""
    out = []
    for char in _inert(value, limit):
        if char in _ENTITIES:
            out.append(_ENTITIES[char])
        elif char in _MD_PUNCTUATION:
            out.append("\\" + char)
        else:
            out.append(char)
    return "".join(out)


def escape_html(value: Any, limit: int = 300) -> str:
    """Untrusted text inside an HTML block (``<summary>``), where markdown is not parsed but entities are."""
    return "".join(_ENTITIES.get(c, c) for c in _inert(value, limit))


def _diff(value: Any) -> str:
    return f"{value:.1e}" if isinstance(value, int | float) and not isinstance(value, bool) else "n/a"


def _icon(cell: Cell) -> str:
    if cell.status == "skipped":
        return "⏭️"
    if cell.status == "tool_error":
        return "💥"
    if cell.status == "not_checked":
        return "❔"
    if cell.status == "not_run":
        return "⏸️"
    if cell.regression == "fixed":
        return "🔧"
    if cell.failed:
        return "⚠️" if cell.pre_existing else "❌"
    return "✅"


def _generation_note(cell: Cell) -> str:
    if cell.generation and cell.generation.status == "fail":
        return " · generation ❌"
    return ""


def render_cell(cell: Cell) -> str:
    """One table cell: icon, then the max diff, or failure kind, stage and first error line, or the skip reason."""
    icon = _icon(cell)
    if cell.status == "skipped":
        return f"{icon} skipped: {escape_inline(cell.skip_reason or 'no reason given', 120)}"
    if cell.status in NOT_A_RESULT or cell.failed:
        kind = "hfexport tool error" if cell.status == "tool_error" else cell.kind()
        parts = [f"{icon} {escape_inline(kind, 40)}", escape_inline(cell.step, 60), escape_inline(cell.error_line, 140)]
        return " · ".join(p for p in parts if p) + ("" if cell.status in NOT_A_RESULT else _generation_note(cell))
    fixed = " fixed ·" if cell.regression == "fixed" else ""
    return f"{icon}{fixed} {_diff(cell.max_abs_diff)}{_generation_note(cell)}"


def _counts(report: Report) -> dict[str, int]:
    summary = report.summary
    keys = (
        "total",
        "passed",
        "failed",
        "new_failures",
        "pre_existing",
        "fixed",
        "skipped",
        "tool_errors",
        "not_checked",
        "not_run",
    )
    return {key: int(summary.get(key) or 0) for key in keys}


def summary_line(report: Report) -> str:
    """The verdict first, then the counts, then what was checked."""
    n = _counts(report)
    if n["tool_errors"]:
        verdict = (
            f"💥 **hfexport itself failed in {n['tool_errors']} check{'s' if n['tool_errors'] != 1 else ''}** "
            "(tool errors: the gate is broken there, not the model)"
        )
    elif n["new_failures"]:
        verdict = f"❌ **{n['new_failures']} new export failure{'s' if n['new_failures'] != 1 else ''}**"
    elif n["failed"] and n["pre_existing"] < n["failed"]:
        verdict = f"❌ **{n['failed']} export failure{'s' if n['failed'] != 1 else ''}**"
    elif n["not_run"]:
        verdict = f"⏸️ **{n['not_run']} check{'s' if n['not_run'] != 1 else ''} not run within the time budget**"
    elif n["failed"]:
        verdict = f"✅ **no new export failures** ({n['pre_existing']} pre-existing)"
    else:
        verdict = "✅ **every export passed**"
    if note := incomplete_note(report):  # the missing shards' cells are unknown: never a pass
        verdict = f"⚠️ **{note}**" + ("" if verdict.startswith("✅") else f" · {verdict}")
    counts = (
        f"{n['total']} checks: {n['passed']} passed, {n['failed']} failed "
        f"({n['new_failures']} new, {n['pre_existing']} pre-existing), {n['fixed']} fixed, {n['skipped']} skipped, "
        f"{n['tool_errors']} tool errors, {n['not_checked']} not checked"
    ) + (f", {n['not_run']} not run (budget)" if n["not_run"] else "")
    backends = ", ".join(escape_inline(b, 30) for b in report.backends)
    parts = [verdict, counts, f"backends: {backends}"]
    if report.selection.get("reason"):
        parts.append(f"selected: {escape_inline(report.selection['reason'], 200)}")
    head = report.head_sha
    if head:
        parts.append(f"head {escape_inline(str(head)[:10])}")
    return " · ".join(parts)


def _rows(report: Report) -> tuple[list[str], list[tuple[str, dict[str, Cell]]]]:
    """Backends (columns) and, per model class, its cells by backend; rows with new failures first."""
    backends = dict.fromkeys(report.backends)  # ordered, and a set for lookups
    by_class: dict[str, dict[str, Cell]] = {}
    for cell in report.cells:
        backends.setdefault(cell.backend)
        by_class.setdefault(cell.model_class, {})[cell.backend] = cell

    def rank(item: tuple[str, dict[str, Cell]]) -> tuple[int, str]:
        cells = item[1].values()
        if any(c.status == "tool_error" or c.new_failure for c in cells):
            return 0, item[0]
        if any(c.failed for c in cells):
            return 1, item[0]
        return 2, item[0]

    return list(backends), sorted(by_class.items(), key=rank)


def _header(backends: list[str]) -> str:
    header = "| model class | " + " | ".join(escape_inline(b, 30) for b in backends) + " |\n"
    return header + "|---" * (len(backends) + 1) + "|"


def _table_rows(backends: list[str], rows: list[tuple[str, dict[str, Cell]]]) -> Iterator[str]:
    for model_class, cells in rows:
        rendered = [render_cell(cells[b]) if b in cells else "—" for b in backends]
        yield f"| {escape_inline(model_class, 100)} | " + " | ".join(rendered) + " |"


def _within(pieces: Iterable[str], budget: int) -> list[str]:
    """The pieces, rendered in order until together they pass ``budget``: no later one could fit in the body."""
    kept, total = [], 0
    for piece in pieces:
        kept.append(piece)
        total += text_size(piece)
        if total > budget:
            break
    return kept


def _cause_details(cause: Cause) -> str:
    """One detail block per cause: where and how it broke, what to do, and every cell it breaks."""
    cell, count = cause.cell, len(cause.cells)
    named = f"{cell.model_class} · {cell.backend}" + (f" and {count - 1} more" if count > 1 else "")
    at = f" · at {cause.where}" if cell.model_location else ""
    title = escape_html(f"{named} · {cell.status}{at}", 300)
    items = [
        f"- stage: {escape_inline(cell.stage or 'unknown', 200)}",
        f"- error: {escape_inline(cell.error_line or 'no message', 2000)}",
    ]
    advice = hint(cell)
    if advice:
        items.append(f"- what to do: {escape_inline(advice, 1000)}")
    if cell.regression:
        items.append(f"- regression: {escape_inline(cell.regression, 20)}")
    source = cell.source
    if source and source.file:
        line = f":{source.line}" if source.line is not None else ""
        items.append(f"- source: {escape_inline(source.file + line, 300)}")
    if cell.workarounds:
        items.append(f"- workarounds applied: {escape_inline(', '.join(map(str, cell.workarounds)), 1000)}")
    if cell.generation and cell.generation.detail:
        items.append(f"- generation: {escape_inline(cell.generation.detail, 1000)}")
    items += _frame_items(cell)
    if count > 1:
        items.append(f"- breaks {count} checks: {escape_inline(cause.broken, 1500)}")
    return f"<details><summary>{_icon(cell)} {title}</summary>\n\n" + "\n".join(items) + "\n\n</details>"


def _frame_items(cell: Cell) -> list[str]:
    """Where it broke (hfexport's frame for a tool error), and the transformers internals this checkout lacks."""
    items = []
    frame = cell.frame
    if frame and frame.file:
        owner = "hfexport code" if cell.status == "tool_error" else "where"
        line = f":{frame.line}" if frame.line is not None else ""
        where = f"{frame.file}{line} in {frame.function or '?'}"
        if frame.workaround:
            where += f" (workaround {frame.workaround})"
        items.append(f"- {owner}: {escape_inline(where, 300)}")
        if frame.text:
            items.append(f"- line: {escape_inline(frame.text, 300)}")
    disabled = cell.disabled
    if disabled:
        names = ", ".join(f"{name} ({feature})" for name, feature in disabled.items())
        items.append(f"- off in this transformers: {escape_inline(names, 1000)}")
    return items


def _disabled_note(report: Report) -> str:
    disabled = disabled_features(report.cells)
    if not disabled:
        return ""
    names = "; ".join(f"{name}: {feature}" for name, feature in disabled.items())
    return f"Off in this transformers (internals it lacks): {escape_inline(names, 1000)}\n\n"


def _timing(cell: Cell) -> str:
    return f"{cell.seconds:.1f}s" if cell.seconds is not None else "n/a"


def _passing_details(cells: Iterable[Cell]) -> str:
    rows = [
        f"| {escape_inline(c.model_class, 100)} | {escape_inline(c.backend, 30)} "
        f"| {_diff(c.max_abs_diff)} | {_diff(c.max_rel_diff)} | {_diff(c.tolerance)} "
        f"| {_timing(c)} | {escape_inline(', '.join(map(str, c.workarounds or [])) or '—', 300)} |"
        for c in cells
    ]
    header = "| model class | backend | max abs diff | max rel diff | tolerance | time | workarounds |\n" + "|---" * 7
    header += "|"
    summary = "<details><summary>Passing checks: diffs, timings, workarounds</summary>"
    return f"{summary}\n\n{header}\n" + "\n".join(rows) + "\n\n</details>"


def _timing_details(cells: list[Cell], backends: list[str]) -> str | None:
    """Where the time went: seconds per step (the export's own steps under it) summed over each backend's cells."""
    totals: dict[str, dict[str, float]] = {}
    for cell in cells:
        if cell.cached:
            continue  # its time was spent in an earlier run
        for step, seconds in (cell.timings or {}).items():
            if isinstance(seconds, int | float) and not isinstance(seconds, bool) and math.isfinite(seconds):
                row = totals.setdefault(str(step), {})
                row[cell.backend] = row.get(cell.backend, 0.0) + seconds
    if not totals:
        return None
    # The 40 steps that took longest (a report can name any number of them), then in reading order.
    kept = sorted(totals, key=lambda step: -sum(totals[step].values()))[:40]
    order = sorted(kept, key=lambda step: (step == "total", step.split(" · ")[0], step))
    header = "| step | " + " | ".join(escape_inline(b, 30) for b in backends) + " |\n" + "|---" * (len(backends) + 1)
    rows = [
        f"| {escape_inline(step.replace('export · ', '↳ '), 60)} | "
        + " | ".join(f"{totals[step].get(b, 0.0):.1f}" for b in backends)
        + " |"
        for step in order
    ]
    summary = "<details><summary>Where the time went (seconds, summed over each backend's checks)</summary>"
    return f"{summary}\n\n{header}|\n" + "\n".join(rows) + "\n\n</details>"


def _footer(report: Report) -> str:
    version = escape_inline(report.hfexport_version or "unknown", 30)
    return f"<sub>hfexport {version} · schema {escape_inline(report.schema_version, 5)}</sub>"


def _omitted_note(sections: int, rows: int, details_url: str | None) -> str:
    left_out = []
    if rows:
        left_out.append(f"{rows} table row{'s' if rows != 1 else ''}")
    if sections:
        left_out.append(f"{sections} detail section{'s' if sections != 1 else ''}")
    where = "the full report is in the job's `report.md` and JSON artifact"
    if details_url and _SAFE_URL.fullmatch(details_url):
        where = f"the full report is in [the job summary]({details_url})"
    return f"_{' and '.join(left_out)} left out to stay under GitHub's size limit; {where}._"


def render_markdown(report: Report, max_chars: int = 65000, details_url: str | None = None) -> str:
    """The whole markdown report, at most ``max_chars`` (UTF-16 units), starting with :data:`MARKER`."""
    if max_chars < MIN_CHARS:
        raise ValueError(f"max_chars must be at least {MIN_CHARS}, got {max_chars}")
    backends, rows = _rows(report)
    cells = [c for _, by_backend in rows for c in by_backend.values()]
    causes = group(cells)
    passing = [c for c in cells if c.status == "pass"]
    timing = _timing_details(cells, backends)
    section_count = len(causes) + bool(passing) + bool(timing)
    # Only what can fit is rendered: cost follows the report's size and max_chars, never rows x backends x retries.
    table_rows = _within(_table_rows(backends, rows), max_chars)
    every_row = len(table_rows) == len(rows)
    sections = _within(map(_cause_details, causes), max_chars) if every_row else []
    if every_row and passing and len(sections) == len(causes):
        sections.append(_passing_details(passing))
    if every_row and timing and len(sections) == len(causes) + bool(passing):
        sections.append(timing)
    top = f"{MARKER}\n{TITLE}\n\n{summary_line(report)}\n\n{_disabled_note(report)}{_header(backends)}"
    footer = "\n\n".join(filter(None, [health.section(report.cells, escape_inline), _footer(report)]))

    def note_for(rows_kept: int, sections_kept: int) -> str:
        left_out = (section_count - sections_kept, len(rows) - rows_kept)
        return _omitted_note(*left_out, details_url) if any(left_out) else ""

    def render(rows_kept: int, sections_kept: int) -> str:
        note = note_for(rows_kept, sections_kept)
        parts = [top + "".join("\n" + r for r in table_rows[:rows_kept]), *sections[:sections_kept]]
        return "\n\n".join([*parts, *([note] if note else []), footer]) + "\n"

    # Sizes measured once; a candidate's size is a sum of them, so choosing what fits is linear, not a re-render.
    row_ends = _running_sums(1 + text_size(r) for r in table_rows)
    section_ends = _running_sums(2 + text_size(section) for section in sections)

    def size(rows_kept: int, sections_kept: int) -> int:
        note = note_for(rows_kept, sections_kept)
        fixed = text_size(top) + 2 + text_size(footer) + 1 + (2 + text_size(note) if note else 0)
        return fixed + row_ends[rows_kept] + section_ends[sections_kept]

    # Detail sections go first (the passing one, then later failures), then table rows from the bottom.
    if every_row:
        sections_kept = _most_that_fit(len(sections), lambda n: size(len(rows), n) <= max_chars)
        if sections_kept >= 0:
            return render(len(rows), sections_kept)
    rows_kept = _most_that_fit(len(table_rows), lambda n: size(n, 0) <= max_chars)
    if rows_kept >= 0:
        return render(rows_kept, 0)
    # Not even the summary fits: cut its end (the marker comes first, so it stays).
    text = render(0, 0)
    while text_size(text) > max_chars - 2:
        text = text[: max_chars - 2 - text_size(text)]
    return text + "…\n"


def _running_sums(sizes: Iterable[int]) -> list[int]:
    """``[0, a, a + b, …]``: the size of the first n pieces is ``sums[n]``."""
    sums = [0]
    for value in sizes:
        sums.append(sums[-1] + value)
    return sums


def _most_that_fit(count: int, fits: Callable[[int], bool]) -> int:
    """The largest n <= count that fits, or -1 when not even n = 0 does (sizes grow with n)."""
    low, high = -1, count
    while low < high:
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    return low
