"""The committed record of the coverage sweep (docs/coverage.json): the newest cell per (engine, class, backend) of
the record and every report, and the record written back one run or cell per line."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from hfexport.gate.cells import GENERATION_KEYS

ENGINES = ("hfexport", "transformers")
ENGINE_TITLES = {"hfexport": "hfexport", "transformers": "transformers.exporters"}

Key = tuple[str, str, str]  # (engine, model class, backend)


# What the document shows of a cell and of a run: all the committed record keeps.
_CELL_KEYS = (
    "engine",
    "model_type",
    "model_class",
    "backend",
    "status",
    "stage",
    "error_type",
    "error",
    "max_abs_diff",
    *GENERATION_KEYS,
)
_RUN_KEYS = ("engine", "backends", "sweep", "shard", "created_at")
_STORED_ERROR_CHARS = 300


def load_results(
    results: Path, store: Path | None = None
) -> tuple[dict[Key, dict[str, Any]], list[dict[str, Any]], dict[str, float]]:
    """The newest cell per (engine, class, backend) of the record and every report file, every run's header, and
    the record's summed wall time, per engine, of the runs whose own times were not kept (``untimed_seconds``).

    A cell carries its run's ``created_at``; of two results of a cell the later run wins, so reports already in the
    record, or older than it, change nothing.
    """
    record = json.loads(store.read_text()) if store is not None and store.exists() else {}
    cells: dict[Key, dict[str, Any]] = {}
    runs = {run_key(run): run for run in record.get("runs", [])}
    candidates = list(record.get("cells", []))
    for path in sorted(results.glob("*.json")):  # names start with a UTC timestamp
        data = json.loads(path.read_text())
        run = {k: data.get(k) for k in _RUN_KEYS}
        runs.setdefault(run_key(run), run)
        candidates += [{**cell, "engine": data["engine"], "created_at": data["created_at"]} for cell in data["cells"]]
    for cell in candidates:
        key = (cell["engine"], cell["model_class"], cell["backend"])
        if key not in cells or (cell.get("created_at") or "") >= (cells[key].get("created_at") or ""):
            cells[key] = cell
    return cells, list(runs.values()), record.get("untimed_seconds", {})


def run_key(run: dict[str, Any]) -> tuple[str, ...]:
    """Runs of parallel sweeps can start in the same second: the command tells them apart."""
    return (run["engine"], run["created_at"], *((run.get("sweep") or {}).get("argv") or ()))


def record_text(cells: dict[Key, dict[str, Any]], runs: list[dict[str, Any]], untimed: dict[str, float]) -> str:
    """The committed record: one run or cell per line, cells in key order, so a sweep's change reads as a diff."""

    def stored(cell: dict[str, Any]) -> dict[str, Any]:
        kept = {k: cell[k] for k in (*_CELL_KEYS, "created_at") if cell.get(k) is not None}
        if "error" in kept:
            kept["error"] = kept["error"][:_STORED_ERROR_CHARS]
        for key in GENERATION_KEYS:
            if kept.get(key, {}).get("detail"):
                kept[key] = {**kept[key], "detail": kept[key]["detail"][:_STORED_ERROR_CHARS]}
        timings = cell.get("timings") or {}
        export = timings.get("export")
        if export is not None:  # an ONNX cell that lowered dynamo's trace: its export counts that trace too
            export = round(export + timings.get("export · reused trace (not spent)", 0.0), 3)
        return {**kept, "timings": {} if export is None else {"export": export}}

    lines = ["{", f'"untimed_seconds": {json.dumps(untimed)},', '"runs": [']
    lines.append(",\n".join(json.dumps({k: run.get(k) for k in _RUN_KEYS}) for run in runs))
    lines += ["],", '"cells": [']
    lines.append(",\n".join(json.dumps(stored(cells[key])) for key in sorted(cells)))
    lines += ["]", "}"]
    return "\n".join(lines) + "\n"


def not_built(cell: dict[str, Any]) -> bool:
    """The tiny model or its eager run failed: nothing was exported (the builder's problem, not the engine's)."""
    return cell["status"] == "not_checked" or (cell["status"] == "error" and cell.get("stage") in ("build", "eager"))


def exporter_passed(cell: dict[str, Any]) -> bool:
    """The engine's exporters passed every check of the cell: its status, or a failure of transformers' own exportable
    module alone. That part runs last, after every check of the engine, so it failing means all of those passed; it
    measures transformers' export path, and the generation table counts it in a column of its own."""
    return cell["status"] == "pass" or (cell.get("export_module") or {}).get("status") == "fail"


def write_file(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_suffix(path.suffix + ".tmp")
    scratch.write_text(text)
    os.replace(scratch, path)
