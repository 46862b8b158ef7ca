"""The report's schema, checked: ``validate_report`` (every departure from a version's schema and its limits) and
``load_report`` (a report file someone else wrote, refused in one line unless it is small, shallow and valid, then
typed once into a ``Report``)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from ..files import read_regular_file
from .cells import (
    CELL_KEY_SINCE,
    CELL_KEYS,
    FAILURE_STATUSES,
    GENERATION_KEYS,
    GENERATION_STATUSES,
    NOT_A_RESULT,
    STATUSES,
    Cell,
)
from .report import REPORT_SCHEMA, Report, summarize

# Older reports (1: no tool_error / not_checked, no frame / disabled; 2: no second_shape / cached / not_run;
# 3: no export health; 4: no first_bad_commit) are still read.
READABLE_SCHEMA_VERSIONS = (1, 2, 3, 4, 5)
REGRESSIONS = ("new", "pre-existing", "fixed", None)
SELECTION_MODES = ("diff", "files", "models", "all")

# Limits far above any real report (a sweep of every architecture is ~1,500 classes x 3 backends) that bound what a
# hostile one can make a reader spend: rendering is linear in cells x backends, and every string is cut when shown.
MAX_REPORT_BYTES = 8 * 1024 * 1024  # far above any real report; a hostile one cannot make readers load more
MAX_CELLS = 20_000
MAX_BACKENDS = 16
MAX_DEPTH = 12  # objects and arrays inside one another (a real report is 6 deep: a second_shape's input shapes)
MAX_CONTAINERS = 500_000  # objects and arrays in the file, counted before parsing
MAX_ITEMS = 1_000  # entries of one object or list below the cells (timings, workarounds, disabled, model types)
MAX_NAME = 300  # model types, classes, backends, timing and workaround names
MAX_TEXT = 20_000  # any other string (an error message, a source line)
MAX_NUMBER = 2**53  # a larger integer is no line number or count a report holds (and no float converts it)
SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # a commit id (SHA-1 or SHA-256 repository)


def _shown(key: Any) -> str:
    """A key of the report as an error message names it: quoted, cut, one line whatever it holds."""
    text = repr(str(key))
    return text if len(text) <= 40 else text[:37] + "…'"


def _check_type(errors: list[str], where: str, value: Any, types: tuple[type, ...], nullable: bool = False) -> bool:
    if value is None and nullable:
        return True
    if isinstance(value, bool) and bool not in types:
        errors.append(f"{where}: expected {'/'.join(t.__name__ for t in types)}, got bool")
        return False
    if not isinstance(value, types):
        errors.append(f"{where}: expected {'/'.join(t.__name__ for t in types)}, got {type(value).__name__}")
        return False
    if isinstance(value, int | float) and not _finite(value):
        errors.append(f"{where}: expected a finite number (an integer of at most 2**53), got {str(value)[:20]}")
        return False
    return True


def _finite(value: float) -> bool:
    return abs(value) <= MAX_NUMBER if isinstance(value, int) else math.isfinite(value)


def _check_text(errors: list[str], where: str, value: Any, limit: int = MAX_TEXT, nullable: bool = False) -> bool:
    if not _check_type(errors, where, value, (str,), nullable):
        return False
    if value is not None and len(value) > limit:
        errors.append(f"{where}: {len(value)} characters, at most {limit}")
        return False
    return True


def _check_limits(data: Any) -> list[str]:
    """Depth, sizes of objects and lists, string lengths: walked without recursion, before anything reads the data."""
    stack: list[tuple[Any, int, str]] = [(data, 1, "report")]
    while stack:
        value, depth, where = stack.pop()
        if isinstance(value, str):
            if len(value) > MAX_TEXT:
                return [f"{where}: {len(value)} characters, at most {MAX_TEXT}"]
            continue
        if not isinstance(value, dict | list):
            continue
        if depth > MAX_DEPTH:
            return [f"{where}: nested more than {MAX_DEPTH} deep"]
        limit = MAX_CELLS if where == "report.cells" else MAX_ITEMS
        if len(value) > limit:
            return [f"{where}: {len(value)} entries, at most {limit}"]
        if isinstance(value, dict):
            for key, item in value.items():
                if len(key) > MAX_NAME:
                    return [f"{where}: a key of {len(key)} characters, at most {MAX_NAME}"]
                stack.append((item, depth + 1, f"report.{_shown(key)[1:-1]}" if depth == 1 else f"{where}.…"))
        else:
            stack.extend((item, depth + 1, f"{where}[…]") for item in value)
    return []


def _validate_cell(errors: list[str], where: str, cell: Any, version: int) -> None:
    if not _check_type(errors, where, cell, (dict,)):
        return
    missing = [k for k in CELL_KEYS if k not in cell and CELL_KEY_SINCE.get(k, 1) <= version]
    if missing:
        errors.append(f"{where}: missing {', '.join(missing)}")
        return
    for key in ("model_type", "model_class", "backend"):
        _check_text(errors, f"{where}.{key}", cell[key], MAX_NAME)
    if cell["status"] not in STATUSES:
        errors.append(f"{where}.status: {_shown(cell['status'])} is not one of {', '.join(STATUSES)}")
    if cell["regression"] not in REGRESSIONS:
        errors.append(f"{where}.regression: {_shown(cell['regression'])} is not new, pre-existing, fixed or null")
    for key in ("stage", "error_type", "error", "skip_reason", "selected_because"):
        _check_text(errors, f"{where}.{key}", cell.get(key), nullable=True)
    for key in ("max_abs_diff", "max_rel_diff", "tolerance"):
        _check_type(errors, f"{where}.{key}", cell[key], (int, float), nullable=True)
    if _check_type(errors, f"{where}.timings", cell["timings"], (dict,)):
        for name, seconds in cell["timings"].items():
            _check_type(errors, f"{where}.timings[{_shown(name)}]", seconds, (int, float))
    if _check_type(errors, f"{where}.workarounds", cell["workarounds"], (list,)):
        for index, name in enumerate(cell["workarounds"]):
            _check_text(errors, f"{where}.workarounds[{index}]", name, MAX_NAME)
    if _check_type(errors, f"{where}.source", cell["source"], (dict,), nullable=True) and cell["source"]:
        _check_text(errors, f"{where}.source.file", cell["source"].get("file"), nullable=True)
        _check_type(errors, f"{where}.source.line", cell["source"].get("line"), (int,), nullable=True)
    for key in GENERATION_KEYS:
        generation = cell.get(key)
        valid = _check_type(errors, f"{where}.{key}", generation, (dict,), nullable=True)
        if valid and generation and generation.get("status") not in GENERATION_STATUSES:
            errors.append(f"{where}.{key}.status: expected {', '.join(GENERATION_STATUSES)}")
        if valid and generation:
            _check_text(errors, f"{where}.{key}.detail", generation.get("detail"), nullable=True)
    if _check_type(errors, f"{where}.frame", cell.get("frame"), (dict,), nullable=True) and cell.get("frame"):
        frame = cell["frame"]
        for key in ("file", "function", "text", "workaround"):
            _check_text(errors, f"{where}.frame.{key}", frame.get(key), nullable=True)
        _check_type(errors, f"{where}.frame.line", frame.get("line"), (int,), nullable=True)
    second = cell.get("second_shape")
    if _check_type(errors, f"{where}.second_shape", second, (dict,), nullable=True) and second:
        if second.get("status") not in ("pass", "skipped"):
            errors.append(f"{where}.second_shape.status: expected pass or skipped")
        _check_type(errors, f"{where}.second_shape.inputs", second.get("inputs"), (dict,), nullable=True)
        _check_type(errors, f"{where}.second_shape.max_abs_diff", second.get("max_abs_diff"), (int, float), True)
        _check_text(errors, f"{where}.second_shape.detail", second.get("detail"), nullable=True)
    _check_type(errors, f"{where}.cached", cell.get("cached"), (bool,), nullable=True)
    _validate_health(errors, where, cell)
    _validate_first_bad_commit(errors, where, cell.get("first_bad_commit"))
    if _check_type(errors, f"{where}.disabled", cell.get("disabled"), (dict,), nullable=True) and cell.get("disabled"):
        for name, feature in cell["disabled"].items():
            _check_text(errors, f"{where}.disabled[{_shown(name)}]", feature)
    if cell["status"] in STATUSES and cell["status"] in FAILURE_STATUSES | NOT_A_RESULT and not cell["error"]:
        errors.append(f"{where}: a {cell['status']} cell needs an error")


def _validate_health(errors: list[str], where: str, cell: dict[str, Any]) -> None:
    """Export health's shape; its numbers are not checked here: ``health.usable`` leaves bad ones out, saying so."""
    for key in ("metrics", "base_metrics"):
        if _check_type(errors, f"{where}.{key}", cell.get(key), (dict,), nullable=True) and cell.get(key):
            _check_type(errors, f"{where}.{key}.ops", cell[key].get("ops"), (dict,), nullable=True)
    found = cell.get("health")
    if not (_check_type(errors, f"{where}.health", found, (dict,), nullable=True) and found):
        return
    for key in ("regressions", "improvements"):
        if _check_type(errors, f"{where}.health.{key}", found.get(key), (list,), nullable=True):
            for index, text in enumerate(found.get(key) or []):
                _check_text(errors, f"{where}.health.{key}[{index}]", text, MAX_NAME)
    _check_type(errors, f"{where}.health.latency", found.get("latency"), (dict,), nullable=True)
    _check_text(errors, f"{where}.health.note", found.get("note"), nullable=True)


