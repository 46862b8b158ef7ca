"""The worker's own side (the child of ``hfexport check``): imports torch and transformers once, then forks one child
per job.

The parent (``worker_parent.py``) starts one worker per revision (``python -m hfexport.gate.worker_child``). The
worker imports torch, transformers, hfexport and the selected backends' modules, then reads JSON requests on stdin
and answers JSON lines on stdout. Each job runs in a child forked from this warm process, so it starts in
milliseconds with everything imported, and a segfault, abort, hang or memory blow-up ends only that child: the worker
turns it into the cell's result (crash / timeout / oom) and goes on. A job is one model class on one backend, or on
dynamo and ONNX (``checks.cell.check_class_in_job``: one build, one trace); the child sends each cell as it finishes,
each cell gets the whole timeout, and the cells a dead child never started run again in a job of their own. Children
get ``RLIMIT_AS`` as a memory limit and are killed at their deadline; their stdout/stderr go to a per-job log whose
last line names a crash.

Code under test. With ``--root`` pointing at a transformers checkout, jobs import the checkout's code. A complete
checkout (``src/transformers/__init__.py``) is put first on ``sys.path``. A partial one (only some
``src/transformers/**.py`` module files, as in a test repository or a sparse checkout) is overlaid on the
installed transformers by a meta-path finder: a module ``transformers.a.b`` whose file ``src/transformers/a/b.py``
exists in the checkout is loaded from there, every other module (packages included) from the installed
transformers. Either way ``transformers.models.<name>.modeling_<name>`` is the checkout's file.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import json
import os
import resource
import selectors
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hfexport.gate.cache import imported_sources
from hfexport.gate.cells import NOT_RUN

if TYPE_CHECKING:
    from hfexport.gate.impact_recorder import ImpactRecorder


class CheckoutOverlay(importlib.abc.MetaPathFinder):
    """Loads ``transformers`` module files present in a partial checkout instead of the installed ones."""

    def __init__(self, src: Path):
        self.src = src

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith("transformers."):
            return None
        candidate = self.src.joinpath(*fullname.split(".")).with_suffix(".py")
        if candidate.is_file():
            return importlib.util.spec_from_file_location(fullname, candidate)
        return None


def install_checkout(root: Path | None) -> None:
    """Make ``import transformers...`` load the checkout's code (see the module docstring)."""
    if root is None or not (root / "src" / "transformers").is_dir():
        return
    src = root / "src"
    if (src / "transformers" / "__init__.py").is_file():
        sys.path.insert(0, str(src))
    else:
        sys.meta_path.insert(0, CheckoutOverlay(src))


# ── Requests handled in the warm process ──


def resolve(names: list[str], select_all: bool, variants: bool = False) -> dict[str, Any]:
    """Model types / class names -> classes (type, class, file, line, module); unknown names are errors. With
    ``variants``, each type's default head found brings the config variants the builder makes of it (``Class@v``)."""
    # Deliberately here: tiny_models imports transformers, which install_checkout chooses first (and the gate's parent
    # imports this module for install_checkout).
    from hfexport import tiny_models

    classes, errors = [], []
    if select_all:
        names = tiny_models.all_model_types()
    for name in names:
        try:
            found = tiny_models.model_classes_for_type(name.strip().lower().replace("-", "_"))
            found = found or [tiny_models.resolve_model_class(name.strip())]
        except (tiny_models.UnknownModelError, ImportError) as error:
            errors.append(str(error))
            continue
        for model_class in found:
            try:
                source, line = inspect.getsourcefile(model_class), inspect.getsourcelines(model_class)[1]
            except (OSError, TypeError):
                source, line = None, None
            model_type = model_class.config_class.model_type
            _, separator, variant = name.strip().partition(tiny_models.VARIANT_SEPARATOR)  # a config variant's name
            classes.append(
                {
                    "model_type": model_type,
                    "model_class": model_class.__name__ + separator + variant,
                    "path": source,
                    "line": line,
                    "module": model_class.__module__,
                }
            )
            if variants and not separator and model_class is tiny_models.resolve_model_class(model_type):
                classes += [{**classes[-1], "model_class": variant} for variant in _variant_names(model_class)]
    return {"op": "resolved", "classes": classes, "errors": errors}


