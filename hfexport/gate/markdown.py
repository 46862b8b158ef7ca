"""Render a gate report as GitHub markdown: the PR comment, report.md and the job summary.

The report may come from an untrusted pull-request run, so every string taken from it goes through one escaper
(``escaping.py``): no raw HTML, no links or images, no autolinked URLs or ``www.`` addresses, no ``@mention`` pings
and no ``#123``, ``GH-123`` or ``owner/repo#123`` cross-references, nothing that breaks a table row.
The body always fits ``max_chars``: detail sections are dropped first, then table rows; the marker and the
summary line are always kept. Rendering is linear in the report: each piece is rendered and measured once.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from . import health
from .causes import Cause, failure_kind, group, hint
from .cells import Cell, FirstBadCommit, disabled_features
from .escaping import code_block, escape_html, escape_inline, line_url, text_size
from .report import Report, counted, counts_text
from .shards import incomplete_note

MARKER = "<!-- hfexport-report -->"
TITLE = "### hfexport export report"
MIN_CHARS = 2000  # room for the marker, the summary, the table header and the truncation notes
# GitHub's limit for one step's summary is 1 MiB; a UTF-16 unit is at most 3 bytes of UTF-8.
JOB_SUMMARY_CHARS = 340_000
# The selection reasons the summary names, with how many classes each one selected.
REASONS_SHOWN = 5

# A details link is kept only when it is a plain http(s) URL.
_SAFE_URL = re.compile(r"https?://[A-Za-z0-9._~:/?#@!$&'*+,;=%-]+")


def _diff(value: float | None) -> str:
    return f"{value:.1e}" if value is not None else "n/a"


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
    return "".join(f" · {label} ❌" for label, part in cell.generation_parts() if part.status == "fail")


def cause_mark(number: int) -> str:
    """A cause's number as the grid shows it: ① to ⑳, then (21)."""
    return chr(0x2460 + number - 1) if 1 <= number <= 20 else f"({number})"


def render_cell(cell: Cell, cause: int | None = None) -> str:
    """A status grid cell, at most about 40 visible characters: an icon, one or two words, the cause's number."""
    icon = _icon(cell)
    if cell.status == "pass":
        return f"{icon}{' fixed' if cell.regression == 'fixed' else ''}{_generation_note(cell)}"
    if cell.status == "skipped":
        return f"{icon} skipped"
    words = "pre-existing" if cell.pre_existing else failure_kind(cell)
    mark = f" {cause_mark(cause)}" if cause is not None else ""
    return f"{icon} {words}{mark}"


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _where(cause: Cause) -> str:
    """``modeling_llama.py:62`` (the model line, file name only) or the step it failed in, as plain text."""
    location = cause.cell.model_location
    if location:
        return f"{(location.file or '').rsplit('/', 1)[-1]}:{location.line}"
    return cause.cell.step or "an unknown step"


def _cause_phrase(cause: Cause) -> str:
    """The cause in a few words, for the verdict: ``data-dependent at `modeling_llama.py:62```."""
    preposition = "at" if cause.cell.model_location else "in"
    return f"{failure_kind(cause.cell)} {preposition} {escape_inline(_where(cause), 120)}"


def _verdict(n: dict[str, int], causes: list[Cause]) -> str:
    """The first sentence: what failed and its causes, by name; only the counts that are not zero."""
    failing = [c for c in causes if c.cell.failed and not c.cell.pre_existing]
    named = "; ".join(map(_cause_phrase, failing[:3])) + (f"; and {len(failing) - 3} more" if len(failing) > 3 else "")
    causes_said = f", {_plural(len(failing), 'cause')}:** {named}" if failing else "**"
    if n["tool_errors"]:
        also = f" · ❌ {_plural(n['new_failures'], 'new failure')}" if n["new_failures"] else ""
        return (
            f"💥 **hfexport itself failed in {_plural(n['tool_errors'], 'check')}** (a tool error: the gate is broken "
            f"there, not the model){also}"
        )
    if n["new_failures"]:
        return f"❌ **{_plural(n['new_failures'], 'new export failure')}{causes_said}"
    if n["failed"] and n["pre_existing"] < n["failed"]:
        return f"❌ **{_plural(n['failed'], 'export failure')}{causes_said}"
    if n["not_run"]:
        return f"⏸️ **{_plural(n['not_run'], 'check')} not run within the time budget**"
    if n["failed"]:
        return f"✅ **no new export failures** ({n['pre_existing']} pre-existing)"
    return "✅ **every export passed**"


