"""The ``PRECOMPUTED`` stage: what a model would compute from its inputs with Python loops, passed in precomputed.

Packed vision towers (Qwen-VL style) derive their sequence layout from the values of ``grid_thw``: cumulative
sequence lengths, rotary position ids, interpolation taps, window order. Computed inside the forward those are
data-dependent sizes that torch.export cannot trace; transformers' ``vision_utils`` helpers (and a model's own, such
as Kimi-K2.5's frame index or Muse's pixel-shuffle index) therefore pop them from the forward's kwargs when a caller
passes them precomputed. This stage runs the model once with those helpers recording what they return, and passes
that as inputs: the export then reads them as tensors, and every shape the gate runs at (the second one too) gets
its own.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import re
import sys
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import torch

from .registry import Request, Stage, builds

_POP = re.compile(r"""kwargs\.pop\(\s*["'](\w+)["']""")


@functools.cache
def popped_kwargs(helper: Callable) -> tuple[str, ...]:
    """The kwargs a helper pops when given them precomputed (``kwargs.pop("name", None)``), in the order it pops,
    which is the order it returns them in; empty for a function that takes no ``kwargs`` dict."""
    try:
        parameter = inspect.signature(helper).parameters.get("kwargs")
        if parameter is None or parameter.kind is parameter.VAR_KEYWORD:
            return ()
        source = inspect.getsource(helper)
    except (OSError, TypeError, ValueError):
        return ()
    return tuple(dict.fromkeys(_POP.findall(source)))


def _helpers(module: ModuleType) -> dict[str, Callable]:
    """The module's globals that are precomputable helpers (``vision_utils``' or the model's own)."""
    return {name: f for name, f in vars(module).items() if inspect.isfunction(f) and popped_kwargs(f)}


def _helper_modules(model: torch.nn.Module) -> list[ModuleType]:
    """The modeling modules of ``model``'s layers that hold such a helper, and vision_utils (its helpers nest)."""
    names = {type(layer).__module__ for layer in model.modules()}
    calling = [sys.modules[name] for name in sorted(names) if name in sys.modules and _helpers(sys.modules[name])]
    helpers = sys.modules.get("transformers.vision_utils")  # absent from releases before it
    return [*calling, helpers] if calling and helpers is not None else calling


def _recording(helper: Callable, recorded: dict[str, torch.Tensor], own_errors: list[Exception]) -> Callable:
    signature, popped = inspect.signature(helper), popped_kwargs(helper)

    @functools.wraps(helper)
    def record(*args: Any, **kwargs: Any) -> Any:
        result = helper(*args, **kwargs)
        try:
            if signature.bind_partial(*args, **kwargs).arguments.get("kwargs") is None:
                return result  # a call that would not take the values precomputed
            # A helper popping one kwarg returns it whole, a tuple too (Kimi-K2.5's temporal merge index of 5.25:
            # destinations, weights and a token count, which as a Python int cannot be passed as a traced input).
            values = result if isinstance(result, tuple) and len(popped) > 1 else (result,)
            for name, value in zip(popped, values, strict=False):
                if isinstance(value, torch.Tensor):
                    recorded.setdefault(name, value)  # the first call pops the kwarg: later ones compute their own
        except Exception as error:  # hfexport's own bookkeeping: raised after the run, never taken for the model's
            own_errors.append(error)
        return result

    return record


@contextlib.contextmanager
def _helpers_recorded(
    modules: list[ModuleType], recorded: dict[str, torch.Tensor], own_errors: list[Exception]
) -> Iterator[None]:
    saved = [(module, name, helper) for module in modules for name, helper in _helpers(module).items()]
    for module, name, helper in saved:
        setattr(module, name, _recording(helper, recorded, own_errors))
    try:
        yield
    finally:
        for module, name, helper in saved:
            setattr(module, name, helper)


def recorded_layout(model: torch.nn.Module, inputs: dict[str, Any]) -> dict[str, torch.Tensor]:
    """What the precomputable helpers return while ``model`` runs on ``inputs``, by the kwarg each would pop.

    Empty when the model's forward fails: the eager reference runs the same inputs and reports that failure. A
    failure of the recording itself is raised: it is hfexport's, not the model's.
    """
    recorded: dict[str, torch.Tensor] = {}
    own_errors: list[Exception] = []
    with _helpers_recorded(_helper_modules(model), recorded, own_errors), torch.no_grad():
        try:
            model(**inputs)
        except Exception:
            recorded.clear()
    if own_errors:
        raise own_errors[0]
    return {name: value for name, value in recorded.items() if name not in inputs}


@builds(Stage.PRECOMPUTED, when=lambda r: bool(_helper_modules(r.model)))
def _packed_sequence_layout(r: Request) -> dict[str, torch.Tensor]:
    """cu_seqlens, position ids, interpolation taps, window order: as the vision_utils helpers compute them."""
    return recorded_layout(r.model, r.inputs)
