"""The gate's report: the versioned JSON document ``check`` writes and ``merge`` joins, and its summary.

Schema "hfexport-report" (``REPORT_SCHEMA_VERSION``) is the contract between ``check``, ``merge`` and ``comment``;
``schema.validate_report`` is its single definition, ``views`` and ``markdown`` render it. Version 2 added the
``tool_error`` and ``not_checked`` statuses and the cell keys ``frame`` (where it broke) and ``disabled``
(transformers internals the checkout lacks); version 3 the cell keys ``second_shape`` (the run at a second input
shape) and ``cached`` (a result from the result cache); version 4 the export health: the cell keys ``metrics``,
``base_metrics`` and ``health``, and the summary's ``health_regressions`` and ``health_improvements``; version 5 the
cell key ``first_bad_commit`` (``check --bisect``).
"""

from __future__ import annotations

import dataclasses
import datetime
from dataclasses import dataclass, field
from typing import Any

import hfexport

from . import health
from .cells import NOT_REGENERATED, Cell

REPORT_SCHEMA = "hfexport-report"
REPORT_SCHEMA_VERSION = 5


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def summarize(cells: list[Cell]) -> dict[str, Any]:
    return {
        "total": len(cells),
        "passed": sum(c.status == "pass" for c in cells),
        "failed": sum(c.failed for c in cells),
        "new_failures": sum(c.new_failure for c in cells),
        "pre_existing": sum(c.pre_existing for c in cells),
        "fixed": sum(c.regression == "fixed" for c in cells),
        "skipped": sum(c.status == "skipped" for c in cells),
        "tool_errors": sum(c.status == "tool_error" for c in cells),
        "not_checked": sum(c.status == "not_checked" for c in cells),
        "not_run": sum(c.status == "not_run" for c in cells),
        **health.summary_entries(cells),
    }


def counts_text(summary: dict[str, Any]) -> str:
    """How the checks ended, in the words every view uses, only the counts that are not zero:
    ``"6 checks: 4 passed, 2 failed (1 new, 1 pre-existing), 1 tool error"``."""
    n = counted(summary)
    which = (("new_failures", "new"), ("pre_existing", "pre-existing"))
    failed = ", ".join(f"{n[key]} {word}" for key, word in which if n[key])
    counts = [
        f"{n['passed']} passed" if n["passed"] else "",
        f"{n['failed']} failed" + (f" ({failed})" if failed else "") if n["failed"] else "",
        *(f"{n[key]} {one if n[key] == 1 else many}" for key, one, many in _OTHER_COUNTS if n[key]),
    ]
    checks = f"{n['total']} check{'' if n['total'] == 1 else 's'}"
    return f"{checks}: {', '.join(filter(None, counts))}" if n["total"] else "no checks"


# The summary's other counts, as one and as several.
_OTHER_COUNTS = (
    ("fixed", "fixed", "fixed"),
    ("tool_errors", "tool error", "tool errors"),
    ("not_checked", "not checked", "not checked"),
    ("skipped", "skipped", "skipped"),
    ("not_run", "not run (budget)", "not run (budget)"),
)
_COUNTED = ("total", "passed", "failed", "new_failures", "pre_existing", *(key for key, _, _ in _OTHER_COUNTS))


def counted(summary: dict[str, Any]) -> dict[str, int]:
    """The summary's counts, 0 where a report of an older schema has none."""
    return {key: int(summary.get(key) or 0) for key in _COUNTED}


def exit_code(summary: dict[str, Any]) -> int:
    """2 when hfexport itself failed (the gate is broken and must say so), 1 on a new failure, else 0."""
    if summary.get("tool_errors"):
        return 2
    return 1 if summary["new_failures"] else 0


# The schema's top-level keys, in the order the JSON form writes them.
HEADER_KEYS = (
    "hfexport_version",
    "created_at",
    "engine",
    "repository",
    "pr",
    "backends",
    "selection",
    "shard",
)


