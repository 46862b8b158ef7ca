"""The gate's report: the versioned JSON document ``check`` writes and ``merge`` joins, and its summary.

Schema "hfexport-report" (``REPORT_SCHEMA_VERSION``) is the contract between ``check``, ``merge`` and ``comment``;
``schema.validate_report`` is its single definition, ``views`` and ``markdown`` render it. Version 2 added the
``tool_error`` and ``not_checked`` statuses and the cell keys ``frame`` (where it broke) and ``disabled``
(transformers internals the checkout lacks); version 3 the cell keys ``second_shape`` (the run at a second input
shape) and ``cached`` (a result from the result cache).
"""

from __future__ import annotations

import datetime
from typing import Any

import hfexport

from .cells import CELL_KEY_SINCE, CELL_KEYS, Cell

REPORT_SCHEMA = "hfexport-report"
REPORT_SCHEMA_VERSION = 3


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_cell(model_type: str, model_class: str, backend: str, **fields: Any) -> dict[str, Any]:
    """A cell's JSON form with every schema key present (None where unknown)."""
    return Cell(model_type, model_class, backend, **{k: v for k, v in fields.items() if k in CELL_KEYS}).as_dict()


def summarize(cells: list[dict[str, Any]]) -> dict[str, int]:
    typed = [Cell.from_dict(c) for c in cells]
    return {
        "total": len(typed),
        "passed": sum(c.status == "pass" for c in typed),
        "failed": sum(c.failed for c in typed),
        "new_failures": sum(c.new_failure for c in typed),
        "pre_existing": sum(c.pre_existing for c in typed),
        "fixed": sum(c.regression == "fixed" for c in typed),
        "skipped": sum(c.status == "skipped" for c in typed),
        "tool_errors": sum(c.status == "tool_error" for c in typed),
        "not_checked": sum(c.status == "not_checked" for c in typed),
        "not_run": sum(c.status == "not_run" for c in typed),
    }


def exit_code(summary: dict[str, int]) -> int:
    """2 when hfexport itself failed (the gate is broken and must say so), 1 on a new failure, else 0."""
    if summary.get("tool_errors"):
        return 2
    return 1 if summary["new_failures"] else 0


def finalize(report: dict[str, Any]) -> dict[str, Any]:
    """Fill summary and exit code from the cells."""
    report["cells"].sort(key=lambda c: (c["model_type"], c["model_class"], c["backend"]))
    report["summary"] = summarize(report["cells"])
    report["exit_code"] = exit_code(report["summary"])
    return report


def new_report(
    engine: str,
    backends: list[str],
    selection: dict[str, Any],
    repository: dict[str, Any],
    shard: tuple[int, int] = (1, 1),
    pr: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "schema": REPORT_SCHEMA,
        "schema_version": REPORT_SCHEMA_VERSION,
        "hfexport_version": hfexport.__version__,
        "created_at": utc_now(),
        "engine": engine,
        "repository": repository,
        "pr": pr or {"number": None, "head_sha": None},
        "backends": list(backends),
        "selection": selection,
        "shard": {"index": shard[0], "count": shard[1]},
        "cells": [],
        "summary": summarize([]),
        "exit_code": 0,
    }


def merge_reports(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """Join shard reports of one sweep: cells concatenated (a repeated cell is an error), summary recomputed."""
    if not reports:
        raise ValueError("nothing to merge")
    first = reports[0]
    merged = {**first, "created_at": utc_now(), "cells": [], "shard": {"index": 1, "count": 1}}
    merged["schema_version"] = REPORT_SCHEMA_VERSION  # older shards are lifted: their cells lack only newer keys
    merged["backends"] = list(dict.fromkeys(b for r in reports for b in r["backends"]))
    model_types = sorted({t for r in reports for t in r["selection"].get("model_types", [])})
    merged["selection"] = {**first["selection"], "model_types": model_types}
    seen: set[tuple[str, str]] = set()
    for report in reports:
        if report["engine"] != first["engine"]:
            raise ValueError(f"cannot merge reports of engines {first['engine']!r} and {report['engine']!r}")
        for cell in report["cells"]:
            key = (cell["model_class"], cell["backend"])
            if key in seen:
                raise ValueError(f"{key[0]} · {key[1]} appears in more than one report")
            seen.add(key)
            merged["cells"].append({**dict.fromkeys(CELL_KEY_SINCE), **cell})
    return finalize(merged)
