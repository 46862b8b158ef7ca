"""docs/compatibility.md from the gate's reports: one part per axis (transformers releases, torch releases), each a
pure function of its reports; each cell's outcome and whether the jobs imported the checkout's code."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from compat_checkouts import UsageError
from compat_environments import package_versions
from packaging.version import InvalidVersion, Version

from hfexport.gate.cells import BACKENDS

RUNS = {"representative": "Representative set", "change": "One-model change"}
TORCH_AXIS = "torch-"  # RESULTS/torch-<torch version>/...: runs on the torch axis
TORCH_PART = "<!-- compat_check: torch releases -->"  # where the document's torch part starts
OUTCOMES = ("passed", "failed", "tool error", "not checked", "skipped")
COLUMN_TITLES = dict(zip(OUTCOMES, ("passed", "failed", "tool errors", "not checked", "skipped"), strict=True))


def imported_from_checkout(report: dict[str, Any]) -> bool | None:
    """Whether the jobs imported the checkout's classes: the gate names a class's file relative to the checkout
    (``src/transformers/...``) when it was loaded from there, and as ``transformers/...`` when from the installed
    package. None when no cell names a file, or when the files were read from the diff rather than from the jobs.
    """
    if (report.get("selection") or {}).get("mode") != "models":
        return None
    files = [(cell.get("source") or {}).get("file") for cell in report.get("cells", [])]
    files = [name for name in files if name]
    return all(name.startswith("src/transformers/") for name in files) if files else None


def outcome(cell: dict[str, Any]) -> str:
    """passed, failed, tool error, not checked or skipped. Tool errors and unbuildable classes are told apart
    whether the gate marks them by status (schema 2) or by a field; an unknown status counts as failed, not passed.
    """
    status = cell.get("status")
    if status == "not_checked" or cell.get("not_checked"):
        return "not checked"
    if status == "tool_error" or cell.get("tool_error"):
        return "tool error"
    if status == "pass":
        return "passed"
    return "skipped" if status == "skipped" else "failed"


def load_results(results: Path) -> list[dict[str, Any]]:
    """One entry per ``RESULTS/<version>/<run>/`` and then per ``RESULTS/torch-<torch>/<version>/<run>/``, oldest
    torch and version first: torch (None off the torch axis), version, run, report and compat.json."""
    torches = [d for d in _subdirectories(results) if _is_version(d.name.removeprefix(TORCH_AXIS))]
    entries = _load_axis(results, None)
    for torch_dir in sorted(torches, key=lambda d: Version(d.name.removeprefix(TORCH_AXIS))):
        entries += _load_axis(torch_dir, torch_dir.name.removeprefix(TORCH_AXIS))
    return entries


def _subdirectories(directory: Path) -> list[Path]:
    return [d for d in directory.iterdir() if d.is_dir()] if directory.is_dir() else []


def _load_axis(directory: Path, torch: str | None) -> list[dict[str, Any]]:
    entries = []
    versions = [d for d in _subdirectories(directory) if _is_version(d.name)]
    for version_dir in sorted(versions, key=lambda d: Version(d.name)):
        for run in RUNS:
            report, meta = (_read_json(version_dir / run / name) for name in ("report.json", "compat.json"))
            if report is not None or meta is not None:
                entry = {"torch": torch, "version": version_dir.name, "run": run, "report": report}
                entries.append({**entry, "meta": meta or {}})
    return entries


def _is_version(name: str) -> bool:
    try:
        Version(name)
    except InvalidVersion:
        return False
    return True


def _read_json(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.exists() else None


def _cells(entry: dict[str, Any]) -> list[dict[str, Any]]:
    return (entry["report"] or {}).get("cells", [])


def _cell_text(text: str, limit: int = 160) -> str:
    text = " ".join(text.replace("|", "/").replace("`", "'").split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _first_error_line(cell: dict[str, Any]) -> str:
    lines = [line for line in (cell.get("error") or "").splitlines() if line.strip()]
    error = f"{cell.get('error_type') or ''}: {lines[0] if lines else ''}".strip(": ")
    frame = cell.get("frame") if isinstance(cell.get("frame"), dict) else {}
    # A tool error names the line of hfexport that broke: where a maintainer starts.
    where = f" at {frame['file']}:{frame.get('line')}" if frame.get("file") else ""
    return f"`{_cell_text(error)}`{where}" if error else "—"


def _label_titles(entries: list[dict[str, Any]]) -> list[str]:
    return ["torch", "transformers"] if any(e["torch"] for e in entries) else ["transformers"]


def _labels(entry: dict[str, Any]) -> list[str]:
    """The row's versions: the transformers release, after the torch the run recorded on the torch axis."""
    if not entry["torch"]:
        return [entry["version"]]
    return [entry["meta"].get("packages", {}).get("torch") or entry["torch"], entry["version"]]


