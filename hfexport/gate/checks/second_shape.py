"""The second shape: every export also runs at a larger batch and another length than it was traced at."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch

from hfexport import tiny_models

from ..blame import blame
from .comparing import OutputMismatch, compare, shapes_text
from .failures import CellFailure, first_line, step

# Every export also runs at a second shape, a larger batch and another length than the traced (2, 7): a dynamic export
# whose tracing fixed a size to the traced one fails there.
SECOND_SHAPE = {"batch_size": 3, "seq_length": 11}


def check_second_shape(
    model: Any, inputs: dict[str, Any], loaded: Callable, tolerance: float, cell: dict[str, Any], timings
) -> None:
    """The export at ``SECOND_SHAPE`` must match eager there too; a shape the model itself cannot run is skipped,
    one hfexport's input builder fails to make is a tool error."""
    try:
        second = tiny_models.sample_inputs(model, seed=1, **SECOND_SHAPE)
        if _changes_declared_static_dims(loaded, inputs, second):
            # A workaround declared the sequence static (one program per length): vary the batch only.
            second = tiny_models.sample_inputs(model, seed=1, batch_size=SECOND_SHAPE["batch_size"])
        if _changes_declared_static_dims(loaded, inputs, second):
            cell["second_shape"] = {"status": "skipped", "detail": "a static-dims workaround keeps the batch static"}
            return
        with torch.no_grad():
            expected = model(**copy.deepcopy(second))
    except Exception as error:
        if blame(error).owner == "hfexport":
            raise CellFailure("second shape", error) from error  # our input builder broke: a tool error, not a skip
        cell["second_shape"] = {"status": "skipped", "detail": f"eager does not run there: {first_line(error)[:200]}"}
        return
    shapes = {
        name: list(value.shape)
        for name, value in second.items()
        if isinstance(value, torch.Tensor) and value.shape != getattr(inputs.get(name), "shape", None)
    }
    with step("second shape", timings, "second_shape"):
        actual = loaded(**copy.deepcopy(second))
        max_abs, _, problem = compare(expected, actual, tolerance)
        if problem:
            raise OutputMismatch(f"at the second shape ({shapes_text(shapes)}): {problem}")
    cell["second_shape"] = {"status": "pass", "inputs": shapes, "max_abs_diff": max_abs}


def _changes_declared_static_dims(loaded: Any, inputs: dict[str, Any], second: dict[str, Any]) -> bool:
    """Whether ``second`` resizes an input dimension that a static-dims workaround kept static in the export."""
    for component in getattr(loaded, "components", {}).values():
        declared = component.get("declared_static_dims", {}) if isinstance(component, dict) else {}
        for name, dims in declared.items():
            first, other = getattr(inputs.get(name), "shape", None), getattr(second.get(name), "shape", None)
            if first is not None and other is not None and any(first[dim] != other[dim] for dim in dims):
                return True
    return False