def _counts_line(report: Report) -> str:
    """How many checks ended how (only the counts that are not zero), on which backends, at which commit."""
    parts = [counts_text(report.summary), "on " + ", ".join(escape_inline(b, 30) for b in report.backends)]
    if report.selection.get("reason"):
        parts.append(f"selected: {escape_inline(report.selection['reason'], 200)}")
    if report.head_sha:
        parts.append(f"head {escape_inline(str(report.head_sha)[:10])}")
    return " · ".join(parts)


def summary_line(report: Report, causes: list[Cause] | None = None) -> str:
    """The verdict naming the causes, then the counts that are not zero and what was checked."""
    n = counted(report.summary)
    verdict = _verdict(n, _causes(report.cells) if causes is None else causes)
    if note := incomplete_note(report):  # the missing shards' cells are unknown: never a pass
        verdict = f"⚠️ **{note}**" + ("" if verdict.startswith("✅") else f" · {verdict}")
    return f"{verdict}\n\n{_counts_line(report)}" + (f"\n\n{line}" if (line := _reasons_line(report)) else "")


def _reasons_line(report: Report) -> str:
    """Why the classes were selected, each reason with how many classes run that code (the first few reasons)."""
    counts = report.selection.get("reason_counts") or {}
    said = [
        f"{escape_inline(str(reason), 160)}: "
        + ("1 class runs" if count == 1 else f"{count} classes run")
        + " that code"
        for reason, count in list(counts.items())[:REASONS_SHOWN]
    ]
    more = f"; and {len(counts) - REASONS_SHOWN} more reasons" if len(counts) > REASONS_SHOWN else ""
    return f"why selected: {'; '.join(said)}{more}" if said else ""


def _causes(cells: list[Cell]) -> list[Cause]:
    """The causes a comment has a section for, new failures and tool errors first, then pre-existing failures; a
    class not checked or not run is one line, not a cause."""
    causes = group([c for c in cells if c.status not in ("not_checked", "not_run")])
    return sorted(causes, key=lambda cause: cause.cell.pre_existing)


def _not_results_line(cells: list[Cell]) -> str:
    """ "9 not checked (bark, timm_wrapper x2) · 6 skipped (longformer x2)": one line for each, by model type."""
    parts = []
    for status, words in (("not_checked", "not checked"), ("skipped", "skipped"), ("not_run", "not run (budget)")):
        found = [c.model_type for c in cells if c.status == status]
        if found:
            by_type = Counter(found)
            commonest = by_type.most_common(8)
            names = ", ".join(f"{name} ×{count}" if count > 1 else name for name, count in commonest)  # noqa: RUF001
            more = f" and {len(by_type) - 8} more types" if len(by_type) > 8 else ""
            parts.append(f"{len(found)} {words} ({escape_inline(names, 400)}{more})")
    not_run = next((c for c in cells if c.status == "not_run"), None)
    advice = f". {hint(not_run, code=escape_inline)}" if not_run else ""  # how to run them all: hfexport's words
    return " · ".join(parts) + advice


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


def _table_rows(backends: list[str], rows: list[tuple[str, dict[str, Cell]]], numbers: dict[int, int]) -> Iterator[str]:
    """The grid's rows; ``numbers`` maps a failing cell (by ``id``) to its cause's number."""
    for model_class, cells in rows:
        rendered = [render_cell(cells[b], numbers.get(id(cells[b]))) if b in cells else "—" for b in backends]
        yield f"| {escape_inline(model_class, 100)} | " + " | ".join(rendered) + " |"


def _passes_everywhere(cells: dict[str, Cell]) -> bool:
    return all(c.status == "pass" and c.regression != "fixed" and _generation_note(c) == "" for c in cells.values())


def _passing_rows_line(rows: list[tuple[str, dict[str, Cell]]]) -> str:
    """The classes that pass on every backend, in one line: the grid shows the others."""
    names = [name for name, _ in rows]
    shown = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
    return f"✅ {_plural(len(names), 'class')} pass{'es' if len(names) == 1 else ''} on every backend: " + (
        escape_inline(shown, 800)
    )


