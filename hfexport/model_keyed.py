"""Model-keyed exceptions: tables outside the exporters' workarounds that name models, declared here so that
``hfexport registry`` lists them (``hfexport.exporters.registry`` re-exports this module) and ``--check`` resolves them.

An *export skip* (``gate/skips.py``) is a model class the gate does not export as it is, with the model-side change
it needs; a *cache type* (``exporters/pytree.py``) a cache class models return without deriving from ``Cache``,
registered with pytree; a *tiny-model entry* (``tiny_models/``) a model type whose tiny model or sample inputs differ
only so that its export runs or compares with eager. Each stays in the table its readers use: ``declare`` records it
and hands the table back unchanged, ``model_exceptions`` lists them all.

It stands apart from the exporters package so that its declarers (the gate's parent process, the tiny-model tables)
import it without loading ``hfexport.exporters`` (90 ms more for every ``hfexport check``).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeVar

EXPORT_SKIP = "export_skip"
CACHE_TYPE = "cache_type"
TINY_MODEL_ENTRY = "tiny_model_entry"
MODEL_KEYED_KINDS = (EXPORT_SKIP, CACHE_TYPE, TINY_MODEL_ENTRY)

# The modules that declare them, imported by name (as backends.py names the exporters): they import this module,
# not the other way round.
DECLARING_MODULES = (
    "hfexport.gate.skips",
    "hfexport.exporters.pytree",
    "hfexport.tiny_models.tables",
    "hfexport.tiny_models.inputs",
)


@dataclass(frozen=True)
class ModelException:
    """One model-keyed exception, as listed by ``hfexport registry``."""

    kind: str
    name: str  # the table or builder that holds it where it is used ("DEGENERATE_INIT")
    models: tuple[str, ...]  # model types ("timesfm2_5") or dotted class paths
    why: str
    module: str  # the module that declares it


_MODEL_EXCEPTIONS: list[ModelException] = []

Table = TypeVar("Table", bound=Iterable[str])


def declare(kind: str, name: str, why: str, models: Table) -> Table:
    """Record the models of ``models`` (a tuple of model types or dotted class paths, or a dict keyed by them) as an
    exception of ``kind`` held by the table ``name`` of the calling module; return ``models`` unchanged."""
    caller = sys._getframe(1).f_globals["__name__"]  # the declaring module, without each caller spelling it out
    _MODEL_EXCEPTIONS.append(ModelException(_known(kind), name, tuple(models), why, caller))
    return models


def _known(kind: str) -> str:
    if kind not in MODEL_KEYED_KINDS:
        raise ValueError(f"{kind!r} is not a model-keyed kind: one of {', '.join(MODEL_KEYED_KINDS)}")
    return kind


def model_exceptions() -> list[ModelException]:
    """Every model-keyed exception, in declaration order (``DECLARING_MODULES`` imported first)."""
    for module in DECLARING_MODULES:
        importlib.import_module(module)
    return list(_MODEL_EXCEPTIONS)
