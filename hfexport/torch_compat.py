"""The torch names hfexport uses that are not public API: declared once, imported from here.

Most export regressions arrive with a torch release, and torch moves its internals between releases
(``torch._subclasses``, ``torch.fx.experimental``, ``torch._export`` passes, ``torch._prims_common``, ...). Every
non-public torch name the exporters, workarounds, checks and tiny-model builder use is declared in ``INTERNALS``, with
what needs it, and read as an attribute of this module: ``from hfexport.torch_compat import infer_size``.

A name resolves on first use, so importing this module imports no torch (the gate's parent never does). A name the
running torch lacks fails its importer with ``MissingTorchInternalError``, which names the torch release, the path and
what needs it. ``hfexport registry --check`` resolves every declaration (``unresolved()``) and, for a function
declared with the parameters hfexport passes it, says when the running torch renamed or dropped one.
"""

from __future__ import annotations

import importlib.metadata
import inspect
from dataclasses import dataclass
from typing import Any

from .compat import UnresolvedPathError, resolve


@dataclass(frozen=True)
class TorchInternal:
    """One non-public torch name, what in hfexport needs it, and the parameters hfexport calls it with by name."""

    path: str
    feature: str
    parameters: tuple[str, ...] = ()


class MissingTorchInternalError(ImportError):
    """A declared torch internal the running torch lacks: an ImportError, so its importer fails as on a bad import."""


_PRIMS = "torch._prims_common"
_SYMBOLIC = "torch.fx.experimental.symbolic_shapes"
_SYMPY = "torch.utils._sympy"
_ONNX = "torch.onnx._internal"
_PASS_BASE = "torch.fx.passes.infra.pass_base"
_VIEW_COPY_PASS = "torch._export.passes.replace_view_ops_with_view_copy_ops_pass"
_PYTREE = "pytrees of inputs, outputs and cache types (every backend)"
_FAST_VIEWS = "the view shortcut of fast tracing (fast_tracing.py)"
_ET_BOUNDS = "ExecuTorch's size bounds and symbolic-size fixes (workarounds/executorch/fixes.py)"
_ONNX_PROMOTION = "ONNX type promotion skips (workarounds/onnx/patches.py)"
_PASSES = "graph passes of the ExecuTorch and XNNPACK fixes"
_VIEW_COPIES = "ExecuTorch's in-place view-copy renaming (fast_lowering.py)"

