"""What static selection reads of one source file (``FileFacts``: its definitions, module-level statements and
imports, from ``ast``) and the on-disk store that keeps them by the hash of each file's text."""

from __future__ import annotations

import ast
import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path

from .touched import bound_names

_SCHEMA = 1


@dataclass(frozen=True)
class _Method:
    refs: frozenset[str]
    calls_super: bool  # calls ``super().<its own name>``


@dataclass(frozen=True)
class _Definition:
    """A top-level function or class: the names its code refers to (``name`` or ``alias.attr``)."""

    kind: str  # "function" or "class"
    line: int
    bases: frozenset[str]  # refs of the base class expressions
    base_names: tuple[str, ...]  # each base's last name (``nn.Module`` -> ``Module``), in order
    refs: frozenset[str]  # of a class: its decorators, keywords and class-level statements (not its methods)
    methods: dict[str, _Method]


@dataclass(frozen=True)
class _Statement:
    """A module-level statement other than a definition or an import."""

    names: tuple[str, ...]
    refs: frozenset[str]


@dataclass(frozen=True)
class FileFacts:
    definitions: dict[str, _Definition]
    statements: tuple[_Statement, ...]
    imports: dict[str, tuple[str, str | None]]  # bound name -> (module, imported name; None: the module itself)
    imported_modules: frozenset[str]  # every module it may import (a package's submodule candidates included)

    @functools.cached_property
    def bound(self) -> set[str]:
        return set(self.definitions) | {name for s in self.statements for name in s.names}

    @functools.cached_property
    def all_refs(self) -> set[str]:
        found = {ref for s in self.statements for ref in s.refs}
        for definition in self.definitions.values():
            found |= definition.refs | definition.bases
            found.update(ref for method in definition.methods.values() for ref in method.refs)
        return found


def _scan(nodes: list[ast.AST]) -> tuple[frozenset[str], set[str]]:
    """Refs of ``nodes`` (``name`` and ``alias.attr``) and the attributes read off ``super()``, in one walk."""
    refs: set[str] = set()
    from_super: set[str] = set()
    for root in nodes:
        for node in ast.walk(root):
            if isinstance(node, ast.Name):
                refs.add(node.id)
            elif isinstance(node, ast.Attribute):
                if isinstance(node.value, ast.Name):
                    refs.add(f"{node.value.id}.{node.attr}")
                elif isinstance(node.value, ast.Call) and getattr(node.value.func, "id", None) == "super":
                    from_super.add(node.attr)
    return frozenset(refs), from_super


def _definition(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> _Definition:
    if not isinstance(node, ast.ClassDef):
        return _Definition("function", node.lineno, frozenset(), (), _scan([node])[0], {})
    methods = {}
    for statement in node.body:
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
            refs, from_super = _scan([statement])
            methods[statement.name] = _Method(refs, statement.name in from_super)
    rest = [s for s in node.body if not isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef)]
    base_names = tuple(
        b.id if isinstance(b, ast.Name) else b.attr for b in node.bases if isinstance(b, ast.Name | ast.Attribute)
    )
    bases = _scan(node.bases)[0]
    return _Definition(
        "class", node.lineno, bases, base_names, _scan([*rest, *node.decorator_list, *node.keywords])[0], methods
    )


def _import_base(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module.split(".") if is_package else module.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def read_facts(source: str, module: str, is_package: bool) -> FileFacts:
    """What selection needs of one file; ``SyntaxError`` when it does not parse."""
    tree = ast.parse(source)
    definitions: dict[str, _Definition] = {}
    statements = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            definitions[node.name] = _definition(node)
        elif not isinstance(node, ast.Import | ast.ImportFrom):
            statements.append(_Statement(bound_names(node, imports=False), _scan([node])[0]))
    imports: dict[str, tuple[str, str | None]] = {}
    imported: set[str] = set()
    for node in ast.walk(tree):  # imports inside functions too: transformers imports lazily
        if isinstance(node, ast.ImportFrom):
            base = _import_base(module, is_package, node)
            imported.add(base)
            for alias in node.names:
                imports.setdefault(alias.asname or alias.name, (base, alias.name))
                imported.add(f"{base}.{alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                imported.add(alias.name)
                if alias.asname:
                    imports.setdefault(alias.asname, (alias.name, None))
    return FileFacts(definitions, tuple(statements), imports, frozenset(imported))


def _facts_json(facts: FileFacts) -> list:
    definitions = {
        name: [
            d.kind,
            d.line,
            sorted(d.bases),
            list(d.base_names),
            sorted(d.refs),
            {m: [sorted(x.refs), x.calls_super] for m, x in d.methods.items()},
        ]
        for name, d in facts.definitions.items()
    }
    statements = [[list(st.names), sorted(st.refs)] for st in facts.statements]
    return [definitions, statements, {k: list(v) for k, v in facts.imports.items()}, sorted(facts.imported_modules)]


def _facts_from_json(row: list) -> FileFacts:
    definitions, statements, imports, imported = row
    return FileFacts(
        {
            name: _Definition(
                kind,
                line,
                frozenset(bases),
                tuple(names),
                frozenset(refs),
                {m: _Method(frozenset(r), bool(sup)) for m, (r, sup) in methods.items()},
            )
            for name, (kind, line, bases, names, refs, methods) in definitions.items()
        },
        tuple(_Statement(tuple(names), frozenset(refs)) for names, refs in statements),
        {k: (v[0], v[1]) for k, v in imports.items()},
        frozenset(imported),
    )


def load_facts(path: Path | None) -> dict[str, FileFacts]:
    """The stored facts; an unreadable or malformed store is ignored (every file is parsed again, then rewritten)."""
    if path is None or not path.is_file():
        return {}
    try:
        document = json.loads(path.read_text())
        if document.get("schema") != _SCHEMA:
            return {}
        return {key: _facts_from_json(row) for key, row in document["files"].items()}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return {}


def store_facts(path: Path, facts: dict[str, FileFacts]) -> None:
    """Write ``facts`` (by the hash of each file's text) to ``path``, replacing it whole: a reader never sees half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps({"schema": _SCHEMA, "files": {k: _facts_json(v) for k, v in facts.items()}}))
    os.replace(temporary, path)
