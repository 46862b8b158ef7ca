"""The workaround kinds, ``Workaround`` and the ``register_*`` decorators that fill the registry (see ``__init__``)."""

from __future__ import annotations

import inspect
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ...compat import INTERNALS

PATCH = "patch"
LOWERING_SWAP = "lowering_swap"
LOADING_SWAP = "loading_swap"
NODE_FIX = "fx_node_fix"
PROGRAM_FIX = "fx_program_fix"
ONNX_TRANSLATION = "onnx_translation"
IR_FIX = "ir_fix"
OPTIMIZER_SKIP = "optimizer_skip"
STATIC_DIMS = "static_dims"
DIM_MULTIPLES = "dim_multiples"
WORKAROUND_KINDS = (
    PATCH,
    LOWERING_SWAP,
    LOADING_SWAP,
    NODE_FIX,
    PROGRAM_FIX,
    ONNX_TRANSLATION,
    IR_FIX,
    OPTIMIZER_SKIP,
    STATIC_DIMS,
    DIM_MULTIPLES,
)

Keys = str | Sequence[str]


@dataclass(frozen=True)
class Workaround:
    """One registered workaround, as listed by ``hfexport registry``."""

    key: str  # a backend ("executorch"), or one of its delegates ("executorch.xnnpack")
    kind: str
    function: Callable
    targets: Sequence[str] = ()  # dotted paths: what a patch replaces, the op a translation lowers, a model class
    defined_by: str | None = None  # the declared transformers internal (compat) whose import defines the targets

    @property
    def name(self) -> str:
        return self.function.__name__

    @property
    def backend(self) -> str:
        return self.key.partition(".")[0]

    @property
    def delegate(self) -> str | None:
        return self.key.partition(".")[2] or None

    @property
    def reason(self) -> str:
        return workaround_reason(self.function)

    @property
    def stage(self) -> str:
        """The exporter stage that installs or runs this workaround, as ``"N name"``."""
        internals = _BACKEND_INTERNALS.get(self.backend)
        if self.kind == PATCH and internals and any(t.startswith(internals[0]) for t in self.targets):
            return internals[1]
        return _STAGES.get((self.backend, self.kind), "?")


# Where each kind of workaround runs, per backend (the "# ── Stage N" banners of each exporter module).
_STAGES = {
    ("dynamo", PATCH): "2 model patches",
    ("dynamo", STATIC_DIMS): "4 dynamic shapes",
    ("dynamo", DIM_MULTIPLES): "4 dynamic shapes",
    ("dynamo", PROGRAM_FIX): "6 program fixes",
    ("dynamo", LOADING_SWAP): "load (not an export stage)",
    ("onnx", PATCH): "1 torch patches",
    ("onnx", NODE_FIX): "3 FX node fixes",
    ("onnx", ONNX_TRANSLATION): "4 ONNX translations",
    ("onnx", IR_FIX): "5 ONNX IR fixes",
    ("onnx", OPTIMIZER_SKIP): "5 ONNX IR fixes",
    ("executorch", PATCH): "2 torch patches",
    ("executorch", LOWERING_SWAP): "3 ExecuTorch patches",
    ("executorch", PROGRAM_FIX): "4 FX program fixes",
    ("executorch", NODE_FIX): "5 FX node fixes",
}
# Patches of a backend's own toolchain (rather than of torch ops) run in that backend's "internals" stage.
_BACKEND_INTERNALS = {
    "onnx": (("torch.onnx", "onnxscript", "onnx_ir"), "2 ONNX patches"),
    "executorch": (("executorch",), "3 ExecuTorch patches"),
}

_REGISTRY: dict[str, list[Workaround]] = defaultdict(list)


def _registering(
    key: str, kind: str, targets: Sequence[str] = (), defined_by: str | None = None
) -> Callable[[Callable], Callable]:
    if defined_by is not None and defined_by not in INTERNALS:
        raise ValueError(f"{defined_by} is not a transformers internal declared in hfexport/compat.py")

    def decorator(function: Callable) -> Callable:
        _REGISTRY[key].append(Workaround(key, kind, function, targets, defined_by))
        return function

    return decorator


def register_patch(key: str, *paths: str) -> Callable[[Callable], Callable]:
    """Register ``factory(original) -> replacement`` for every dotted path, installed during ``key``'s exports."""
    if not paths:
        raise ValueError("register_patch needs at least one dotted path")
    return _registering(key, PATCH, paths)


