"""What ``hfexport registry --check`` resolves in the transformers being checked: every workaround target, and the
model of every model-keyed exception."""

from __future__ import annotations

import importlib.util

from ...compat import UnresolvedPathError, resolve, resolve_path
from ...model_keyed import ModelException, model_exceptions
from .kinds import Workaround, all_workarounds

_MODEL_TYPES = "transformers.models.auto.configuration_auto.CONFIG_MAPPING_NAMES"

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


def unresolved_models() -> list[tuple[ModelException, str, str | None]]:
    """Every (model-keyed exception, reason, absent) whose model does not resolve in the installed transformers.

    A dotted class path resolves as a patch target does; a model type is one ``CONFIG_MAPPING_NAMES`` maps. ``absent``
    is ``ABSENT_MODEL`` when the model's package is not there (a type's package is named after the type), else None:
    the model is there under another name, and the exception no longer applies where it should.
    """
    missing = []
    model_types = resolve(_MODEL_TYPES)
    for exception in model_exceptions():
        for model in exception.models:
            if model.startswith("transformers."):
                try:
                    resolve_path(model)
                except UnresolvedPathError as error:
                    missing.append((exception, str(error), ABSENT_MODEL if _model_absent(model) else None))
            elif model not in model_types:
                package = f"transformers.models.{model.replace('-', '_')}"
                absent = ABSENT_MODEL if _model_absent(package) else None
                missing.append((exception, f"model type {model!r} is not in {_MODEL_TYPES}", absent))
    return missing