def _validate_first_bad_commit(errors: list[str], where: str, found: Any) -> None:
    """``check --bisect``'s answer: a full commit id (shown and linked: never free text), or a note saying why none."""
    where = f"{where}.first_bad_commit"
    if not (_check_type(errors, where, found, (dict,), nullable=True) and found):
        return
    sha = found.get("sha")
    if sha is not None and not (isinstance(sha, str) and SHA.fullmatch(sha)):
        errors.append(f"{where}.sha: expected a full commit SHA or null, got {_shown(sha)}")
    if sha is None and not found.get("note"):
        errors.append(f"{where}: no commit and no note saying why")
    for key in ("subject", "note"):
        _check_text(errors, f"{where}.{key}", found.get(key), nullable=True)
    for key in ("pr", "runs"):
        number = found.get(key)
        if _check_type(errors, f"{where}.{key}", number, (int,), nullable=True) and number is not None and number < 0:
            errors.append(f"{where}.{key}: expected a count or number of at least 0, got {number}")


def validate_cell(cell: Any) -> list[str]:
    """Every way one cell's JSON form departs from the current schema and its limits (a result-cache entry's)."""
    errors = _check_limits(cell)
    if not errors:
        _validate_cell(errors, "cell", cell, READABLE_SCHEMA_VERSIONS[-1])
    return errors


