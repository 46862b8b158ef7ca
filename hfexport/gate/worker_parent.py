"""The worker's parent side, in ``hfexport check``: starts a warm worker process for one revision and streams its
results.

The worker (``worker_child.py``) pays the torch/transformers/backend imports once and forks an isolated child per job;
this side only speaks JSON lines with it, so ``hfexport check`` itself never imports torch.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hfexport

from .cells import NOT_RUN

GIB = 1024**3


class WorkerError(RuntimeError):
    """The worker process could not start or died (an infrastructure error, exit code 2)."""


@dataclass
class JobOptions:
    jobs: int = 1
    timeout: float = 600.0
    memory_limit_gib: float = 16.0
    backends: tuple[str, ...] = ("dynamo",)
    engine: str = "hfexport"
    impact: bool = False  # record what transformers code each job runs (impact_recorder.py)


def hfexport_dir(root: Path | None) -> Path:
    """The hfexport package the jobs import: the revision's own copy when the repository is hfexport itself."""
    if root is not None and (root / "hfexport" / "__init__.py").is_file():
        return (root / "hfexport").resolve()
    return Path(hfexport.__file__).resolve().parent


def transformers_dir(root: Path | None) -> Path | None:
    """The transformers package the jobs import first: a complete checkout's, else the installed one (the worker's
    rule, see ``worker_child.install_checkout``), found without importing it."""
    if root is not None and (root / "src" / "transformers" / "__init__.py").is_file():
        return (root / "src" / "transformers").resolve()
    spec = importlib.util.find_spec("transformers")
    return Path(spec.origin).resolve().parent if spec and spec.origin else None


def _python_path(root: Path | None) -> str:
    paths = [str(hfexport_dir(root).parent), os.environ.get("PYTHONPATH", "")]
    return os.pathsep.join(p for p in dict.fromkeys(paths) if p)


class WorkerProcess:
    """One warm worker for the code at ``root`` (None: the installed transformers)."""

    def __init__(self, root: Path | None, options: JobOptions):
        self.jobs = options.jobs
        self.log_dir = Path(tempfile.mkdtemp(prefix="hfexport-jobs-"))
        self.stderr_path = self.log_dir / "worker.log"
        command = [
            sys.executable,
            "-m",
            "hfexport.gate.worker_child",
            f"--root={root or ''}",
            f"--jobs={options.jobs}",
            f"--timeout={options.timeout}",
            f"--memory-limit={int(options.memory_limit_gib * GIB)}",
            f"--backends={','.join(options.backends)}",
            f"--engine={options.engine}",
            f"--log-dir={self.log_dir}",
            *(["--impact"] if options.impact else []),
        ]
        env = dict(os.environ, PYTHONPATH=_python_path(root), PYTHONUNBUFFERED="1")
        with open(self.stderr_path, "w") as stderr:
            self.process = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env
            )
        self.backend_problems: dict[str, str] = self._receive("ready").get("backend_problems", {})

    def _receive(self, op: str) -> dict[str, Any]:
        line = self.process.stdout.readline()
        if not line:
            raise WorkerError(f"the job worker exited ({self.process.wait()}): {self._stderr_tail()}")
        message = json.loads(line)
        if message.get("op") != op:
            raise WorkerError(f"the job worker answered {message.get('op')!r}, expected {op!r}")
        return message

    def _stderr_tail(self) -> str:
        lines = [line for line in self.stderr_path.read_text(errors="replace").splitlines() if line.strip()]
        return lines[-1] if lines else "no output"

    def _send(self, message: dict[str, Any]) -> None:
        self.process.stdin.write(json.dumps(message) + "\n")
        self.process.stdin.flush()

    def resolve(self, names: list[str], select_all: bool = False, variants: bool = False) -> dict[str, Any]:
        self._send({"op": "resolve", "names": names, "all": select_all, "variants": variants})
        return self._receive("resolved")

    def warm(self, modules: list[str]) -> None:
        self._send({"op": "warm", "modules": modules})
        self._receive("warmed")

    def run(
        self, jobs: list[dict[str, Any]], deadline: float | None = None
    ) -> Iterator[tuple[int, str, dict[str, Any]]]:
        """Yield (index in ``jobs``, backend, cell) as each of a job's cells (one per ``job["backends"]``) finishes; a
        dead worker fails the remaining cells as errors.

        Jobs are handed to the worker a few at a time, in order; past ``deadline`` (``time.monotonic()``) no more are
        started, neither here nor in the worker (a queued job, a crashed job's cells run again), and the cells of those
        never started come back as ``not_run`` (the ones running finish).
        """
        ahead = threading.Semaphore(self.jobs + 1)
        started: list[int] = []

        def feed() -> None:
            try:
                for index, job in enumerate(jobs):
                    ahead.acquire()
                    if deadline is not None and time.monotonic() >= deadline:
                        break
                    # The worker gets the time left too: a job it queues, or runs again, past it never starts.
                    left = {} if deadline is None else {"seconds_left": deadline - time.monotonic()}
                    self._send({"op": "run", "id": index, "job": job, **left})
                    started.append(index)
                self.process.stdin.close()
            except (BrokenPipeError, ValueError, OSError):
                pass  # the worker died; the reader reports it

        writer = threading.Thread(target=feed, daemon=True)
        writer.start()
        remaining = {index: list(job["backends"]) for index, job in enumerate(jobs)}
        for line in self.process.stdout:
            message = json.loads(line)
            if message.get("op") == "result":
                index = message["id"]
                remaining[index].remove(message["backend"])
                if not remaining[index]:
                    del remaining[index]
                    ahead.release()
                yield index, message["backend"], message["cell"]
        writer.join()
        never_started = set(remaining) - set(started)
        for index in sorted(never_started):
            for backend in remaining[index]:
                yield index, backend, dict(NOT_RUN)
        if set(remaining) - never_started:
            error = f"the job worker died ({self.process.wait()}): {self._stderr_tail()}"
            for index in sorted(set(remaining) - never_started):
                for backend in remaining[index]:
                    cell = {"status": "tool_error", "stage": "job", "error_type": "WorkerError", "error": error}
                    yield index, backend, cell

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        shutil.rmtree(self.log_dir, ignore_errors=True)

    def __enter__(self) -> WorkerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
