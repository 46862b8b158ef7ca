"""The workaround registry: every patch, fix, translation and lowering swap an exporter runs, keyed by who needs it.

Kinds: a *patch* is a factory ``original -> replacement`` bound to dotted paths and installed only while one export
runs; a *lowering swap* is a patch installed only around ExecuTorch lowering with ``fast_lowering`` (a speed-up, not
a repair), a *loading swap* one installed only while ``torch.export.load`` reads a saved program (a speed-up too). A
*fix* rewrites the traced artifact: a node fix is ``(graph_module, node) -> changed``, a program fix
``(exported_program) -> changed``, an IR fix ``(onnx_ir.Model) -> changed``. An *ONNX translation* lowers one op
with onnxscript. An *optimizer skip* names model classes whose ONNX export skips onnxscript's optimizer. *Static dims*
name input dimensions kept static in models holding a module of the given classes, and *dim multiples* dimensions such
models take only in multiples of a number (declared as a dynamic root times it).

Every kind lives in one registry: a dict from key to workarounds in registration order. A key is a backend
(``"dynamo"``, ``"onnx"``, ``"executorch"``) or one delegate of a backend (``"executorch.xnnpack"``); an export runs
the keys its exporter's ``workaround_keys`` names, in that order (the one rule, for every backend: ``HfExporter``).
"""

from __future__ import annotations

import builtins
import contextlib
import importlib.util
import inspect
import logging
import threading
import types
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

from ..compat import INTERNALS, UnresolvedPathError, may_be_loaded, resolve, resolve_path

logger = logging.getLogger("hfexport")

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


# ── Dotted-path resolution ──


# Why a target that does not resolve is simply not needed in this transformers (a release older or newer than it):
ABSENT_MODEL = "model"  # its transformers.models.<type> package is not there
ABSENT_FEATURE = "feature"  # the internal that defines it (defined_by) is not there: compat has that feature off


def unresolved_targets(backend: str | None = None) -> list[tuple[Workaround, str, str | None]]:
    """Every (workaround, reason, absent) whose target path does not resolve in the installed packages.

    ``absent``: ``ABSENT_MODEL`` or ``ABSENT_FEATURE`` when the target is only absent from this transformers, None
    when it drifted (a renamed or removed target: the workaround no longer applies where it should).
    """
    missing = []
    for workaround in all_workarounds(backend):
        for target in workaround.targets:
            try:
                resolve_path(target)
            except UnresolvedPathError as error:
                missing.append((workaround, str(error), _absence(workaround, target)))
    return missing


def _absence(workaround: Workaround, target: str) -> str | None:
    if _model_absent(target):
        return ABSENT_MODEL
    if workaround.defined_by is not None and _internal_absent(workaround.defined_by):
        return ABSENT_FEATURE
    return None


def _model_absent(path: str) -> bool:
    parts = path.split(".")
    if parts[:2] != ["transformers", "models"] or len(parts) < 3:
        return False
    return importlib.util.find_spec(".".join(parts[:3])) is None


def _internal_absent(path: str) -> bool:
    try:
        resolve(path)
    except UnresolvedPathError:
        return True
    return False


# ── Installing patches ──


class TargetRecord(TypedDict):
    """One workaround target in ``export.json``: the workaround, the key it was registered under, the dotted path."""

    name: str
    key: str
    target: str


@dataclass
class PatchReport:
    """What ``apply_patches`` (or a translation table) installed and what it could not find."""

    installed: list[TargetRecord] = field(default_factory=list)
    unresolved: list[TargetRecord] = field(default_factory=list)


def merged_records(records: list[TargetRecord], more: list[TargetRecord]) -> list[TargetRecord]:
    """``records``, then the records of ``more`` it lacks (a backend installs its patches twice: trace, lowering)."""
    return records + [record for record in more if record not in records]


def _record(workaround: Workaround, target: str) -> TargetRecord:
    return {"name": workaround.name, "key": workaround.key, "target": target}


@dataclass
class _InstalledAttribute:
    owner: Any
    name: str
    had_own: bool
    original_raw: Any


_active = threading.local()


def _raw_attribute(owner: Any, name: str) -> tuple[bool, Any]:
    """The attribute as stored (descriptor included) and whether ``owner`` defines it itself."""
    if isinstance(owner, type):
        for klass in owner.__mro__:
            if name in vars(klass):
                return klass is owner, vars(klass)[name]
    if isinstance(owner, types.ModuleType) and name not in vars(owner) and hasattr(builtins, name):
        return False, getattr(builtins, name)  # a builtin the module's code calls, not shadowed yet
    return name in getattr(owner, "__dict__", {}), getattr(owner, name)


def _unwrap_descriptor(raw: Any) -> Any:
    """What a factory receives: the plain function behind a staticmethod/classmethod, a property as is."""
    if isinstance(raw, (staticmethod, classmethod)):
        return raw.__func__
    return raw


