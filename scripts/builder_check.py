"""Tiny-model builder check: which classes of a selection build and run eagerly, and why the others do not.

Classes listed in ``tiny_models.UNRUNNABLE`` (with the reason no tiny model runs them here) are counted apart.
No export runs: each class is built from its tiny config (``hfexport.tiny_models.tiny_model``), given its sample
inputs and run once in eager mode, in this process, one class after another. Prints one line per class and a
total; ``--json`` writes every result. Much faster than a coverage sweep, so builder work can iterate on it.

    python scripts/builder_check.py --set heads
    python scripts/builder_check.py --set all --failed-only --json build/builder.json
    python scripts/builder_check.py --models blip_2_qformer,BrosModel

``--diff BASE`` checks what the gate selects on a transformers checkout's range BASE..HEAD instead (``--root``, default
the current directory), through the gate's own builder path (the code that decides a cell is not checked), with the
checkout's transformers imported; ``--shards N`` prints, per shard of ``check --shard K/N``, its cells and the share
of them checked (built and run eagerly; ``EXPORT_SKIPS`` cells counted apart):

    python scripts/builder_check.py --diff HEAD~1 --root /tmp/release-diff --shards 16
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
import warnings
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from hfexport.gate.cells import BACKENDS, in_shard  # noqa: E402
from hfexport.gate.changes import SelectedClass  # noqa: E402
from hfexport.gate.skips import skip_reason  # noqa: E402
from hfexport.gate.worker_child import install_checkout  # noqa: E402


class _TimedOut(BaseException):
    # Not an Exception: the gate's build step turns those into the cell's failure, a timeout must end the check.
    pass


def _alarm(signum: int, frame: FrameType | None) -> None:
    raise _TimedOut


def check_class(job: dict[str, Any], checkout: Path | None, timeout: int) -> tuple[str, str | None]:
    """("checked", None) when the job's class builds and runs eagerly through the gate's builder path
    (``checks.building.ClassUnderTest``), else the status the gate gives its cells ("not_checked", "tool_error",
    "oom") and ``"<step>: <ErrorType>: <first line>"``."""
    from hfexport.gate.checks.building import ClassUnderTest
    from hfexport.gate.checks.failures import CellFailure

    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(timeout)
    try:
        ClassUnderTest(job, checkout).build({})
    except _TimedOut:
        return "timeout", f"timed out after {timeout} s"
    except CellFailure as failure:
        return failure.status, f"{failure.step}: {failure.error_type}: {failure.first_line[:160]}"
    finally:
        signal.alarm(0)
    return "checked", None


def _listed(name: str) -> bool:
    from hfexport.tiny_models import UNRUNNABLE, resolve_model_class

    try:
        return resolve_model_class(name).__name__ in UNRUNNABLE
    except Exception:
        return False


def check_names(names: list[str], failed_only: bool, timeout: int) -> tuple[dict[str, str | None], int]:
    """Each class of a selection checked in this process (the installed transformers); exit code 1 if any failed."""
    warnings.simplefilter("ignore")
    results: dict[str, str | None] = {}
    started = time.perf_counter()
    for name in names:
        results[name] = error = check_class({"model_class": name}, None, timeout)[1]
        if error or not failed_only:
            print(f"{name}: {error or 'ok'}", flush=True)
    listed = sum(error is not None and _listed(name) for name, error in results.items())
    failed = sum(error is not None for error in results.values()) - listed
    seconds = time.perf_counter() - started
    built = len(names) - failed - listed
    print(
        f"{built} of {len(names)} built and ran eagerly; {listed} listed unrunnable; {failed} failed ({seconds:.0f} s)"
    )
    return results, 1 if failed else 0


# ── A release diff: what the gate selects, per shard ──


def diff_selection(root: Path, base: str) -> list[SelectedClass]:
    """The classes ``hfexport check --base BASE`` selects in the checkout at ``root`` (read without importing it)."""
    from hfexport.gate.targets import target_for

    classes = target_for(root, [], [], False, base, None).selection.classes
    return list({selected.model_class: selected for selected in classes}.values())


def check_diff(root: Path, base: str, shards: int, failed_only: bool, timeout: int) -> tuple[dict[str, Any], int]:
    """Every selected class checked with the checkout's transformers, then each shard's cells and checked share."""
    selected = diff_selection(root, base)
    print(f"{len(selected)} classes selected by {base}..HEAD", flush=True)
    install_checkout(root)
    warnings.simplefilter("ignore")
    statuses: dict[str, tuple[str, str | None]] = {}
    for index, selection in enumerate(selected, 1):
        job = {"model_class": selection.model_class, "module": selection.module}
        statuses[selection.model_class] = check_class(job, root, timeout)
        error = statuses[selection.model_class][1]
        if error or not failed_only:
            print(f"[{index}/{len(selected)}] {selection.model_class}: {error or 'ok'}", flush=True)
    per_shard = [_shard_counts(selected, statuses, (k, shards)) for k in range(1, shards + 1)]
    for k, counts in enumerate(per_shard, 1):
        share = counts["checked"] / counts["cells"] if counts["cells"] else 1.0
        print(
            f"shard {k}/{shards}: {counts['cells']} cells, {counts['checked']} checked ({share:.1%}), "
            f"{counts['skipped']} skipped, {counts['not_checked']} not checked: "
            + ", ".join(counts["not_checked_cells"])
        )
    unchecked = sum(status != "checked" for status, _ in statuses.values())
    results = {"classes": {name: {"status": s, "error": e} for name, (s, e) in statuses.items()}, "shards": per_shard}
    return results, 1 if unchecked else 0


def _shard_counts(
    selected: list[SelectedClass], statuses: dict[str, tuple[str, str | None]], shard: tuple[int, int]
) -> dict[str, Any]:
    cells = [(s.model_class, b) for s in selected for b in BACKENDS if in_shard(s.model_class, b, shard)]
    skipped = [cell for cell in cells if skip_reason(cell[0])]
    unchecked = [cell for cell in cells if cell not in skipped and statuses[cell[0]][0] != "checked"]
    return {
        "cells": len(cells),
        "checked": len(cells) - len(skipped) - len(unchecked),
        "skipped": len(skipped),
        "not_checked": len(unchecked),
        "not_checked_cells": [f"{name} ({backend})" for name, backend in unchecked],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    chosen = parser.add_mutually_exclusive_group()
    chosen.add_argument("--set", choices=("heads", "all", "representative"), default="heads")
    chosen.add_argument("--models", help="comma-separated model types or classes")
    chosen.add_argument("--diff", metavar="BASE", help="the classes the gate selects on BASE..HEAD of --root")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="the transformers checkout of --diff")
    parser.add_argument("--shards", type=int, default=16, help="with --diff: the checked share per shard of N")
    parser.add_argument("--failed-only", action="store_true", help="print only the classes that fail")
    parser.add_argument("--timeout", type=int, default=120, help="seconds per class")
    parser.add_argument("--json", type=Path, help="write {class: error or null} here (--diff: statuses and shards)")
    args = parser.parse_args(argv)
    if args.diff:
        results, code = check_diff(args.root.resolve(), args.diff, args.shards, args.failed_only, args.timeout)
    else:
        from coverage_selection import set_classes

        names = [n.strip() for n in args.models.split(",") if n.strip()] if args.models else set_classes(args.set)
        results, code = check_names(names, args.failed_only, args.timeout)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