class LoadedTargets(Sequence[str]):
    """Patch targets listed when the patches are installed: ``find()`` gives the dotted paths among the modules loaded
    by then (the methods a transformers decorator wraps, across every modeling module: no fixed list keeps up)."""

    def __init__(self, find: Callable[[], list[str]]) -> None:
        self.find = find

    def __getitem__(self, index: Any) -> Any:
        return self.find()[index]

    def __len__(self) -> int:
        return len(self.find())

    def __iter__(self) -> Iterator[str]:
        # Listed once: installing the patch of one target changes what find() sees of the others.
        return iter(self.find())


def register_loaded_patch(key: str, targets: LoadedTargets) -> Callable[[Callable], Callable]:
    """``register_patch`` for targets found among the loaded modules when ``key``'s patches are installed."""
    return _registering(key, PATCH, targets)


def register_lowering_swap(key: str, *paths: str) -> Callable[[Callable], Callable]:
    """A patch installed only around ExecuTorch lowering, and only with ``fast_lowering``: a speed-up."""
    if not paths:
        raise ValueError("register_lowering_swap needs at least one dotted path")
    return _registering(key, LOWERING_SWAP, paths)


def register_loading_swap(key: str, *paths: str) -> Callable[[Callable], Callable]:
    """A patch installed only while ``torch.export.load`` reads a program: a speed-up."""
    if not paths:
        raise ValueError("register_loading_swap needs at least one dotted path")
    return _registering(key, LOADING_SWAP, paths)


def register_fx_node_fix(key: str) -> Callable[[Callable], Callable]:
    """Register ``fix(graph_module, node) -> changed`` run over every call_function node of ``key``'s graphs."""
    return _registering(key, NODE_FIX)


def register_fx_program_fix(key: str) -> Callable[[Callable], Callable]:
    """Register ``fix(exported_program) -> changed`` run once on ``key``'s programs."""
    return _registering(key, PROGRAM_FIX)


def register_onnx_translation(*ops: str, defined_by: str | None = None) -> Callable[[Callable], Callable]:
    """Register an onnxscript function as torch.onnx's lowering of the ops at these dotted paths.

    ``defined_by``: the declared transformers internal whose import defines the ops (a custom op of transformers).
    """
    if not ops:
        raise ValueError("register_onnx_translation needs at least one op path")
    return _registering("onnx", ONNX_TRANSLATION, ops, defined_by)


def register_ir_fix(key: str) -> Callable[[Callable], Callable]:
    """Register ``fix(onnx_ir.Model) -> changed`` run on the finished ONNX program."""
    return _registering(key, IR_FIX)


def register_onnx_optimizer_skip(*class_paths: str) -> Callable[[Callable], Callable]:
    """Export the model classes at these dotted paths without onnxscript's optimizer; the function holds the why."""
    if not class_paths:
        raise ValueError("register_onnx_optimizer_skip needs at least one model class path")
    return _registering("onnx", OPTIMIZER_SKIP, class_paths)


def register_static_dims(key: str, *module_paths: str) -> Callable[[Callable], Callable]:
    """Register ``dims(input_name, value) -> dims`` kept static in models holding a module of a class at these paths."""
    if not module_paths:
        raise ValueError("register_static_dims needs at least one module class path")
    return _registering(key, STATIC_DIMS, module_paths)


def register_dim_multiples(key: str, *module_paths: str) -> Callable[[Callable], Callable]:
    """Register ``multiples(input_name, value, module) -> {dim: multiple}``: dims that models holding a ``module`` of a
    class at these paths take in multiples only, declared as such (a dynamic root times the multiple)."""
    if not module_paths:
        raise ValueError("register_dim_multiples needs at least one module class path")
    return _registering(key, DIM_MULTIPLES, module_paths)


def registered(keys: Keys, kind: str) -> list[Workaround]:
    """The workarounds of ``kind`` under ``keys``: key by key in the order given, each in registration order."""
    keys = (keys,) if isinstance(keys, str) else keys
    return [w for key in keys for w in _REGISTRY.get(key, ()) if w.kind == kind]


def all_workarounds(backend: str | None = None) -> list[Workaround]:
    """Every registered workaround; with ``backend``, that backend's own and its delegates'."""
    return [w for items in _REGISTRY.values() for w in items if backend is None or w.backend == backend]


def workaround_reason(function: Callable) -> str:
    """The one-line *why* of a workaround: its first comment line, else its docstring's first line."""
    try:
        source = inspect.getsource(function)
    except (OSError, TypeError):
        source = ""
    for line in source.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            return stripped.lstrip("# ").strip()
    doc = inspect.getdoc(function)
    return doc.splitlines()[0] if doc else ""