def _variant_names(model_class: type) -> list[str]:
    """``Class@variant`` of every config variant the builder makes of ``model_class``."""
    from hfexport import tiny_models  # deliberately here: it imports transformers (see resolve)

    try:
        found = tiny_models.config_variants(model_class)
    except Exception:  # the default config does not build: its cells say why (not_checked), no variant can be made
        return []
    return [f"{model_class.__name__}{tiny_models.VARIANT_SEPARATOR}{v.name}" for v in found if v.unmade is None]


def warm(modules: list[str]) -> None:
    """Import the modules the jobs will need once, here, so every forked child has them already."""
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception:
            continue
    _freeze_imported()


def _freeze_imported() -> None:
    """Keep what is imported so far out of the children's garbage collections: a full collection in a child would
    walk (and write to, copying on write) every object of this process; 0.35 s less per ExecuTorch job on gemma3.
    This process itself never collects (``main``): imports make no garbage worth the 1.2 s collections cost them."""
    gc.freeze()


# ── Forked jobs ──


@dataclass
class Child:
    job_id: int
    job: dict[str, Any]
    pid: int
    fd: int
    deadline: float
    log: Path
    started: float
    start_by: float | None  # past it the cells the child never started are not run again (the time budget)
    pending: list[str]  # the job's backends whose cells have not come back yet, in order
    running: str | None = None  # the backend whose cell the child said it started and has not finished
    data: bytes = b""


