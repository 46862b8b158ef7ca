"""What a change touched: a git range, file names or ``--models`` turned into the model classes to check.

Model classes are read from the modeling files themselves with ``ast`` (no import, no hand-written table): every
class of a touched ``modeling_*.py`` that derives from ``PreTrainedModel`` (through classes of the same file or of
other modeling files) and has a ``forward`` of its own or inherited is a candidate. Abstract family bases such as
``LlamaPreTrainedModel`` define no ``forward`` and are left out.
"""

from __future__ import annotations

import ast
import difflib
import importlib.util
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from ..families import GATE_CLASSES

MODEL_FILE = re.compile(
    r"(?:^|/)src/transformers/models/(?P<type>[^/]+)/(?P<kind>modeling|modular|configuration)_[^/]*\.py$"
)
# Shared code whose change can break any model: it selects the representative set instead of one model type.
SHARED_CODE = re.compile(
    r"(?:^|/)src/transformers/(?:cache_utils|masking_utils|modeling_utils|modeling_rope_utils|pytorch_utils"
    r"|modeling_attn_mask_utils|integrations/[^/]*attention[^/]*)\.py$"
    r"|(?:^|/)hfexport/exporters/[^/]+\.py$"
)
# One class per kind of architecture the exporters treat differently: decoder LM, encoder, seq2seq, vision.
REPRESENTATIVE_NAMES = tuple(class_name for _, class_name in GATE_CLASSES)
# The selection's reason names the changed files of this many model types; the report's model_types has every one.
REASONS_NAMED = 8


class SelectionError(ValueError):
    """The change cannot be determined: not a git repository, a bad range, no default branch."""


@dataclass(frozen=True)
class SelectedClass:
    model_type: str
    model_class: str
    file: str | None = None  # relative to the repository root when inside a checkout
    line: int | None = None
    module: str | None = None  # dotted module that defines the class, when known from its file


@dataclass
class Selection:
    mode: str  # "diff", "files", "models" or "all"
    classes: list[SelectedClass] = field(default_factory=list)
    names: list[str] = field(default_factory=list)  # --models / --all names the worker resolves to classes
    representative: bool = False
    reason: str = ""

    @property
    def model_types(self) -> list[str]:
        return sorted({c.model_type for c in self.classes})


# ── Git ──


# A git hook (pre-commit) runs with these set for the repository being committed to; inherited, they point
# `git worktree add` and `git -C <other tree>` at the wrong index ("index file open failed: Not a directory").
_HOOK_GIT_VARIABLES = frozenset({"GIT_INDEX_FILE", "GIT_DIR", "GIT_WORK_TREE", "GIT_PREFIX"})


def git(root: Path, *args: str, index_file: Path | None = None) -> str:
    env = {name: value for name, value in os.environ.items() if name not in _HOOK_GIT_VARIABLES}
    if index_file is not None:  # an index of hfexport's own, so the repository's own index is never touched
        env["GIT_INDEX_FILE"] = str(index_file)
    result = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, env=env)
    if result.returncode != 0:
        message = (result.stderr.strip().splitlines() or ["git failed"])[-1]
        raise SelectionError(f"git {' '.join(args)}: {message}")
    return result.stdout.strip()


def repository_root(path: Path) -> Path:
    try:
        return Path(git(path, "rev-parse", "--show-toplevel"))
    except SelectionError:
        raise SelectionError(f"{path} is not a git repository (pass file names or --models)") from None


def default_branch(root: Path) -> str:
    """The branch a PR would merge into: origin's HEAD, else the first of main/master that exists."""
    try:
        return git(root, "symbolic-ref", "--short", "refs/remotes/origin/HEAD")
    except SelectionError:
        pass
    for candidate in ("origin/main", "origin/master", "main", "master"):
        if (
            subprocess.run(
                ["git", "-C", str(root), "rev-parse", "--verify", "-q", candidate], capture_output=True
            ).returncode
            == 0
        ):
            return candidate
    raise SelectionError("cannot find the default branch (no origin/HEAD, main or master): pass --base")


def resolve_range(root: Path, base: str | None, head: str | None) -> tuple[str, str]:
    """Commit ids of (base, head); base defaults to the merge base of HEAD with the default branch."""
    head_sha = git(root, "rev-parse", "--verify", f"{head or 'HEAD'}^{{commit}}")
    if base is None:
        branch = default_branch(root)
        try:
            return git(root, "merge-base", branch, head_sha), head_sha
        except SelectionError:
            raise SelectionError(f"no merge base between {branch} and {head or 'HEAD'}: pass --base") from None
    return git(root, "rev-parse", "--verify", f"{base}^{{commit}}"), head_sha


def changed_files(root: Path, base: str, head: str | None) -> list[str]:
    """Files changed from ``base`` to ``head`` (to the working tree when head is None), relative to ``root``."""
    args = ["diff", "--name-only", base] + ([head] if head else [])
    return [line for line in git(root, *args).splitlines() if line]


# ── Finding model classes in modeling files ──


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


def _parse(path: Path, module_name: str) -> tuple[dict[str, _ClassInfo], dict[str, str]]:
    """Classes of a file (line, base names, own forward) and where each imported name comes from."""
    tree = ast.parse(path.read_text(), filename=str(path))
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


# ── Selections ──


def _modeling_files(model_type: str, root: Path | None) -> list[tuple[Path, Path]]:
    """(file, transformers dir it lives in) of a model type's modeling files, the checkout's first."""
    for directory in transformers_source_dirs(root):
        files = sorted((directory / "models" / model_type).glob("modeling_*.py"))
        if files:
            return [(f, directory) for f in files]
    return []