INTERNALS: dict[str, TorchInternal] = {
    "pytree": TorchInternal("torch.utils._pytree", _PYTREE),
    "OpOverload": TorchInternal("torch._ops.OpOverload", "telling ATen ops from other call targets in graph fixes"),
    "HigherOrderOperator": TorchInternal("torch._ops.HigherOrderOperator", "the ONNX decomposition skips"),
    "ConstantSource": TorchInternal("torch._dynamo.source.ConstantSource", "dynamic dims the exporter creates itself"),
    "int_oo": TorchInternal(f"{_SYMPY}.numbers.int_oo", "unbounded dynamic dims (dynamo and ExecuTorch)"),
    "ValueRanges": TorchInternal(f"{_SYMPY}.value_ranges.ValueRanges", "ExecuTorch's bound narrowing"),
    "bound_sympy": TorchInternal(f"{_SYMPY}.value_ranges.bound_sympy", _ET_BOUNDS, ("expr", "ranges")),
    "FloorDiv": TorchInternal(f"{_SYMPY}.functions.FloorDiv", _ET_BOUNDS),
    "Max": TorchInternal(f"{_SYMPY}.functions.Max", _ET_BOUNDS),
    "SymT": TorchInternal(f"{_SYMPY}.symbol.SymT", _ET_BOUNDS),
    "symbol_is_type": TorchInternal(f"{_SYMPY}.symbol.symbol_is_type", _ET_BOUNDS, ("sym", "prefix")),
    "fake_impls": TorchInternal("torch._subclasses.fake_impls", "ExecuTorch's fake kernels for symbolic sizes"),
    "GuardOnDataDependentSymNode": TorchInternal(f"{_SYMBOLIC}.GuardOnDataDependentSymNode", _ET_BOUNDS),
    "constrain_range": TorchInternal(f"{_SYMBOLIC}.constrain_range", _ET_BOUNDS, ("a", "min", "max")),
    "free_symbols": TorchInternal(f"{_SYMBOLIC}.free_symbols", "XNNPACK's symbolic-size fixes"),
    "free_unbacked_symbols": TorchInternal(f"{_SYMBOLIC}.free_unbacked_symbols", "data-dependent size fixes"),
    "guard_or_false": TorchInternal(f"{_SYMBOLIC}.guard_or_false", _ET_BOUNDS),
    "statically_known_true": TorchInternal(f"{_SYMBOLIC}.statically_known_true", "symbolic size checks in fixes"),
    "extract_shape_from_varargs": TorchInternal(
        f"{_PRIMS}.extract_shape_from_varargs", _FAST_VIEWS, ("shape", "validate")
    ),
    "infer_size": TorchInternal(f"{_PRIMS}.infer_size", _FAST_VIEWS, ("shape", "numel")),
    "make_contiguous_strides_for": TorchInternal(f"{_PRIMS}.make_contiguous_strides_for", _FAST_VIEWS),
    "is_contiguous_or_false": TorchInternal(f"{_PRIMS}.is_contiguous_or_false", "ONNX fixes of contiguous copies"),
    "_LazyGraphModule": TorchInternal(
        "torch.fx._lazy_graph_module._LazyGraphModule", "GraphModules compiled on first call (fast tracing)"
    ),
    "PassBase": TorchInternal(f"{_PASS_BASE}.PassBase", _PASSES),
    "PassResult": TorchInternal(f"{_PASS_BASE}.PassResult", _PASSES),
    "legalize_graph": TorchInternal("torch.fx.passes.tools_common.legalize_graph", "ExecuTorch's fast partitioning"),
    "_NON_FUNCTIONAL_OPS_TO_FUNCTIONAL_OPS": TorchInternal(
        f"{_VIEW_COPY_PASS}._NON_FUNCTIONAL_OPS_TO_FUNCTIONAL_OPS", _VIEW_COPIES
    ),
    "get_view_copy_of_view_op": TorchInternal(f"{_VIEW_COPY_PASS}.get_view_copy_of_view_op", _VIEW_COPIES, ("schema",)),
    "_is_cia_op": TorchInternal("torch._export.utils._is_cia_op", "the ONNX decomposition skips"),
    "_is_preservable_cia_op": TorchInternal(
        "torch._export.utils._is_preservable_cia_op", "the ONNX decomposition skips"
    ),
    "_decomp": TorchInternal(f"{_ONNX}.exporter._decomp", "the ONNX decomposition skips"),
    "_ir_passes": TorchInternal(f"{_ONNX}.exporter._ir_passes", "ONNX IR clean-up after export"),
    "get_type_promotion_rule": TorchInternal(
        f"{_ONNX}.fx.passes.type_promotion.get_type_promotion_rule", _ONNX_PROMOTION
    ),
    "TypePromotionTable": TorchInternal(f"{_ONNX}.fx.passes.type_promotion.TypePromotionTable", _ONNX_PROMOTION),
    "from_scalar_type_to_torch_dtype": TorchInternal(
        f"{_ONNX}.fx.type_utils.from_scalar_type_to_torch_dtype", _ONNX_PROMOTION
    ),
    "_triple": TorchInternal("torch.nn.modules.utils._triple", "ExecuTorch's 3-d convolution fix"),
    "_BatchNorm": TorchInternal("torch.nn.modules.batchnorm._BatchNorm", "tiny models' random batch-norm statistics"),
}


def torch_version() -> str:
    """The installed torch's version (from its metadata: importing torch is not needed to say it)."""
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def __getattr__(name: str) -> Any:
    declared = INTERNALS.get(name)
    if declared is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        found = resolve(declared.path)
    except UnresolvedPathError as error:
        raise MissingTorchInternalError(
            f"torch {torch_version()} lacks {declared.path}, which {declared.feature} needs ({error}); "
            "`hfexport registry --check` lists every torch name hfexport misses"
        ) from None
    globals()[name] = found  # resolved once: later reads are plain module attributes
    return found


def _change(declared: TorchInternal, found: Any) -> str | None:
    """What changed in a found name that hfexport relies on: a declared parameter renamed or dropped."""
    if not declared.parameters:
        return None
    try:
        accepted = inspect.signature(found).parameters
    except (TypeError, ValueError):
        return f"{declared.path} is no longer a Python function ({type(found).__name__})"
    missing = [name for name in declared.parameters if name not in accepted]
    if missing:
        return f"{declared.path}{inspect.signature(found)} no longer takes {', '.join(map(repr, missing))}"
    return None


def unresolved() -> list[tuple[TorchInternal, str]]:
    """Every declared torch internal the running torch lacks or changed, with the reason (``registry --check``)."""
    problems = []
    for declared in INTERNALS.values():
        try:
            found = resolve(declared.path)
        except UnresolvedPathError as error:
            problems.append((declared, f"missing: {error}"))
            continue
        if (change := _change(declared, found)) is not None:
            problems.append((declared, f"changed: {change}"))
    return problems
