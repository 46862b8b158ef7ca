"""What ``check --bisect`` costs: one new failure bisected over a range of N commits (issue 52).

Run by hand, not by the tests (minutes): ``python scripts/bench_bisect.py [--commits 16] [--bad 11]``.
A git checkout of the installed transformers' modeling_llama.py (tests/checkout_fixture.py) gets N commits: no-op
module-level lines, except commit ``--bad``, which adds a data-dependent branch to ``LlamaRMSNorm.forward``.
``hfexport check --base <base> --backends dynamo --models LlamaForCausalLM --no-generation --no-health`` then runs
twice with an empty result cache each time, without and with ``--bisect``; prints both wall times, the commit named,
the steps that ran a cell, and the cost per step (the difference over the steps).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from checkout_fixture import LLAMA, commit, git, make_checkout

# A Python branch on a tensor's value (as tests/test_gate.py's DATA_DEPENDENT): torch.export cannot trace it.
BREAK = (
    "        input_dtype = hidden_states.dtype\n",
    "        input_dtype = hidden_states.dtype\n        if hidden_states.sum() > 1e30:\n"
    "            hidden_states = hidden_states * 2\n",
)


def _range(repo: Path, commits: int, bad: int) -> list[str]:
    made = []
    for number in range(1, commits + 1):
        source = (repo / LLAMA).read_text()
        source = source.replace(*BREAK) if number == bad else source + f"_unused_{number} = 0\n"
        made.append(commit(repo, {LLAMA: source}, f"commit {number}"))
    return made


def _check(repo: Path, base: str, scratch: Path, bisect: bool) -> tuple[float, dict]:
    name = "bisect" if bisect else "plain"
    args = ["--base", base, "--backends", "dynamo", "--models", "LlamaForCausalLM", "--no-generation", "--no-health"]
    args += ["--cache-dir", str(scratch / f"cache-{name}"), "--report-dir", str(scratch / name)]
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "hfexport.cli", "check", *args, *(["--bisect"] if bisect else [])], cwd=repo)
    took = time.monotonic() - started
    (cell,) = json.loads((scratch / name / "report.json").read_text())["cells"]
    return took, cell


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=16)
    parser.add_argument("--bad", type=int, default=11, help="the commit (1..N) that breaks the export")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hfexport-bench-bisect-") as folder:
        scratch = Path(folder)
        repo = make_checkout(scratch / "transformers", heads=1)
        base = git(repo, "rev-parse", "HEAD")
        commits = _range(repo, options.commits, options.bad)
        plain, _ = _check(repo, base, scratch, bisect=False)
        bisected, cell = _check(repo, base, scratch, bisect=True)
    found = cell["first_bad_commit"] or {}
    runs = found.get("runs") or 0
    right = found.get("sha") == commits[options.bad - 1]
    print(f"{options.commits} commits, commit {options.bad} breaks LlamaForCausalLM on dynamo")
    print(f"check without --bisect: {plain:.1f} s; with --bisect: {bisected:.1f} s")
    print(f"first bad commit: {found.get('sha', '')[:12]} ({'right' if right else 'WRONG'}), {runs} step runs")
    if runs:
        print(f"bisecting: {bisected - plain:.1f} s, {(bisected - plain) / runs:.1f} s per step")


if __name__ == "__main__":
    main()