def _rewrap_descriptor(raw: Any, replacement: Any) -> Any:
    """Give the replacement the same descriptor kind as the original unless the factory already chose one."""
    if isinstance(replacement, (staticmethod, classmethod, property)):
        return replacement
    if isinstance(raw, staticmethod):
        return staticmethod(replacement)
    if isinstance(raw, classmethod):
        return classmethod(replacement)
    if isinstance(raw, property):
        return property(replacement)
    return replacement


@contextlib.contextmanager
def apply_patches(keys: Keys, report: PatchReport | None = None, kind: str = PATCH) -> Iterator[PatchReport]:
    """Install the patches (or lowering swaps) of ``keys``, key by key; restore the originals on exit, in reverse.

    A later key's patch of a path wraps an earlier key's. A key already installed by an enclosing call (a nested
    export) is not installed twice. A target in a modeling module nothing imported yet is left alone: importing
    every patched model's module would cost each export about a second.
    """
    report = report if report is not None else PatchReport()
    active: set[tuple[str, str]] = _active.__dict__.setdefault("keys", set())
    keys = (keys,) if isinstance(keys, str) else tuple(keys)
    mine = [key for key in dict.fromkeys(keys) if (key, kind) not in active]
    installed: list[_InstalledAttribute] = []
    active.update((key, kind) for key in mine)
    try:
        for workaround, path, target in _targets(registered(mine, kind)):
            if isinstance(target, UnresolvedPathError):
                logger.warning("patch %s (%s) not installed: %s", workaround.name, workaround.key, target)
                report.unresolved.append(_record(workaround, path))
                continue
            _replace(target, workaround.function(_unwrap_descriptor(target.original_raw)), installed)
            report.installed.append(_record(workaround, path))
        yield report
    finally:
        _restore(installed)
        active.difference_update((key, kind) for key in mine)


def _targets(
    workarounds: list[Workaround],
) -> Iterator[tuple[Workaround, str, _InstalledAttribute | UnresolvedPathError]]:
    """Each target path of ``workarounds`` that may run (``compat.may_be_loaded``): the attribute as it is when reached
    (after the replacements made so far), or why the path does not resolve."""
    for workaround in workarounds:
        for path in filter(may_be_loaded, workaround.targets):
            try:
                owner, name = resolve_path(path)
            except UnresolvedPathError as error:
                yield workaround, path, error
                continue
            yield workaround, path, _InstalledAttribute(owner, name, *_raw_attribute(owner, name))


def _replace(target: _InstalledAttribute, replacement: Any, installed: list[_InstalledAttribute]) -> None:
    setattr(target.owner, target.name, _rewrap_descriptor(target.original_raw, replacement))
    installed.append(target)


def _restore(installed: list[_InstalledAttribute]) -> None:
    for item in reversed(installed):
        if item.had_own:
            setattr(item.owner, item.name, item.original_raw)
        else:
            delattr(item.owner, item.name)


@contextlib.contextmanager
def watch_patches(keys: Keys, reached: set[tuple[str, str]]) -> Iterator[None]:
    """Record in ``reached`` the patches of ``keys`` whose targets a trace calls, changing nothing it does.

    Each target the patch would replace is wrapped by a pass-through that adds (key, patch name) to ``reached``: a trace
    that reaches none of them is the one those patches would have made. A patch of a backend's own toolchain
    (torch.onnx, executorch...) only runs while lowering and is not watched; a target that is not a plain callable
    cannot be watched and counts as reached.
    """
    installed: list[_InstalledAttribute] = []
    try:
        for workaround, path, target in _targets(registered(keys, PATCH)):
            internals = _BACKEND_INTERNALS.get(workaround.backend, ((),))[0]
            if isinstance(target, UnresolvedPathError) or (internals and path.startswith(internals)):
                continue  # not installed by the export either, or installed only while lowering
            original = _unwrap_descriptor(target.original_raw)
            patch = (workaround.key, workaround.name)
            if isinstance(original, property) or not callable(original):
                reached.add(patch)
                continue
            _replace(target, _reach_recorder(original, patch, reached), installed)
        yield
    finally:
        _restore(installed)


def _reach_recorder(original: Callable, patch: tuple[str, str], reached: set[tuple[str, str]]) -> Callable:
    def recorder(*args: Any, **kwargs: Any) -> Any:
        reached.add(patch)
        return original(*args, **kwargs)

    return recorder


def onnx_translation_table(keys: Keys, report: PatchReport | None = None) -> dict[Any, Callable]:
    """torch.onnx's ``custom_translation_table``: each registered translation under the op its path resolves to."""
    table = {}
    for workaround in registered(keys, ONNX_TRANSLATION):
        for path in workaround.targets:
            try:
                table[resolve(path)] = workaround.function
            except UnresolvedPathError as error:
                logger.warning("translation %s not installed: %s", workaround.name, error)
                if report is not None:
                    report.unresolved.append(_record(workaround, path))
    return table


