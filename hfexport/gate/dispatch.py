"""The parent's side of a run's cells: each answered from the result cache or handed to a job worker, a class's
dynamo and ONNX cells in one job, the longest jobs first when no budget bounds the run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import changes, health
from .cache import ResultCache
from .cache import environment as cache_environment
from .cells import SHARED_TRACE_BACKENDS, Cell
from .targets import CheckOptions, GateError
from .worker_parent import WorkerError, WorkerProcess, transformers_dir


def resolve_names(worker: WorkerProcess, selection: changes.Selection, checkout: Path | None) -> None:
    resolved = worker.resolve(selection.names, selection.mode == "all", selection.variants)
    if resolved["errors"]:
        raise GateError("; ".join(resolved["errors"]))
    for entry in resolved["classes"]:
        path = Path(entry["path"]) if entry["path"] else None
        selection.classes.append(
            changes.SelectedClass(
                entry["model_type"],
                entry["model_class"],
                changes._relative(path, checkout) if path else None,
                entry["line"],
                entry["module"],
            )
        )


# ── Jobs ──


def _job(cell: Cell, selected: changes.SelectedClass, options: CheckOptions) -> dict[str, Any]:
    return {
        "model_type": selected.model_type,
        "model_class": selected.model_class,
        "module": selected.module,
        "backend": cell.backend,
        "generation": options.generation,
        # A recorded result is cached under keys of its own: a result kept without a record never answers for one.
        **({"impact": True} if options.record_impact else {}),
    }


class LazyWorker:
    """The job worker for the code at ``code``, started on first use: a run whose cells all come from the result
    cache imports no torch at all."""

    def __init__(self, code: Path | None, options: CheckOptions):
        self.code, self.options, self.worker = code, options, None

    def get(self) -> WorkerProcess:
        if self.worker is None:
            self.worker = _start(self.code, self.options)
        return self.worker

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()


def _result_cache(code: Path | None, options: CheckOptions) -> ResultCache | None:
    if options.cache_dir is None:
        return None
    package = transformers_dir(code)
    roots = {"checkout": code, "site": package.parent if package else None}
    return ResultCache(options.cache_dir, cache_environment(code, options.engine), roots)


def run_cells_on_worker(
    worker: LazyWorker,
    cells: list[tuple[Cell, changes.SelectedClass]],
    options: CheckOptions,
    on_result: Callable[[Cell, dict[str, Any]], None],
    deadline: float | None = None,
    store: health.ProgramStore | None = None,
) -> None:
    """Run (cell, class) pairs on a worker; ``on_result(cell, result)`` as each finishes (in finishing order).

    A cell the result cache holds for the same code is answered from it, marked ``cached``, and not run.
    """
    cache = _result_cache(worker.code, options)
    jobs = [_job(cell, selected, options) for cell, selected in cells]
    to_run = []
    for index, job in enumerate(jobs):
        cached = cache.get(job) if cache else None
        if cached is not None:
            on_result(cells[index][0], {**cached, "cached": True})
        else:
            to_run.append(index)
    if not to_run:
        return
    groups = _sharing_jobs(to_run, jobs, options.engine)
    if deadline is None:
        groups = _longest_first(groups, jobs, cache)
    running = worker.get()
    running.warm(sorted({cells[i][1].module for i in to_run if cells[i][1].module}))
    class_jobs = [
        {
            **jobs[group[0]],
            "backends": [jobs[i]["backend"] for i in group],
            **(store.job_fields(jobs[group[0]]["model_class"]) if store else {}),
        }
        for group in groups
    ]
    for position, backend, result in running.run(class_jobs, deadline):
        index = next(i for i in groups[position] if jobs[i]["backend"] == backend)
        if cache:
            cache.put(jobs[index], result)
        on_result(cells[index][0], result)


def _sharing_jobs(indices: list[int], jobs: list[dict[str, Any]], engine: str) -> list[list[int]]:
    """The cells to run, as jobs: a class's dynamo and ONNX cells in one job (dynamo first, its trace handed on, see
    ``cells.SHARED_TRACE_BACKENDS``), every other cell in one of its own; in the order of each job's first cell."""
    if engine != "hfexport":
        return [[index] for index in indices]
    groups: list[list[int]] = []
    sharing: dict[str, list[int]] = {}
    for index in indices:
        job = jobs[index]
        if job["backend"] not in SHARED_TRACE_BACKENDS:
            groups.append([index])
            continue
        if job["model_class"] not in sharing:
            sharing[job["model_class"]] = []
            groups.append(sharing[job["model_class"]])
        sharing[job["model_class"]].append(index)
    for group in sharing.values():
        group.sort(key=lambda index: SHARED_TRACE_BACKENDS.index(jobs[index]["backend"]))
    return groups


# A cell's usual seconds per backend (a tiny model, one core), until the result cache knows that cell's own.
TYPICAL_SECONDS = {"executorch": 30.0, "onnx": 12.0, "dynamo": 6.0}


def _longest_first(groups: list[list[int]], jobs: list[dict[str, Any]], cache: ResultCache | None) -> list[list[int]]:
    """Without a budget the longest jobs start first, so no core idles at the end behind one started last; a cell's
    expected length is its own last run where the result cache kept one, else its backend's usual."""

    def expected(index: int) -> float:
        known = cache.last_seconds(jobs[index]) if cache else None
        return known if known is not None else TYPICAL_SECONDS.get(jobs[index]["backend"], 10.0)

    return sorted(groups, key=lambda group: -sum(map(expected, group)))


def _start(checkout: Path | None, options: CheckOptions) -> WorkerProcess:
    try:
        worker = WorkerProcess(checkout, options.job_options())
    except WorkerError as error:
        raise GateError(str(error)) from None
    if worker.backend_problems:
        worker.close()
        backend, problem = next(iter(worker.backend_problems.items()))
        raise GateError(f"backend {backend} cannot be loaded: {problem}")
    return worker