def _validate_cells(errors: list[str], data: dict[str, Any], version: int) -> None:
    cells = data.get("cells")
    if not _check_type(errors, "cells", cells, (list,)):
        return
    listed = data.get("backends") if isinstance(data.get("backends"), list) else []
    backends = {b for b in listed if isinstance(b, str)}
    seen: set[tuple[str, str]] = set()
    for index, cell in enumerate(cells):
        _validate_cell(errors, f"cells[{index}]", cell, version)
        if len(errors) > 20:
            return
        if errors or not isinstance(cell, dict):
            continue  # the names are checked to be strings first
        if cell["backend"] not in backends:
            errors.append(f"cells[{index}].backend: {_shown(cell['backend'])} is not in backends")
        key = (cell["model_class"], cell["backend"])
        if key in seen:
            errors.append(f"cells[{index}]: a second cell for {_shown(key[0])} on {_shown(key[1])}")
        seen.add(key)


def _validate_commits(errors: list[str], data: dict[str, Any]) -> None:
    """Commit ids are shown and compared: each is a full SHA or null, never free text."""
    for section, keys in (("pr", ("head_sha",)), ("repository", ("base", "head"))):
        values = data.get(section) if isinstance(data.get(section), dict) else {}
        for key in keys:
            value = values.get(key)
            if value is not None and not (isinstance(value, str) and SHA.fullmatch(value)):
                errors.append(f"{section}.{key}: expected a full commit SHA or null, got {_shown(value)}")
    pr = data.get("pr") if isinstance(data.get("pr"), dict) else {}
    number = pr.get("number")
    if number is not None and not (_check_type(errors, "pr.number", number, (int,)) and number > 0):
        errors.append(f"pr.number: expected a positive integer, got {_shown(number)}")


def _validate_incomplete(errors: list[str], incomplete: Any) -> None:
    """A merge's missing shards (``hfexport merge --allow-partial``): ``{"shards": N, "missing": [K, ...]}``."""
    if incomplete is None or not _check_type(errors, "incomplete", incomplete, (dict,)):
        return
    count, missing = incomplete.get("shards"), incomplete.get("missing")
    valid = isinstance(count, int) and not isinstance(count, bool) and 1 < count <= MAX_CELLS
    if not (valid and isinstance(missing, list) and missing):
        errors.append("incomplete: expected the shard count N and a list of the missing shards")
    elif not all(isinstance(k, int) and not isinstance(k, bool) and 1 <= k <= count for k in missing):
        errors.append(f"incomplete.missing: expected shard numbers from 1 to {count}")