def optimizer_skips(keys: Keys, class_path: str) -> list[Workaround]:
    """The optimizer skips of ``keys`` that name the model class at ``class_path``."""
    return [workaround for workaround in registered(keys, OPTIMIZER_SKIP) if class_path in workaround.targets]


def static_dims(
    keys: Keys, model: Any, tensors: dict[str, Any], report: PatchReport | None = None
) -> dict[str, set[int]]:
    """``{input name: dims}`` of the input ``tensors`` that the static-dims declarations of ``keys`` keep static.

    A declaration applies when one of ``model``'s modules is an instance of one of its classes; it is recorded in
    ``report.installed`` (under the class it matched), a class path that does not resolve in ``report.unresolved``.
    """
    static: dict[str, set[int]] = {}
    for declaration, _module in _applying(keys, STATIC_DIMS, model, report):
        for name, value in tensors.items():
            static.setdefault(name, set()).update(declaration.function(name, value))
    return static


def dim_multiples(
    keys: Keys, model: Any, tensors: dict[str, Any], report: PatchReport | None = None
) -> dict[str, dict[int, int]]:
    """``{input name: {dim: multiple}}`` of the input ``tensors`` that the dim-multiples declarations of ``keys``
    declare, each given the first module of its class; applied and recorded as ``static_dims``'s declarations are."""
    multiples: dict[str, dict[int, int]] = {}
    for declaration, module in _applying(keys, DIM_MULTIPLES, model, report):
        for name, value in tensors.items():
            if declared := declaration.function(name, value, module):
                multiples.setdefault(name, {}).update(declared)
    return multiples


def _applying(keys: Keys, kind: str, model: Any, report: PatchReport | None) -> Iterator[tuple[Workaround, Any]]:
    """Each declaration of ``kind`` that applies to ``model``, with the first of ``model``'s modules it matched."""
    report = report if report is not None else PatchReport()
    modules = list(model.modules())
    module_types = {type(module) for module in modules}
    for declaration in registered(keys, kind):
        held = [
            (path, found)
            for path in declaration.targets
            if (found := _held_class(path, module_types, declaration, report))
        ]
        if not held:
            continue
        path, held_class = held[0]
        report.installed.append(_record(declaration, path))
        yield declaration, next(module for module in modules if isinstance(module, held_class))


def _held_class(path: str, module_types: set[type], workaround: Workaround, report: PatchReport) -> type | None:
    """The class at ``path`` where a module of ``module_types`` is an instance of it; an unresolved path is reported."""
    # As for patches: importing every declared class's modeling module to look cost each dynamic export 0.4 s in a
    # gate job, and a class of a module not imported cannot be one the model was built from.
    if not may_be_loaded(path):
        return None
    try:
        module_class = resolve(path)
    except UnresolvedPathError as error:
        logger.warning("%s %s (%s) not applied: %s", workaround.kind, workaround.name, workaround.key, error)
        report.unresolved.append(_record(workaround, path))
        return None
    return module_class if any(issubclass(module_type, module_class) for module_type in module_types) else None


# ── Running fixes ──


def apply_node_fixes(keys: Keys, graph_module: Any, applied: list[str] | None = None) -> list[str]:
    """Run every node fix of ``keys`` over every call_function node, in registry order; return the fixes that changed
    one.

    Two fixes changing the same node is a registry conflict: it is logged, never silently resolved by order.
    """
    applied = applied if applied is not None else []
    fixes = registered(keys, NODE_FIX)
    if not fixes:
        return applied
    changed_any = False
    for node in [node for node in graph_module.graph.nodes if node.op == "call_function"]:
        changed_by = []
        for workaround in fixes:
            if node.graph is None or node._erased:
                break
            if workaround.function(graph_module, node):
                changed_by.append(workaround.name)
        if len(changed_by) > 1:
            logger.warning("node %s was rewritten by several fixes: %s", node.name, ", ".join(changed_by))
        for name in changed_by:
            if name not in applied:
                applied.append(name)
        changed_any = changed_any or bool(changed_by)
    if changed_any:
        graph_module.graph.eliminate_dead_code()
        graph_module.graph.lint()
        graph_module.recompile()
    return applied


def apply_program_fixes(keys: Keys, exported_program: Any, applied: list[str] | None = None) -> list[str]:
    """Run every program fix of ``keys`` in registry order; return those that changed something."""
    return _run_whole(registered(keys, PROGRAM_FIX), exported_program, applied)


def apply_ir_fixes(keys: Keys, model: Any, applied: list[str] | None = None) -> list[str]:
    """Run every ONNX IR fix of ``keys`` on ``model`` in registry order; return those that changed something."""
    return _run_whole(registered(keys, IR_FIX), model, applied)


def _run_whole(fixes: list[Workaround], artifact: Any, applied: list[str] | None) -> list[str]:
    applied = applied if applied is not None else []
    for workaround in fixes:
        if workaround.function(artifact) and workaround.name not in applied:
            applied.append(workaround.name)
    return applied
