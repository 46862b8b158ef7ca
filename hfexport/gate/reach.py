"""Static selection: which model classes can run a touched function, method or class, read from the source.

Without an impact map, a touched unit is followed by name through transformers' source (``ast``, no import):

- a function reaches every function, method or class whose code names it, through its imports (re-exports
  followed) or a module alias (``masking_utils.create_causal_mask``);
- a class reaches its subclasses and everything that names it; a touched method reaches the subclasses that do not
  override it (or override it and call ``super()``), and everything that names its class;
- a module-level statement that names a reached unit reaches the names it binds (a registry such as
  ``ALL_ATTENTION_FUNCTIONS`` is followed to every function that looks it up); one that binds no name cannot be
  followed by name and reaches the module's reverse import closure, as transformers' ``utils/tests_fetcher.py`` does.

A model class (a ``PreTrainedModel`` subclass with a ``forward`` of a ``modeling_*.py``, see ``changes``) reached
this way is selected, with how many steps it took. A touched unit that reaches no model class at all (``getattr``
dispatch, a function no code names) falls back to the reverse import closure of its module: a change some model
imports never selects nothing. Files are read once per content (``source_facts.FileFacts`` are kept by the hash of
the text).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .source_facts import FileFacts, load_facts, read_facts, store_facts
from .touched import Touch

# Modules that import everything lazily: following them would make every module import every other.
_LAZY_INDEXES = frozenset({"transformers", "transformers.models"})
_MODELING = re.compile(r"^transformers\.models\.(?P<type>[^.]+)\.modeling_(?!tf_|flax_)[^.]+$")
_MODULAR = re.compile(r"^transformers\.models\.(?P<type>[^.]+)\.modular_[^.]+$")
_WORD = re.compile(r"\w+")
_MAX_RESOLVE_DEPTH = 8
# Methods called without their name being written: nn.Module.__call__ runs forward (dunders are checked apart).
_IMPLICIT = frozenset({"forward"})
# The distance given to what only the reverse import closure reaches: after everything found by name.
CLOSURE_DISTANCE = 1000


class SourceTree:
    """transformers' Python files as the jobs will import them: a complete checkout's ``src/transformers``, or a
    partial one laid over the installed package. ``facts_cache``: a JSON file keeping each file's facts by the hash
    of its text, so a later run parses only the files that changed."""

    def __init__(self, package_dirs: list[Path], facts_cache: Path | None = None):
        self.paths: dict[str, Path] = {}
        self.packages: set[str] = set()
        for directory in reversed(package_dirs):  # the first directory wins
            for path in directory.rglob("*.py"):
                parts = ("transformers", *path.relative_to(directory).with_suffix("").parts)
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                    self.packages.add(".".join(parts))
                self.paths[".".join(parts)] = path
        self._texts: dict[str, str] = {}
        self._keys: dict[str, str] = {}
        self._words: dict[str, set[str]] | None = None
        self._facts: dict[str, FileFacts | None] = {}
        self.unreadable: set[str] = set()
        self.facts_cache = facts_cache
        if facts_cache is not None and facts_cache not in _LOADED:
            _FACTS_SEEN.update(load_facts(facts_cache))
            _LOADED.add(facts_cache)
        self._stored = _FACTS_SEEN
        self._parsed = 0

    def text(self, module: str) -> str | None:
        if module not in self._texts:
            path = self.paths.get(module)
            self._texts[module] = path.read_text(encoding="utf-8", errors="replace") if path else ""
        return self._texts[module] or None

    def mentioning(self, word: str) -> set[str]:
        """Modules whose text holds ``word`` as a whole word."""
        if self._words is None:
            keys = {module: self._key(module) for module in self.paths}
            fingerprint = hashlib.sha256(json.dumps(sorted(keys.items())).encode()).hexdigest()
            if fingerprint not in _INDEX_SEEN:
                index: dict[str, set[str]] = {}
                for module in self.paths:
                    for found in set(_WORD.findall(self.text(module) or "")):
                        index.setdefault(found, set()).add(module)
                _INDEX_SEEN.clear()  # one tree's index at a time: it is tens of MiB
                _INDEX_SEEN[fingerprint] = index
            self._words = _INDEX_SEEN[fingerprint]
        return self._words.get(word, set())

    def _key(self, module: str) -> str:
        """The store's key of a module's facts: its name, kind and text."""
        if module not in self._keys:
            text = self.text(module) or ""
            self._keys[module] = hashlib.sha256(f"{module in self.packages}:{module}:{text}".encode()).hexdigest()
        return self._keys[module]

    def facts(self, module: str) -> FileFacts | None:
        """The file's facts; None for a module that is not there or does not parse (listed in ``unreadable``)."""
        if module not in self._facts:
            self._facts[module] = self._read(module)
        return self._facts[module]

    def _read(self, module: str) -> FileFacts | None:
        text = self.text(module)
        if text is None:
            return None
        key = self._key(module)
        if key not in self._stored:
            try:
                self._stored[key] = read_facts(text, module, module in self.packages)
            except (SyntaxError, ValueError):
                self.unreadable.add(module)
                return None
            self._parsed += 1
        return self._stored[key]

    def save(self) -> None:
        """Keep the facts read so far in ``facts_cache`` (when parsing found anything new)."""
        if self.facts_cache is None or not self._parsed:
            return
        keys = [self._key(module) for module in self.paths]  # this tree's files only: the store stays its size
        kept = {key: self._stored[key] for key in keys if key in self._stored}
        store_facts(self.facts_cache, kept)