@dataclass
class Report:
    """A whole report, typed: what was checked where (the header, as the schema has it) and its ``Cell``s.

    ``check`` builds one from its jobs' results and ``schema.load_report`` from a report file; every view (terminal,
    JUnit, annotations, markdown) reads only this.
    """

    engine: str
    backends: list[str]
    selection: dict[str, Any]
    repository: dict[str, Any]
    pr: dict[str, Any] = field(default_factory=lambda: {"number": None, "head_sha": None})
    shard: dict[str, int] = field(default_factory=lambda: {"index": 1, "count": 1})
    cells: list[Cell] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=lambda: summarize([]))
    exit_code: int = 0
    schema_version: int = REPORT_SCHEMA_VERSION
    hfexport_version: str = hfexport.__version__
    created_at: str = field(default_factory=utc_now)
    extra: dict[str, Any] = field(default_factory=dict)  # top-level keys outside the schema (a sweep's "sweep")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Report:
        """A report from its JSON form (validated by ``schema.validate_report``): its cells typed once, here."""
        known = {*HEADER_KEYS, "schema", "schema_version", "cells", "summary", "exit_code"}
        return cls(
            **{key: data[key] for key in HEADER_KEYS if key in data},
            cells=[Cell.from_dict(cell) for cell in data.get("cells") or []],
            summary=dict(data.get("summary") or {}),
            exit_code=data.get("exit_code", 0),
            schema_version=data.get("schema_version", REPORT_SCHEMA_VERSION),
            extra={key: value for key, value in data.items() if key not in known},
        )

    def as_dict(self) -> dict[str, Any]:
        """The JSON form (schema ``REPORT_SCHEMA``)."""
        header = {key: getattr(self, key) for key in HEADER_KEYS}
        return {
            "schema": REPORT_SCHEMA,
            "schema_version": self.schema_version,
            **header,
            "cells": [cell.as_dict() for cell in self.cells],
            "summary": self.summary,
            "exit_code": self.exit_code,
            **self.extra,
        }

    @property
    def head_sha(self) -> str | None:
        """The commit checked: the PR's head, else the repository's head."""
        return (self.pr or {}).get("head_sha") or (self.repository or {}).get("head")

    def finalize(self) -> Report:
        """Cells in order, summary and exit code from the cells."""
        self.cells.sort(key=lambda c: (c.model_type, c.model_class, c.backend))
        self.summary = summarize(self.cells)
        self.exit_code = exit_code(self.summary)
        if self.exit_code == 0 and any(c.error_type == NOT_REGENERATED for c in self.cells):
            self.exit_code = 1  # a changed modular file whose modeling file is stale: the change went unchecked
        return self


def new_report(
    engine: str,
    backends: list[str],
    selection: dict[str, Any],
    repository: dict[str, Any],
    shard: tuple[int, int] = (1, 1),
    pr: dict[str, Any] | None = None,
) -> Report:
    """A report with no cells yet, of this run's engine, backends, selection, commits, shard and PR."""
    return Report(
        engine,
        list(backends),
        selection,
        repository,
        pr=pr or {"number": None, "head_sha": None},
        shard={"index": shard[0], "count": shard[1]},
    )


def merge_reports(reports: list[Report]) -> Report:
    """Join shard reports of one sweep: cells concatenated (a repeated cell is an error), summary recomputed."""
    if not reports:
        raise ValueError("nothing to merge")
    first = reports[0]
    merged = dataclasses.replace(first, created_at=utc_now(), cells=[], shard={"index": 1, "count": 1})
    merged.schema_version = REPORT_SCHEMA_VERSION  # older shards are lifted: their cells lack only newer keys
    merged.backends = list(dict.fromkeys(b for r in reports for b in r.backends))
    model_types = sorted({t for r in reports for t in r.selection.get("model_types", [])})
    merged.selection = {**first.selection, "model_types": model_types}
    seen: set[tuple[str, str]] = set()
    for report in reports:
        if report.engine != first.engine:
            raise ValueError(f"cannot merge reports of engines {first.engine!r} and {report.engine!r}")
        for cell in report.cells:
            key = (cell.model_class, cell.backend)
            if key in seen:
                raise ValueError(f"{key[0]} · {key[1]} appears in more than one report")
            seen.add(key)
            merged.cells.append(cell)
    return merged.finalize()
