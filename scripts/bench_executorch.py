"""Time the ExecuTorch (XNNPACK) export of tiny models with hfexport and with ``transformers.exporters``, in one run.

Run by hand, not by the tests: ``python scripts/bench_executorch.py [--dynamic] [--models llama bert ...]``.
Both exporters run in the same process on the same freshly built model, in alternating order, after one warm-up
export each (imports, XNNPACK's pattern graphs and torch's dispatch caches are then paid by neither). Prints wall and
CPU seconds per model, the competitor/hfexport ratio of each, and the medians. CPU time is the fairer number on a
shared machine: it does not count the time other processes hold the cores.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hfexport.gate.model_sets import CORE_MODEL_TYPES


def ours(dynamic: bool) -> Callable[[Any, dict], Any]:
    from hfexport.exporters.exporter_executorch import ExecutorchConfig, ExecutorchExporter

    def export(model: Any, inputs: dict) -> Any:
        return ExecutorchExporter().export_program(model, inputs, ExecutorchConfig(dynamic=dynamic))

    return export


def competitor(dynamic: bool) -> Callable[[Any, dict], Any]:
    from transformers.exporters import ExecutorchConfig, ExecutorchExporter

    def export(model: Any, inputs: dict) -> Any:
        return ExecutorchExporter().export_program(model, inputs, ExecutorchConfig(dynamic=dynamic))

    return export


def timed(export: Callable[[Any, dict], Any], name: str) -> tuple[float, float] | str:
    """(wall, cpu) seconds of one export of a freshly built tiny ``name``, or the error's first line."""
    from hfexport.tiny_models import sample_inputs, tiny_model

    model = tiny_model(name)
    inputs = sample_inputs(model)
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        export(model, inputs)
    except Exception as error:  # a failed export is a result, not the end of the run
        return f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[0][:100]}"
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(CORE_MODEL_TYPES))
    parser.add_argument("--dynamic", action="store_true", help="export with dynamic shapes (default: static)")
    args = parser.parse_args()

    exporters = {"hfexport": ours(args.dynamic), "transformers": competitor(args.dynamic)}
    for label, export in exporters.items():
        print(f"warm-up {label}: {timed(export, 'bert')}", flush=True)

    header = (
        f"{'model':<10} {'hfexport wall/cpu':>18} {'transformers wall/cpu':>22} {'ratio wall':>10} {'ratio cpu':>10}"
    )
    print(header, flush=True)
    wall_ratios, cpu_ratios, totals = [], [], {"hfexport": [0.0, 0.0], "transformers": [0.0, 0.0]}
    for index, name in enumerate(args.models):
        order = list(exporters) if index % 2 == 0 else list(reversed(exporters))
        results = {label: timed(exporters[label], name) for label in order}
        ours_result, theirs_result = results["hfexport"], results["transformers"]
        if isinstance(ours_result, str) or isinstance(theirs_result, str):
            print(f"{name:<10} hfexport: {ours_result}  transformers: {theirs_result}", flush=True)
            continue
        for label, (wall, cpu) in (("hfexport", ours_result), ("transformers", theirs_result)):
            totals[label][0] += wall
            totals[label][1] += cpu
        wall_ratios.append(theirs_result[0] / ours_result[0])
        cpu_ratios.append(theirs_result[1] / ours_result[1])
        print(
            f"{name:<10} {ours_result[0]:>8.1f}/{ours_result[1]:<8.1f}"
            f" {theirs_result[0]:>11.1f}/{theirs_result[1]:<9.1f} {wall_ratios[-1]:>10.2f} {cpu_ratios[-1]:>10.2f}",
            flush=True,
        )
    if cpu_ratios:
        print(
            f"median ratio (transformers / hfexport): wall {statistics.median(wall_ratios):.2f}, "
            f"cpu {statistics.median(cpu_ratios):.2f} over {len(cpu_ratios)} models"
        )
        mine, theirs = totals["hfexport"], totals["transformers"]
        print(
            f"whole set: hfexport {mine[0]:.1f} s wall / {mine[1]:.1f} s cpu, transformers.exporters {theirs[0]:.1f} / "
            f"{theirs[1]:.1f}: hfexport takes {mine[0] / theirs[0]:.2f}x its wall, {mine[1] / theirs[1]:.2f}x its cpu"
        )


if __name__ == "__main__":
    main()