# Facts and word indexes this process has read, by content: every selection of one run (or test session) shares them.
_FACTS_SEEN: dict[str, FileFacts] = {}
_LOADED: set[Path] = set()
_INDEX_SEEN: dict[str, dict[str, set[str]]] = {}


@dataclass(frozen=True)
class Hit:
    """A model class a touch reaches: how many steps it took and the last step's kind."""

    module: str
    model_class: str
    line: int
    distance: int
    how: str  # "calls it", "subclass", "imports the module"


# A node of the walk: (module, top-level name, method or None); ("module", name, None) is a module's import closure.
_Node = tuple[str, str, str | None]


@dataclass
class StaticReach:
    """Walks from touched units to the model classes that can run them."""

    tree: SourceTree
    _resolved: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    _traits: dict[tuple[str, str], tuple[bool, bool]] = field(default_factory=dict)
    _followed: dict[_Node, list[tuple[_Node, str]]] = field(default_factory=dict)  # walks of one diff share steps
    _closures: dict[str, list[Hit]] = field(default_factory=dict)

    def is_model_class(self, module: str, name: str) -> bool:
        """A class of a modeling file deriving from ``PreTrainedModel`` with a ``forward`` (``changes``' rule)."""
        return bool(_MODELING.match(module)) and all(self.traits(module, name))

    def traits(self, module: str, name: str, depth: int = 0) -> tuple[bool, bool]:
        """(derives from PreTrainedModel, has a forward) of class ``name`` as seen from ``module``."""
        if name == "PreTrainedModel":
            return True, False
        key = (module, name)
        if key not in self._traits:
            self._traits[key] = (False, False)  # a cycle of bases ends here
            defined_in, defined = self.resolve(module, name)
            facts = self.tree.facts(defined_in)
            definition = facts.definitions.get(defined) if facts else None
            if definition is not None and definition.kind == "class" and depth < 32:
                bases = [self.traits(defined_in, base, depth + 1) for base in definition.base_names]
                self._traits[key] = (
                    any(is_model for is_model, _ in bases),
                    "forward" in definition.methods or any(forward for _, forward in bases),
                )
        return self._traits[key]

    def resolve(self, module: str, name: str, depth: int = 0) -> tuple[str, str]:
        """Where ``name`` as seen from ``module`` is defined: (module, name), or (module, "") for a module."""
        key = (module, name)
        if key not in self._resolved:
            self._resolved[key] = self._resolve(module, name, depth)
        return self._resolved[key]

    def _resolve(self, module: str, name: str, depth: int) -> tuple[str, str]:
        facts = self.tree.facts(module)
        if facts is None or name in facts.bound or name not in facts.imports or depth > _MAX_RESOLVE_DEPTH:
            return module, name
        source, original = facts.imports[name]
        if original is None or f"{source}.{original}" in self.tree.paths:
            return (source if original is None else f"{source}.{original}"), ""
        return self.resolve(source, original, depth + 1)

    def _names_for(self, module: str, facts: FileFacts, target: tuple[str, str]) -> set[str]:
        """The refs in ``module`` that mean ``target``: local names bound to it, ``alias.name`` through a module."""
        target_module, name = target
        wanted = {name} if module == target_module and name in facts.bound else set()
        refs = facts.all_refs
        for local, (_, original) in facts.imports.items():
            if original == name and local in refs and self.resolve(module, local) == target:
                wanted.add(local)
            elif f"{local}.{name}" in refs and self.resolve(module, local) == (target_module, ""):
                wanted.add(f"{local}.{name}")
        return wanted

    def _steps(self, node: _Node) -> Iterator[tuple[_Node, str]]:
        """The nodes one step from ``node``, each with the step's kind."""
        target_module, name, method = node
        for module in sorted(self.tree.mentioning(name)):
            if _MODULAR.match(module):
                continue  # never imported: its code runs as the modeling file generated from it (modular_copiers)
            facts = self.tree.facts(module)
            wanted = self._names_for(module, facts, (target_module, name)) if facts else set()
            if not wanted:
                continue
            # Code that names the class of a touched method runs that method only where it calls it by name, unless
            # Python or torch calls it implicitly (``forward`` through ``nn.Module.__call__``, dunders).
            calls = method is None or method in _IMPLICIT or method.startswith("__")
            calls = calls or module in self.tree.mentioning(method)
            for other, definition in facts.definitions.items():
                if definition.bases & wanted:
                    overridden = method in definition.methods and not definition.methods[method].calls_super
                    if not overridden:
                        yield (module, other, method), "subclass"
                    continue
                if not calls:
                    continue
                if definition.refs & wanted:
                    yield (module, other, None), "uses it"
                for method_name, found in definition.methods.items():
                    if found.refs & wanted and (module, other) != (target_module, name):
                        yield (module, other, method_name), "calls it"
            for statement in facts.statements if calls else ():
                if statement.refs & wanted:
                    if statement.names:
                        yield from (((module, bound, None), "uses it") for bound in statement.names)
                    else:  # a registration call or dispatch that binds nothing: follow the module's importers
                        yield ("module", module, None), "imports the module"

    def reach(self, touch: Touch, fallback: bool = True) -> list[Hit]:
        """The model classes ``touch`` reaches, nearest first; with ``fallback``, the import closure when nothing else
        is found (without: a modeling file's own classes are selected anyway)."""
        hits = self._walk(self._seeds(touch))
        return hits or (self.closure(touch.module) if fallback else [])

    def _seeds(self, touch: Touch) -> list[_Node]:
        if touch.kind == "function":
            parts = touch.qualname.split(".")
            return [(touch.module, parts[0], parts[1] if len(parts) == 2 else None)]
        if touch.kind == "class":
            return [(touch.module, touch.qualname, None)]
        return [(touch.module, name, None) for name in touch.names] or [("module", touch.module, None)]

    def _walk(self, seeds: list[_Node]) -> list[Hit]:
        hits: dict[tuple[str, str], Hit] = {}
        seen = set(seeds)
        queue = deque((seed, 0, "changed") for seed in seeds)
        while queue:
            node, distance, how = queue.popleft()
            if node[0] == "module":
                for hit in self.closure(node[1]):
                    hits.setdefault((hit.module, hit.model_class), hit)
                continue
            module, name, _ = node
            facts = self.tree.facts(module)
            if facts and name in facts.definitions and self.is_model_class(module, name):
                hits.setdefault((module, name), Hit(module, name, facts.definitions[name].line, distance, how))
            if node not in self._followed:
                self._followed[node] = list(self._steps(node))
            for step, kind in self._followed[node]:
                if step not in seen:
                    seen.add(step)
                    queue.append((step, distance + 1, kind))
        return sorted(hits.values(), key=lambda hit: (hit.distance, hit.module, hit.line))

    def locate(self, model_class: str) -> Hit | None:
        """Where a model class the impact map names is defined (None: no modeling file defines it now)."""
        for module in sorted(self.tree.mentioning(model_class)):
            facts = self.tree.facts(module)
            if facts and model_class in facts.definitions and self.is_model_class(module, model_class):
                return Hit(module, model_class, facts.definitions[model_class].line, 0, "runs it")
        return None

    def modular_copiers(self, touch: Touch) -> list[tuple[str, str]]:
        """(model type, modular file name) of each modular file that imports touched code of a modeling file: the
        converter copies that code into the type's own modeling file."""
        if not _MODELING.match(touch.module):
            return []
        found = []
        for module in sorted(self.tree.mentioning(touch.module.rsplit(".", 1)[-1])):
            match = _MODULAR.match(module)
            facts = self.tree.facts(module) if match else None
            imported = {name for source, name in (facts.imports.values() if facts else ()) if source == touch.module}
            if imported and (not touch.names or imported & set(touch.names)):
                found.append((match["type"], f"{module.rsplit('.', 1)[-1]}.py"))
        return found

    def importers(self, module: str) -> set[str]:
        """Every module that imports ``module``, directly or through others (lazy package indexes not followed)."""
        found = {module}
        queue = deque([module])
        while queue:
            current = queue.popleft()
            for candidate in self.tree.mentioning(current.rsplit(".", 1)[-1]):
                facts = self.tree.facts(candidate)
                if candidate in found or facts is None or current not in facts.imported_modules:
                    continue
                found.add(candidate)
                if candidate not in _LAZY_INDEXES:
                    queue.append(candidate)
        return found

    def closure(self, module: str) -> list[Hit]:
        """The model classes of every modeling file in ``module``'s reverse import closure (tests_fetcher's rule)."""
        if module not in self._closures:
            self._closures[module] = self._closure(module)
        return self._closures[module]

    def _closure(self, module: str) -> list[Hit]:
        hits = []
        for importer in sorted(self.importers(module)):
            facts = self.tree.facts(importer) if _MODELING.match(importer) else None
            for name, definition in (facts.definitions if facts else {}).items():
                if definition.kind == "class" and self.is_model_class(importer, name):
                    hits.append(Hit(importer, name, definition.line, CLOSURE_DISTANCE, "imports the module"))
        return hits


def model_type_of(module: str) -> str | None:
    """``transformers.models.llama.modeling_llama`` -> ``llama``; None for a module of no model type."""
    match = _MODELING.match(module)
    return match["type"] if match else None
