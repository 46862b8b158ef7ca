"""One job's cells, in the job's forked child: tiny model -> export -> save -> reload -> run on the runtime -> compare
with eager, then the second shape and generation.

Runs inside a forked job process (see ``worker_child.py``); returns each cell's fields of the report as a plain dict.
Every step is timed, and a failure names the step it happened in: an exporter's own ``ExportStageError`` names
its stage ("onnx · stage 4 ONNX translations"), the other steps are "build", "eager", "save", "load",
"run on <runtime>", "compare" and "generation".
"""

from __future__ import annotations

import copy
import functools
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hfexport import compat
from hfexport.exporters import ExportStageError

from .. import metrics
from .building import ClassUnderTest
from .comparing import DEFAULT_TOLERANCE, TOLERANCES, OutputMismatch, compare, shapes_text
from .engines import engine, shared_generation_traces, shared_trace, workarounds_used
from .failures import CellFailure, frame_record, step
from .generation import check_generation, generates, generation_available
from .second_shape import check_second_shape

RUNTIMES = {"dynamo": "torch", "onnx": "onnxruntime", "executorch": "executorch runtime"}


def check_class_in_job(
    job: dict[str, Any], checkout: Path | None, engine_name: str = "hfexport"
) -> Iterator[dict[str, Any]]:
    """Check one model class on each of ``job["backends"]`` in turn, yielding each cell as it is done; the model is
    built once, and dynamo's trace is ONNX's where it is the program ONNX would trace."""
    backends = list(job["backends"])
    traces = shared_trace(backends, engine_name), shared_generation_traces(backends, engine_name)
    shared = ClassUnderTest(job, checkout, *traces)
    for backend in backends:
        yield run_cell({**job, "backend": backend}, checkout, engine_name, shared)


def run_cell(
    job: dict[str, Any], checkout: Path | None, engine_name: str = "hfexport", shared: ClassUnderTest | None = None
) -> dict[str, Any]:
    """Check one (model class, backend): returns status, stage, error, diffs, timings and workarounds."""
    started = time.perf_counter()
    timings: dict[str, float] = {}
    backend = job["backend"]
    tolerance = TOLERANCES.get(backend, DEFAULT_TOLERANCE)
    cell: dict[str, Any] = {"tolerance": tolerance, "timings": timings, "workarounds": [], "generation": None}
    try:
        _check(shared or ClassUnderTest(job, checkout), engine_name, backend, tolerance, cell, timings)
        cell.update(status="pass", stage=None, error_type=None, error=None)
    except CellFailure as failure:
        cell.update(status=failure.status, stage=failure.step, error_type=failure.error_type, error=failure.first_line)
        cell["frame"] = frame_record(failure.frame, checkout, failure.workaround)
    timings["total"] = round(time.perf_counter() - started, 3)
    cell["disabled"] = compat.disabled()
    return cell


def _check(
    shared: ClassUnderTest,
    engine_name: str,
    backend: str,
    tolerance: float,
    cell: dict[str, Any],
    timings: dict[str, float],
) -> None:
    export, save, load = engine(engine_name)
    model, reference, inputs, expected = shared.build(timings)
    traced = {"trace": shared.trace} if shared.trace is not None else {}
    with tempfile.TemporaryDirectory(prefix="hfexport-cell-") as scratch:
        try:
            with step(f"{backend} · export", timings, "export"):
                exported = export(model, copy.deepcopy(inputs), backend, False, **traced)
        except CellFailure as failure:
            cause = failure.__cause__
            if isinstance(cause, ExportStageError):
                failure.step = cause.where
            raise
        cell["workarounds"] = workarounds_used(exported, type(model).__module__)
        # Where the export's time went (torch.export, lowering, optimizing...), for the profile in the report.
        for component in (getattr(exported, "manifest", None) or {}).get("components", {}).values():
            timings.update({f"export · {step}": seconds for step, seconds in (component.get("timings") or {}).items()})
        with step("save", timings, "save"):
            save(exported, Path(scratch) / "export")
        with step("load", timings, "load"):
            loaded = load(Path(scratch) / "export")
        with step(f"run on {RUNTIMES.get(backend, backend)}", timings, "run"):
            actual = loaded(**copy.deepcopy(inputs))
        with step("compare", timings, "compare"):
            max_abs, max_rel, problem = compare(expected, actual, tolerance)
            cell.update(max_abs_diff=max_abs, max_rel_diff=max_rel)
            if problem:
                traced = {name: list(value.shape) for name, value in inputs.items() if hasattr(value, "shape")}
                raise OutputMismatch(f"at the traced shape ({shapes_text(traced)}): {problem}")
        check_second_shape(reference, inputs, loaded, tolerance, cell, timings)
        # Health reads hfexport's ExportedModel (its manifest and programs): the competitor's engine is not measured.
        if engine_name == "hfexport":
            with step("export health", timings, "health"):
                cell.update(
                    metrics.measure(Path(scratch) / "export", loaded, inputs, backend, shared.job.get("health"))
                )
    if shared.job.get("generation") and generation_available(engine_name) and generates(type(model), model.config):
        traces = {"trace": shared.generation_traces} if shared.generation_traces is not None else {}
        check_generation(model, reference, inputs, functools.partial(export, **traces), backend, cell, timings)
