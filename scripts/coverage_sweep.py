"""Coverage sweep: hfexport's exporters side by side with ``transformers.exporters`` on every architecture.

For each selected model class and backend, the gate's own check (``hfexport.gate.run.run_check``: warm worker,
one forked job per cell, tiny seeded model, export, save, reload, run, compare with eager) runs once per engine:
``hfexport`` and ``transformers`` (the installed transformers' own ``transformers.exporters``). Both engines build
the very same tiny model and sample inputs (same builder, same seed) in the same job runner, so a difference in a
row is a difference of the exporters. Each invocation writes one gate report per engine under ``--results``;
``render`` joins the committed record ``docs/coverage.json`` and every report found there (the newest result of a
cell wins) into ``docs/coverage.md``, and writes the joined record back: a sweep on any checkout adds to the
published cells instead of starting over.

    python scripts/coverage_sweep.py run --all --backends dynamo,onnx,executorch --shard 1/4 -j 2
    python scripts/coverage_sweep.py run --set heads --backends dynamo,onnx --shard 2/2
    python scripts/coverage_sweep.py run --set representative --backends executorch
    python scripts/coverage_sweep.py run --models llama,bert --backends onnx
    python scripts/coverage_sweep.py render

Selections: ``--all`` every class the tiny-model builder lists for every model type (base model and main task
heads); ``--set heads`` one class per model type, its main task head (the class ``hfexport export <type>``
builds); ``--set representative`` a fixed set of architectures across families (decoder LMs, MoE,
encoders, encoder-decoders, vision, audio); ``--models`` explicit types or classes.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

from coverage_doc import render  # noqa: E402
from coverage_record import ENGINE_TITLES, ENGINES  # noqa: E402
from coverage_selection import VARIANT_SEPARATOR, classes_in_shard, selected_names, set_label, variants  # noqa: E402

from hfexport.gate import changes, views  # noqa: E402
from hfexport.gate.cells import BACKENDS, parse_shard  # noqa: E402
from hfexport.gate.run import run_check  # noqa: E402
from hfexport.gate.targets import CheckOptions, GateError, Target  # noqa: E402

DEFAULT_RESULTS = ROOT / "build" / "coverage"
DEFAULT_DOC = ROOT / "docs" / "coverage.md"
DEFAULT_STORE = ROOT / "docs" / "coverage.json"

# ── Running ──


def run_sweep(
    names: list[str],
    backends: list[str],
    engines: list[str],
    results: Path,
    label: str,
    shard: tuple[int, int] = (1, 1),
    jobs: int = 1,
    timeout: float = 600.0,
    echo: Any = print,
    generation: bool = False,
) -> list[Path]:
    """Run the gate's check on ``names`` once per engine; write and return one report file per engine.

    ``generation``: run the gate's greedy generation parts on decoder LMs too (the document's generation column).
    """
    results.mkdir(parents=True, exist_ok=True)
    written = []
    for engine in engines:
        selection = changes.Selection(mode="models", names=list(names), reason=f"coverage sweep ({label})")
        options = CheckOptions(
            backends=list(backends), jobs=jobs, timeout=timeout, engine=engine, generation=generation, shard=shard
        )
        echo(f"── {ENGINE_TITLES[engine]} · {','.join(backends)} · {label} · shard {shard[0]}/{shard[1]}")
        started = time.time()
        result = run_check(Target(selection, checkout=None), options, echo=echo)
        seconds = round(time.time() - started, 1)
        result.extra["sweep"] = {
            "set": label,
            "seconds": seconds,
            "argv": sys.argv[1:],
            "generation": generation,
            "commit": hfexport_commit(),
        }
        if label == "variants":  # what the set leaves out, and why: the document lists them
            result.extra["sweep"]["unmade"] = {
                f"{model_class}{VARIANT_SEPARATOR}{v.name}": v.unmade for model_class, v in variants() if v.unmade
            }
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        path = results / f"{stamp}-{engine}-{'_'.join(backends)}-{label}-{shard[0]}of{shard[1]}.json"
        path.write_text(views.to_json(result))
        written.append(path)
        seconds = result.extra["sweep"]["seconds"]
        echo(f"   {result.summary['passed']}/{result.summary['total']} passed in {seconds} s")
    return written


def hfexport_commit() -> str | None:
    """The commit of hfexport a sweep measured, ``+`` after it where hfexport's files differed from it; None outside
    a git checkout. A cell is only as current as the code that ran it: the document names each run's."""

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)

    head = git("rev-parse", "--short", "HEAD")
    if head.returncode:
        return None
    changed = git("status", "--porcelain", "--", "hfexport").stdout.strip()
    return head.stdout.strip() + ("+" if changed else "")


# ── Command line ──


def _shard(value: str) -> tuple[int, int]:
    try:
        return parse_shard(value)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _csv(choices: tuple[str, ...]) -> Any:
    def parse(value: str) -> list[str]:
        names = [name.strip() for name in value.split(",") if name.strip()]
        unknown = [name for name in names if name not in choices]
        if unknown or not names:
            raise argparse.ArgumentTypeError(f"choose from {', '.join(choices)}")
        return names

    return parse


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run a sweep (one gate run per engine), then re-render the document")
    chosen = run.add_mutually_exclusive_group()
    chosen.add_argument("--all", action="store_true", help="every class of every model type")
    chosen.add_argument("--set", choices=("heads", "representative", "variants"), default="heads")
    chosen.add_argument("--models", help="comma-separated model types or classes")
    run.add_argument("--backends", type=_csv(BACKENDS), default=list(BACKENDS))
    run.add_argument("--engines", type=_csv(ENGINES), default=list(ENGINES))
    run.add_argument("--shard", type=_shard, default=(1, 1), help="K/N: the K-th of N deterministic shares")
    run.add_argument("-j", "--jobs", type=int, default=1, help="jobs in parallel per gate run")
    run.add_argument("--timeout", type=float, default=600.0, help="seconds per cell")
    run.add_argument(
        "--generation", action="store_true", help="also run the gate's greedy generation on decoder LMs (a column)"
    )
    for command in (run, commands.add_parser("render", help="write the document from the results")):
        command.add_argument("--results", type=Path, default=DEFAULT_RESULTS, help="where the reports go")
        command.add_argument("--doc", type=Path, default=DEFAULT_DOC)
        command.add_argument("--store", type=Path, default=DEFAULT_STORE, help="the committed record of every cell")
    args = parser.parse_args(argv)
    if args.command == "run":
        names = selected_names(args)
        if not args.models:  # the sets are class names: shard them here already
            names = classes_in_shard(names, args.backends, args.shard)
        try:
            run_sweep(
                names,
                args.backends,
                args.engines,
                args.results,
                set_label(args),
                args.shard,
                args.jobs,
                args.timeout,
                generation=args.generation,
            )
        except GateError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    render(args.results, args.doc, args.store)
    print(f"wrote {args.doc} and {args.store}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
