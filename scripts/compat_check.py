"""Compatibility matrix: the gate on released transformers versions, each unpacked from its wheel into a checkout,
and on torch releases, each in a virtual environment of its own.

For each version, ``run`` downloads the wheel (``pip download --no-deps``, reused when already in ``--wheel-dir``),
unpacks its ``transformers/`` package into ``src/transformers/`` of a fresh temporary git repository and commits it.
``hfexport check`` then runs with that checkout as working directory: the gate finds the checkout from the cwd and its
jobs import the release's code, not the installed transformers. Two runs per version:

- ``representative``: ``hfexport check --models representative`` (the gate's built-in set);
- ``change``: a comment appended to ``modeling_<TYPE>.py`` and committed, then ``hfexport check --base HEAD~1``,
  which selects every class of that model type and runs failing cells again on the untouched release.

The torch axis (``--torch 2.14.1,2.15.0``) runs the same on each torch release: the gate runs in a virtual
environment ``VENV_DIR/torch-<version>`` holding that torch, hfexport (editable, this checkout) and the rest of
``constraints.txt``'s pinned set, built on first use (``PIP_CONSTRAINT`` set for that install only: it replaces a
machine-wide constraint) and reused after; a torch the running Python already holds runs there, with none to build.

Each run leaves ``RESULTS/<version>/<run>/`` (``RESULTS/torch-<torch>/<version>/<run>/`` on the torch axis) with the
gate's ``report.json`` (and ``report.md``, ``junit.xml``), ``gate.log`` and ``compat.json`` (the command, its exit
code, wall time and the package versions used). ``render`` turns the reports into ``docs/compatibility.md``: one part
per axis, each a pure function of its reports; an axis without results under ``RESULTS`` keeps its part of the
document as it is (so a torch run need not redo the transformers releases), and re-rendering gives the same document.
``ci`` is the CI job: the release just before the pin of ``constraints.txt`` and the newest release, on the
representative set with dynamo and onnx; it fails on tool errors or missing reports, not on model failures.

    python scripts/compat_check.py run 5.22.0 5.23.0 5.24.0 --backends dynamo,onnx,executorch -j 2
    python scripts/compat_check.py run 5.22.0 --backends dynamo --runs change --change-model bert
    python scripts/compat_check.py run 5.25.0 --torch 2.13.0,2.14.1,2.15.0 --backends dynamo,onnx,executorch -j 2
    python scripts/compat_check.py render
    python scripts/compat_check.py ci -j 2
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from hfexport.gate.cells import BACKENDS

ROOT = Path(__file__).resolve().parent.parent
RUNS = {"representative": "Representative set", "change": "One-model change"}
DEFAULT_RESULTS = ROOT / "build" / "compat"
DEFAULT_DOC = ROOT / "docs" / "compatibility.md"
DEFAULT_WHEEL_DIR = Path(os.environ.get("HFEXPORT_WHEEL_DIR") or Path.home() / ".cache" / "hfexport" / "wheels")
DEFAULT_VENV_DIR = Path(os.environ.get("HFEXPORT_VENV_DIR") or Path.home() / ".cache" / "hfexport" / "venvs")
TORCH_AXIS = "torch-"  # RESULTS/torch-<torch version>/...: runs on the torch axis
TORCH_PART = "<!-- compat_check: torch releases -->"  # where the document's torch part starts
CI_BACKENDS = ("dynamo", "onnx")
PACKAGES = ("torch", "onnx", "onnxscript", "onnxruntime", "executorch", "transformers", "hfexport")
FAILED = frozenset({"fail", "crash", "timeout", "oom", "error"})
OUTCOMES = ("passed", "failed", "tool error", "not checked", "skipped")
COLUMN_TITLES = dict(zip(OUTCOMES, ("passed", "failed", "tool errors", "not checked", "skipped"), strict=True))
# A code line (a comment selects nothing): module level, so it selects the type's own classes only.
TOUCH_LINE = "\n_compat_check_touched = True\n"
GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "compat_check",
    "GIT_AUTHOR_EMAIL": "compat_check@localhost",
    "GIT_COMMITTER_NAME": "compat_check",
    "GIT_COMMITTER_EMAIL": "compat_check@localhost",
}

Echo = Callable[[str], None]


class UsageError(Exception):
    """Bad input (a version the index does not have, a model type the release lacks): exit 2 with this line."""


# ── Checkouts ──


def _parse_version(version: str) -> Version:
    try:
        return Version(version)
    except InvalidVersion:
        raise UsageError(f"{version!r} is not a version number") from None


def _find_wheel(version: str, wheel_dir: Path) -> Path | None:
    wanted = _parse_version(version)
    for path in sorted(wheel_dir.glob("transformers-*.whl")):
        try:
            if Version(path.name.split("-")[1]) == wanted:  # 5.22 and 5.22.0 name the same wheel
                return path
        except InvalidVersion:
            continue
    return None


def wheel_for(version: str, wheel_dir: Path) -> Path:
    """The wheel of transformers ``version`` in ``wheel_dir``, downloaded with pip when it is not there yet."""
    found = _find_wheel(version, wheel_dir)
    if found is not None:
        return found
    wheel_dir.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet"]
    result = subprocess.run(
        [*command, f"transformers=={version}", "-d", str(wheel_dir)], capture_output=True, text=True
    )
    found = _find_wheel(version, wheel_dir)
    if result.returncode or found is None:
        lines = [line for line in (result.stderr or result.stdout).splitlines() if line.strip()]
        raise UsageError(f"transformers {version}: pip download failed: {lines[-1] if lines else 'no wheel'}")
    return found


def git(repo: Path, *args: str) -> str:
    # A fixed identity and no signing: the temporary repository must commit on any machine's git config.
    command = ["git", "-C", str(repo), "-c", "commit.gpgsign=false", *args]
    result = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **GIT_IDENTITY})
    if result.returncode:
        raise RuntimeError(f"git {' '.join(args)} failed in {repo}: {result.stderr.strip()}")
    return result.stdout.strip()


def make_checkout(version: str, dest: Path, wheel_dir: Path) -> Path:
    """A git repository at ``dest`` holding the wheel's ``transformers/`` as ``src/transformers/``, committed once."""
    if dest.exists() and any(dest.iterdir()):
        raise UsageError(f"{dest} is not empty")
    _unpack(version, wheel_dir, dest / "src")
    # The jobs import the checkout, leaving bytecode behind; ignored, it never shows in a diff or a status.
    (dest / ".gitignore").write_text("__pycache__/\n")
    git(dest, "init", "-q", "-b", "main")
    git(dest, "add", "-A")
    git(dest, "commit", "-q", "-m", f"transformers {version}")
    return dest


