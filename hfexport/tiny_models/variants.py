"""Config variants: a model type built at the features its default config leaves off and checkpoints switch on.

A variant is a set of constructor arguments applied on top of the tiny config (rope types, sliding windows shorter
than the sample sequence, one or half the key/value heads, alibi, qk-norm, parallel residuals, tied or untied
embeddings, a head_dim other than hidden/heads, MoE routing options, gated-GELU T5, scaled embeddings). Which ones a
class supports is found from its config class (the constructor declares the entry) and its modeling code (which
reads it). A variant is named by its class: ``"LlamaForCausalLM@rope_dynamic"``; ``tiny_model`` and
``resolve_model_class`` take such names. One the builder cannot make is listed with its reason (``Variant.unmade``).
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from transformers import PretrainedConfig, PreTrainedModel

from .classes import VARIANT_SEPARATOR as SEPARATOR
from .classes import resolve_model_class
from .configs import _declared_keys, tiny_config

# Dynamic NTK rope grows its frequencies past the context: a context of 8 puts the gate's second shape (11) past it.
SHORT_CONTEXT = 8
# Shorter than the sample sequence (7), so the window masks some of it.
SHORT_WINDOW = 4

Overrides = dict[str, Any]


@dataclass(frozen=True)
class Variant:
    """One config variant of a model class: its name, the constructor arguments, and why it cannot be made (if so)."""

    name: str
    overrides: Overrides = field(default_factory=dict)
    unmade: str | None = None


class UnknownVariantError(ValueError):
    """A variant name its class does not support, or one the builder cannot make (the message says which)."""


def split_name(name: str) -> tuple[str, str | None]:
    """``"LlamaForCausalLM@rope_dynamic"`` -> ``("LlamaForCausalLM", "rope_dynamic")``; a plain name has no variant."""
    base, _, variant = name.partition(SEPARATOR)
    return base, variant or None


# ── Finding the variants ──


def _rope(config: PretrainedConfig, **parameters: Any) -> Overrides:
    """Rope parameters of the tiny config with ``parameters`` on top, for each layer type where they are per layer."""
    current = config.rope_parameters
    if all(isinstance(value, dict) for value in current.values()):  # {"full_attention": {...}, ...}
        return {"rope_parameters": {layer: {**value, **parameters} for layer, value in current.items()}}
    return {"rope_parameters": {**current, **parameters}}


def _rotary_half(config: PretrainedConfig) -> int:
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    rope = config.rope_parameters
    factor = rope.get("partial_rotary_factor", getattr(config, "partial_rotary_factor", 1.0)) if rope else 1.0
    return int(head_dim * (factor or 1.0)) // 2


def _ntk_wide(config: PretrainedConfig) -> Overrides:
    """NTK scaling raises the base to dim / (dim - 2): a rotary dim of 2 (gpt_neox's quarter of a tiny head) divides by
    zero, so such a config rotates half its head instead."""
    return {"partial_rotary_factor": 0.5} if _rotary_half(config) < 2 else {}


def _rope_variants(config: PretrainedConfig) -> dict[str, Overrides]:
    if not getattr(config, "rope_parameters", None):
        return {}
    short_context = {"max_position_embeddings": SHORT_CONTEXT}
    half = _rotary_half(config)
    return {
        "rope_linear": _rope(config, rope_type="linear", factor=2.0),
        "rope_dynamic": {**_rope(config, rope_type="dynamic", factor=2.0, **_ntk_wide(config)), **short_context},
        "rope_yarn": _rope(config, rope_type="yarn", factor=4.0, original_max_position_embeddings=SHORT_CONTEXT),
        "rope_llama3": _rope(
            config,
            rope_type="llama3",
            factor=8.0,
            low_freq_factor=1.0,
            high_freq_factor=4.0,
            original_max_position_embeddings=SHORT_CONTEXT,
        ),
        "rope_longrope": {
            **_rope(
                config,
                rope_type="longrope",
                short_factor=[1.0] * half,
                long_factor=[1.0 + i / half for i in range(half)],
                original_max_position_embeddings=SHORT_CONTEXT,
            ),
            "max_position_embeddings": 4 * SHORT_CONTEXT,
        },
    }


def _sliding_window(config: PretrainedConfig, declared: set[str]) -> dict[str, Overrides]:
    overrides: Overrides = {"sliding_window": SHORT_WINDOW}
    if "use_sliding_window" in declared:
        overrides |= {"use_sliding_window": True, "max_window_layers": 0}
    if isinstance(getattr(config, "layer_types", None), list):
        layers = config.num_hidden_layers
        overrides["layer_types"] = ["sliding_attention"] * (layers - 1) + ["full_attention"]
    return {"sliding_window": overrides}


def _key_value_heads(config: PretrainedConfig, declared: set[str]) -> dict[str, Overrides]:
    heads, current = config.num_attention_heads, getattr(config, "num_key_value_heads", None)
    variants = {}
    if heads > 1 and current != 1:
        variants["mqa"] = {"num_key_value_heads": 1}
    if heads > 2 and current != heads // 2:
        variants["gqa"] = {"num_key_value_heads": heads // 2}
    return variants


def _flags(config: PretrainedConfig, declared: set[str]) -> dict[str, Overrides]:
    """Boolean features: each one the tiny config leaves at the other value."""
    variants = {}
    for name, keys in _FLAGS.items():
        for key in keys:
            if key in declared and isinstance(getattr(config, key, None), bool):
                variants[name if not getattr(config, key) else f"no_{name}"] = {key: not getattr(config, key)}
                break
    return variants


_FLAGS = {
    "alibi": ("alibi",),
    "qk_norm": ("qk_layernorm", "use_qk_norm", "qk_norm"),
    "parallel_residual": ("use_parallel_residual", "parallel_attn", "parallel_residual"),
    "new_decoder_architecture": ("new_decoder_architecture",),
    "tied_embeddings": ("tie_word_embeddings",),
    "scaled_embeddings": ("scale_embedding",),
    "normalized_top_k": ("norm_topk_prob",),
}


def _wide_head_dim(config: PretrainedConfig, declared: set[str]) -> dict[str, Overrides]:
    if not getattr(config, "head_dim", None):  # derived from hidden/heads by the model
        return {}
    return {"wide_head_dim": {"head_dim": 2 * (config.hidden_size // config.num_attention_heads)}}


def _routing(config: PretrainedConfig, declared: set[str]) -> dict[str, Overrides]:
    variants = {}
    if (getattr(config, "num_experts_per_tok", None) or 1) > 1:
        variants["top1_routing"] = {"num_experts_per_tok": 1}
    if "decoder_sparse_step" in declared:
        variants["sparse_step_2"] = {"decoder_sparse_step": 2}
    if "mlp_only_layers" in declared:
        variants["dense_first_layer"] = {"mlp_only_layers": [0]}
    elif "first_k_dense_replace" in declared:
        variants["dense_first_layer"] = {"first_k_dense_replace": 1}
    return variants


def _gated_gelu(config: PretrainedConfig, declared: set[str]) -> dict[str, Overrides]:
    return {"gated_gelu": {"feed_forward_proj": "gated-gelu"}} if config.feed_forward_proj != "gated-gelu" else {}


# (config entry the constructor declares and the modeling code reads, the variants it gives)
_FINDERS: tuple[tuple[str, Callable[[PretrainedConfig, set[str]], dict[str, Overrides]]], ...] = (
    ("rope_parameters", lambda config, declared: _rope_variants(config)),
    ("sliding_window", _sliding_window),
    ("num_key_value_heads", _key_value_heads),
    ("head_dim", _wide_head_dim),
    ("num_experts_per_tok", _routing),
    ("feed_forward_proj", _gated_gelu),
)


# Read by PreTrainedModel (tied embeddings) or turned by the config class into the entries the model reads (T5's
# feed_forward_proj into is_gated_act and dense_act_fn).
_READ_ELSEWHERE = {"tie_word_embeddings", "feed_forward_proj"}


def _modeling_source(model_class: type[PreTrainedModel]) -> str:
    try:
        return inspect.getsource(sys.modules[model_class.__module__])
    except (OSError, TypeError):
        return ""


def _reads(source: str, key: str) -> bool:
    return f".{key}" in source or f'"{key}"' in source


def config_variants(model_class: type[PreTrainedModel] | str) -> list[Variant]:
    """Every variant ``model_class`` supports, each made (its tiny config builds) or with the reason it is not."""
    model_class = resolve_model_class(model_class)
    return [_made(model_class, name, overrides) for name, overrides in _found(model_class).items()]


def _found(model_class: type[PreTrainedModel]) -> dict[str, Overrides]:
    """The variants' overrides: entries the config class declares, that the modeling code reads, at other values."""
    config = tiny_config(model_class)
    declared = _declared(type(config))
    source = _modeling_source(model_class)
    found: dict[str, Overrides] = {}
    for key, finder in _FINDERS:
        if key in declared and (key in _READ_ELSEWHERE or _reads(source, key)):
            found |= finder(config, declared)
    found |= {
        name: overrides
        for name, overrides in _flags(config, declared).items()
        if all(key in _READ_ELSEWHERE or _reads(source, key) for key in overrides)
    }
    return found


def _declared(config_class: type[PretrainedConfig]) -> set[str]:
    return _declared_keys(config_class)


def _made(model_class: type[PreTrainedModel], name: str, overrides: Overrides) -> Variant:
    try:
        tiny_config(model_class, overrides=overrides)
    except Exception as error:  # the config class refuses the combination: listed with its reason
        return Variant(name, overrides, f"{type(error).__name__}: {' '.join(str(error).split())}"[:300])
    return Variant(name, overrides)


def variant_overrides(model_class: type[PreTrainedModel], name: str) -> Overrides:
    """The constructor arguments of ``model_class``'s variant ``name``; unknown or unmade ones raise, saying why."""
    found = _found(model_class)
    if name not in found:
        known = ", ".join(found) or "none"
        raise UnknownVariantError(f"{model_class.__name__} has no variant {name!r} (its variants: {known})")
    variant = _made(model_class, name, found[name])
    if variant.unmade:
        raise UnknownVariantError(f"{model_class.__name__}{SEPARATOR}{name} cannot be made: {variant.unmade}")
    return variant.overrides


def named_overrides(name: str | type[PreTrainedModel]) -> Overrides:
    """The overrides of the variant a name carries (``"LlamaForCausalLM@rope_dynamic"``); none for a plain name."""
    if not isinstance(name, str):
        return {}
    base, variant = split_name(name)
    return variant_overrides(resolve_model_class(base), variant) if variant else {}