def _run_child(
    job: dict[str, Any], write_fd: int, log: Path, options: argparse.Namespace, recorder: ImpactRecorder | None
) -> None:
    """In the forked child: limits, quiet output, the job's cells, each on the pipe as one JSON line once it is done;
    with a ``recorder``, each cell holds the transformers code its job ran (``cell["impact"]``). Never returns."""
    status = 0
    pending = list(job["backends"])
    try:
        log_fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.setpgid(0, 0)
        limit = int(options.memory_limit)
        if limit > 0:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        gc.enable()
        if recorder is not None:
            recorder.reset()
        # Deliberately here: both are imported already (_preload, after install_checkout), never in the gate's parent.
        import torch

        from hfexport.gate.checks.cell import check_class_in_job

        torch.set_num_threads(max(1, (os.cpu_count() or 1) // options.jobs))

        before = set(sys.modules)
        cells = check_class_in_job(job, _root(options), options.engine)
        while pending:
            _write_line(write_fd, {"started": pending[0]})
            cell = next(cells)
            cell["sources"] = _sources(job, options, before)
            if recorder is not None:
                cell["impact"] = recorder.record(cell["sources"])
            _write_line(write_fd, {"backend": pending.pop(0), "cell": cell})
    except MemoryError:
        cell = {"status": "oom", "stage": None, "error_type": "MemoryError", "error": "out of memory"}
        if pending:
            _write_line(write_fd, {"backend": pending[0], "cell": cell})
    except BaseException as error:
        # run_cell turns every failure of a cell into its result: reaching here means hfexport itself broke.
        traceback.print_exc()
        cell = {"status": "tool_error", "stage": "job", "error_type": type(error).__name__, "error": str(error)[:500]}
        cell["frame"] = _innermost_frame(error)
        if pending:
            _write_line(write_fd, {"backend": pending[0], "cell": cell})
        status = 1
    os.close(write_fd)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _sources(job: dict[str, Any], options: argparse.Namespace, before: set[str]) -> list[str]:
    """What the result cache keys a cell on: the model's and config's code, and what the job imported so far."""
    from hfexport.tiny_models.configs import checkout_test_files  # deliberately here: it imports transformers

    model_class = getattr(sys.modules.get(job.get("module") or ""), job["model_class"], None)
    config_class = getattr(model_class, "config_class", None)
    start = [sys.modules[c.__module__] for c in (model_class, config_class) if c is not None]
    imported_here = [sys.modules[name] for name in set(sys.modules) - before if sys.modules.get(name)]
    # No model class to start from: no closure to trust, so the result is not cached.
    return imported_sources(_root(options), start, imported_here, checkout_test_files) if start else []


def _write_line(fd: int, message: dict[str, Any]) -> None:
    view = memoryview(json.dumps(message, default=str).encode() + b"\n")
    while view:
        view = view[os.write(fd, view) :]


def _innermost_frame(error: BaseException) -> dict[str, Any] | None:
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return None
    last = frames[-1]
    return {"file": last.filename, "line": last.lineno, "function": last.name, "text": last.line, "workaround": None}


def _root(options: argparse.Namespace) -> Path | None:
    return Path(options.root) if options.root else None


def _last_line(log: Path) -> str:
    try:
        lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1][:500] if lines else ""


def _death_cell(child: Child, wait_status: int, timed_out: bool, options: argparse.Namespace) -> dict[str, Any]:
    """The result of a child that returned no JSON: timeout, oom (killed by the kernel) or crash."""
    if timed_out:
        return {"status": "timeout", "error_type": "Timeout", "error": f"no result after {options.timeout:g} s"}
    if os.WIFSIGNALED(wait_status):
        number = os.WTERMSIG(wait_status)
        name = signal.Signals(number).name if number in signal.Signals._value2member_map_ else str(number)
        detail = _last_line(child.log)
        if number == signal.SIGKILL:
            return {"status": "oom", "error_type": name, "error": f"killed by {name} (out of memory?) {detail}".strip()}
        return {"status": "crash", "error_type": name, "error": f"killed by {name}: {detail}".rstrip(": ")}
    code = os.WEXITSTATUS(wait_status)
    return {
        "status": "crash",
        "error_type": "ExitCode",
        "error": f"exited with {code} without a result: {_last_line(child.log)}",
    }


class Worker:
    def __init__(self, options: argparse.Namespace, out: Any, recorder: ImpactRecorder | None = None):
        self.options = options
        self.recorder = recorder
        self.out = out
        # (job id, job, the monotonic time past which it must not start, if the run has a budget)
        self.queue: list[tuple[int, dict[str, Any], float | None]] = []
        self.children: dict[int, Child] = {}
        self.selector = selectors.DefaultSelector()
        self.logs = Path(options.log_dir)

    def send(self, message: dict[str, Any]) -> None:
        self.out.write(json.dumps(message, default=str) + "\n")
        self.out.flush()

    def handle(self, request: dict[str, Any]) -> None:
        op = request.get("op")
        if op == "resolve":
            self.send(resolve(request.get("names", []), request.get("all", False), request.get("variants", False)))
        elif op == "warm":
            warm(request.get("modules", []))
            if self.recorder is not None:
                self.recorder.instrument_loaded()
            self.send({"op": "warmed"})
        elif op == "run":
            seconds_left = request.get("seconds_left")
            start_by = None if seconds_left is None else time.monotonic() + seconds_left
            self.queue.append((request["id"], request["job"], start_by))

    def start_jobs(self) -> None:
        while self.queue and len(self.children) < self.options.jobs:
            job_id, job, start_by = self.queue.pop(0)
            if start_by is not None and time.monotonic() >= start_by:
                for backend in job["backends"]:  # queued (or run again after a crash) past the budget: never started
                    self.send({"op": "result", "id": job_id, "backend": backend, "cell": dict(NOT_RUN)})
                continue
            read_fd, write_fd = os.pipe()
            log = self.logs / f"job-{job_id}-{'-'.join(job['backends'])}.log"
            pid = os.fork()
            if pid == 0:
                os.close(read_fd)
                _run_child(job, write_fd, log, self.options, self.recorder)
            os.close(write_fd)
            os.set_blocking(read_fd, False)
            now = time.monotonic()
            backends = list(job["backends"])
            # Running its first cell from the fork on: a child that dies before saying so has that cell die with it.
            deadline = now + self.options.timeout
            child = Child(job_id, job, pid, read_fd, deadline, log, now, start_by, backends, backends[0])
            self.children[read_fd] = child
            self.selector.register(read_fd, selectors.EVENT_READ, child)

    def receive(self, child: Child, chunk: bytes) -> None:
        """Send on each cell the child finished; the next cell gets the whole timeout from now."""
        *lines, child.data = (child.data + chunk).split(b"\n")
        for line in filter(None, lines):
            message = json.loads(line)
            if "started" in message:
                child.running = message["started"]
                continue
            self.send_cell(child, message["backend"], message["cell"])
            now = time.monotonic()
            child.deadline, child.started = now + self.options.timeout, now

    def send_cell(self, child: Child, backend: str, cell: dict[str, Any]) -> None:
        child.pending.remove(backend)
        child.running = None
        cell["log_tail"] = _last_line(child.log) if cell.get("status") != "pass" else None
        self.send({"op": "result", "id": child.job_id, "backend": backend, "cell": cell})

    def finish(self, child: Child, timed_out: bool) -> None:
        """The child ended (or ran out of time): the cell it was on died with it, the cells it never started run in a
        job of their own, so one backend's crash never becomes another's result."""
        self.selector.unregister(child.fd)
        del self.children[child.fd]
        os.close(child.fd)
        if timed_out:
            _kill_group(child.pid)
        _, wait_status = os.waitpid(child.pid, 0)
        _kill_group(child.pid)  # threads or helpers the job started must not outlive it
        if child.running is not None:
            cell = {"stage": None, **_death_cell(child, wait_status, timed_out, self.options)}
            cell["timings"] = {"total": round(time.monotonic() - child.started, 3)}
            self.send_cell(child, child.running, cell)
        if child.pending:
            self.queue.insert(0, (child.job_id, {**child.job, "backends": child.pending}, child.start_by))

    def loop(self, stdin_fd: int) -> None:
        # Raw reads with our own line buffer: a buffered text stream would hide read-ahead lines from select().
        self.selector.register(stdin_fd, selectors.EVENT_READ, None)
        stdin_open, pending = True, b""
        while stdin_open or self.queue or self.children:
            self.start_jobs()  # may only answer queued jobs as not run: then nothing is left to wait for
            if not (stdin_open or self.children):
                break
            deadline = min((c.deadline for c in self.children.values()), default=None)
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            for key, _ in self.selector.select(timeout):
                if key.data is None:
                    chunk = os.read(stdin_fd, 1 << 16)
                    if not chunk:
                        self.selector.unregister(stdin_fd)
                        stdin_open = False
                        continue
                    *lines, pending = (pending + chunk).split(b"\n")
                    for line in filter(None, lines):
                        self.handle(json.loads(line))
                    continue
                child: Child = key.data
                chunk = os.read(child.fd, 1 << 16)
                if chunk:
                    self.receive(child, chunk)
                else:
                    self.finish(child, timed_out=False)
            now = time.monotonic()
            for child in [c for c in self.children.values() if c.deadline <= now]:
                self.finish(child, timed_out=True)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _preload(backends: list[str], engine: str) -> dict[str, str]:
    """Import everything jobs share; return why a backend cannot be loaded (its cells report it)."""
    # Deliberately here: the point of the worker is to import these once, after install_checkout chose transformers.
    import torch  # noqa: F401
    import transformers  # noqa: F401

    import hfexport.gate.checks.cell
    import hfexport.tiny_models  # noqa: F401
    from hfexport.exporters.backends import get_exporter_class, get_runner_class

    problems = {}
    if engine == "transformers":
        from hfexport.gate.engine_transformers import transformers_engine

        transformers_engine()
        return problems
    for backend in backends:
        try:
            get_exporter_class(backend).preload()
            get_runner_class(backend)
        except (ImportError, ValueError) as error:
            problems[backend] = f"{type(error).__name__}: {error}"
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m hfexport.gate.worker_child")
    parser.add_argument("--root", default="")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--memory-limit", type=float, default=0, help="bytes of address space per job (0: none)")
    parser.add_argument("--backends", default="dynamo")
    parser.add_argument("--engine", default="hfexport")
    parser.add_argument("--impact", action="store_true", help="record what transformers code each job runs")
    parser.add_argument("--log-dir", required=True)
    options = parser.parse_args()
    gc.disable()  # until a child enables it again: see _freeze_imported
    # The protocol owns the real stdout; anything else printed (library logs, warnings) goes to stderr.
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    install_checkout(_root(options))
    problems = _preload(options.backends.split(","), options.engine)
    recorder = None
    if options.impact:
        from hfexport.gate.impact_recorder import ImpactRecorder  # deliberately here: slipcover is optional (3.11)

        recorder = ImpactRecorder(_root(options))
        recorder.instrument_loaded()
    _freeze_imported()
    out.write(json.dumps({"op": "ready", "backend_problems": problems}) + "\n")
    out.flush()
    Worker(options, out, recorder).loop(sys.stdin.fileno())


if __name__ == "__main__":
    main()