def _counts_table(entries: list[dict[str, Any]], run: str) -> list[str]:
    rows = [e for e in entries if e["run"] == run]
    skipped = any(outcome(c) == "skipped" for e in rows for c in _cells(e))
    columns = [k for k in OUTCOMES if k != "skipped" or skipped]
    new = run == "change"  # only a range has a base to tell new failures from pre-existing ones
    header = [*_label_titles(rows), "backend", *(COLUMN_TITLES[k] for k in columns), *(["new failures"] * new)]
    header += ["gate exit", "gate s"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for entry in rows:
        lines += _count_rows(entry, columns, new)
    return lines


def _count_rows(entry: dict[str, Any], columns: list[str], new: bool) -> list[str]:
    meta, report = entry["meta"], entry["report"]
    tail = [str(meta.get("exit_code", "—")), f"{meta['seconds']:.0f}" if "seconds" in meta else "—"]
    if report is None:
        reason = f"no report: {_cell_text(meta.get('last_line', ''), 100)}"
        return ["| " + " | ".join([*_labels(entry), reason, *["—"] * (len(columns) + new), *tail]) + " |"]
    rows = []
    for backend in report.get("backends", []):
        cells = [c for c in report["cells"] if c["backend"] == backend]
        counts = Counter(outcome(c) for c in cells)
        values = [str(counts[k]) for k in columns]
        if new:
            values.append(str(sum(outcome(c) == "failed" and c.get("regression") == "new" for c in cells)))
        rows.append("| " + " | ".join([*_labels(entry), backend, *values, *tail]) + " |")
    return rows


def _status(cell: dict[str, Any], run: str) -> str:
    kind, status = outcome(cell), str(cell.get("status"))
    if kind in ("failed", "skipped") or status.replace("_", " ") == kind:
        shown = status.replace("_", " ")
    else:  # marked by a field rather than by its status: show both
        shown = f"{kind} ({status})"
    regression = cell.get("regression")
    return f"{shown}, {regression}" if run == "change" and regression in ("new", "pre-existing") else shown


def _problem_rows(entries: list[dict[str, Any]]) -> list[str]:
    header = [*_label_titles(entries), "run", "class", "backend", "status", "stage", "first error line"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for entry in entries:
        for cell in _cells(entry):
            if outcome(cell) == "passed":
                continue
            skipped = outcome(cell) == "skipped"
            detail = _cell_text(cell.get("skip_reason") or "") if skipped else _first_error_line(cell)
            lines.append(
                f"| {' | '.join(_labels(entry))} | {entry['run']} | {cell['model_class']} | {cell['backend']} "
                f"| {_status(cell, entry['run'])} | {_cell_text(cell.get('stage') or '—', 60)} | {detail} |"
            )
    return lines if len(lines) > 2 else ["None: every cell passed."]


def _change_types(entries: list[dict[str, Any]]) -> list[str]:
    types = set()
    for entry in entries:
        if entry["run"] == "change":
            selection = (entry["report"] or {}).get("selection") or {}
            types.update(selection.get("model_types") or [entry["meta"].get("change_model") or "llama"])
    return sorted(types)


def rerun_command(entries: list[dict[str, Any]]) -> str:
    """The ``run`` command that reproduces these results, from what the reports say they ran."""
    versions = list(dict.fromkeys(e["version"] for e in entries))
    used = {b for e in entries for b in ((e["report"] or {}).get("backends") or [])}
    backends = [b for b in BACKENDS if b in used] or list(BACKENDS)
    runs = list(dict.fromkeys(e["run"] for e in entries))
    parts = ["python scripts/compat_check.py run", *versions, "--backends", ",".join(backends)]
    if torches := list(dict.fromkeys(e["torch"] for e in entries if e["torch"])):
        parts += ["--torch", ",".join(torches)]
    if runs != list(RUNS):
        parts += ["--runs", ",".join(runs)]
    if _change_types(entries) not in ([], ["llama"]):
        parts += ["--change-model", ",".join(_change_types(entries))]
    return " ".join([*parts, "-j", "2"]) + "\npython scripts/compat_check.py render"


def _environment(entries: list[dict[str, Any]]) -> list[str]:
    """The package versions the runs recorded (every value, when runs differ); the installed ones otherwise."""
    seen: dict[str, list[str]] = {}
    recorded = [e["meta"]["packages"] for e in entries if e["meta"].get("packages")]
    for packages in recorded or [package_versions()]:
        for name, version in packages.items():
            if version not in seen.setdefault(name, []):
                seen[name].append(version)
    installed = seen.pop("transformers", None)
    source = "recorded by the runs" if recorded else "when rendering: the runs recorded none"
    lines = [f"Versions (`importlib.metadata`, {source}): "]
    lines[0] += ", ".join(f"{name} {' / '.join(versions)}" for name, versions in seen.items()) + "."
    if installed:
        lines.append(f"The installed transformers ({' / '.join(installed)}) is not the one the jobs export.")
    return lines


def _origin_lines(entries: list[dict[str, Any]]) -> list[str]:
    """What the representative reports show of where the jobs imported the models from."""
    origins = [(e["version"], imported_from_checkout(e["report"])) for e in entries if e["report"]]
    installed = sorted({version for version, origin in origins if origin is False}, key=Version)
    if installed:
        return [f"**Warning**: for {', '.join(installed)} the jobs exported the installed transformers.", ""]
    if any(origin for _, origin in origins):
        return [
            "In every representative report each class's source file is the checkout's (`src/transformers/...`):",
            "the jobs imported the release's code.",
            "",
        ]
    return []


def _results_line(entries: list[dict[str, Any]]) -> str:
    dates = sorted(e["report"]["created_at"] for e in entries if e["report"] and e["report"].get("created_at"))
    return f"Results of {dates[-1] if dates else 'no run'}. " + " ".join(_environment(entries))


def _rerun_and_tables(entries: list[dict[str, Any]], heading: str) -> list[str]:
    """The command that reproduces ``entries``, a counts table per run kind and the cells that did not pass."""
    lines = ["Rerun:", "", "```bash", rerun_command(entries), "```", ""]
    for run, title in RUNS.items():
        if any(e["run"] == run for e in entries):
            lines += [f"{heading} {title}", "", *_counts_table(entries, run), ""]
    return [*lines, f"{heading} Cells that did not pass", "", *_problem_rows(entries), ""]


def render_text(entries: list[dict[str, Any]]) -> str:
    """The document: a pure function of the results' reports and compat.json files."""
    representative = sorted({c["model_class"] for e in entries if e["run"] == "representative" for c in _cells(e)})
    changed = "/".join(f"modeling_{t}.py" for t in _change_types(entries) or ["llama"])
    lines = [
        "# Compatibility with transformers releases",
        "",
        "Generated by `scripts/compat_check.py` from the gate's reports (do not edit by hand). For each release, the",
        "`transformers/` package of its wheel is unpacked into `src/transformers/` of a fresh git repository, and",
        "`hfexport check` runs with that checkout as working directory, so that the jobs export the release's",
        "modeling code.",
        "",
        "- **Representative set**: `hfexport check --models representative`"
        + (f" ({', '.join(representative)})." if representative else "."),
        f"- **One-model change**: a comment appended to `{changed}` and committed, then `hfexport check --base",
        "  HEAD~1`: every class of that model type; a failing cell runs again on the untouched release and is",
        "  pre-existing when it fails there too (only new failures would fail a pull request).",
        "",
        "Failed: status fail, crash, timeout, oom or error. Tool errors are failures inside hfexport's own code, not",
        "checked are classes the tiny-model builder cannot make: neither is a result of the model.",
        "",
        _results_line(entries),
        "",
        *_origin_lines(entries),
        "CI runs `python scripts/compat_check.py ci`: the release just before the pin of `constraints.txt` and the",
        "newest release, representative set on dynamo and onnx; it fails on tool errors and missing reports.",
        "",
        *_rerun_and_tables(entries, "##"),
    ]
    return "\n".join(lines)


def render_torch_text(entries: list[dict[str, Any]]) -> str:
    """The document's torch part: a pure function of the torch axis's reports and compat.json files."""
    lines = [
        TORCH_PART,
        "## torch releases",
        "",
        "The same runs on each torch release, in a virtual environment of its own holding that torch, hfexport and the",
        "rest of `constraints.txt`'s pinned set (a torch the running Python holds runs there): the torch range that",
        "`pyproject.toml` declares stops above the newest torch passing here.",
        "",
        _results_line(entries),
        "",
        "CI runs the representative set on torch 2.14.1 (dynamo and onnx; tests/test_torch_releases.py).",
        "",
        *_rerun_and_tables(entries, "###"),
    ]
    return "\n".join(lines)


def render(results: Path, output: Path) -> str:
    """Write the document from the results under ``results``; return its text. An axis with no results there keeps
    its part of the document at ``output`` as it is."""
    entries = load_results(results)
    if not entries:
        raise UsageError(f"no results under {results}: run `compat_check.py run VERSION...` first")
    releases, torches = [e for e in entries if not e["torch"]], [e for e in entries if e["torch"]]
    kept_releases, start, kept_torches = (output.read_text() if output.exists() else "").partition(TORCH_PART)
    text = render_text(releases) if releases else kept_releases
    text += render_torch_text(torches) if torches else start + kept_torches
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text)
    return text