def _within(pieces: Iterable[str], budget: int) -> list[str]:
    """The pieces, rendered in order until together they pass ``budget``: no later one could fit in the body."""
    kept, total = [], 0
    for piece in pieces:
        kept.append(piece)
        total += text_size(piece)
        if total > budget:
            break
    return kept


def _cause_details(cause: Cause, number: int, links: Links, internals: bool) -> str:
    """A cause's section, titled by the cause: the broken line (linked, then as code), the error, what to do, and
    every check it breaks. Open for the first three. hfexport's own frames and workarounds only with ``internals``."""
    cell, count = cause.cell, len(cause.cells)
    title = f"{cause_mark(number)} {failure_kind(cell)} {'at' if cell.model_location else 'in'} {_where(cause)}"
    title += f" · {_plural(count, 'check')}" + (" · pre-existing" if cell.pre_existing else "")
    opened = " open" if number <= OPEN_SECTIONS else ""
    parts = [f"<details{opened}><summary>{_icon(cell)} {escape_html(title, 300)}</summary>"]
    location = cell.model_location
    if location:
        url = line_url(links.repository, links.sha, location.file, location.line)
        # A linked path is made of plain names only (line_url checked it): a code span shows it as it is.
        where = (
            f"[`{location.file}:{location.line}`]({url})" if url else escape_inline(f"{location.file}:{location.line}")
        )
        function = f" in {escape_inline(location.function, 120)}" if location.function else ""
        parts.append(f"{where}{function}")
        if location.text:
            parts.append(code_block(location.text))
    elif cell.status == "tool_error":
        step = escape_inline(cell.step or "an unknown step", 200)
        parts.append(
            f"hfexport itself failed in {step}; the job log names its code. This says nothing about the model."
        )
    else:
        step = escape_inline(cell.step or "an unknown step", 200)
        parts.append(f"No transformers line is known: it failed in {step}.")
    parts.append(f"**Error:** {escape_inline(cell.error_line or 'no message', 600)}")
    advice = hint(cell, code=escape_inline)
    if advice:
        parts.append(f"**What to do:** {advice}")
    parts += [_first_bad_commit(answer, cells_named, links) for answer, cells_named in cause.first_bad_commits()]
    parts.append(f"**Breaks {_plural(count, 'check')}:** {escape_inline(cause.broken, 1500)}")
    if internals:
        parts += _internal_items(cell)
    return "\n\n".join(parts) + "\n\n</details>"


def _first_bad_commit(answer: FirstBadCommit, cells_named: str, links: Links) -> str:
    """``check --bisect``'s line of a cause: the commit (linked where the repository is known), or why none."""
    which = f" ({escape_inline(cells_named, 600)})" if cells_named else ""
    if answer.sha is None:
        return f"**First bad commit:** not found: {escape_inline(answer.note, 300)}{which}"
    # The schema admits only a full hexadecimal SHA: safe in a code span and a URL as it is.
    short = f"`{answer.sha[:7]}`"
    short = f"[{short}]({links.repository}/commit/{answer.sha})" if links.repository else short
    pr = f" (PR #{answer.pr})" if answer.pr else ""
    return f"**First bad commit:** {short} {escape_inline(answer.subject or '', 200)}{pr}{which}"


# The first cause sections a reviewer sees open; the rest are one click away.
OPEN_SECTIONS = 3


@dataclass(frozen=True)
class Links:
    """Where line links point: ``repository_url``'s result and the head commit; either None: no links."""

    repository: str | None = None
    sha: str | None = None


