"""A one-model pull request, timed as the gate sees it: a fresh run, the same push again, a push touching a file only
some classes import; and where each cell's time goes, stage by stage.

Run by hand, not by the tests (minutes): ``python scripts/bench_pr.py [--version 5.23.0] [--model gemma3] [-j 2]``.
The release wheel is unpacked into a temporary git checkout (as ``scripts/compat_check.py`` does); one commit appends
a comment to ``modeling_<MODEL>.py``, and ``hfexport check --base <the release>`` runs on it with an empty result
cache. Then, with the same base:

- ``again``: the same command, nothing changed (every cell comes from the result cache);
- ``partial``: a commit touching ``--partial FILE`` (default: siglip's modeling file, which only gemma3's multimodal
  classes import), then the same command: the PR now selects siglip's classes too (never run: they run), and of
  the model's cells only those whose files changed run again.

Prints each run's wall seconds and how many cells ran or came from the cache, then the profile of the fresh run: per
backend, the seconds each step took summed over its cells (build, eager, export and its own steps, save, load, run,
compare, second shape, generation).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import compat_check


def run_gate(
    checkout: Path, base: str, cache: Path, report_dir: Path, jobs: int, backends: str
) -> tuple[float, dict[str, Any]]:
    command = [sys.executable, "-m", "hfexport.cli", "check", "--base", base, "-j", str(jobs), "--backends", backends]
    command += ["--cache-dir", str(cache), "--report-dir", str(report_dir)]
    started = time.perf_counter()
    result = subprocess.run(command, cwd=checkout, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if not (report_dir / "report.json").is_file():
        raise SystemExit(f"hfexport check exited {result.returncode} without a report:\n{result.stderr[-2000:]}")
    return seconds, json.loads((report_dir / "report.json").read_text())


def profile(report: dict[str, Any]) -> list[str]:
    """Seconds per step summed over each backend's cells (the export's own steps indented under it)."""
    totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for cell in report["cells"]:
        for step, seconds in (cell.get("timings") or {}).items():
            totals[step][cell["backend"]] += seconds
    backends = report["backends"]
    lines = [f"{'step':<42}" + "".join(f"{b:>12}" for b in backends)]
    for step in sorted(totals, key=lambda s: (s == "total", s.split(" · ")[0], s)):
        name = ("  " + step.split(" · ", 1)[1]) if step.startswith("export · ") else step
        lines.append(f"{name:<42}" + "".join(f"{totals[step].get(b, 0):>12.1f}" for b in backends))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", default=compat_check.pinned_version())
    parser.add_argument("--model", default="gemma3", help="the model type the pull request touches")
    parser.add_argument("--partial", default="src/transformers/models/siglip/modeling_siglip.py")
    parser.add_argument("-j", "--jobs", type=int, default=2)
    parser.add_argument("--backends", default="dynamo,onnx,executorch")
    parser.add_argument("--wheel-dir", type=Path, default=compat_check.DEFAULT_WHEEL_DIR)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hfexport-bench-pr-") as scratch:
        root = Path(scratch)
        checkout = compat_check.make_checkout(args.version, root / "transformers", args.wheel_dir)
        base = compat_check.git(checkout, "rev-parse", "HEAD")  # the pull request's base: the release
        compat_check.touch_model(checkout, args.model)
        runs = []
        for name in ("fresh", "again", "partial"):
            if name == "partial":
                with (checkout / args.partial).open("a") as touched:
                    touched.write("# bench_pr: touched\n")
                compat_check.git(checkout, "commit", "-qam", "touch a file some classes import")
            seconds, report = run_gate(checkout, base, root / "cache", root / name, args.jobs, args.backends)
            cached = sum(bool(c.get("cached")) for c in report["cells"])
            runs.append((name, seconds, len(report["cells"]) - cached, cached, report))
            print(
                f"{name:<8} {seconds:7.1f} s  {len(report['cells']) - cached:3d} cells ran, {cached:3d} from the cache"
            )
        fresh = runs[0][4]
        classes = sorted({c["model_class"] for c in fresh["cells"]})
        print(
            f"\n{args.model} on transformers {args.version}: {len(classes)} classes x {len(fresh['backends'])} backends"
        )
        print("profile of the fresh run (seconds summed over cells):")
        print("\n".join(profile(fresh)))


if __name__ == "__main__":
    main()