def _unpack(version: str, wheel_dir: Path, src: Path) -> None:
    with zipfile.ZipFile(wheel_for(version, wheel_dir)) as archive:
        archive.extractall(src, [name for name in archive.namelist() if name.startswith("transformers/")])


def overlay_release(checkout: Path, version: str, wheel_dir: Path) -> None:
    """Commit another release's ``transformers/`` on top of the checkout: the diff between two releases."""
    shutil.rmtree(checkout / "src" / "transformers")
    _unpack(version, wheel_dir, checkout / "src")
    git(checkout, "add", "-A")
    git(checkout, "commit", "-q", "-m", f"transformers {version}")


def _modeling_file(model_type: str) -> str:
    return f"src/transformers/models/{model_type}/modeling_{model_type}.py"


def require_model(version: str, wheel: Path, model_type: str) -> None:
    """Fail before any gate run when the release has no modeling file for ``model_type``."""
    with zipfile.ZipFile(wheel) as archive:
        if _modeling_file(model_type).removeprefix("src/") not in archive.namelist():
            raise UsageError(f"transformers {version} has no {_modeling_file(model_type)}")


def touch_model(checkout: Path, model_type: str) -> None:
    """A harmless one-model change, committed: the gate's diff then selects every class of ``model_type``."""
    with (checkout / _modeling_file(model_type)).open("a") as modeling:
        modeling.write(TOUCH_LINE)
    git(checkout, "commit", "-q", "-am", f"touch modeling_{model_type}.py")


# ── Running the gate ──


def package_versions() -> dict[str, str]:
    """The installed versions (importlib.metadata) of what the gate runs on; the jobs' transformers is the checkout."""
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    versions["python"] = platform.python_version()
    return versions


def package_versions_of(python: str) -> dict[str, str]:
    """``package_versions()`` as the interpreter ``python`` (a torch release's environment) sees them."""
    if python == sys.executable:
        return package_versions()
    code = f"import json, runpy; print(json.dumps(runpy.run_path({__file__!r})['package_versions']()))"
    result = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(result.stdout)


# ── Torch releases: one virtual environment each ──


