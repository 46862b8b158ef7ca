"""Tracing speed-ups (key ``"dynamo"``, stage 2 patches): installed around every backend's trace, changing no program.

ExecuTorch installs the lazy GraphModules and the view shortcut around its lowering too, as lowering swaps
(``executorch/fast_lowering.py``): its re-traces make most of its GraphModules and view its tensors again.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from typing import Any

import sympy
import torch
from torch.fx import GraphModule

from ....torch_compat import (
    _LazyGraphModule,
    extract_shape_from_varargs,
    infer_size,
    make_contiguous_strides_for,
    statically_known_true,
)
from ...registry import register_patch

GRAPH_MODULE_CONSTRUCTOR = "torch.fx.graph_module.GraphModule.__new__"
RESHAPE_VIEW_HELPER = "torch._refs._reshape_view_helper"


@register_patch("dynamo", GRAPH_MODULE_CONSTRUCTOR)
def _patch_graph_modules_compiled_on_first_call(original: Callable) -> Callable:
    # Speed: each GraphModule writes and compiles its graph's Python code when made and on every re-compile (1,715 a
    # gemma3 ExecuTorch cell, 2.7 s), and passes call almost none of them; torch's lazy kind compiles on first use.
    def new(cls: type, *args: Any, **kwargs: Any) -> Any:
        return original(_LazyGraphModule if cls is GraphModule else cls, *args, **kwargs)

    return new


@register_patch("dynamo", "torch._subclasses.fake_tensor.FakeTensorMode._cached_dispatch_impl")
def _patch_symbolic_fake_dispatch_uncached(original: Callable) -> Callable:
    # Speed: a dynamic trace meets most symbolic ops once, and each cache miss rebuilds its output from the new entry
    # to check it, symbolic strides through sympy: 20-30 % of the trace (swin 0.45 -> 0.34 s, gemma3 1.15 -> 0.82 s).
    def dispatch(self: Any, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        if self.shape_env is not None and self.shape_env.backed_var_to_val:
            return self._dispatch_impl(func, types, args, kwargs)
        return original(self, func, types, args, kwargs)  # static: entries outlive the trace, and hit

    return dispatch


@register_patch("dynamo", RESHAPE_VIEW_HELPER)
def _patch_view_of_contiguous_as_strided(original: Callable) -> Callable:
    # Speed: a fake view or reshape walks the dims, splitting and merging them with a Mod check each, which costs sympy
    # on symbolic sizes (swin2sr's windows: 6 ms a view); of a tensor with contiguous strides it is those of the shape.
    def reshape_view_helper(a: torch.Tensor, *shape: Any, allow_copy: bool) -> torch.Tensor:
        sizes = infer_size(extract_shape_from_varargs(shape, validate=False), a.numel())
        if not (sizes and a.ndim and _has_contiguous_strides(a)) or _inferred_as_a_power(sizes):
            return original(a, *shape, allow_copy=allow_copy)
        numel = functools.reduce(operator.mul, sizes, 1)
        torch._check(
            a.numel() == numel,
            lambda: f"Could not reshape a tensor with shape {a.shape} as a tensor with shape {sizes}!",
        )
        return torch.as_strided(a, sizes, make_contiguous_strides_for(sizes))

    return reshape_view_helper


def _inferred_as_a_power(sizes: list[Any]) -> bool:
    """Whether a size inferred for -1 reads as a power over a size (``s**2 // s``, sympy keeps it): the walk takes the
    tensor's own ``s``, which later shapes must match, and ExecuTorch cannot emit the power (GPT-NeoX-Japanese's square
    scores viewed as ``(b, h, q, -1)``: "invalid target for call_function <built-in function pow>")."""
    return any(isinstance(size, torch.SymInt) and size.node.expr.has(sympy.Pow) for size in sizes)


def _has_contiguous_strides(tensor: torch.Tensor) -> bool:
    """Whether ``tensor``'s strides are known to be exactly the contiguous ones, size-1 dims too (the walk keeps a
    size-1 dim's own stride, so a tensor contiguous but for it is left to the walk)."""
    contiguous = make_contiguous_strides_for(tensor.shape)
    return all(
        statically_known_true(stride == expected) for stride, expected in zip(tensor.stride(), contiguous, strict=True)
    )
