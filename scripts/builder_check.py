"""Tiny-model builder check: which classes of a selection build and run eagerly, and why the others do not.

Classes listed in ``tiny_models.UNRUNNABLE`` (with the reason no tiny model runs them here) are counted apart.
No export runs: each class is built from its tiny config (``hfexport.tiny_models.tiny_model``), given its sample
inputs and run once in eager mode, in this process, one class after another. Prints one line per class and a
total; ``--json`` writes every result. Much faster than a coverage sweep, so builder work can iterate on it.

    python scripts/builder_check.py --set heads
    python scripts/builder_check.py --set all --failed-only --json build/builder.json
    python scripts/builder_check.py --models blip_2_qformer,BrosModel
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import torch  # noqa: E402
from coverage_sweep import set_classes  # noqa: E402

from hfexport.tiny_models import UNRUNNABLE, resolve_model_class, sample_inputs, tiny_model  # noqa: E402


class _TimedOut(Exception):
    pass


def _alarm(signum: int, frame: FrameType | None) -> None:
    raise _TimedOut


def check_class(name: str, timeout: int) -> str | None:
    """None when ``name`` builds and runs eagerly, else ``"<step>: <ErrorType>: <first line>"``."""
    step = "build"
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(timeout)
    try:
        model = tiny_model(name)
        step = "inputs"
        inputs = sample_inputs(model)
        step = "eager"
        with torch.no_grad():
            model(**inputs)
    except _TimedOut:
        return f"{step}: timed out after {timeout} s"
    except Exception as error:
        first_line = (str(error).strip().splitlines() or [""])[0][:160]
        return f"{step}: {type(error).__name__}: {first_line}"
    finally:
        signal.alarm(0)
    return None


def _listed(name: str) -> bool:
    try:
        return resolve_model_class(name).__name__ in UNRUNNABLE
    except Exception:
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    chosen = parser.add_mutually_exclusive_group()
    chosen.add_argument("--set", choices=("heads", "all", "representative"), default="heads")
    chosen.add_argument("--models", help="comma-separated model types or classes")
    parser.add_argument("--failed-only", action="store_true", help="print only the classes that fail")
    parser.add_argument("--timeout", type=int, default=120, help="seconds per class")
    parser.add_argument("--json", type=Path, help="write {class: error or null} here")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.models.split(",") if n.strip()] if args.models else set_classes(args.set)
    warnings.simplefilter("ignore")
    results: dict[str, str | None] = {}
    started = time.perf_counter()
    for name in names:
        results[name] = error = check_class(name, args.timeout)
        if error or not args.failed_only:
            print(f"{name}: {error or 'ok'}", flush=True)
    listed = sum(error is not None and _listed(name) for name, error in results.items())
    failed = sum(error is not None for error in results.values()) - listed
    seconds = time.perf_counter() - started
    built = len(names) - failed - listed
    print(
        f"{built} of {len(names)} built and ran eagerly; {listed} listed unrunnable; {failed} failed ({seconds:.0f} s)"
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