def pinned_set_with_torch(version: str, constraints: Path = ROOT / "constraints.txt") -> str:
    """``constraints.txt`` with its torch pin replaced by ``version``: the known-good set on another torch."""
    _parse_version(version)
    lines = [line for line in constraints.read_text().splitlines() if not re.match(r"torch\s*==", line)]
    return "\n".join([*lines, f"torch=={version}"]) + "\n"


def running_torch() -> str | None:
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def _same_release(installed: str | None, wanted: str) -> bool:
    return installed is not None and Version(installed).public == Version(wanted).public  # 2.13.0+cpu is 2.13.0


def torch_python(version: str, venv_dir: Path, echo: Echo = print, extras: tuple[str, ...] = ()) -> str:
    """The interpreter the gate runs on for torch ``version``: this one when it holds that torch, else the Python of
    ``venv_dir/torch-<version>``, built on first use and reused while this checkout and its pinned set are the same
    and it holds the ``extras`` (packages beside hfexport[all], e.g. timm and a torchvision of that torch)."""
    wanted = _parse_version(version)
    if _same_release(running_torch(), version):
        return sys.executable
    venv = venv_dir / f"torch-{wanted}"
    python, ready = venv / "bin" / "python", venv / "hfexport-ready.json"
    pinned = pinned_set_with_torch(str(wanted))
    identity = {"root": str(ROOT), "pinned": pinned}
    built = json.loads(ready.read_text()) if python.exists() and ready.exists() else {}
    held = set(built.pop("extras", []))
    if built == identity and held >= set(extras):
        return str(python)
    extras = tuple(sorted(held | set(extras))) if built == identity else extras
    echo(f"torch {version}: building {venv} (torch, hfexport[all] and the pinned set)")
    ready.unlink(missing_ok=True)
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    (venv / "constraints.txt").write_text(pinned)
    # For this install only: a machine-wide constraint (one capping torch, say) would refuse the torch asked for.
    env = {**os.environ, "PIP_CONSTRAINT": str(venv / "constraints.txt")}
    command = [str(python), "-m", "pip", "install", "--quiet", "-e", f"{ROOT}[all]", *extras]
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    if result.returncode:
        lines = [line for line in (result.stderr or result.stdout).splitlines() if line.strip()]
        raise UsageError(f"torch {version}: pip install failed: {lines[-1] if lines else 'no output'}")
    ready.write_text(json.dumps({**identity, "extras": sorted(extras)}))
    return str(python)


def gate_args(run: str) -> list[str]:
    """The gate's selection for a run kind (the change run's model type is in the committed diff)."""
    return ["--models", "representative"] if run == "representative" else ["--base", "HEAD~1"]


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


def _stream(command: list[str], cwd: Path, log: Path, echo: Echo) -> tuple[int, str]:
    """Run ``command``, echoing and logging every line; return its exit code and its last non-empty line."""
    last = ""
    with log.open("w") as sink:
        process = subprocess.Popen(
            command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
        )
        for line in process.stdout:
            sink.write(line)
            if line.strip():
                last = line.strip()
                echo(f"    {line.rstrip()}")
    return process.wait(), last


def step_dir(results: Path, version: str, run: str, torch: str | None = None) -> Path:
    """Where a gate run writes: ``RESULTS/<version>/<run>``, under ``RESULTS/torch-<torch>/`` on the torch axis."""
    return (results / f"{TORCH_AXIS}{torch}" if torch else results) / version / run


