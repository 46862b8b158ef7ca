"""Stage 3 of every export: pytree registration of transformers' ``Cache`` types, and readable names for leaves.

torch.export flattens inputs and outputs with pytree: every ``Cache`` and ``ModelOutput`` type must be registered.
Caches are walked attribute by attribute: tensors become leaves, everything else a JSON-able context, registered
under the type's import path so that saved programs load again (``ensure_pytree_types``). A type the attribute walk
cannot reach gets a branch in ``_flatten_to_context`` / ``_unflatten_from_context``.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any

import torch
from transformers import Cache, PretrainedConfig

from .. import compat
from ..model_keyed import CACHE_TYPE, declare
from ..torch_compat import pytree

_TENSOR = "__tensor__"


def _class_path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _class_from_path(path: str) -> type:
    module_name, _, qualname = path.rpartition(".")
    return getattr(importlib.import_module(module_name), qualname)


def _is_walkable_object(value: Any) -> bool:
    # Hybrid models (qwen3_next, bailing_hybrid, jamba, ...) keep conv/recurrent states in linear-attention layers,
    # which do not derive from CacheLayerMixin; an older transformers may lack some of these layer kinds.
    return isinstance(value, (Cache, *compat.loaded_internal_types(*_CACHE_LAYER_TYPES, *_OTHER_CACHE_TYPES)))


_CACHE_LAYER_TYPES = (
    "transformers.cache_utils.CacheLayerMixin",
    "transformers.cache_utils.LinearAttentionCacheLayerMixin",
    "transformers.cache_utils.DummyLayer",
)

_OTHER_CACHE_TYPES = declare(
    CACHE_TYPE,
    "_OTHER_CACHE_TYPES",
    "models return these caches without deriving from Cache: registered with pytree and walked as a Cache is",
    (
        "transformers.models.reformer.modeling_reformer.ReformerDynamicCache",
        "transformers.models.xlstm.modeling_xlstm.xLSTMCache",
        "transformers.models.voxtral_realtime.modeling_voxtral_realtime.VoxtralRealtimeConv1dPaddingCache",
        "transformers.models.voxtral_realtime.modeling_voxtral_realtime.VoxtralRealtimeConv1dCacheLayer",
    ),
)


def _flatten_to_context(value: Any, leaves: list[torch.Tensor]) -> Any:
    """Append the tensors of ``value`` to ``leaves``; return a JSON-able context that rebuilds everything else."""

    if isinstance(value, torch.Tensor):
        leaves.append(value)
        return _TENSOR
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        # A symbolic scalar left on a cache layer (e.g. a sliding window's cumulative length) has no tensor slot.
        return {"symbolic": str(value)}
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).removeprefix("torch.")}
    if isinstance(value, torch.device):
        return {"device": str(value)}
    if isinstance(value, type):
        # Caches that grow layers lazily keep the layer class to make (t5gemma2's cross-attention cache).
        return {"class": _class_path(value)}
    if isinstance(value, (list, tuple)):
        return {"list" if isinstance(value, list) else "tuple": [_flatten_to_context(v, leaves) for v in value]}
    if isinstance(value, dict):
        context = {"dict": {str(k): _flatten_to_context(v, leaves) for k, v in value.items()}}
        # Linear-attention layers index their states by int: keep the key type through the JSON context.
        return {**context, "int_keys": True} if value and all(type(k) is int for k in value) else context
    if isinstance(value, PretrainedConfig):
        # xLSTM's cache keeps the model config it was sized from.
        return {"config": _class_path(type(value)), "values": value.to_dict()}
    if _is_walkable_object(value):
        attributes = {name: _flatten_to_context(v, leaves) for name, v in vars(value).items()}
        return {"object": _class_path(type(value)), "attributes": attributes}
    raise TypeError(f"cannot flatten {type(value).__name__} inside a cache: add a branch to _flatten_to_context")


def _unflatten_from_context(context: Any, leaves: Iterator[Any]) -> Any:
    if context == _TENSOR:
        return next(leaves)
    if not isinstance(context, dict):
        return context
    if "dtype" in context:
        return getattr(torch, context["dtype"])
    if "device" in context:
        return torch.device(context["device"])
    if "class" in context:
        return _class_from_path(context["class"])
    if "config" in context:
        return _class_from_path(context["config"]).from_dict(context["values"])
    if "symbolic" in context:
        return None
    if "list" in context or "tuple" in context:
        items = [_unflatten_from_context(c, leaves) for c in context.get("list", context.get("tuple"))]
        return items if "list" in context else tuple(items)
    if "dict" in context:
        key = int if context.get("int_keys") else str
        return {key(k): _unflatten_from_context(c, leaves) for k, c in context["dict"].items()}
    instance = object.__new__(_class_from_path(context["object"]))
    for name, attribute_context in context["attributes"].items():
        setattr(instance, name, _unflatten_from_context(attribute_context, leaves))
    return instance


def _leaf_paths(context: Any, prefix: str = "") -> list[str]:
    """Readable dotted names of the leaves a context describes: ``layers.0.keys`` reads as ``0.key``."""
    if context == _TENSOR:
        return [prefix]
    if not isinstance(context, dict):
        return []
    join = (lambda name: f"{prefix}.{name}") if prefix else (lambda name: str(name))
    if "list" in context or "tuple" in context:
        items = context.get("list", context.get("tuple"))
        return [p for i, c in enumerate(items) for p in _leaf_paths(c, join(i))]
    if "dict" in context:
        return [p for k, c in context["dict"].items() for p in _leaf_paths(c, join(k))]
    if "attributes" in context:
        paths = []
        for name, attribute_context in context["attributes"].items():
            if name == "layers":
                paths += _leaf_paths(attribute_context, prefix)
            else:
                paths += _leaf_paths(attribute_context, join({"keys": "key", "values": "value"}.get(name, name)))
        return paths
    return []


def _cache_flatten(cache: Any) -> tuple[list[torch.Tensor], Any]:
    leaves: list[torch.Tensor] = []
    context = _flatten_to_context(vars(cache), leaves)
    return leaves, context


def _cache_unflatten(values: Any, context: Any, cls: type) -> Any:
    instance = object.__new__(cls)
    for name, value in _unflatten_from_context(context, iter(values)).items():
        setattr(instance, name, value)
    return instance


def _cache_flatten_with_keys(cache: Any) -> tuple[list[tuple[Any, torch.Tensor]], Any]:
    leaves, context = _cache_flatten(cache)
    names = _leaf_paths({"attributes": context["dict"]})
    return [(pytree.GetAttrKey(name), leaf) for name, leaf in zip(names, leaves, strict=True)], context


def register_pytree_type(cls: type) -> None:
    """Register one cache type with pytree (idempotent); its context serializes as JSON for saved programs."""
    if cls in pytree.SUPPORTED_NODES:
        return
    pytree.register_pytree_node(
        cls,
        _cache_flatten,
        lambda values, context: _cache_unflatten(values, context, cls),
        serialized_type_name=_class_path(cls),
        to_dumpable_context=lambda context: context,
        from_dumpable_context=lambda dumped: dumped,
        flatten_with_keys_fn=_cache_flatten_with_keys,
    )


def _subclasses(cls: type) -> Iterator[type]:
    for subclass in cls.__subclasses__():
        yield subclass
        yield from _subclasses(subclass)


def register_cache_types() -> list[str]:
    """Register every ``Cache`` subclass loaded so far (model-specific ones too, once their module is imported), and
    the caches outside ``Cache`` of ``_OTHER_CACHE_TYPES``."""

    classes = [Cache, *_subclasses(Cache), *compat.loaded_internal_types(*_OTHER_CACHE_TYPES)]
    for cls in classes:
        register_pytree_type(cls)
    return [_class_path(cls) for cls in classes]


def ensure_pytree_types(type_paths: list[str]) -> None:
    """Before loading a saved program: import and register every type its input/output specs name."""

    for path in type_paths:
        # ModelOutput subclasses register themselves with pytree when their class is created: importing is enough
        # (instantiating one would fail on outputs with required fields, DPRQuestionEncoderOutput).
        cls = _class_from_path(path)
        if issubclass(cls, (Cache, *compat.loaded_internal_types(*_OTHER_CACHE_TYPES))):
            register_pytree_type(cls)


def _spec_types(spec: pytree.TreeSpec) -> set[str]:
    found = set()
    if spec.type not in (None, list, tuple, dict) and spec.type in pytree.SUPPORTED_NODES:
        found.add(_class_path(spec.type))
    for child in spec.children():
        found |= _spec_types(child)
    return found


def leaf_names(spec: pytree.TreeSpec) -> list[str]:
    """A readable name per leaf of a spec: ``input_ids``, ``logits``, ``past_key_values.0.key``."""
    # Tensors as placeholders: the cache walk only turns tensors into leaves.
    placeholder = pytree.tree_unflatten([torch.empty(0) for _ in range(spec.num_leaves)], spec)
    names = []
    for path, _ in pytree.tree_flatten_with_path(placeholder)[0]:
        parts = []
        for entry in path:
            if isinstance(entry, pytree.MappingKey):
                parts.append(str(entry.key))
            elif isinstance(entry, pytree.SequenceKey):
                parts.append(str(entry.idx))
            elif isinstance(entry, pytree.GetAttrKey):
                parts.append(entry.name)
            else:
                parts.append(str(entry).strip(".[]"))
        names.append(".".join(parts))
    return names


def named_leaves(value: Any) -> list[tuple[str, Any]]:
    """(readable name, leaf) for every leaf of ``value``, caches included (their types registered first); leaves are
    numbered where their spec cannot be named."""
    register_cache_types()
    leaves, spec = pytree.tree_flatten(value)
    try:
        names = leaf_names(spec)
    except Exception:
        names = [str(i) for i in range(len(leaves))]
    return list(zip(names, leaves, strict=True))