def validate_report(data: Any) -> list[str]:
    """Every way ``data`` departs from its schema version (1 to 5) and its limits; an empty list means valid."""
    errors: list[str] = []
    if not _check_type(errors, "report", data, (dict,)):
        return errors
    errors = _check_limits(data)
    if errors:
        return errors
    if data.get("schema") != REPORT_SCHEMA:
        errors.append(f"schema: expected {REPORT_SCHEMA!r}, got {_shown(data.get('schema'))}")
    version = data.get("schema_version")
    if version not in READABLE_SCHEMA_VERSIONS or isinstance(version, bool):
        errors.append(f"schema_version: expected one of {READABLE_SCHEMA_VERSIONS}, got {_shown(version)}")
        return errors
    for key in ("hfexport_version", "created_at", "engine"):
        _check_text(errors, key, data.get(key), MAX_NAME)
    for key in ("repository", "selection", "shard", "summary"):
        _check_type(errors, key, data.get(key), (dict,))
    _check_type(errors, "pr", data.get("pr"), (dict,), nullable=True)
    _validate_commits(errors, data)
    if _check_type(errors, "backends", data.get("backends"), (list,)):
        if len(data["backends"]) > MAX_BACKENDS:
            errors.append(f"backends: {len(data['backends'])} of them, at most {MAX_BACKENDS}")
        for index, backend in enumerate(data["backends"]):
            _check_text(errors, f"backends[{index}]", backend, MAX_NAME)
        if len(set(map(repr, data["backends"]))) != len(data["backends"]):
            errors.append("backends: a backend is listed twice")
    selection = data.get("selection")
    if isinstance(selection, dict):
        if selection.get("mode") not in SELECTION_MODES:
            errors.append(f"selection.mode: {_shown(selection.get('mode'))} is not one of {', '.join(SELECTION_MODES)}")
        _check_type(errors, "selection.model_types", selection.get("model_types"), (list,))
        _check_type(errors, "selection.representative", selection.get("representative"), (bool,))
        _check_text(errors, "selection.reason", selection.get("reason"), nullable=True)
        counts = selection.get("reason_counts")
        if _check_type(errors, "selection.reason_counts", counts, (dict,), nullable=True) and counts:
            for reason, count in counts.items():
                _check_type(errors, f"selection.reason_counts[{_shown(reason)}]", count, (int,))
        notes = selection.get("notes")
        if _check_type(errors, "selection.notes", notes, (list,), nullable=True) and notes:
            for index, note in enumerate(notes):
                _check_text(errors, f"selection.notes[{index}]", note)
    shard = data.get("shard")
    if isinstance(shard, dict):
        index, count = shard.get("index"), shard.get("count")
        if not (isinstance(index, int) and isinstance(count, int) and 1 <= index <= count <= MAX_CELLS):
            errors.append(f"shard: expected 1 <= index <= count, got {_shown(index)}/{_shown(count)}")
    _validate_incomplete(errors, data.get("incomplete"))
    _validate_cells(errors, data, version)
    summary, cells = data.get("summary"), data.get("cells")
    if isinstance(summary, dict) and isinstance(cells, list) and not errors:
        expected = summarize([Cell.from_dict(cell) for cell in cells])
        if version == 1:
            expected = {k: v for k, v in expected.items() if k not in ("tool_errors", "not_checked")}
        if version < 3 and "not_run" not in summary:
            expected.pop("not_run")  # written before the status existed (a report lifted since may carry a 0)
        if version < 4:
            expected = {k: v for k, v in expected.items() if not k.startswith("health_")}
        if summary != expected:
            errors.append(f"summary: {str(summary)[:300]} does not match the cells ({expected})")
    if data.get("exit_code") not in (0, 1, 2) or isinstance(data.get("exit_code"), bool):
        errors.append(f"exit_code: expected 0, 1 or 2, got {_shown(data.get('exit_code'))}")
    return errors


class ReportError(ValueError):
    """Why a report file cannot be used, in one line (the CLI exits with code 2)."""


def load_report(path: Path, max_bytes: int = MAX_REPORT_BYTES) -> Report:
    """Read, validate and type a JSON report (``report.json`` or the directory holding it), refusing oversized input.

    ``merge`` and ``comment`` read reports written by other runs (``comment``: by untrusted pull-request code), so
    nothing is trusted before the size cap, the count of objects and arrays, and the schema have passed.
    """
    path = path / "report.json" if path.is_dir() else path
    try:
        raw = read_regular_file(path, max_bytes)  # never through a link: a link to a secret would echo it
    except OSError as error:
        raise ReportError(f"cannot read the report {path}: {error.strerror or error}") from None
    if len(raw) > max_bytes:
        raise ReportError(f"{path} is over {max_bytes} bytes: refusing to read it")
    # Counted in the bytes (strings included, so never fewer than there are): bounds what parsing can allocate.
    if raw.count(b"{") + raw.count(b"[") > MAX_CONTAINERS:
        raise ReportError(f"{path} has over {MAX_CONTAINERS} objects and arrays: refusing to read it")
    try:
        data = json.loads(raw, parse_constant=_no_constant)
    except RecursionError:
        raise ReportError(f"{path} is nested too deeply: refusing to read it") from None
    except ValueError as error:
        raise ReportError(f"{path} is not valid JSON: {str(error)[:200]}") from None
    errors = validate_report(data)
    if errors:
        shown = "; ".join(errors[:5]) + (f" (and {len(errors) - 5} more)" if len(errors) > 5 else "")
        raise ReportError(f"{path} is not a valid hfexport report: {shown}")
    return Report.from_dict(data)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows (a report records a diff it could not compute as null)")
