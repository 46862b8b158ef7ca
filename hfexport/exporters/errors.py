"""The errors an export raises: a failure inside a named stage, and hfexport's findings that an export falls short."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


class ExportStageError(RuntimeError):
    """An export failed inside a named step; ``str()`` starts with ``where``: ``"<backend> · stage N <name>"``, or
    ``"<backend> · <name>"`` for a step that is not one of hfexport's stages (torch.export tracing the model)."""

    def __init__(self, backend: str, stage: int | None, stage_name: str, error: BaseException):
        self.backend = backend
        self.stage = stage
        self.stage_name = stage_name
        self.error_type = type(error).__name__
        first_line = (str(error).strip().splitlines() or [""])[0]
        self.first_line = first_line
        super().__init__(f"{self.where}: {self.error_type}: {first_line}")

    @property
    def where(self) -> str:
        return f"{self.backend} · " + (f"stage {self.stage} " if self.stage is not None else "") + self.stage_name


@contextlib.contextmanager
def export_stage(backend: str, stage: int | None, stage_name: str) -> Iterator[None]:
    """Attribute any exception raised inside to ``stage`` (None: a step of torch's, not a stage of hfexport's)."""
    try:
        yield
    except ExportStageError:
        raise
    except Exception as error:
        raise ExportStageError(backend, stage, stage_name, error) from error


class ExportFailure(ValueError):
    """hfexport's finding that an export falls short (outputs differ, a shape it does not accept).

    Raised on purpose by hfexport's code, so the gate reports it as the model's failure, never as a tool error.
    """


class SpecializedDimension(ExportFailure):
    """An input dimension the program fixed to its traced size was given another size."""

    def __init__(
        self,
        component: str,
        input_name: str,
        dim: int,
        traced: int,
        size: int,
        dynamic: bool,
        declared: bool = False,
        where: dict[str, Any] | None = None,
    ):
        self.input_name, self.dim, self.traced, self.size = input_name, dim, traced, size
        self.where = where  # the code line tracing fixed the size at ({"file", "line", "function"}), when recorded
        if declared:
            why = "a static-dims workaround kept it static: the model's code takes one size per program"
        elif dynamic:
            why = "exported with dynamic shapes, but tracing specialized it: the model's code fixed this size"
        else:
            why = "exported static; export with dynamic=True to vary it"
        accepts = f"dimension {dim} has size {size}, but the program accepts only size {traced}"
        super().__init__(f"{component}: input {input_name!r} {accepts} ({why})")
