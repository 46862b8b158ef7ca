"""The ``PRECOMPUTED`` stage: what a model would compute from its inputs with Python loops, passed in precomputed.

Packed vision towers (Qwen-VL style) derive their sequence layout from the values of ``grid_thw``: cumulative
sequence lengths, rotary position ids, interpolation taps, window order. Computed inside the forward those are
data-dependent sizes that torch.export cannot trace; transformers' ``vision_utils`` helpers therefore pop them from
the forward's kwargs when a caller passes them precomputed. This stage runs the model once with those helpers
recording what they return, and passes that as inputs: the export then reads them as tensors, and every shape the
gate runs at (the second one too) gets its own.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import torch

from .registry import Request, Stage, builds

# Each helper of transformers.vision_utils -> the kwargs it pops when given them, in the order it returns them.
POPPED_BY_HELPER = {
    "get_vision_cu_seqlens": ("cu_seqlens",),
    "get_vision_position_ids": ("position_ids",),
    "get_vision_nearest_position_ids": ("position_ids",),
    "get_vision_window_index": ("window_index", "cu_window_seqlens"),
    "get_vision_interpolation_indices_and_weights": ("interp_indices", "interp_weights"),
    "get_vision_bilinear_indices_and_weights": ("bilinear_indices", "bilinear_weights"),
}


def _helper_modules(model: torch.nn.Module) -> list[ModuleType]:
    """The modeling modules of ``model``'s layers that call a vision_utils helper, and vision_utils itself."""
    helpers = sys.modules.get("transformers.vision_utils")
    if helpers is None:  # a release before vision_utils
        return []
    names = {type(layer).__module__ for layer in model.modules()}
    modules = [sys.modules[name] for name in sorted(names) if name in sys.modules]
    calling = [m for m in modules if any(vars(m).get(h) is getattr(helpers, h, None) for h in POPPED_BY_HELPER)]
    return [*calling, helpers] if calling else []


def _recording(helper: Callable, popped: tuple[str, ...], recorded: dict[str, torch.Tensor]) -> Callable:
    @functools.wraps(helper)
    def record(*args: Any, **kwargs: Any) -> Any:
        result = helper(*args, **kwargs)
        if kwargs.get("kwargs") is None:  # a call that would not take the value precomputed
            return result
        for name, value in zip(popped, result if isinstance(result, tuple) else (result,), strict=False):
            if isinstance(value, torch.Tensor):
                recorded.setdefault(name, value)  # the first call pops the kwarg: later ones compute their own
        return result

    return record


@contextlib.contextmanager
def _helpers_recorded(modules: list[ModuleType], recorded: dict[str, torch.Tensor]) -> Iterator[None]:
    saved = [(m, name, helper) for m in modules for name, helper in vars(m).items() if name in POPPED_BY_HELPER]
    for module, name, helper in saved:
        setattr(module, name, _recording(helper, POPPED_BY_HELPER[name], recorded))
    try:
        yield
    finally:
        for module, name, helper in saved:
            setattr(module, name, helper)


def recorded_layout(model: torch.nn.Module, inputs: dict[str, Any]) -> dict[str, torch.Tensor]:
    """What the vision_utils helpers return while ``model`` runs on ``inputs``, by the kwarg each would pop.

    Empty when the forward fails: the eager reference runs the same inputs and reports that failure.
    """
    recorded: dict[str, torch.Tensor] = {}
    with _helpers_recorded(_helper_modules(model), recorded), torch.no_grad():
        try:
            model(**inputs)
        except Exception:
            return {}
    return {name: value for name, value in recorded.items() if name not in inputs}


@builds(Stage.PRECOMPUTED, when=lambda r: bool(_helper_modules(r.model)))
def _packed_sequence_layout(r: Request) -> dict[str, torch.Tensor]:
    """cu_seqlens, position ids, interpolation taps, window order: as the vision_utils helpers compute them."""
    return recorded_layout(r.model, r.inputs)