def _internal_items(cell: Cell) -> list[str]:
    """For the job summary: hfexport's own frame, the workarounds that ran, generation, the internals this checkout
    lacks."""
    items = []
    frame = cell.frame
    if frame and frame.file and cell.model_location is None:
        line = f":{frame.line}" if frame.line is not None else ""
        where = f"{frame.file}{line} in {frame.function or '?'}"
        items.append(f"- hfexport frame: {escape_inline(where, 300)}")
    if frame and frame.workaround:
        items.append(f"- running workaround: {escape_inline(frame.workaround, 200)}")
    if cell.workarounds:
        items.append(f"- workarounds applied: {escape_inline(', '.join(map(str, cell.workarounds)), 1000)}")
    for label, part in cell.generation_parts():
        if part.detail:
            items.append(f"- {label}: {escape_inline(part.detail, 1000)}")
    if cell.disabled:
        names = ", ".join(f"{name} ({feature})" for name, feature in cell.disabled.items())
        items.append(f"- off in this transformers: {escape_inline(names, 1000)}")
    return ["\n".join(items)] if items else []


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
        for step, seconds in cell.timings.items():  # finite numbers: what the worker timed, or the schema checked
            row = totals.setdefault(step, {})
            row[cell.backend] = row.get(cell.backend, 0.0) + seconds
    if not totals:
        return None
    # The 40 steps that took longest (a report can name any number of them), then in reading order.
    kept = sorted(totals, key=lambda step: -sum(totals[step].values()))[:40]
    order = sorted(kept, key=lambda step: (step == "total", step.split(" · ")[0], step))
    header = "| step | " + " | ".join(escape_inline(b, 30) for b in backends) + " |\n" + "|---" * (len(backends) + 1)
    rows = [
        f"| {escape_inline(step.replace('export · ', '↳ ').replace('_', ' '), 60)} | "
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


def render_markdown(
    report: Report,
    max_chars: int = 65000,
    details_url: str | None = None,
    repository: str | None = None,
    internals: bool = False,
) -> str:
    """The PR comment (or, with ``internals``, the job summary), at most ``max_chars`` UTF-16 units, starting with
    :data:`MARKER`: the verdict naming the causes, the status grid, one section per cause.

    ``repository`` (``repository_url``'s result) links each cause's line at the report's head commit. The comment
    shows only the grid rows that are not a pass on every backend; ``internals`` adds every row, hfexport's own
    frames and workarounds, the passing checks' diffs and where the time went.
    """
    if max_chars < MIN_CHARS:
        raise ValueError(f"max_chars must be at least {MIN_CHARS}, got {max_chars}")
    backends, rows = _rows(report)
    cells = [c for _, by_backend in rows for c in by_backend.values()]
    causes = _causes(cells)
    numbers = {id(cell): number for number, cause in enumerate(causes, start=1) for cell in cause.cells}
    passing_rows = [] if internals else [row for row in rows if _passes_everywhere(row[1])]
    if passing_rows:
        rows = [row for row in rows if not _passes_everywhere(row[1])]
    passing = [c for c in cells if c.status == "pass"] if internals else []
    timing = _timing_details(cells, backends) if internals else None
    links = Links(repository, report.head_sha)
    section_count = len(causes) + bool(passing) + bool(timing)
    # Only what can fit is rendered: cost follows the report's size and max_chars, never rows x backends x retries.
    table_rows = _within(_table_rows(backends, rows, numbers), max_chars)
    every_row = len(table_rows) == len(rows)
    details = (_cause_details(c, n, links, internals) for n, c in enumerate(causes, start=1))
    sections = _within(details, max_chars) if every_row else []
    if every_row and passing and len(sections) == len(causes):
        sections.append(_passing_details(passing))
    if every_row and timing and len(sections) == len(causes) + bool(passing):
        sections.append(timing)
    top = f"{MARKER}\n{TITLE}\n\n{summary_line(report, causes)}\n\n{_disabled_note(report)}{_header(backends)}"
    below_table = "\n\n".join(
        filter(None, [_passing_rows_line(passing_rows) if passing_rows else "", _not_results_line(cells)])
    )
    footer = "\n\n".join(filter(None, [health.section(report.cells, escape_inline), _footer(report)]))

    def note_for(rows_kept: int, sections_kept: int) -> str:
        left_out = (section_count - sections_kept, len(rows) - rows_kept)
        return _omitted_note(*left_out, details_url) if any(left_out) else ""

    def render(rows_kept: int, sections_kept: int) -> str:
        note = note_for(rows_kept, sections_kept)
        table = top + "".join("\n" + r for r in table_rows[:rows_kept])
        parts = [table, below_table, *sections[:sections_kept], note, footer]
        return "\n\n".join(filter(None, parts)) + "\n"

    # Sizes measured once; a candidate's size is a sum of them, so choosing what fits is linear, not a re-render.
    row_ends = _running_sums(1 + text_size(r) for r in table_rows)
    section_ends = _running_sums(2 + text_size(section) for section in sections)

    def size(rows_kept: int, sections_kept: int) -> int:
        note = note_for(rows_kept, sections_kept)
        fixed = sum(2 + text_size(part) for part in (top, below_table, note, footer) if part) - 1
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
