"""Installing patches (and lowering or loading swaps) around one export and undoing them after; watching which
patches a trace reaches."""

from __future__ import annotations

import builtins
import contextlib
import logging
import threading
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypedDict

from ...compat import UnresolvedPathError, may_be_loaded, resolve_path
from .kinds import _BACKEND_INTERNALS, PATCH, Keys, Workaround, registered

logger = logging.getLogger("hfexport")


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


def target_record(workaround: Workaround, target: str) -> TargetRecord:
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
                report.unresolved.append(target_record(workaround, path))
                continue
            _replace(target, workaround.function(_unwrap_descriptor(target.original_raw)), installed)
            report.installed.append(target_record(workaround, path))
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
