"""The model classes of a modeling file, read with ``ast`` (no import): every class that derives from
``PreTrainedModel`` (through classes of the same file or of other modeling files) and has a ``forward`` of its own or
inherited. Abstract family bases such as ``LlamaPreTrainedModel`` define no ``forward`` and are left out."""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

# A model type's own files: a change to one selects its classes.
MODEL_FILE = re.compile(
    r"(?:^|/)src/transformers/models/(?P<type>[^/]+)/(?P<kind>modeling|modular|configuration)_(?P<name>[^/]*)\.py$"
)


def transformers_source_dirs(root: Path | None) -> list[Path]:
    """Where ``transformers`` modules are read from: the checkout's ``src/transformers``, then the installed one."""
    dirs = []
    if root is not None and (root / "src" / "transformers").is_dir():
        dirs.append(root / "src" / "transformers")
    spec = importlib.util.find_spec("transformers")
    if spec is not None and spec.submodule_search_locations:
        dirs.extend(Path(p) for p in spec.submodule_search_locations)
    return dirs


def _module_file(module: str, source_dirs: list[Path]) -> Path | None:
    parts = module.split(".")
    if parts[0] != "transformers":
        return None
    for directory in source_dirs:
        for candidate in (
            directory.joinpath(*parts[1:]).with_suffix(".py"),
            directory.joinpath(*parts[1:], "__init__.py"),
        ):
            if candidate.is_file():
                return candidate
    return None


def _absolute_module(module_name: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module_name.split(".")[: -node.level]
    return ".".join(package + ([node.module] if node.module else []))


@dataclass
class _ClassInfo:
    line: int
    bases: list[str]
    has_forward: bool


# Parsed files by module and text: the selections of one process (a test session's many checks) parse each once.
_PARSED: dict[tuple[str, str], tuple[dict[str, _ClassInfo], dict[str, str]]] = {}


def _parse(path: Path, module_name: str) -> tuple[dict[str, _ClassInfo], dict[str, str]]:
    """Classes of a file (line, base names, own forward) and where each imported name comes from."""
    text = path.read_text()
    key = (module_name, hashlib.sha256(text.encode()).hexdigest())
    if key not in _PARSED:
        _PARSED[key] = _read_classes(ast.parse(text, filename=str(path)), module_name)
    return _PARSED[key]


def _read_classes(tree: ast.Module, module_name: str) -> tuple[dict[str, _ClassInfo], dict[str, str]]:
    classes: dict[str, _ClassInfo] = {}
    imports: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            bases = [
                b.id if isinstance(b, ast.Name) else b.attr
                for b in node.bases
                if isinstance(b, ast.Name | ast.Attribute)
            ]
            has_forward = any(isinstance(n, ast.FunctionDef) and n.name == "forward" for n in node.body)
            classes[node.name] = _ClassInfo(node.lineno, bases, has_forward)
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                imports[alias.asname or alias.name] = _absolute_module(module_name, node)
    return classes, imports


class _ModelClassFinder:
    """Decides, across modeling files, which classes derive from ``PreTrainedModel`` and have a ``forward``."""

    def __init__(self, source_dirs: list[Path]):
        self.source_dirs = source_dirs
        self._files: dict[str, tuple[dict[str, _ClassInfo], dict[str, str]]] = {}

    def _file(self, module: str) -> tuple[dict[str, _ClassInfo], dict[str, str]] | None:
        if module not in self._files:
            path = _module_file(module, self.source_dirs)
            self._files[module] = _parse(path, module) if path else ({}, {})
        return self._files[module]

    def _lookup(self, module: str, name: str, depth: int = 0) -> tuple[str, _ClassInfo] | None:
        classes, imports = self._file(module)
        if name in classes:
            return module, classes[name]
        if name in imports and depth < 8 and imports[name].startswith("transformers.") and imports[name] != module:
            return self._lookup(imports[name], name, depth + 1)
        return None

    def traits(self, module: str, name: str, depth: int = 0) -> tuple[bool, bool]:
        """(derives from PreTrainedModel, has a forward) of class ``name`` as seen from ``module``."""
        if name == "PreTrainedModel":
            return True, False
        found = self._lookup(module, name)
        if found is None or depth > 32:
            return False, False
        defining_module, info = found
        is_model, has_forward = False, info.has_forward
        for base in info.bases:
            base_model, base_forward = self.traits(defining_module, base, depth + 1)
            is_model = is_model or base_model
            has_forward = has_forward or base_forward
        return is_model, has_forward

    def model_classes(self, module: str) -> list[tuple[str, int]]:
        classes, _ = self._file(module)
        found = []
        for name, info in classes.items():
            is_model, has_forward = self.traits(module, name)
            if is_model and has_forward:
                found.append((name, info.line))
        return found


def model_classes_in_file(path: Path, root: Path | None = None) -> list[tuple[str, int]]:
    """(class name, line) of every exportable model class defined in one modeling file."""
    match = MODEL_FILE.search(path.as_posix())
    module = (
        f"transformers.models.{match['type']}.{path.stem}"
        if match
        else f"transformers.models.{path.parent.name}.{path.stem}"
    )
    finder = _ModelClassFinder([path.parent.parent.parent, *transformers_source_dirs(root)])
    finder._files[module] = _parse(path, module)
    return finder.model_classes(module)
