"""How a cell ends: ``CellFailure`` (the step it failed in and whose failure it is), the timed ``step`` that raises it,
and the failure's record for the report (its root cause's first line, the deciding frame)."""

from __future__ import annotations

import linecache
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import hfexport
from hfexport.exporters import SpecializedDimension
from hfexport.tiny_models import UnrunnableModelError

from ..blame import Frame, blame, traced_model_frame


class CellFailure(Exception):
    """Ends a cell: ``stage`` is where it failed; the status says whose failure it is (see ``blame.py``).

    "tool_error": hfexport's own code failed; "not_checked": the tiny model could not be built or run eagerly;
    "oom": out of memory; "fail": the export, its runtime or the comparison failed for this model.
    """

    def __init__(self, stage: str, error: BaseException, building: bool = False):
        super().__init__(str(error))
        self.step = stage
        cause = root_cause(error)
        found = blame(error)
        if isinstance(cause, MemoryError) or _out_of_memory(cause):
            self.status = "oom"
        elif building and _listed_unrunnable(cause):
            self.status = "not_checked"
        elif found.owner == "hfexport":
            self.status = "tool_error"
        else:
            self.status = "not_checked" if building else "fail"
        # Torch, onnx or executorch failed on a node after tracing: the model line that produced the node.
        traced = traced_model_frame(error) if found.owner == "toolchain" else None
        self.frame = traced or _where_specialized(cause) or found.frame
        self.workaround = found.workaround
        self.error_type = type(cause).__name__
        self.first_line = first_line(cause)


def _where_specialized(error: BaseException) -> Frame | None:
    # A size the program refuses is the model's line that fixed it while tracing (torch's shape environment recorded
    # it), not the runner's check that found it.
    where = error.where if isinstance(error, SpecializedDimension) else None
    return Frame(where["file"], where["line"], where["function"], "transformers") if where else None


def _listed_unrunnable(error: BaseException) -> bool:
    # The builder refuses a class of tiny_models.UNRUNNABLE on purpose: not hfexport's failure, the model's limit here.
    return isinstance(error, UnrunnableModelError)


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def first_line(error: BaseException) -> str:
    return _ANSI.sub("", (str(error).strip().splitlines() or [""])[0])[:500]


def root_cause(error: BaseException) -> BaseException:
    """The innermost cause that still says something: wrappers like torch.onnx's ConversionError say little."""
    seen = {id(error)}
    while True:
        cause = error.__cause__ or (None if error.__suppress_context__ else error.__context__)
        if cause is None or id(cause) in seen or not first_line(cause):
            return error
        seen.add(id(cause))
        error = cause


def _out_of_memory(error: BaseException) -> bool:
    # torch reports a refused allocation (RLIMIT_AS reached) as a RuntimeError, not a MemoryError.
    return "can't allocate memory" in str(error) or "bad_alloc" in str(error)


@contextmanager
def step(stage: str, timings: dict[str, float], key: str, building: bool = False) -> Iterator[None]:
    """Time one step; an exception inside ends the cell as a ``CellFailure`` of ``stage``."""
    started = time.perf_counter()
    try:
        yield
    except CellFailure:
        raise
    except Exception as error:
        raise CellFailure(stage, error, building) from error
    finally:
        timings[key] = round(time.perf_counter() - started, 3)


def frame_record(frame: Frame | None, checkout: Path | None, workaround: str | None = None) -> dict[str, Any] | None:
    """The deciding frame for the report: path relative to the checkout (or to hfexport's parent), and its text."""
    if frame is None:
        return None
    path = Path(frame.file)
    for root in (checkout, Path(hfexport.__file__).resolve().parent.parent):
        if root is not None and path.is_relative_to(root.resolve()):
            path = path.relative_to(root.resolve())
            break
    text = linecache.getline(frame.file, frame.line).strip()[:300]
    return {
        "file": path.as_posix(),
        "line": frame.line,
        "function": frame.function,
        "text": text,
        "workaround": workaround,
    }
