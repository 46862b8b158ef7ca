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
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

from compat_checkouts import (  # noqa: E402
    DEFAULT_WHEEL_DIR,
    UsageError,
    git,
    make_checkout,
    require_model,
    touch_model,
    wheel_for,
)
from compat_doc import OUTCOMES, RUNS, TORCH_AXIS, imported_from_checkout, outcome, render  # noqa: E402
from compat_environments import DEFAULT_VENV_DIR, Echo, package_versions_of, pinned_version, torch_python  # noqa: E402

from hfexport.gate.cells import BACKENDS  # noqa: E402

DEFAULT_RESULTS = ROOT / "build" / "compat"
DEFAULT_DOC = ROOT / "docs" / "compatibility.md"
CI_BACKENDS = ("dynamo", "onnx")

# ── Running the gate ──


def gate_args(run: str) -> list[str]:
    """The gate's selection for a run kind (the change run's model type is in the committed diff)."""
    return ["--models", "representative"] if run == "representative" else ["--base", "HEAD~1"]


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
