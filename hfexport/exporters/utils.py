"""Workaround registries shared by every exporter, and the small helpers they all use.

A *patch* is a factory ``original -> replacement`` bound to dotted paths and installed only while one export
runs. A *fix* rewrites the traced artifact: a node fix is ``(graph_module, node) -> changed``, a program fix is
``(exported_program) -> changed``. Registries are plain dicts keyed by backend name; an exporter installs what is
registered for its backend at the stage that owns it.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import inspect
import logging
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..compat import UnresolvedPathError, resolve_path

logger = logging.getLogger("hfexport")

PatchFactory = Callable[[Any], Any]
NodeFix = Callable[[Any, Any], bool]
ProgramFix = Callable[[Any], bool]


@dataclass(frozen=True)
class Workaround:
    """One registered patch or fix, as listed by ``hfexport registry``."""

    backend: str
    kind: str  # "patch", "fx_node_fix", "fx_program_fix", "onnx_translation", "ir_fix"
    function: Callable
    targets: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.function.__name__

    @property
    def reason(self) -> str:
        return workaround_reason(self.function)

    @property
    def stage(self) -> str:
        """The exporter stage that installs or runs this workaround, as ``"N name"``."""
        internals = _BACKEND_INTERNALS.get(self.backend)
        if self.kind == "patch" and internals and any(t.startswith(internals[0]) for t in self.targets):
            return internals[1]
        return _STAGES.get((self.backend, self.kind), "?")


# Where each kind of workaround runs, per backend (the "# ── Stage N" banners of each exporter module).
_STAGES = {
    ("dynamo", "patch"): "2 model patches",
    ("onnx", "patch"): "1 torch patches",
    ("onnx", "fx_node_fix"): "3 FX node fixes",
    ("onnx", "onnx_translation"): "4 ONNX translations",
    ("onnx", "ir_fix"): "5 ONNX IR fixes",
    ("executorch", "patch"): "2 torch patches",
    ("executorch", "fx_program_fix"): "4 FX program fixes",
    ("executorch", "fx_node_fix"): "5 FX node fixes",
}
# Patches of a backend's own toolchain (rather than of torch ops) run in that backend's "internals" stage.
_BACKEND_INTERNALS = {
    "onnx": (("torch.onnx", "onnxscript", "onnx_ir"), "2 ONNX patches"),
    "executorch": (("executorch",), "3 ExecuTorch patches"),
}


_PATCHES: dict[str, list[Workaround]] = defaultdict(list)
_NODE_FIXES: dict[str, list[Workaround]] = defaultdict(list)
_PROGRAM_FIXES: dict[str, list[Workaround]] = defaultdict(list)


def register_patch(backend: str, *paths: str) -> Callable[[PatchFactory], PatchFactory]:
    """Register ``factory(original) -> replacement`` for every dotted path, installed during ``backend`` exports."""
    if not paths:
        raise ValueError("register_patch needs at least one dotted path")

    def decorator(factory: PatchFactory) -> PatchFactory:
        _PATCHES[backend].append(Workaround(backend, "patch", factory, tuple(paths)))
        return factory

    return decorator


def register_fx_node_fix(backend: str) -> Callable[[NodeFix], NodeFix]:
    """Register ``fix(graph_module, node) -> changed`` run over every node of ``backend`` graphs."""

    def decorator(fix: NodeFix) -> NodeFix:
        _NODE_FIXES[backend].append(Workaround(backend, "fx_node_fix", fix))
        return fix

    return decorator


def register_fx_program_fix(backend: str) -> Callable[[ProgramFix], ProgramFix]:
    """Register ``fix(exported_program) -> changed`` run once on ``backend`` programs."""

    def decorator(fix: ProgramFix) -> ProgramFix:
        _PROGRAM_FIXES[backend].append(Workaround(backend, "fx_program_fix", fix))
        return fix

    return decorator


def registered_patches(backend: str) -> list[Workaround]:
    return list(_PATCHES.get(backend, ()))


def registered_node_fixes(backend: str) -> list[Workaround]:
    return list(_NODE_FIXES.get(backend, ()))


def registered_program_fixes(backend: str) -> list[Workaround]:
    return list(_PROGRAM_FIXES.get(backend, ()))


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


def unresolved_targets(backend: str | None = None) -> list[tuple[Workaround, str, bool]]:
    """Every (workaround, reason, model_absent) whose target path does not resolve in the installed packages.

    ``model_absent``: the target is in a ``transformers.models.<type>`` package this transformers does not have (a
    model newer or older than it), so the workaround is simply not needed here.
    """
    missing = []
    for workaround in all_workarounds(backend):
        if workaround.kind != "patch":
            continue  # translation-table keys name ops, not importable paths
        for target in workaround.targets:
            try:
                resolve_path(target)
            except UnresolvedPathError as error:
                missing.append((workaround, str(error), _model_absent(target)))
    return missing


def _model_absent(path: str) -> bool:
    parts = path.split(".")
    if parts[:2] != ["transformers", "models"] or len(parts) < 3:
        return False
    return importlib.util.find_spec(".".join(parts[:3])) is None


_EXTRA_WORKAROUND_SOURCES: list[Callable[[], list[Workaround]]] = []


def register_workaround_source(source: Callable[[], list[Workaround]]) -> None:
    """Let a backend list workarounds kept in its own tables (ONNX translations, IR fixes) in ``all_workarounds``."""
    _EXTRA_WORKAROUND_SOURCES.append(source)


def all_workarounds(backend: str | None = None) -> list[Workaround]:
    registries = (_PATCHES, _PROGRAM_FIXES, _NODE_FIXES)
    found = [w for registry in registries for items in registry.values() for w in items]
    found += [w for source in _EXTRA_WORKAROUND_SOURCES for w in source()]
    return [w for w in found if backend is None or w.backend == backend]


# ── Installing patches ──


@dataclass
class _InstalledAttribute:
    owner: Any
    name: str
    had_own: bool
    original_raw: Any


@dataclass
class PatchReport:
    """What one ``apply_patches`` call installed and what it could not find."""

    installed: list[str] = field(default_factory=list)
    unresolved: list[str] = field(default_factory=list)


_active_backends = threading.local()


def _raw_attribute(owner: Any, name: str) -> tuple[bool, Any]:
    """The attribute as stored (descriptor included) and whether ``owner`` defines it itself."""
    if isinstance(owner, type):
        for klass in owner.__mro__:
            if name in vars(klass):
                return klass is owner, vars(klass)[name]
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
def apply_patches(backend: str, report: PatchReport | None = None) -> Iterator[PatchReport]:
    """Install every patch registered for ``backend``; restore the originals on exit, also after an exception.

    Nested exports of the same backend reuse the outer installation instead of wrapping the patches twice.
    """
    report = report if report is not None else PatchReport()
    active: set[str] = _active_backends.__dict__.setdefault("backends", set())
    if backend in active:
        yield report
        return
    installed: list[_InstalledAttribute] = []
    active.add(backend)
    try:
        for workaround in _PATCHES.get(backend, ()):
            for path in workaround.targets:
                try:
                    owner, name = resolve_path(path)
                except UnresolvedPathError as error:
                    logger.warning("patch %s (%s) not installed: %s", workaround.name, backend, error)
                    report.unresolved.append(path)
                    continue
                had_own, raw = _raw_attribute(owner, name)
                replacement = _rewrap_descriptor(raw, workaround.function(_unwrap_descriptor(raw)))
                setattr(owner, name, replacement)
                installed.append(_InstalledAttribute(owner, name, had_own, raw))
                report.installed.append(f"{workaround.name} -> {path}")
        yield report
    finally:
        for item in reversed(installed):
            if item.had_own:
                setattr(item.owner, item.name, item.original_raw)
            else:
                delattr(item.owner, item.name)
        active.discard(backend)


# ── Running fixes ──


def apply_node_fixes(backend: str, graph_module: Any, applied: list[str] | None = None) -> list[str]:
    """Run every node fix of ``backend`` over every node, in registration order; return the fixes that changed one.

    Two fixes changing the same node is a registry conflict: it is logged, never silently resolved by order.
    """
    applied = applied if applied is not None else []
    fixes = _NODE_FIXES.get(backend, ())
    if not fixes:
        return applied
    changed_any = False
    for node in list(graph_module.graph.nodes):
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


def apply_program_fixes(backend: str, exported_program: Any, applied: list[str] | None = None) -> list[str]:
    """Run every program fix of ``backend`` in registration order; return those that changed something."""
    applied = applied if applied is not None else []
    for workaround in _PROGRAM_FIXES.get(backend, ()):
        if workaround.function(exported_program) and workaround.name not in applied:
            applied.append(workaround.name)
    return applied


# ── Stages and errors ──


class ExportStageError(RuntimeError):
    """An export failed inside a named stage; ``str()`` starts with ``"<backend> · stage N <name>"``."""

    def __init__(self, backend: str, stage: int, stage_name: str, error: BaseException):
        self.backend = backend
        self.stage = stage
        self.stage_name = stage_name
        self.error_type = type(error).__name__
        first_line = (str(error).strip().splitlines() or [""])[0]
        self.first_line = first_line
        super().__init__(f"{backend} · stage {stage} {stage_name}: {self.error_type}: {first_line}")


@contextlib.contextmanager
def export_stage(backend: str, stage: int, stage_name: str) -> Iterator[None]:
    """Attribute any exception raised inside to ``stage`` so a report can name the extension point to use."""
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


class MissingDependencyError(ImportError):
    """A backend's optional packages are not installed."""


def require(*packages: str, extra: str) -> None:
    """Import-check ``packages``; raise one error naming what is missing, what is installed and what was tested."""
    missing = [name for name in packages if importlib.util.find_spec(name) is None]
    if not missing:
        return
    installed = {name: package_version(name) for name in packages if name not in missing}
    raise MissingDependencyError(
        f"the {extra} backend needs {', '.join(missing)} (installed: {installed or 'none of them'}); "
        f"install with `pip install -c constraints.txt 'hfexport[{extra}]'` (tested set in constraints.txt)"
    )


def package_version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def package_versions(*extra: str) -> dict[str, str]:
    """Versions of the packages an export depends on, recorded in ``export.json``."""
    names = ("hfexport", "torch", "transformers", *extra)
    return {name: version for name in names if (version := package_version(name)) is not None}
