"""The impact map: which transformers code each model class's check really ran.

A check (one model class on its backends: the eager reference run, the export traces, generation) records, in the
gate worker's forked child, every transformers function and method that executed (``CodeUnit``: module and qualified
name, with its file and first and last line) and the transformers modules the job depended on (the files the result
cache keys the cell on). The record travels with the cell's result (``cell["impact"]``, kept by the result cache
under the cell's key) and is merged, per class, into a map: ``hfexport impact build`` writes one for a selection,
``hfexport impact merge`` joins shards. Lambdas and comprehensions count as the function around them; a nested
function is a unit of its own (``outer.<locals>.inner``).

API for selection (the gate's parent imports this module: no torch here)::

    expect = expected_versions(checkout)                # {"transformers": ..., "hfexport": ...}
    impact = ImpactMap.load(path, expect)               # ImpactMapError (one line) when unusable
    impact = default_map(cache_dir, expect)             # from the result cache's records, or None
    impact.model_classes()                              # classes the map has a record for
    impact.classes_running(CodeUnit("transformers.masking_utils", "create_causal_mask"))
    impact.classes_with_module("transformers.masking_utils")
    impact.executed("LlamaForCausalLM")                 # ExecutedUnit: unit, file, first_line, last_line

A class absent from ``model_classes()`` has no record: select it by static analysis, never by the map. A config
variant's checks are recorded under its cells' name, ``"LlamaForCausalLM@rope_dynamic"`` (``default_class`` gives the
class): selection adds a variant where its record holds changed code that its default class's does not.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hfexport

from ..files import read_regular_file
from .cache import MAX_ENTRY_BYTES
from .worker_parent import transformers_dir

MAP_SCHEMA = 1
MAP_KIND = "hfexport-impact-map"
MAX_MAP_BYTES = 512 << 20  # a map for every class of a release is tens of MiB; past this it is not a map
MAX_NAME = 1000  # longest module, qualified name or path a map may hold
# Between a class and its config variant's name, as tiny_models.VARIANT_SEPARATOR (the gate's parent imports no torch).
VARIANT_SEPARATOR = "@"
# Recording edits 3.11 bytecode (impact_recorder.py); elsewhere checks run unrecorded and maps cannot be built.
RECORDING_PYTHON = (3, 11)


@dataclass(frozen=True)
class CodeUnit:
    """A function or method of a transformers module (``qualname`` "" is the module's top level)."""

    module: str  # dotted module as in the checkout, e.g. "transformers.masking_utils"
    qualname: str  # "create_sliding_window_causal_mask", "StaticLayer.update"


@dataclass(frozen=True)
class ExecutedUnit:
    """A code unit a check executed, with where its code was then (file relative to the transformers package's parent,
    e.g. ``transformers/masking_utils.py``; first and last line of its definition, the first being its first
    decorator's where it has one, as Python counts it)."""

    unit: CodeUnit
    file: str
    first_line: int
    last_line: int

    def as_row(self) -> list[Any]:
        return [self.unit.module, self.unit.qualname, self.file, self.first_line, self.last_line]


class ImpactMapError(ValueError):
    """A map that cannot be used: unreadable, malformed, or of another schema or transformers/hfexport version."""


@dataclass
class ClassRecord:
    """What one model class's checks executed and imported."""

    units: set[ExecutedUnit]
    modules: set[str]


class ImpactMap:
    """Per model class, the code units its checks executed and the modules they imported."""

    def __init__(self, versions: dict[str, str | None], records: dict[str, ClassRecord] | None = None):
        self.versions = dict(versions)
        self.records: dict[str, ClassRecord] = records or {}
        self._by_unit: dict[CodeUnit, set[str]] | None = None
        self._by_module: dict[str, set[str]] | None = None

    # ── Queries ──

    def model_classes(self) -> set[str]:
        """Classes the map has a record for."""
        return set(self.records)

    def classes_running(self, unit: CodeUnit) -> set[str]:
        """Classes whose check executed that function or method."""
        if self._by_unit is None:
            self._by_unit = {}
            for name, record in self.records.items():
                for executed in record.units:
                    self._by_unit.setdefault(executed.unit, set()).add(name)
        return set(self._by_unit.get(unit, ()))

    def classes_with_module(self, module: str) -> set[str]:
        """Classes whose check executed code of that module or imported it."""
        if self._by_module is None:
            self._by_module = {}
            for name, record in self.records.items():
                for held in record.modules | {executed.unit.module for executed in record.units}:
                    self._by_module.setdefault(held, set()).add(name)
        return set(self._by_module.get(module, ()))

    def executed(self, model_class: str) -> set[ExecutedUnit]:
        """What that class's checks executed (empty for a class without a record)."""
        record = self.records.get(model_class)
        return set(record.units) if record else set()

    # ── Building ──

    def add(self, model_class: str, record: dict[str, Any]) -> None:
        """Add one cell's ``impact`` record (see ``impact_recorder.py``) to the class's."""
        if not _is_class_name(model_class):
            raise ImpactMapError(f"{model_class[:80]!r} is no class name")
        parsed = _parse_record(record)
        held = self.records.setdefault(model_class, ClassRecord(set(), set()))
        held.units |= parsed.units
        held.modules |= parsed.modules
        self._by_unit = self._by_module = None

    def merge(self, other: ImpactMap) -> None:
        """Take ``other``'s records in (classes in both: the union); versions must be the same."""
        if other.versions != self.versions:
            raise ImpactMapError(f"cannot merge maps of versions {self.versions} and {other.versions}")
        for name, record in other.records.items():
            held = self.records.setdefault(name, ClassRecord(set(), set()))
            held.units |= record.units
            held.modules |= record.modules
        self._by_unit = self._by_module = None

    # ── Files ──

    def to_json(self) -> dict[str, Any]:
        """Rows of units and modules held once; each class names its rows by index."""
        units = sorted({u for r in self.records.values() for u in r.units}, key=ExecutedUnit.as_row)
        modules = sorted({m for r in self.records.values() for m in r.modules})
        unit_index = {u: i for i, u in enumerate(units)}
        module_index = {m: i for i, m in enumerate(modules)}
        classes = {
            name: {
                "units": sorted(unit_index[u] for u in record.units),
                "modules": sorted(module_index[m] for m in record.modules),
            }
            for name, record in sorted(self.records.items())
        }
        return {
            "kind": MAP_KIND,
            "schema": MAP_SCHEMA,
            "versions": self.versions,
            "units": [u.as_row() for u in units],
            "modules": modules,
            "classes": classes,
        }

    def dump(self, path: Path) -> None:
        """Write the map (whole, then renamed into place)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(path.name + ".tmp")
        temporary.write_text(json.dumps(self.to_json(), separators=(",", ":")))
        os.replace(temporary, path)

    @classmethod
    def load(cls, path: Path, expect: dict[str, str | None] | None = None) -> ImpactMap:
        """Read and validate a map file; ``expect`` holds the versions it must have been built with."""
        try:
            data = read_regular_file(path, MAX_MAP_BYTES)  # a restored cache may hold a link or a FIFO there
        except OSError as error:
            raise ImpactMapError(f"impact map {path}: cannot read it ({error.strerror or error})") from None
        if len(data) > MAX_MAP_BYTES:
            raise ImpactMapError(f"impact map {path}: larger than {MAX_MAP_BYTES >> 20} MiB")
        try:
            document = json.loads(data)
        except (ValueError, RecursionError):
            raise ImpactMapError(f"impact map {path}: not JSON") from None
        try:
            loaded = cls.from_json(document)
        except ImpactMapError as error:
            raise ImpactMapError(f"impact map {path}: {error}") from None
        if expect is not None:
            loaded.check_versions(expect, f"impact map {path}")
        return loaded

    def check_versions(self, expect: dict[str, str | None], where: str = "impact map") -> None:
        for name, wanted in expect.items():
            if self.versions.get(name) != wanted:
                raise ImpactMapError(
                    f"{where}: built with {name} {self.versions.get(name)}, this run has {name} {wanted}"
                )

    @classmethod
    def from_json(cls, document: Any) -> ImpactMap:
        """A map from its JSON form; anything malformed is ImpactMapError naming the first problem."""
        if not isinstance(document, dict) or document.get("kind") != MAP_KIND:
            raise ImpactMapError("not an hfexport impact map")
        if document.get("schema") != MAP_SCHEMA:
            raise ImpactMapError(f"schema {document.get('schema')!r}, this hfexport reads schema {MAP_SCHEMA}")
        versions = document.get("versions")
        if not isinstance(versions, dict) or not all(
            isinstance(k, str) and (v is None or _is_name(v)) for k, v in versions.items()
        ):
            raise ImpactMapError("'versions' is not a mapping of names to versions")
        rows, modules, classes = document.get("units"), document.get("modules"), document.get("classes")
        if not isinstance(rows, list) or not isinstance(modules, list) or not isinstance(classes, dict):
            raise ImpactMapError("'units' and 'modules' must be lists, 'classes' a mapping")
        units = [_unit_from_row(row) for row in rows]
        if not all(_is_module(m) for m in modules):
            raise ImpactMapError("'modules' holds something that is no transformers module name")
        records = {}
        for name, entry in classes.items():
            if not _is_class_name(name) or not isinstance(entry, dict):
                raise ImpactMapError(f"class entry {str(name)[:80]!r} is malformed")
            records[name] = ClassRecord(
                {units[i] for i in _indices(entry.get("units"), len(units), name)},
                {modules[i] for i in _indices(entry.get("modules"), len(modules), name)},
            )
        return cls(versions, records)


# ── Reading and checking ──


def _is_name(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= MAX_NAME and value.isprintable()


def _is_identifier(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= MAX_NAME and value.isidentifier()


def _is_class_name(value: Any) -> bool:
    """A model class, or one of its config variants (``"LlamaForCausalLM@rope_dynamic"``, ``tiny_models.variants``)."""
    base, separator, variant = value.partition(VARIANT_SEPARATOR) if isinstance(value, str) else ("", "", "")
    return _is_identifier(base) and (not separator or _is_identifier(variant))


def default_class(name: str) -> str:
    """The class a config variant's name names (``"LlamaForCausalLM@rope_dynamic"`` -> ``"LlamaForCausalLM"``)."""
    return name.partition(VARIANT_SEPARATOR)[0]


def _is_module(value: Any) -> bool:
    return (
        _is_name(value)
        and (value == "transformers" or value.startswith("transformers."))
        and all(part.isidentifier() for part in value.split("."))
    )


_QUALNAME = re.compile(r"^$|^[A-Za-z_][\w<>]*(\.[A-Za-z_<][\w<>]*)*$")


def _unit_from_row(row: Any) -> ExecutedUnit:
    """``[module, qualname, file, first_line, last_line]`` -> ExecutedUnit; ImpactMapError if it is anything else."""
    if not (isinstance(row, list) and len(row) == 5):
        raise ImpactMapError("a unit row is not [module, qualname, file, first_line, last_line]")
    module, qualname, file, first, last = row
    valid = _is_module(module) and isinstance(qualname, str) and len(qualname) <= MAX_NAME
    valid = valid and bool(_QUALNAME.match(qualname)) and _is_name(file)
    lines_valid = all(type(n) is int and 0 <= n < 1 << 31 for n in (first, last)) and first <= last
    if not (valid and lines_valid):
        raise ImpactMapError(f"unit row {json.dumps(row)[:120]} is malformed")
    return ExecutedUnit(CodeUnit(module, qualname), file, first, last)


def _indices(values: Any, size: int, name: str) -> list[int]:
    if not isinstance(values, list) or not all(type(i) is int and 0 <= i < size for i in values):
        raise ImpactMapError(f"class {name}: indices must be a list of row numbers below {size}")
    return values


def _parse_record(record: Any) -> ClassRecord:
    """One cell's ``impact`` record: ``{"units": [row...], "modules": [name...]}``."""
    if not isinstance(record, dict):
        raise ImpactMapError("an impact record is not a mapping")
    rows, modules = record.get("units"), record.get("modules")
    if not isinstance(rows, list) or not isinstance(modules, list) or not all(_is_module(m) for m in modules):
        raise ImpactMapError("an impact record's 'units' or 'modules' is malformed")
    return ClassRecord({_unit_from_row(row) for row in rows}, set(modules))


# ── Versions and where maps come from ──


def expected_versions(code: Path | None) -> dict[str, str | None]:
    """The versions a map must have been built with for a run on ``code`` (a checkout, or None: installed)."""
    package = transformers_dir(code)
    version = None
    if package is not None:
        found = re.search(r"""^__version__\s*=\s*["']([^"']+)["']""", (package / "__init__.py").read_text(), re.M)
        version = found.group(1) if found else None
    return {"transformers": version, "hfexport": hfexport.__version__}


def default_map(cache_dir: Path | None, expect: dict[str, str | None]) -> ImpactMap | None:
    """The map ``check`` uses without ``--impact-map``: the records the result cache kept, or None when it has none.

    Entries of other versions are left out (each record names the versions it was made with)."""
    if cache_dir is None or not cache_dir.is_dir():
        return None
    found = ImpactMap(expect)
    for entry in _cache_entries(cache_dir):
        result = entry.get("result") if isinstance(entry, dict) else None
        job = entry.get("job") if isinstance(entry, dict) else None
        if not (isinstance(result, dict) and isinstance(job, dict) and "impact" in result):
            continue
        record = result["impact"]
        if not isinstance(record, dict) or record.get("versions") != expect:
            continue
        try:
            found.add(str(job.get("model_class")), record)
        except ImpactMapError:
            continue  # a corrupted entry: that class may still have others; selection treats missing as unmapped
    return found if found.records else None


def recording_supported() -> bool:
    """Python 3.11 with SlipCover installed (a dependency there; an install without dependencies may lack it)."""
    return sys.version_info[:2] == RECORDING_PYTHON and importlib.util.find_spec("slipcover") is not None


def merge_files(paths: list[Path]) -> ImpactMap:
    """One map from the maps of several shards (``impact build --shard K/N``): all of one set of versions."""
    merged = ImpactMap.load(paths[0])
    for path in paths[1:]:
        other = ImpactMap.load(path)
        if other.versions != merged.versions:
            raise ImpactMapError(f"impact map {path}: versions {other.versions}, {paths[0]} has {merged.versions}")
        merged.merge(other)
    return merged


def _cache_entries(cache_dir: Path) -> Iterable[Any]:
    """Every result cache entry that reads as JSON (``ResultCache`` removes the broken ones when it meets them)."""
    for path in cache_dir.glob("*/*.json"):
        try:
            data = read_regular_file(path, MAX_ENTRY_BYTES)
            if len(data) <= MAX_ENTRY_BYTES:
                yield json.loads(data)
        except (OSError, ValueError, RecursionError):
            continue
