"""A one-model pull request, timed as the gate sees it: a fresh run, the same push again, a push touching a file only
some classes import; and where each cell's time goes, stage by stage.

Run by hand, not by the tests (minutes): ``python scripts/bench_pr.py [--version 5.23.0] [--model gemma3] [-j 2]``.
The release wheel is unpacked into a temporary git checkout (as ``scripts/compat_check.py`` does); one commit appends
a no-op code line to ``modeling_<MODEL>.py``, and ``hfexport check --base <the release>`` runs on it with an empty
result cache. Then, with the same base:

- ``again``: the same command, nothing changed (every cell comes from the result cache);
- ``partial``: a commit touching ``--partial FILE`` (default: siglip's modeling file, which only gemma3's multimodal
  classes import), then the same command: the PR now selects siglip's classes too (never run: they run), and of
  the model's cells only those whose files changed run again.

``--no-health`` runs them without export health (passing cells not run at base): its cost is the difference.
Prints each run's wall seconds and how many cells ran or came from the cache, then the profile of the fresh run: per
backend, the seconds each step took summed over its cells (build, eager, export and its own steps, save, load, run,
compare, second shape, generation).

``--diff 5.22.0..5.23.0 --shard 1/64``: a whole release diff instead (the second release's files committed on top of
the first), one shard of it, with an empty result cache; prints the shard's wall seconds, its cells, the profile, and
what one shard of a ``--matrix``-shard split would take at the same pace.
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

import compat_checkouts
import compat_environments


def run_gate(
    checkout: Path,
    base: str,
    cache: Path,
    report_dir: Path,
    jobs: int,
    backends: str,
    shard: str = "1/1",
    health: bool = True,
) -> tuple[float, dict[str, Any]]:
    command = [sys.executable, "-m", "hfexport.cli", "check", "--base", base, "-j", str(jobs), "--backends", backends]
    command += ["--shard", shard, "--cache-dir", str(cache), "--report-dir", str(report_dir)]
    command += [] if health else ["--no-health"]
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


def release_diff(args: argparse.Namespace, root: Path) -> None:
    """One shard of the diff between two releases, timed, and the pace of a ``--matrix`` split."""
    first, _, second = args.diff.partition("..")
    checkout = compat_checkouts.make_checkout(first, root / "transformers", args.wheel_dir)
    base = compat_checkouts.git(checkout, "rev-parse", "HEAD")
    compat_checkouts.overlay_release(checkout, second, args.wheel_dir)
    seconds, report = run_gate(checkout, base, root / "cache", root / "report", args.jobs, args.backends, args.shard)
    index, count = (int(part) for part in args.shard.split("/"))
    print(f"transformers {first} -> {second}, shard {index}/{count}: {len(report['cells'])} cells in {seconds:.1f} s")
    print(f"at that pace one of {args.matrix} shards takes {seconds * count / args.matrix / 60:.1f} min")
    print("profile (seconds summed over cells):")
    print("\n".join(profile(report)))


def pull_request(args: argparse.Namespace, root: Path) -> None:
    checkout = compat_checkouts.make_checkout(args.version, root / "transformers", args.wheel_dir)
    base = compat_checkouts.git(checkout, "rev-parse", "HEAD")  # the pull request's base: the release
    compat_checkouts.touch_model(checkout, args.model)
    runs = []
    for name in ("fresh", "again", "partial"):
        if name == "partial":
            with (checkout / args.partial).open("a") as touched:
                touched.write("\n_bench_pr_touched = True\n")  # code: a comment selects nothing
            compat_checkouts.git(checkout, "commit", "-qam", "touch a file some classes import")
        seconds, report = run_gate(
            checkout, base, root / "cache", root / name, args.jobs, args.backends, health=args.health
        )
        cached = sum(bool(c.get("cached")) for c in report["cells"])
        runs.append((name, seconds, len(report["cells"]) - cached, cached, report))
        print(f"{name:<8} {seconds:7.1f} s  {len(report['cells']) - cached:3d} cells ran, {cached:3d} from the cache")
    fresh = runs[0][4]
    classes = sorted({c["model_class"] for c in fresh["cells"]})
    print(f"\n{args.model} on transformers {args.version}: {len(classes)} classes x {len(fresh['backends'])} backends")
    print("profile of the fresh run (seconds summed over cells):")
    print("\n".join(profile(fresh)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", default=compat_environments.pinned_version())
    parser.add_argument("--model", default="gemma3", help="the model type the pull request touches")
    parser.add_argument("--partial", default="src/transformers/models/siglip/modeling_siglip.py")
    parser.add_argument("--diff", metavar="FROM..TO", help="a release diff instead of a one-model pull request")
    parser.add_argument("--shard", default="1/64", help="with --diff: the shard K/N to run")
    parser.add_argument("--matrix", type=int, default=16, help="with --diff: the matrix size to project onto")
    parser.add_argument("-j", "--jobs", type=int, default=2)
    parser.add_argument("--backends", default="dynamo,onnx,executorch")
    parser.add_argument(
        "--no-health", dest="health", action="store_false", help="check --no-health: passing cells not run at base"
    )
    parser.add_argument("--wheel-dir", type=Path, default=compat_checkouts.DEFAULT_WHEEL_DIR)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hfexport-bench-pr-") as scratch:
        (release_diff if args.diff else pull_request)(args, Path(scratch))


if __name__ == "__main__":
    main()
