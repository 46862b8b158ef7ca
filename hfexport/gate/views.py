"""Views of a report for machines and terminals: JSON, the terminal table and progress lines, JUnit XML, GitHub
annotations, and the report files (``markdown.py`` renders the PR comment)."""

from __future__ import annotations

import json
import math
import os
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import health
from .causes import Cause, group, hint
from .cells import Annotation, Cell, disabled_features
from .escaping import repository_url
from .markdown import JOB_SUMMARY_CHARS, render_markdown
from .report import Report, counts_text


def _json_safe(value: Any) -> Any:
    # NaN/inf are not JSON: a diff that could not be computed is recorded as null.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value


def to_json(report: Report) -> str:
    return json.dumps(_json_safe(report.as_dict()), indent=2, sort_keys=False) + "\n"


def progress_line(done: int, total: int, cell: Cell) -> str:
    took = f" [{cell.seconds:.1f} s]" if cell.seconds is not None else ""
    return f"[{done}/{total}] {cell.model_class} · {cell.backend}: {cell.label()}{took}"


def terminal_table(report: Report) -> str:
    """Rows = model classes, columns = backends, then one line per failure with its stage and error."""
    backends, cells = report.backends, report.cells
    rows: dict[str, dict[str, Cell]] = {}
    for cell in cells:
        rows.setdefault(cell.model_class, {})[cell.backend] = cell
    table = [["model class", *backends]]
    for model_class, by_backend in rows.items():
        table.append([model_class, *[by_backend[b].short() if b in by_backend else "-" for b in backends]])
    widths = [min(48, max(len(row[i]) for row in table)) for i in range(len(table[0]))]
    lines = [
        "  ".join(value[:48].ljust(width) for value, width in zip(row, widths, strict=True)).rstrip() for row in table
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    for cause in group(cells):
        lines.append(f"  {cause.broken}: {cause.cell.label()}")
        advice = hint(cause.cell)
        if advice:
            lines.append(f"    what to do: {advice}")
        for answer, cells_named in cause.first_bad_commits():
            lines.append(f"    first bad commit: {answer.text()}" + (f" ({cells_named})" if cells_named else ""))
    for cell in cells:
        if cell.status == "skipped":
            lines.append(f"  {cell.model_class} · {cell.backend}: {cell.label()}")
    lines.append(counts_text(report.summary))
    for name, feature in disabled_features(cells).items():
        lines.append(f"off in this transformers (no {name}): {feature}")
    if report.summary.get("tool_errors"):
        lines.append("hfexport itself failed (tool errors above): these cells say nothing about the models")
    return "\n".join(lines)


def junit_xml(report: Report) -> str:
    """One testsuite per backend, one testcase per model class; pre-existing failures and skips are skipped."""
    root = ET.Element("testsuites", name="hfexport")
    for backend in report.backends:
        cells = [c for c in report.cells if c.backend == backend]
        suite = ET.SubElement(
            root,
            "testsuite",
            name=f"hfexport.{backend}",
            tests=str(len(cells)),
            failures=str(sum(c.status == "fail" and c.new_failure for c in cells)),
            errors=str(sum((c.status != "fail" and c.new_failure) or c.status == "tool_error" for c in cells)),
            skipped=str(sum(c.status in ("skipped", "not_checked", "not_run") or c.pre_existing for c in cells)),
        )
        for cell in cells:
            case = ET.SubElement(
                suite,
                "testcase",
                classname=f"{backend}.{cell.model_type}",
                name=cell.model_class,
                time=f"{cell.seconds or 0:.3f}",
            )
            if cell.status == "skipped":
                ET.SubElement(case, "skipped", message=cell.skip_reason or "")
            elif cell.status == "not_checked":
                ET.SubElement(case, "skipped", message=cell.label())  # "not checked · eager: ..."
            elif cell.status == "not_run":
                ET.SubElement(case, "skipped", message=cell.error or "not run")
            elif cell.status == "tool_error":
                element = ET.SubElement(case, "error", message=cell.label(), type="hfexport tool error")
                element.text = cell.label()
            elif cell.pre_existing:
                ET.SubElement(case, "skipped", message=cell.label())  # "pre-existing fail · ..."
            elif cell.new_failure:
                tag = "failure" if cell.status == "fail" else "error"
                element = ET.SubElement(case, tag, message=cell.label(), type=cell.error_type or cell.status or "")
                element.text = cell.label()
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


# GitHub shows about 10 error annotations of a step; the comment and the job summary list every one.
ANNOTATIONS_PER_KIND = 10


def github_annotations(report: Report) -> list[Annotation]:
    """The annotations of a run (``github/actions.py`` writes them as workflow commands): an error per cause of new
    failures (on the line that broke), then per tool error; a notice per class not checked and for cells not run; a
    warning per program that grew. A line that breaks several classes or
    backends gets one annotation naming them all. At most ``ANNOTATIONS_PER_KIND`` of each kind, then one
    notice that counts the rest."""
    cells = report.cells
    # Each kind: its items and how one becomes an annotation (only those shown are formatted: a report can hold
    # 20,000 failing cells).
    kinds: dict[str, tuple[list[Any], Callable[[Any], Annotation]]] = {
        "new failures": (group([c for c in cells if c.new_failure]), _failure_annotation),
        "tool errors": ([c for c in cells if c.status == "tool_error"], _tool_error_annotation),
        "classes not checked": ([c for c in cells if c.status == "not_checked"], _not_checked_annotation),
        "health warnings": (health.annotations(cells), _as_is),  # a program that grew
    }
    not_run = [c for c in cells if c.status == "not_run"]
    if not_run:
        title = f"{len(not_run)} checks not run within the time budget"
        kinds["not run"] = ([Annotation("notice", hint(not_run[0]) or "", title)], _as_is)
    lines, left_out = [], []
    for kind, (items, annotation) in kinds.items():
        lines += map(annotation, items[:ANNOTATIONS_PER_KIND])
        if len(items) > ANNOTATIONS_PER_KIND:
            left_out.append(f"{len(items) - ANNOTATIONS_PER_KIND} {kind}")
    if left_out:
        message = f"{', '.join(left_out)}: the PR comment and the job summary list every one"
        lines.append(Annotation("notice", message, "more annotations than shown here"))
    return lines


def _as_is(annotation: Annotation) -> Annotation:
    return annotation


def _tool_error_annotation(cell: Cell) -> Annotation:
    return Annotation("error", cell.label(), f"hfexport failed checking {cell.model_class} on {cell.backend}")


def _not_checked_annotation(cell: Cell) -> Annotation:
    return Annotation("notice", cell.label(), f"{cell.model_class} not checked on {cell.backend}")


def _failure_annotation(cause: Cause) -> Annotation:
    """The ``::error`` of one cause of new failures, on the line that broke when the trace reached the checkout's
    code, else on the model class's line."""
    cell = cause.cell
    source = cell.model_location or cell.source
    count = len(cause.cells)
    title = f"{cell.model_class} does not export to {cell.backend}"
    if count > 1:
        title = f"{count} checks break here: {cause.broken}"[:300]
    message = cell.label() + (f"\nWhat to do: {advice}" if (advice := hint(cell)) else "")
    message += "".join(f"\nFirst bad commit: {answer.text()}" for answer, _ in cause.first_bad_commits()[:1])
    file = (source and source.file) or None
    line = (source.line or None) if source and file else None
    return Annotation("error", message, title, file, line)


def write_reports(report: Report, report_dir: Path, details_url: str | None = None) -> dict[str, Path]:
    """report.json, report.md (the PR comment), junit.xml, and the job summary when ``$GITHUB_STEP_SUMMARY`` is set;
    cause lines link to ``$GITHUB_SERVER_URL/$GITHUB_REPOSITORY`` at the head commit when those are set."""
    report_dir.mkdir(parents=True, exist_ok=True)
    repository = repository_url(os.environ.get("GITHUB_SERVER_URL"), os.environ.get("GITHUB_REPOSITORY"))
    markdown = render_markdown(report, details_url=details_url, repository=repository)
    written = {
        "json": report_dir / "report.json",
        "markdown": report_dir / "report.md",
        "junit": report_dir / "junit.xml",
    }
    written["json"].write_text(to_json(report))
    written["markdown"].write_text(markdown)
    written["junit"].write_text(junit_xml(report))
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        # The job summary adds what a reviewer does not need: every row, timings, workarounds, hfexport's frames.
        internals = render_markdown(report, JOB_SUMMARY_CHARS, details_url, repository, internals=True)
        with open(summary, "a") as handle:
            handle.write(internals + "\n")
    return written
