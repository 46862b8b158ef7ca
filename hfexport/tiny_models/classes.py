"""Names to model classes: a model type (its default head) or a class name of the installed transformers."""

from __future__ import annotations

import difflib
import inspect

import transformers
from transformers import PreTrainedModel

from .. import compat
from .tables import DEFAULT_HEAD_MAPPINGS, MAIN_HEAD_MAPPINGS

VARIANT_SEPARATOR = "@"

# Internals of the auto classes (through the compatibility layer: an empty table if a transformers lacks one).
modeling_auto = compat.internal("transformers.models.auto.modeling_auto")
CONFIG_MAPPING_NAMES: dict[str, str] = (
    compat.internal("transformers.models.auto.configuration_auto.CONFIG_MAPPING_NAMES") or {}
)


class UnknownModelError(ValueError):
    """Raised when a name is neither a model type nor a model class of the installed transformers."""


class UnrunnableModelError(RuntimeError):
    """Raised for a class of ``tables.UNRUNNABLE``: no tiny model of it runs eagerly here (the reason says why)."""


def _mapping(name: str) -> dict[str, str | tuple[str, ...]]:
    return getattr(modeling_auto, name, {})


def _as_tuple(names: str | tuple[str, ...]) -> tuple[str, ...]:
    # A mapping entry is one class name or several.
    return (names,) if isinstance(names, str) else tuple(names)


def class_names(mapping_name: str, model_type: str) -> tuple[str, ...]:
    """The class names an auto mapping (``MODEL_FOR_..._MAPPING_NAMES``) lists for a model type."""
    return _as_tuple(_mapping(mapping_name).get(model_type, ()))


def _class_by_name(name: str) -> type[PreTrainedModel] | None:
    try:
        obj = getattr(transformers, name)
    except (AttributeError, ImportError, RuntimeError):
        return None
    return obj if inspect.isclass(obj) and issubclass(obj, PreTrainedModel) else None


def _known_class_names() -> set[str]:
    names: set[str] = set()
    for mapping_name in dir(modeling_auto):
        if mapping_name.startswith("MODEL") and mapping_name.endswith("_MAPPING_NAMES"):
            for value in _mapping(mapping_name).values():
                names.update(_as_tuple(value))
    return names


def _model_type_of(name: str) -> str | None:
    # Model types mix spellings ("xlm-roberta", "gpt_neo"): accept either separator.
    name = name.strip().lower()
    for candidate in (name, name.replace("-", "_"), name.replace("_", "-")):
        if candidate in CONFIG_MAPPING_NAMES:
            return candidate
    return None


def resolve_model_class(name: str | type[PreTrainedModel]) -> type[PreTrainedModel]:
    """Return the class for a model type (its default head) or for a model class name (of a config variant too:
    ``tiny_models.variants``); a class is itself."""
    if isinstance(name, type):
        return name
    name = name.partition(VARIANT_SEPARATOR)[0]  # "LlamaForCausalLM@rope_dynamic": a config variant of the class
    model_type = _model_type_of(name)
    if model_type is not None:
        for mapping_name in (*DEFAULT_HEAD_MAPPINGS, "MODEL_MAPPING_NAMES"):
            for class_name in class_names(mapping_name, model_type):
                cls = _class_by_name(class_name)
                if cls is not None:
                    return cls
        # Types without a base model (e.g. only an image-text-to-text head) still have a main class.
        for cls in model_classes_for_type(model_type):
            return cls
        raise UnknownModelError(f"Model type {name!r} has no model class in transformers {transformers.__version__}")
    cls = _class_by_name(name)
    if cls is not None:
        return cls
    choices = sorted(set(CONFIG_MAPPING_NAMES) | _known_class_names())
    close = difflib.get_close_matches(name, choices, n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise UnknownModelError(f"Unknown model type or class {name!r}{hint}")


def model_classes_for_type(model_type: str) -> list[type[PreTrainedModel]]:
    """Return the base model class and the main task heads of a model type, base first."""
    classes: list[type[PreTrainedModel]] = []
    for mapping_name in ("MODEL_MAPPING_NAMES", *MAIN_HEAD_MAPPINGS):
        for class_name in class_names(mapping_name, model_type):
            cls = _class_by_name(class_name)
            if cls is not None and cls not in classes:
                classes.append(cls)
    return classes


def all_model_types() -> list[str]:
    """Return every model type of the installed transformers that has at least one model class."""
    return [model_type for model_type in CONFIG_MAPPING_NAMES if model_classes_for_type(model_type)]
