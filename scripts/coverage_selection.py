"""Which classes a coverage sweep runs: the named sets (all, heads, representative, variants) and a class's family.

``hfexport.tiny_models`` is imported where used: it imports torch and transformers (seconds), which `run --models`
never needs in the sweep's parent process.
"""

from __future__ import annotations

import argparse
import functools
from typing import Any

from hfexport.gate.cells import in_shard
from hfexport.gate.model_sets import FAMILIES


def _model_type(name: str) -> str:
    return name.strip().lower().replace("-", "_")


_EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")


@functools.cache
def family_of(model_type: str, model_class: str) -> str:
    """The family of ``FAMILIES`` a class belongs to: listed types by name, the others by config and head."""
    for family, types in FAMILIES.items():
        if model_type in {_model_type(t) for t in types}:
            return family
    from hfexport import tiny_models

    try:
        cls = tiny_models.resolve_model_class(model_class)
        config = cls.config_class()
    except Exception:
        return "other"
    text = config.get_text_config(decoder=True)
    if any(isinstance(getattr(text, k, None), int) and getattr(text, k) > 1 for k in _EXPERT_KEYS):
        return "MoE"
    if cls.main_input_name in ("input_values", "input_features"):
        return "audio"
    if cls.main_input_name == "pixel_values":
        return "vision"
    if getattr(config, "is_encoder_decoder", False):
        return "encoder-decoder"
    if model_class.endswith(("ForCausalLM", "LMHeadModel")):
        return "decoder LM"
    if model_class.endswith("ForMaskedLM"):
        return "encoder"
    return "other"


def selected_names(args: argparse.Namespace) -> list[str]:
    """Class names (the sets) or the given types / classes (``--models``) for the gate's worker to resolve."""
    if args.models:
        return [name.strip() for name in args.models.split(",") if name.strip()]
    return set_classes(set_label(args))


def set_classes(label: str) -> list[str]:
    """The classes of a named selection: "all", "heads", "representative" or "variants" (variant names)."""
    if label == "representative":
        return representative_classes()
    if label == "variants":
        return [f"{model_class}{VARIANT_SEPARATOR}{v.name}" for model_class, v in variants() if v.unmade is None]
    from hfexport import tiny_models

    names: list[str] = []
    for model_type in tiny_models.all_model_types():
        if label == "all":
            names += [cls.__name__ for cls in tiny_models.model_classes_for_type(model_type)]
        else:
            names.append(tiny_models.resolve_model_class(model_type).__name__)
    return list(dict.fromkeys(names))


def classes_in_shard(classes: list[str], backends: list[str], shard: tuple[int, int]) -> list[str]:
    """The classes with a cell in ``shard`` (the gate shards cells by class and backend), so workers resolve no more."""
    return [c for c in classes if any(in_shard(c, b, shard) for b in backends)]


# Popular architectures whose config variants the `variants` set sweeps (issue 53: what hub checkpoints switch on).
VARIANT_TYPES = ("llama", "mistral", "qwen2", "gemma2", "phi3", "falcon", "bloom", "gpt_neox", "mixtral", "t5")
VARIANT_SEPARATOR = "@"  # tiny_models.VARIANT_SEPARATOR


@functools.cache
def variants() -> list[tuple[str, Any]]:
    """(main head class, ``tiny_models.Variant``) of every config variant of ``VARIANT_TYPES``, made or not."""
    from hfexport import tiny_models

    found = []
    for model_type in VARIANT_TYPES:
        model_class = tiny_models.resolve_model_class(model_type).__name__
        found += [(model_class, variant) for variant in tiny_models.config_variants(model_class)]
    return found


def representative_classes() -> list[str]:
    """The main task head of every type in ``FAMILIES``."""
    from hfexport import tiny_models

    return [tiny_models.resolve_model_class(t).__name__ for types in FAMILIES.values() for t in types]


def set_label(args: argparse.Namespace) -> str:
    if args.models:
        return "models"
    return "all" if args.all else args.set
