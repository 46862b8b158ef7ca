"""Applying what is not a patch: ONNX translations, optimizer skips, the static-dims and dim-multiples declarations a
model's modules match, and the node, program and IR fixes run on the traced artifact."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

from ...compat import UnresolvedPathError, may_be_loaded, resolve
from .installing import PatchReport, target_record
from .kinds import (
    DIM_MULTIPLES,
    IR_FIX,
    NODE_FIX,
    ONNX_TRANSLATION,
    OPTIMIZER_SKIP,
    PROGRAM_FIX,
    STATIC_DIMS,
    Keys,
    Workaround,
    registered,
)

logger = logging.getLogger("hfexport")


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
                    report.unresolved.append(target_record(workaround, path))
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
        report.installed.append(target_record(declaration, path))
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
        report.unresolved.append(target_record(workaround, path))
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
