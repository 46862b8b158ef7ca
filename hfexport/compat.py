"""The transformers names hfexport reads that are not public API: declared once, resolved in the code under test.

The gate runs on transformers ``main`` and on PR branches of any age, not only on the release hfexport pins. Every
internal transformers name the engine, generation, the tiny-model builder or the gate uses is declared in
``INTERNALS`` with the feature that needs it. ``internal(path)`` returns the object, or None when the transformers
being exported lacks it: only that feature is off, never the export, and ``disabled()`` says what was off (cells and
export manifests record it). ``hfexport registry --check`` resolves every declared name.
"""

from __future__ import annotations

import builtins
import importlib
import sys
import types
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Internal:
    """One non-public transformers name and what hfexport cannot do without it."""

    path: str
    feature: str


INTERNALS: dict[str, Internal] = {
    internal.path: internal
    for internal in (
        Internal("transformers.cache_utils.CacheLayerMixin", "KV-cache layers as export inputs/outputs; generation"),
        Internal(
            "transformers.cache_utils.LinearAttentionCacheLayerMixin",
            "conv/recurrent states of hybrid caches (qwen3_next, jamba, ...) as export inputs/outputs",
        ),
        Internal("transformers.cache_utils.DummyLayer", "placeholder cache layers (gemma3n, ...) as export outputs"),
        *(
            Internal(f"transformers.cache_utils.{name}", "generation: cache layers with state of their own declined")
            for name in ("DynamicLayer", "DynamicSlidingWindowLayer")
        ),
        Internal(
            "transformers.integrations.executorch.TorchExportableModuleForDecoderOnlyLM",
            "the gate's check of transformers' own exportable module (the 'transformers export module' part)",
        ),
        Internal(
            "transformers.models.reformer.modeling_reformer.ReformerDynamicCache",
            "reformer's bucket cache (not a Cache) as an export output",
        ),
        Internal(
            "transformers.models.xlstm.modeling_xlstm.xLSTMCache",
            "xLSTM's recurrent state (not a Cache) as an export output",
        ),
        Internal(
            "transformers.models.voxtral_realtime.modeling_voxtral_realtime.VoxtralRealtimeConv1dPaddingCache",
            "voxtral_realtime's streaming conv padding (not a Cache) as an export output",
        ),
        Internal(
            "transformers.models.voxtral_realtime.modeling_voxtral_realtime.VoxtralRealtimeConv1dCacheLayer",
            "the layers of voxtral_realtime's conv padding cache",
        ),
        Internal(
            "transformers.modeling_rope_utils.dynamic_rope_update",
            "_patch_rotary_frequencies_as_cos_sin (deepseek_v2, llama4 rotary embeddings)",
        ),
        Internal(
            "transformers.models.auto.configuration_auto.CONFIG_MAPPING_NAMES", "the model types tiny models exist for"
        ),
        Internal("transformers.models.auto.modeling_auto", "the model classes of a type (tiny models, gate selection)"),
        Internal("transformers.integrations.moe", "ONNX translation of the grouped_mm fallback op (MoE experts)"),
    )
}

_disabled: dict[str, str] = {}


class UnresolvedPathError(LookupError):
    """A dotted path that does not exist in the installed (or checked-out) packages."""


def resolve_path(path: str) -> tuple[Any, str]:
    """Return ``(owner, attribute_name)`` for a dotted path, importing the longest importable module prefix."""
    parts = path.split(".")
    owner: Any = None
    for split in range(len(parts) - 1, 0, -1):
        try:
            owner = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        break
    else:
        raise UnresolvedPathError(f"{path}: no importable module prefix")
    for attribute in parts[split:-1]:
        if not hasattr(owner, attribute):
            raise UnresolvedPathError(f"{path}: {type(owner).__name__} {owner!r} has no attribute {attribute!r}")
        owner = getattr(owner, attribute)
    name = parts[-1]
    # A builtin a module's code calls resolves in that module: a patch there shadows it for that module only.
    if not hasattr(owner, name) and not (isinstance(owner, types.ModuleType) and hasattr(builtins, name)):
        raise UnresolvedPathError(f"{path}: {getattr(owner, '__name__', owner)!r} has no attribute {name!r}")
    return owner, name


def resolve(path: str) -> Any:
    """The object a dotted path names (a module too); ``UnresolvedPathError`` when it does not exist."""
    try:
        return importlib.import_module(path)
    except ImportError:
        pass  # not a module: an attribute of one (resolved outside the handler, so no import error is chained)
    owner, name = resolve_path(path)
    return getattr(owner, name)


def internal(path: str) -> Any | None:
    """The declared internal ``path`` of this transformers, or None (and recorded in ``disabled()``) if it lacks it."""
    declared = INTERNALS[path]  # an undeclared name is a bug here, not drift in transformers
    try:
        return resolve(path)
    except UnresolvedPathError:
        _disabled[path] = declared.feature
        return None


def internal_types(*paths: str) -> tuple[type, ...]:
    """The classes among ``paths`` this transformers has, for ``isinstance`` checks that tolerate a missing one."""
    return tuple(found for path in paths if (found := internal(path)) is not None)


def may_be_loaded(path: str) -> bool:
    """False for a path inside a model's modeling module that nothing imported yet: no model of that type exists in
    this process, so none of its classes can be held, returned or run, and importing the module to look costs time."""
    parts = path.split(".")
    return parts[:2] != ["transformers", "models"] or len(parts) < 5 or ".".join(parts[:4]) in sys.modules


def loaded_internal_types(*paths: str) -> tuple[type, ...]:
    """``internal_types`` of the classes that ``may_be_loaded``: importing the others' modeling modules to find out
    cost each gate job three imports (0.06 s)."""
    return internal_types(*filter(may_be_loaded, paths))


def disabled() -> dict[str, str]:
    """Internal names found missing so far in this process, with the feature each one turned off."""
    return dict(_disabled)


def unresolved() -> list[tuple[Internal, str]]:
    """Every declared internal this transformers lacks, with the reason (``hfexport registry --check``)."""
    missing = []
    for declared in INTERNALS.values():
        try:
            resolve(declared.path)
        except UnresolvedPathError as error:
            missing.append((declared, str(error)))
    return missing
