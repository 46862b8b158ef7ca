"""The model a job's cells share: the tiny model of the job's class, its sample inputs and eager outputs, built once."""

from __future__ import annotations

import copy
import importlib
from pathlib import Path
from typing import Any

import torch

from hfexport import tiny_models

from .failures import CellFailure, step


def build_model(job: dict[str, Any], checkout: Path | None) -> Any:
    """The tiny model of ``job["model_class"]``; a class outside the auto mappings is imported from its module and
    built from its own config class (a text tower's, not its model type's composite config)."""
    try:
        return tiny_models.tiny_model(job["model_class"], seed=0, checkout=checkout)
    except tiny_models.UnknownModelError:
        if not job.get("module"):
            raise
    model_class = getattr(importlib.import_module(job["module"]), job["model_class"])
    return tiny_models.tiny_model(model_class, seed=0, checkout=checkout)


class ClassUnderTest:
    """What the cells of one model class in one job share: the tiny model, its sample inputs and eager outputs, built
    once by the first cell (a failure there ends every cell the same way), and the traces dynamo hands on to ONNX
    (the model's, and its generation components').

    Eager runs on a copy of the model (``reference``), never on the one exported: a forward may grow the model's state
    (SeamlessM4T's conformer widens its positional table to the longest input seen), and the export must see the
    model as loaded, as a user's export would."""

    def __init__(
        self, job: dict[str, Any], checkout: Path | None, trace: Any = None, generation_traces: Any = None
    ) -> None:
        self.job, self.checkout, self.trace, self.generation_traces = job, checkout, trace, generation_traces
        self.built: tuple[Any, Any, dict[str, Any], Any] | None = None
        self.failure: CellFailure | None = None

    def build(self, timings: dict[str, float]) -> tuple[Any, Any, dict[str, Any], Any]:
        """(model to export, model eager runs on, sample inputs, eager outputs); timed in the first cell only."""
        if self.failure is not None:
            raise self.failure
        if self.built is None:
            try:
                with step("build", timings, "build", building=True):
                    model = build_model(self.job, self.checkout)
                    inputs = tiny_models.sample_inputs(model)
                    reference = _eager_copy(model, self.job, self.checkout)
                with step("eager", timings, "eager", building=True), torch.no_grad():
                    expected = reference(**copy.deepcopy(inputs))
            except CellFailure as failure:
                self.failure = failure
                raise
            self.built = (model, reference, inputs, expected)
        return self.built


def _eager_copy(model: Any, job: dict[str, Any], checkout: Path | None) -> Any:
    """An identical model for eager to run on: a deep copy, or the same seeded build where it cannot be copied."""
    try:
        return copy.deepcopy(model)
    except Exception:  # a module holding something deepcopy refuses (a lock, a generator): build it again, same seed
        return build_model(job, checkout)
