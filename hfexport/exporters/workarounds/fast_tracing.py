"""Tracing speed-ups (key ``"dynamo"``, stage 2 patches): installed around every backend's trace, changing no program.

ExecuTorch installs the same one around its lowering too, as a lowering swap (``fast_lowering.py``): most of its effect
is there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch.fx import GraphModule
from torch.fx._lazy_graph_module import _LazyGraphModule

from ..registry import register_patch

GRAPH_MODULE_CONSTRUCTOR = "torch.fx.graph_module.GraphModule.__new__"


@register_patch("dynamo", GRAPH_MODULE_CONSTRUCTOR)
def _patch_graph_modules_compiled_on_first_call(original: Callable) -> Callable:
    # Speed: each GraphModule writes and compiles its graph's Python code when made and on every re-compile (1,715 a
    # gemma3 ExecuTorch cell, 2.7 s), and passes call almost none of them; torch's lazy kind compiles on first use.
    def new(cls: type, *args: Any, **kwargs: Any) -> Any:
        return original(_LazyGraphModule if cls is GraphModule else cls, *args, **kwargs)

    return new