def run_step(
    version: str,
    run: str,
    checkout: Path,
    options: argparse.Namespace,
    echo: Echo,
    clock: Callable[[], str],
    torch: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """One gate run on ``checkout``; writes ``compat.json`` beside the gate's reports and returns it. ``torch``: the
    torch axis's (version, interpreter) to run the gate with instead of this Python."""
    python = torch[1] if torch else sys.executable
    report_dir = step_dir(options.results, version, run, torch[0] if torch else None).resolve()
    shutil.rmtree(report_dir, ignore_errors=True)  # a stale report.json must not pass for this run's
    report_dir.mkdir(parents=True)
    selection = gate_args(run)
    tail = ["--backends", ",".join(options.backends), "-j", str(options.jobs), "--report-dir", str(report_dir)]
    label = f"transformers {version}" + (f" · torch {torch[0]}" if torch else "")
    echo(f"[{clock()}] {label} · {run}: hfexport check {' '.join(selection + tail[:-2])}")
    started = time.monotonic()
    command = [python, "-m", "hfexport.cli", "check", *selection, *tail]
    exit_code, last = _stream(command, checkout, report_dir / "gate.log", echo)
    meta = {
        "version": version,
        "run": run,
        "command": ["hfexport", "check", *selection, *tail[:-2]],
        "change_model": options.change_model if run == "change" else None,
        "exit_code": exit_code,
        "last_line": last,
        "seconds": round(time.monotonic() - started, 1),
        "packages": package_versions_of(python),
        "torch_axis": torch[0] if torch else None,
    }
    (report_dir / "compat.json").write_text(json.dumps(meta, indent=1) + "\n")
    echo(f"[{clock()}] {label} · {run}: {_step_summary(report_dir, meta)}")
    return meta


def _step_summary(report_dir: Path, meta: dict[str, Any]) -> str:
    took = f"exit {meta['exit_code']} in {meta['seconds']:.1f} s"
    path = report_dir / "report.json"
    if not path.exists():
        return f"{took}, no report: {meta['last_line']}"
    report = json.loads(path.read_text())
    counts = Counter(outcome(cell) for cell in report["cells"])
    where = {True: "checkout's code", False: "INSTALLED transformers, not the checkout", None: "code origin not shown"}
    text = ", ".join(f"{counts[kind]} {kind}" for kind in OUTCOMES if counts[kind])
    return f"{took}: {text or 'no cells'} ({where[imported_from_checkout(report)]})"


def run_matrix(options: argparse.Namespace, echo: Echo = print) -> list[dict[str, Any]]:
    """Every run of every version; input is checked (wheels fetched, model type found) before any gate run."""
    started = time.monotonic()

    def clock() -> str:
        return f"{time.monotonic() - started:7.1f} s"

    wheels = {}
    for version in options.versions:
        wheels[version] = wheel_for(version, options.wheel_dir)
        echo(f"[{clock()}] transformers {version}: wheel {wheels[version]}")
        if "change" in options.runs:
            require_model(version, wheels[version], options.change_model)
    torches: list[tuple[str, str] | None] = [None]  # None: this Python, the transformers axis
    if options.torch:
        torches = [(torch, torch_python(torch, options.venv_dir, echo)) for torch in options.torch]
        echo(f"[{clock()}] torch {', '.join(options.torch)}: {', '.join(python for _, python in torches)}")
    steps = []
    for version in options.versions:
        scratch = Path(tempfile.mkdtemp(prefix=f"compat-{version}-")).resolve()
        try:
            checkout = make_checkout(version, scratch, options.wheel_dir)
            echo(f"[{clock()}] transformers {version}: checkout {checkout} ({git(checkout, 'rev-parse', 'HEAD')[:12]})")
            for run in options.runs:
                if run == "change":
                    touch_model(checkout, options.change_model)
                steps += [run_step(version, run, checkout, options, echo, clock, torch) for torch in torches]
        finally:
            if not options.keep:
                shutil.rmtree(scratch, ignore_errors=True)
    echo(f"[{clock()}] done: {len(steps)} gate runs; results in {options.results}")
    return steps


# ── CI: one release older and one newer than the pin ──


def pinned_version(constraints: Path = ROOT / "constraints.txt") -> str:
    match = re.search(r"^transformers==(\S+)", constraints.read_text(), re.MULTILINE)
    if match is None:
        raise UsageError(f"{constraints} pins no transformers version")
    return match.group(1)


def released_versions() -> list[str]:
    """Every transformers version on the package index (``pip index versions``: one request)."""
    command = [sys.executable, "-m", "pip", "index", "versions", "transformers"]
    result = subprocess.run(command, capture_output=True, text=True)
    match = re.search(r"Available versions: (.+)", result.stdout)
    if result.returncode or match is None:
        raise UsageError(f"pip index versions transformers failed: {result.stderr.strip().splitlines()[-1:]}")
    return [v.strip() for v in match.group(1).split(",")]


def neighbours(pin: str, available: list[str]) -> list[str]:
    """The release just before the pin (what users still run) and the newest release (what they move to next)."""
    releases = sorted({Version(v) for v in available if not Version(v).is_prerelease})
    older = [v for v in releases if v < Version(pin)]
    newer = [v for v in releases if v > Version(pin)]
    return [str(v) for v in (older[-1:] + newer[-1:])]


def ci_problems(results: Path, steps: list[dict[str, Any]]) -> list[str]:
    """What makes the CI job fail: a gate run without a report, a tool error, or the installed code exported."""
    problems = []
    for meta in steps:
        where = f"transformers {meta['version']} · {meta['run']}"
        path = step_dir(results, meta["version"], meta["run"], meta.get("torch_axis")) / "report.json"
        if not path.exists():
            problems.append(f"{where}: no report (exit {meta['exit_code']}: {meta['last_line']})")
            continue
        report = json.loads(path.read_text())
        tool_errors = [c["model_class"] for c in report["cells"] if outcome(c) == "tool error"]
        if tool_errors:
            problems.append(f"{where}: tool errors in {', '.join(sorted(set(tool_errors)))}")
        if imported_from_checkout(report) is False:
            problems.append(f"{where}: the jobs exported the installed transformers, not the checkout")
    return problems


# ── Rendering ──


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


# ── Command line ──


def _csv(choices: tuple[str, ...]) -> Callable[[str], list[str]]:
    def parse(value: str) -> list[str]:
        names = list(dict.fromkeys(name.strip() for name in value.split(",") if name.strip()))
        unknown = [name for name in names if name not in choices]
        if unknown or not names:
            raise argparse.ArgumentTypeError(f"choose from {', '.join(choices)}")
        return names

    return parse


def _versions(value: str) -> list[str]:
    versions = list(dict.fromkeys(v.strip() for v in value.split(",") if v.strip()))
    for version in versions:
        try:
            Version(version)
        except InvalidVersion:
            raise argparse.ArgumentTypeError(f"{version!r} is not a version number") from None
    return versions


def _positive(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {value!r}")
    return int(value)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run the gate on each version's checkout, then re-render the document")
    run.add_argument("versions", nargs="+", metavar="VERSION")
    run.add_argument("--backends", type=_csv(BACKENDS), default=list(BACKENDS), help="comma-separated")
    run.add_argument("--runs", type=_csv(tuple(RUNS)), default=list(RUNS), help="representative, change or both")
    run.add_argument("--change-model", default="llama", metavar="TYPE", help="model type the change run touches")
    run.add_argument(
        "--torch",
        type=_versions,
        metavar="VERSIONS",
        help="comma-separated torch releases: run on each one (the torch axis) instead of this Python's torch",
    )
    run.add_argument("--venv-dir", type=Path, default=DEFAULT_VENV_DIR, help="where each torch's environment lives")
    ci = commands.add_parser("ci", help="the release before the pin and the newest one, representative set only")
    ci.add_argument("--versions", type=lambda v: v.split(","), help="comma-separated, instead of the pin's neighbours")
    render_cmd = commands.add_parser("render", help="write the document from the results")
    for command in (run, ci):
        command.add_argument("-j", "--jobs", type=_positive, default=2, help="jobs in parallel per gate run")
        command.add_argument("--wheel-dir", type=Path, default=DEFAULT_WHEEL_DIR)
        command.add_argument("--keep", action="store_true", help="keep the temporary checkouts")
    for command in (run, ci, render_cmd):
        command.add_argument("--results", type=Path, default=DEFAULT_RESULTS)
        command.add_argument("--output", type=Path, help=f"default: {DEFAULT_DOC} ({{results}}/compatibility.md: ci)")
    return parser


def _ci(args: argparse.Namespace) -> int:
    pin = pinned_version()
    args.versions = args.versions or neighbours(pin, released_versions())
    args.backends, args.runs, args.change_model = list(CI_BACKENDS), ["representative"], "llama"
    args.torch = []  # this Python's torch: the torch axis is run_step's --torch (tests/test_torch_releases.py)
    print(f"transformers pinned at {pin}; checking {', '.join(args.versions)} on {', '.join(CI_BACKENDS)}")
    steps = run_matrix(args)
    render(args.results, args.output or args.results / "compatibility.md")
    problems = ci_problems(args.results, steps)
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    steps: list[dict[str, Any]] = []
    try:
        if args.command == "ci":
            return _ci(args)
        if args.command == "run":
            args.versions = list(dict.fromkeys(args.versions))
            steps = run_matrix(args)
        render(args.results, args.output or DEFAULT_DOC)
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"wrote {args.output or DEFAULT_DOC}")
    # 1 when a gate run wrote no report (the gate itself failed); model failures are results, not errors.
    missing = _missing_reports(args.results, steps)
    for name in missing:
        print(f"error: {name}: the gate wrote no report (see its gate.log)", file=sys.stderr)
    return 1 if missing else 0


def _missing_reports(results: Path, steps: list[dict[str, Any]]) -> list[str]:
    return [
        str(path.relative_to(results))
        for path in (step_dir(results, s["version"], s["run"], s.get("torch_axis")) for s in steps)
        if not (path / "report.json").exists()
    ]


if __name__ == "__main__":
    sys.exit(main())