def _relative(path: Path, root: Path | None) -> str:
    if root is not None and path.is_relative_to(root):
        return path.relative_to(root).as_posix()
    # Outside a checkout: name it as transformers names its own files.
    parts = path.parts
    return (
        "/".join(parts[len(parts) - 1 - parts[::-1].index("transformers") :]) if "transformers" in parts else str(path)
    )


def classes_of_type(model_type: str, root: Path | None) -> list[SelectedClass]:
    selected = []
    for path, _ in _modeling_files(model_type, root):
        if path.stem.startswith(("modeling_tf_", "modeling_flax_")):
            continue
        for name, line in model_classes_in_file(path, root):
            module = f"transformers.models.{model_type}.{path.stem}"
            selected.append(SelectedClass(model_type, name, _relative(path, root), line, module))
    return selected


def select_from_files(files: list[str], root: Path | None, mode: str) -> Selection:
    """Map changed files to model classes; shared code selects the representative set."""
    model_types: dict[str, list[str]] = {}
    shared = []
    for name in files:
        posix = Path(name).as_posix()
        match = MODEL_FILE.search(posix)
        if match:
            model_types.setdefault(match["type"], []).append(Path(posix).name)
        elif SHARED_CODE.search(posix):
            shared.append(Path(posix).name)
    classes: list[SelectedClass] = []
    reasons = []
    for model_type, names in sorted(model_types.items()):
        classes += classes_of_type(model_type, root)
        reasons.append(f"{', '.join(sorted(set(names)))} changed")
    if len(reasons) > REASONS_NAMED:  # a release diff touches ~500 model types: the report lists them all
        reasons[REASONS_NAMED:] = [f"and {len(reasons) - REASONS_NAMED} more model types"]
    selection = Selection(mode=mode, classes=classes, reason="; ".join(reasons))
    if shared:
        known = {c.model_class for c in classes}
        for model_type, class_name in GATE_CLASSES:
            if class_name not in known:
                located = [c for c in classes_of_type(model_type, root) if c.model_class == class_name]
                classes.append(located[0] if located else SelectedClass(model_type, class_name))
        selection.representative = True
        shared_reason = f"shared code changed ({', '.join(sorted(set(shared)))}): representative architectures"
        selection.reason = "; ".join(filter(None, [selection.reason, shared_reason]))
    if not selection.reason:
        selection.reason = "no modeling, configuration or shared code changed"
    return selection


def select_from_diff(root: Path, base: str, head: str | None) -> Selection:
    return select_from_files(changed_files(root, base, head), root, "diff")


def find_checkout(path: Path) -> Path | None:
    """The nearest directory at or above ``path`` that holds ``src/transformers``."""
    for candidate in [path, *path.parents]:
        if (candidate / "src" / "transformers").is_dir():
            return candidate
    return None


# ── Model names (--models, hfexport export NAME), checked from the source files before any job starts ──

# ("llama", "LlamaConfig") or "llama": "LlamaConfig": transformers' auto modules have written it both ways.
_CONFIG_ENTRY = re.compile(r'"([\w.-]+)"\s*[,:]\s*"\w+Config"')
_CLASS_LINE = re.compile(r"^class (\w+)\(", re.M)


def _transformers_dir(checkout: Path | None) -> Path | None:
    """The transformers package the jobs will import: the checkout's, else the installed one (found, not imported)."""
    if checkout is not None:
        return checkout / "src" / "transformers"
    spec = importlib.util.find_spec("transformers")
    locations = list(spec.submodule_search_locations or []) if spec else []
    return Path(locations[0]) if locations else None


def _key(name: str) -> str:
    # A config variant's name ("LlamaForCausalLM@rope_dynamic", tiny_models.variants) names its class.
    return name.partition("@")[0].strip().lower().replace("-", "_")


def unknown_model_names(names: list[str], checkout: Path | None) -> dict[str, list[str]]:
    """Each name that is neither a model type (transformers' config mapping) nor a class of a modeling file, with up to
    three close matches. Read from the files in about a second, where resolving imports torch and transformers."""
    package = _transformers_dir(checkout)
    auto = package / "models" / "auto" if package else None
    text = "".join(p.read_text(encoding="utf-8", errors="replace") for p in auto.glob("*.py")) if auto else ""
    types = {_key(t): t for t in _CONFIG_ENTRY.findall(text)}
    if not types:
        return {}  # an unusual layout: the jobs resolve the names and say what they cannot
    unknown = [name for name in names if _key(name) not in types]
    if not unknown:
        return {}
    classes: set[str] = set()
    for path in (package / "models").rglob("modeling_*.py"):
        classes.update(_CLASS_LINE.findall(path.read_text(encoding="utf-8", errors="replace")))
    known = {**types, **{name.lower(): name for name in classes}}
    found: dict[str, list[str]] = {}
    for name in unknown:
        if name.partition("@")[0].strip() in classes:
            continue
        close = difflib.get_close_matches(_key(name), list(known), n=3, cutoff=0.8)
        found[name] = [known[match] for match in close]
    return found


def check_model_names(names: list[str], checkout: Path | None) -> None:
    """``SelectionError`` naming every unknown model name, with close matches only when they are close."""
    unknown = unknown_model_names(names, checkout)
    if unknown:
        said = "; ".join(
            f"{name!r}" + (f" (did you mean {', '.join(close)}?)" if close else "") for name, close in unknown.items()
        )
        raise SelectionError(
            f"unknown model type or class {said}: a model type is a key of transformers' CONFIG_MAPPING_NAMES "
            "(llama, bert), a class one its modeling files define (LlamaForCausalLM)"
        )
