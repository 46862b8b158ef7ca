"""Tiny, seeded, random-weight transformers models and matching sample inputs.

Everything is built from config classes: nothing is downloaded. A default config is shrunk by
walking its attributes (and those of nested sub-configs) and replacing known size keys, so
that most architectures of the installed transformers build without a per-model recipe.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import inspect
import logging
import sys
import unittest
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import transformers
from transformers import CONFIG_MAPPING, AutoConfig, PretrainedConfig, PreTrainedModel

from . import compat

# Internals of the auto classes (through the compatibility layer: an empty table if a transformers lacks one).
modeling_auto = compat.internal("transformers.models.auto.modeling_auto")
CONFIG_MAPPING_NAMES: dict[str, str] = (
    compat.internal("transformers.models.auto.configuration_auto.CONFIG_MAPPING_NAMES") or {}
)

logger = logging.getLogger(__name__)

__all__ = [
    "ALTERNATE_CONFIGS",
    "UnknownModelError",
    "all_model_types",
    "model_classes_for_type",
    "resolve_model_class",
    "sample_inputs",
    "tester_config",
    "tiny_config",
    "tiny_model",
]


class UnknownModelError(ValueError):
    """Raised when a name is neither a model type nor a model class of the installed transformers."""


# Task heads in the order that picks a model type's default class; the base model comes last.
_DEFAULT_HEAD_MAPPINGS = (
    "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
    "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES",
    "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
    "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
    "MODEL_FOR_CTC_MAPPING_NAMES",
    "MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES",
)
# Heads listed by model_classes_for_type: the default ones plus multimodal generation.
_MAIN_HEAD_MAPPINGS = (
    "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
    "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
    "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES",
    "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES",
    "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
    "MODEL_FOR_CTC_MAPPING_NAMES",
    "MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES",
)

# ── Tiny sizes ──
# The architectures every backend must export and round-trip (one per family the exporters treat differently).
CORE_MODEL_TYPES = (
    "llama",
    "mistral",
    "qwen2",
    "gemma",
    "gpt2",
    "bert",
    "roberta",
    "t5",
    "bart",
    "vit",
    "resnet",
    "wav2vec2",
    "whisper",
    "clip",
)

HIDDEN = 32
HEADS = 4
KV_HEADS = 2
HEAD_DIM = HIDDEN // HEADS
INTERMEDIATE = 64
LAYERS = 2
VOCAB = 128
MAX_POSITIONS = 512
IMAGE_SIZE = 32
PATCH_SIZE = 8
FRAMES = 4
EXPERTS = 4
EXPERTS_PER_TOKEN = 2

_HIDDEN_KEYS = frozenset(
    {
        "hidden_size",
        "d_model",
        "n_embd",
        "n_embed",
        "embed_dim",
        "emb_dim",
        "dim",
        "d_latents",
        "word_embed_proj_dim",
        "embedding_size",
        "embedding_dim",
        "projection_dim",
        "classifier_proj_size",
        "xvector_output_dim",
        "codevector_dim",
        "proj_codevector_dim",
    }
)
_INTERMEDIATE_KEYS = frozenset({"ffn_dim", "d_ff", "n_inner", "hidden_dim"})
_LAYER_KEYS = frozenset({"num_layers", "n_layer", "n_layers", "encoder_layers", "decoder_layers"})
_HEAD_KEYS = frozenset({"n_head", "n_heads", "num_heads", "encoder_attention_heads", "decoder_attention_heads"})
_KV_HEAD_KEYS = frozenset({"num_key_value_heads", "num_kv_heads", "n_kv_heads", "multi_query_group_num"})
_HEAD_DIM_KEYS = frozenset(
    {
        "head_dim",
        "d_kv",
        "kv_channels",
        "rotary_dim",
        "qk_rope_head_dim",
        "qk_nope_head_dim",
        "v_head_dim",
        "swa_head_dim",
    }
)
_LORA_RANK_KEYS = frozenset({"kv_lora_rank", "q_lora_rank"})
_EXPERT_KEYS = frozenset({"num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts"})
_EXPERTS_PER_TOKEN_KEYS = frozenset({"num_experts_per_tok", "moe_top_k", "moe_topk", "moe_k", "num_selected_experts"})
# Grouped routing (DeepSeek-style) needs experts divisible by groups: one group keeps it trivially true.
_ONE_KEYS = frozenset({"n_group", "topk_group", "n_shared_experts", "first_k_dense_replace", "zero_expert_num"})
_EXACT_CAPS = (
    (_HIDDEN_KEYS, HIDDEN),
    (_INTERMEDIATE_KEYS, INTERMEDIATE),
    (_LAYER_KEYS, LAYERS),
    (_HEAD_KEYS, HEADS),
    # Grouped-query attention even where the full-size model is multi-head; multi-query stays as is.
    (_KV_HEAD_KEYS, KV_HEADS),
    (_HEAD_DIM_KEYS, HEAD_DIM),
    (_LORA_RANK_KEYS, 2 * HEAD_DIM),
    (_EXPERT_KEYS, EXPERTS),
    (_EXPERTS_PER_TOKEN_KEYS, EXPERTS_PER_TOKEN),
    (_ONE_KEYS, 1),
)
# Families of keys named by their ending ("vision_hidden_size", "shape_vocab_size", ...): (suffixes, cap).
_SUFFIX_CAPS = (
    (("hidden_size", "_embed_dim", "_emb_dim", "_emb_size", "_embedding_dim", "_embedding_size"), HIDDEN),
    (("intermediate_size", "_ffn_dim", "_inner_dim"), INTERMEDIATE),
    (("num_hidden_layers", "_num_layers", "num_encoder_layers", "num_decoder_layers"), LAYERS),
    (("num_attention_heads", "_num_heads", "_attention_heads"), HEADS),
    (("_num_key_value_heads",), KV_HEADS),
    (("vocab_size",), VOCAB),
)
_CAPS = {
    "max_position_embeddings": MAX_POSITIONS,
    "n_positions": MAX_POSITIONS,
    "max_source_positions": 32,
    "max_target_positions": 64,
    "num_mel_bins": 16,
    "num_conv_pos_embeddings": 16,
    "num_conv_pos_embedding_groups": 2,
    "num_codevectors_per_group": 8,
    "image_size": IMAGE_SIZE,
    "crop_size": IMAGE_SIZE,
    "patch_size": PATCH_SIZE,
    # Video encoders: frames as a multiple of the tubelet's 2 frames.
    "num_frames": FRAMES,
    "frames_per_clip": FRAMES,
    "window_size": 4,
    # DETR-like two-stage decoders pick their queries by top-k over the few encoder tokens of a tiny image.
    "num_queries": 8,
    # Spectrogram transformers (AST) take exactly max_length frames.
    "max_length": 64,
    "mamba_d_head": HEAD_DIM,
    "mamba_d_state": 16,
    "state_size": 16,
    "mamba_chunk_size": 32,
    "chunk_size": 32,
    # Depthwise upsampling convs (mimi, pocket_tts) have one group per hidden channel.
    "upsample_groups": HIDDEN,
}
# Channel widths of conv feature extractors, and of resnet-like stages (which widen stage by stage).
_CHANNEL_LIST_KEYS = frozenset({"conv_dim", "tdnn_dim"})
_STAGE_WIDTH_LIST_KEYS = frozenset({"hidden_sizes", "embed_dim", "embedding_dims"})
_DEPTH_LIST_KEYS = frozenset({"depths", "depth", "num_block_repeats"})
# Switches that would need optional dependencies or downloads (timm, pretrained backbones).
_FORCED = {"use_timm_backbone": False, "use_pretrained_backbone": False}
# Config entries that are bookkeeping, not architecture: the constructor sets them itself.
_SKIPPED_KEYS = frozenset({"transformers_version", "architectures", "_name_or_path", "dtype", "torch_dtype"})
# Per model type, what generic shrinking cannot derive (applies to sub-configs of that type too).
_OVERRIDES: dict[str, dict[str, Any]] = {
    # The attention pattern is expanded from (pattern, repeats) pairs to one entry per layer.
    "gpt_neo": {"attention_types": [[["global", "local"], 1]]},
    # Stage i reads the i-th drop-path rate of its own blocks: stage i needs at least i + 1 blocks.
    "cvt": {"depth": [1, 2, 3]},
    # The 2D layout embeddings are six slices of hidden_size // 6 that must add back up to hidden_size.
    "lilt": {"hidden_size": 48},
    # Likewise four coordinate and two shape embeddings.
    "layoutlmv3": {"hidden_size": 48, "coordinate_size": 8, "shape_size": 8},
    # The axial position embedding halves must add up to hidden_size.
    "reformer": {"axial_pos_embds_dim": [HIDDEN // 2, HIDDEN // 2]},
    # The block pattern repeats over the layers: two layers must still contain an attention block.
    "recurrent_gemma": {"block_types": ["recurrent", "attention"]},
    # Group norms over the narrowest tiny stage (16 channels).
    "bit": {"num_groups": 8},
    # Hybrid stacks: two layers must still hold an attention layer, where the cache measures its length.
    "bamba": {"attn_layer_indices": [1]},
    "jamba": {"attn_layer_period": 2, "attn_layer_offset": 1},
    "granitemoehybrid": {"layer_types": ["linear_attention", "full_attention"]},
    "kimi_linear": {"layer_types": ["linear_attention", "full_attention"]},
    "glm5_next_text": {"layer_types": ["linear_attention", "full_attention"]},
    "lfm2_moe": {"layer_types": ["conv", "full_attention"]},
    # Hybrid layers share one transformer block, tied from the first hybrid layer to the others: two of them. Its
    # attention reads the hidden states concatenated with the embeddings: twice the width.
    "zamba": {
        "num_hidden_layers": 3,
        "layers_block_type": ["linear_attention", "hybrid", "hybrid"],
        "attention_hidden_size": 2 * HIDDEN,
    },
    # Two layers cannot both produce and reuse the key/values of each attention kind; the per-layer embeddings
    # have their own vocabulary (262144 entries of 256 per layer: 134M parameters).
    "gemma3n_text": {"num_kv_shared_layers": 0, "vocab_size_per_layer_input": VOCAB},
    # Settings the default configs leave to checkpoints, without which the model does not build or run.
    "falcon_h1": {"mamba_d_ssm": 2 * HIDDEN},
    "nemotron_h": {"n_groups": 1},
    "dots1": {"n_routed_experts": EXPERTS, "n_shared_experts": 1},
    # One expert by default: routing degenerates (histc over a single bin whose min equals its max).
    "hunyuan_v1_moe": {"num_experts": EXPERTS, "moe_topk": EXPERTS_PER_TOKEN},
    "dbrx": {"attn_config": {"kv_n_heads": 1, "rope_theta": 10000.0, "clip_qkv": 8.0}},
    "esm": {"pad_token_id": 1},
    "xmod": {"default_language": "en_XX"},
    # Its layer count is stored as n_layers, which the constructor does not accept (the generic cap cannot reach it).
    "inkling_vision": {"num_hidden_layers": LAYERS},
    # SAM's image embeddings meet the prompt embeddings (hidden_size wide, positions as sin/cos pairs).
    "sam_vision_model": {"output_channels": HIDDEN, "num_pos_feats": HIDDEN // 2},
    "sam_hq_vision_model": {"output_channels": HIDDEN, "num_pos_feats": HIDDEN // 2},
    "sam_hq_mask_decoder": {"vit_dim": HIDDEN},
    # SAM 2's Hiera stages double their width and the FPN lists them deepest first, with their feature map sizes (a
    # 32-pixel image at strides 4, 8, 16); a global-attention block must not open a pooled stage (its window // the
    # stride is 0); prompts are laid on the stride-16 image embeddings.
    "sam2_hiera_det_model": {
        "embed_dim_per_stage": [HIDDEN, 2 * HIDDEN, 4 * HIDDEN, 8 * HIDDEN],
        "num_attention_heads_per_stage": [1, 2, 4, 8],
        "blocks_per_stage": [1, 1, 2, 1],
        "global_attention_blocks": [3],
        "window_size_per_stage": [4, 4, 4, 2],
    },
    "sam2_vision_model": {
        "backbone_channel_list": [8 * HIDDEN, 4 * HIDDEN, 2 * HIDDEN, HIDDEN],
        "backbone_feature_sizes": [[8, 8], [4, 4], [2, 2]],
    },
    "sam2_prompt_encoder": {"patch_size": 16},
    # The first stage reads the stem's channels.
    "textnet": {"stem_out_channels": 16},
    # Four stride-2 convs embed the patches: 16 pixels whatever patch_size says, but attention biases use it.
    "levit": {"patch_size": 16},
    # The top conv widens to round_filters(1280) whatever the stage widths; its norm reads hidden_dim.
    "efficientnet": {"hidden_dim": 2560},
    # Five stride-2 stages leave 1x1 of a 32-pixel image, too small for the last stage's 2x2 patches.
    "mobilevitv2": {"image_size": 64},
    # Probabilistic forecasters have no default horizon; one time feature (e.g. age) per step; autoformer's
    # decoder starts from the last label_length steps of the context.
    "autoformer": {"prediction_length": 4, "num_time_features": 1, "label_length": 2},
    "informer": {"prediction_length": 4, "num_time_features": 1},
    "time_series_transformer": {"prediction_length": 4, "num_time_features": 1},
}

# ── Alternate configs ──
# A second tiny config for a representative class of each family: constructor arguments applied on top of the shrunk
# config (``tiny_model(name, overrides=ALTERNATE_CONFIGS[name])``) that take other code paths of the same model.
# Sliding windows stay shorter than sample_inputs' 7 tokens, so the window masks something.
ALTERNATE_CONFIGS: dict[str, dict[str, Any]] = {
    "LlamaForCausalLM": {"tie_word_embeddings": True, "num_hidden_layers": 3},
    "MistralForCausalLM": {"sliding_window": 4},
    "Gemma3ForCausalLM": {
        "num_hidden_layers": 3,
        "sliding_window": 4,
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
    },
    # BERT as a decoder: causal mask and a key/value cache.
    "BertModel": {"is_decoder": True, "type_vocab_size": 4},
    "ViTModel": {"image_size": 48, "patch_size": 16, "num_channels": 1},
    # Untied T5 (mT5, Flan-T5) skips the decoder output scaling; gated-gelu doubles the feed-forward input projection.
    "T5ForConditionalGeneration": {"feed_forward_proj": "gated-gelu", "tie_word_embeddings": False},
    # Every second layer sparse (the default, every fourth, leaves two layers without a router or experts).
    "NllbMoeForConditionalGeneration": {"encoder_sparse_step": 2, "decoder_sparse_step": 2, "expert_capacity": 16},
}


# ── Resolving names to classes ──


def _mapping(name: str) -> dict[str, str | tuple[str, ...]]:
    return getattr(modeling_auto, name, {})


def _class_names(mapping_name: str, model_type: str) -> tuple[str, ...]:
    names = _mapping(mapping_name).get(model_type, ())
    return (names,) if isinstance(names, str) else tuple(names)


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
                names.update((value,) if isinstance(value, str) else value)
    return names


def _model_type_of(name: str) -> str | None:
    # Model types mix spellings ("xlm-roberta", "gpt_neo"): accept either separator.
    name = name.strip().lower()
    for candidate in (name, name.replace("-", "_"), name.replace("_", "-")):
        if candidate in CONFIG_MAPPING_NAMES:
            return candidate
    return None


def resolve_model_class(name: str) -> type[PreTrainedModel]:
    """Return the class for a model type (its default head) or for a model class name."""
    model_type = _model_type_of(name)
    if model_type is not None:
        for mapping_name in (*_DEFAULT_HEAD_MAPPINGS, "MODEL_MAPPING_NAMES"):
            for class_name in _class_names(mapping_name, model_type):
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
    for mapping_name in ("MODEL_MAPPING_NAMES", *_MAIN_HEAD_MAPPINGS):
        for class_name in _class_names(mapping_name, model_type):
            cls = _class_by_name(class_name)
            if cls is not None and cls not in classes:
                classes.append(cls)
    return classes


def all_model_types() -> list[str]:
    """Return every model type of the installed transformers that has at least one model class."""
    return [model_type for model_type in CONFIG_MAPPING_NAMES if model_classes_for_type(model_type)]


# ── Shrinking configs ──


def _declared_keys(config_cls: type[PretrainedConfig]) -> set[str]:
    # Keys the constructor does not accept are derived by it: passing a shrunk copy would conflict.
    declared: set[str] = set()
    for cls in config_cls.__mro__:
        if isinstance(cls, type) and issubclass(cls, PretrainedConfig):
            declared.update(inspect.signature(cls.__init__).parameters)
    return declared - {"self", "kwargs", "args"}


def _declared_default(config_cls: type[PretrainedConfig], key: str) -> Any:
    parameter = inspect.signature(config_cls.__init__).parameters.get(key)
    return inspect.Parameter.empty if parameter is None else parameter.default


def _shrink_layer_list(values: list[Any], layers: int) -> list[Any]:
    # Keep one layer of every kind (e.g. sliding and full attention) before repeating kinds.
    first_of_kind: dict[Any, int] = {}
    for index, value in enumerate(values):
        first_of_kind.setdefault(repr(value), index)
    picked = sorted(first_of_kind.values())[:layers]
    picked += [i for i in range(len(values)) if i not in picked][: layers - len(picked)]
    return [values[i] for i in sorted(picked)]


class _TokenIds:
    """Maps special token ids beyond the tiny vocabulary onto its top end, consistently across sub-configs."""

    def __init__(self) -> None:
        self._remapped: dict[int, int] = {}

    def __call__(self, value: Any) -> Any:
        if isinstance(value, list | tuple):
            return type(value)(self(v) for v in value)
        if isinstance(value, bool) or not isinstance(value, int) or value < VOCAB:
            return value
        if value not in self._remapped:
            self._remapped[value] = VOCAB - 1 - len(self._remapped)
        return self._remapped[value]


def _is_token_key(key: str) -> bool:
    return key.endswith(("_token_id", "_token_ids", "_token_index", "_suppress_tokens")) or key == "suppress_tokens"


def _int_cap(key: str) -> int | None:
    """Return the tiny upper bound of an integer size entry, or None when ``key`` is not a size."""
    for keys, cap in _EXACT_CAPS:
        if key in keys:
            return cap
    if key in _CAPS:
        return _CAPS[key]
    for suffixes, cap in _SUFFIX_CAPS:
        if key.endswith(suffixes):
            return cap
    return None


def _shrink_list(key: str, values: list[int] | tuple[int, ...]) -> list[int] | tuple[int, ...]:
    if key in _CHANNEL_LIST_KEYS:
        return type(values)(min(v, HIDDEN) for v in values)
    if key in _STAGE_WIDTH_LIST_KEYS:
        return type(values)(min(v, 16 * 2**i, 64) for i, v in enumerate(values))
    if key in _DEPTH_LIST_KEYS:
        return type(values)(1 for _ in values)
    if _int_cap(key) == HEADS:
        # Per-stage heads must divide per-stage widths, which double from stage to stage.
        return type(values)(min(v, 2**i) for i, v in enumerate(values))
    cap = _int_cap(key)
    return values if cap is None else type(values)(min(v, cap) for v in values)


def _shrink_value(key: str, value: Any, token_ids: _TokenIds) -> Any:
    """Return the tiny value of one config entry (unchanged when the key is not a size)."""
    if _is_token_key(key):
        return token_ids(value)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        cap = _int_cap(key)
        return value if cap is None else min(value, cap)
    if isinstance(value, list | tuple) and value and all(isinstance(v, int) for v in value):
        return _shrink_list(key, value)
    return value


def _original_layers(values: dict[str, Any]) -> int | None:
    counts = [v for k, v in values.items() if isinstance(v, int) and not isinstance(v, bool) and _int_cap(k) == LAYERS]
    return max(counts) if counts else None


def _mrope_section(rope_parameters: dict[str, Any]) -> list[int]:
    # Multimodal rope splits the rotary half-dims into (temporal, height, width) sections.
    total = int(HEAD_DIM * rope_parameters.get("partial_rotary_factor", 1.0)) // 2
    sections = [total // 3] * 3
    for i in range(total % 3):
        sections[i] += 1
    return sections


def _make_consistent(config_cls: type[PretrainedConfig], kwargs: dict[str, Any], original: dict[str, Any]) -> None:
    """Fix size relations that capping each entry on its own breaks."""
    heads = next((kwargs[k] for k in kwargs if _int_cap(k) == HEADS and isinstance(kwargs[k], int)), None)
    hidden = kwargs.get("hidden_size", HIDDEN)
    if "kv_lora_rank" in kwargs and heads is not None:
        # Multi-head latent attention expands the latent to one key/value per query head.
        kwargs.update({k: heads for k in _KV_HEAD_KEYS if k in kwargs})
    if {"qk_nope_head_dim", "qk_rope_head_dim", "qk_head_dim"} <= kwargs.keys():
        kwargs["qk_head_dim"] = kwargs["qk_nope_head_dim"] + kwargs["qk_rope_head_dim"]
    if "mamba_n_heads" in kwargs:
        kwargs["mamba_d_head"] = HEAD_DIM
        kwargs["mamba_n_heads"] = kwargs.get("mamba_expand", 2) * hidden // HEAD_DIM
    elif {"expand", "num_heads", "head_dim"} <= kwargs.keys():
        kwargs["num_heads"] = kwargs["expand"] * hidden // kwargs["head_dim"]
    if {"stage_in_channels", "stage_mid_channels", "stage_out_channels", "stem_channels"} <= kwargs.keys():
        # HGNet stages chain: each reads what the previous one wrote, the first reads the stem's output.
        out = _shrink_list("hidden_sizes", kwargs["stage_out_channels"])
        mids = zip(kwargs["stage_mid_channels"], out, strict=True)
        kwargs["stage_mid_channels"] = [min(mid, width) for mid, width in mids]
        kwargs["stage_in_channels"] = [kwargs["stem_channels"][-1], *out[:-1]]
        kwargs["stage_out_channels"] = kwargs["hidden_sizes"] = out
    if "out_indices" in kwargs:
        # Backbone levels an outer config asks for (RT-DETR reads three), among the stages the tiny backbone has.
        depths = kwargs.get("depths", original.get("depths"))
        stages = len(depths) if isinstance(depths, list | tuple) else kwargs.get("num_hidden_layers")
        if stages:
            kwargs["out_indices"] = sorted({min(index, stages) for index in kwargs["out_indices"]})
    rope = kwargs.get("rope_parameters", original.get("rope_parameters"))
    if isinstance(rope, dict) and (
        "mrope_section" in rope or "mrope_section" in getattr(config_cls, "ignore_keys_at_rope_validation", ())
    ):
        kwargs["rope_parameters"] = {**rope, "mrope_section": _mrope_section(rope)}


def _shrink_config(config: PretrainedConfig, token_ids: _TokenIds) -> dict[str, Any]:
    """Return constructor kwargs for a tiny version of ``config`` (sub-configs as nested dicts)."""
    config_cls = type(config)
    declared = _declared_keys(config_cls)
    original = config.to_dict()
    old_layers = _original_layers(original)
    new_layers = min(old_layers, LAYERS) if old_layers else None
    kwargs: dict[str, Any] = {}
    for key, value in original.items():
        # Read the stored value: per-layer configs (gemma4) refuse plain attribute access to per-layer fields.
        attribute = vars(config).get(key)
        if isinstance(attribute, PretrainedConfig):
            kwargs[key] = {"model_type": attribute.model_type, **_shrink_config(attribute, token_ids)}
            continue
        if key == "out_indices" and value:
            kwargs[key] = value  # derived by default, but set by outer configs: clamped in _make_consistent
            continue
        if key in _SKIPPED_KEYS or key not in declared:
            continue
        if isinstance(value, list) and old_layers and new_layers and len(value) == old_layers > new_layers:
            # One entry per layer (layer_types, ...): derived or not, it must match the new layer count. Per-stage
            # sizes (swin's depths and num_heads) are then shrunk like any list, or heads stop dividing widths.
            kwargs[key] = _shrink_value(key, _shrink_layer_list(value, new_layers), token_ids)
            continue
        if key == "vocab_size" and value is None:
            # CTC heads of speech encoders (wav2vec2-bert, wav2vec2-conformer) leave it unset by default.
            kwargs[key] = VOCAB
            continue
        shrunk = _shrink_value(key, value, token_ids)
        if shrunk is value and value is not None and _declared_default(config_cls, key) is None:
            # Defaulted to None and filled in by the constructor (head_dim, ...): let it redo that.
            continue
        kwargs[key] = shrunk
    kwargs.update({k: v for k, v in _FORCED.items() if k in declared})
    _make_consistent(config_cls, kwargs, original)
    kwargs.update(_OVERRIDES.get(config.model_type, {}))
    return kwargs


def _attn_implementation(model_class: type[PreTrainedModel]) -> str:
    return "sdpa" if getattr(model_class, "_supports_sdpa", False) else "eager"


def _build_tiny_config(model_class: type[PreTrainedModel], overrides: dict[str, Any]) -> PretrainedConfig:
    config_cls = model_class.config_class
    model_type = getattr(config_cls, "model_type", "")
    default = AutoConfig.for_model(model_type) if model_type in CONFIG_MAPPING_NAMES else config_cls()
    kwargs = _shrink_config(default, _TokenIds())
    return type(default)(**{**kwargs, **overrides})


def _with_overrides(config: PretrainedConfig, overrides: dict[str, Any]) -> PretrainedConfig:
    # Rebuilt from the declared entries only: derived ones (T5's dense_act_fn) would pin the old values.
    declared = _declared_keys(type(config))
    kwargs = {k: v for k, v in config.to_dict().items() if k in declared and k not in _SKIPPED_KEYS}
    return type(config)(**{**kwargs, **overrides})


def _complete_config(config: PretrainedConfig) -> None:
    """Fill in what models and sample inputs rely on where a config, the builder's or a tester's, leaves it unset."""
    _fill_sizes_left_to_checkpoints(config)
    _fill_pad_token_ids(config)


def _fill_pad_token_ids(config: PretrainedConfig) -> None:
    # Decoder sequence classifiers refuse batches > 1 without one ("no padding token is defined"). The eos id, as
    # eager generate pads with; sample inputs never draw special ids, so no row is all padding.
    stored = vars(config)
    for value in stored.values():
        if isinstance(value, PretrainedConfig):
            _fill_pad_token_ids(value)
    vocab_size = stored.get("vocab_size")
    if "pad_token_id" not in stored or stored["pad_token_id"] is not None or not isinstance(vocab_size, int):
        return
    eos = stored.get("eos_token_id")
    eos = eos[0] if isinstance(eos, list | tuple) and eos else eos
    config.pad_token_id = eos if isinstance(eos, int) and 0 <= eos < vocab_size else 0


def _fill_sizes_left_to_checkpoints(config: PretrainedConfig) -> None:
    # Some default configs leave these None for checkpoints to fill in (ministral, hunyuan, nemotron, deepseek_v2,
    # dots1): the model then fails to build or route. Derive them as the constructors of the other models do.
    stored = vars(config)
    for value in stored.values():
        if isinstance(value, PretrainedConfig):
            _fill_sizes_left_to_checkpoints(value)
    heads = stored.get("num_attention_heads")
    if isinstance(heads, int) and stored.get("head_dim", 0) is None:
        config.head_dim = config.hidden_size // heads
    if isinstance(heads, int) and stored.get("num_key_value_heads", 0) is None:
        config.num_key_value_heads = min(KV_HEADS, heads)
    if any(stored.get(key) for key in _EXPERT_KEYS) and stored.get("num_experts_per_tok", 0) is None:
        config.num_experts_per_tok = EXPERTS_PER_TOKEN


def tiny_config(name: str, checkout: Path | None = None, overrides: dict[str, Any] | None = None) -> PretrainedConfig:
    """Return a tiny config for a model type or class; a transformers checkout's model tester wins if usable.

    ``overrides`` are constructor arguments applied on top of the tiny config (see ``ALTERNATE_CONFIGS``).
    """
    model_class = resolve_model_class(name)
    config = None
    if checkout is not None:
        config = tester_config(model_class.config_class.model_type, checkout)
    if config is None:
        config = _build_tiny_config(model_class, overrides or {})
    elif overrides:
        config = _with_overrides(config, overrides)
    _complete_config(config)
    config._attn_implementation = _attn_implementation(model_class)
    return config


def tiny_model(
    name: str, seed: int = 0, checkout: Path | None = None, overrides: dict[str, Any] | None = None
) -> PreTrainedModel:
    """Build a seeded, random-weight, float32 tiny model in eval mode (``overrides``: see ``tiny_config``)."""
    model_class = resolve_model_class(name)
    config = tiny_config(model_class.__name__, checkout=checkout, overrides=overrides)
    torch.manual_seed(seed)
    try:
        model = model_class(config)
    except ValueError as error:
        # A sub-model (a vision backbone, a codec) may lack SDPA even where the outer class supports it.
        if "attention implementation" not in str(error) or config._attn_implementation == "eager":
            raise
        config._attn_implementation = "eager"
        torch.manual_seed(seed)
        model = model_class(config)
    return model.to(torch.float32).eval()


def load_local_model(directory: Path) -> PreTrainedModel:
    """A model saved with ``save_pretrained``: the class its config names under ``architectures``, in eval mode."""
    from transformers import AutoConfig

    if not (directory / "config.json").is_file():
        raise FileNotFoundError(f"{directory} has no config.json: not a save_pretrained model directory")
    config = AutoConfig.from_pretrained(directory)
    architectures = getattr(config, "architectures", None) or []
    model_class = resolve_model_class(architectures[0] if architectures else config.model_type)
    return model_class.from_pretrained(directory).to(torch.float32).eval()


# ── Sample inputs ──


def _special_token_ids(config: PretrainedConfig) -> set[int]:
    ids: set[int] = set()
    for key, value in config.to_dict().items():
        if not _is_token_key(key):
            continue
        for item in value if isinstance(value, list | tuple) else (value,):
            if isinstance(item, int) and not isinstance(item, bool):
                ids.add(item)
    return ids


def _text_vocab_size(config: PretrainedConfig) -> int:
    text_config = config.get_text_config(decoder=True)
    return int(getattr(text_config, "vocab_size", None) or getattr(config, "vocab_size", None) or VOCAB)


def _token_ids(config: PretrainedConfig, shape: tuple[int, int], generator: torch.Generator) -> torch.Tensor:
    # Special ids (pad, image placeholders...) change the model's behaviour: draw plain text tokens only.
    excluded = _special_token_ids(config) | _special_token_ids(config.get_text_config(decoder=True))
    allowed = torch.tensor([i for i in range(_text_vocab_size(config)) if i not in excluded])
    return allowed[torch.randint(len(allowed), shape, generator=generator)]


def _image_config(config: PretrainedConfig) -> PretrainedConfig:
    return getattr(config, "vision_config", None) or config


def _pixel_values(config: PretrainedConfig, batch_size: int, generator: torch.Generator) -> torch.Tensor:
    """Images as (batch, channels, height, width); video encoders' clips as (batch, frames, channels, height, width)."""
    vision = _image_config(config)
    size = getattr(vision, "image_size", None) or getattr(vision, "crop_size", IMAGE_SIZE)
    height, width = (size, size) if isinstance(size, int) else tuple(size)[-2:]
    channels = getattr(vision, "num_channels", None) or getattr(vision, "in_chans", 3)
    frames = getattr(vision, "num_frames", None) or getattr(vision, "frames_per_clip", None)
    clip = (frames,) if isinstance(frames, int) else ()
    return torch.randn(batch_size, *clip, channels, height, width, generator=generator)


def _flat_patches(
    config: PretrainedConfig, images: int, patches_name: str, generator: torch.Generator
) -> dict[str, torch.Tensor]:
    """Qwen-VL-style vision towers: every image's patches as rows of one flat tensor, laid out by ``grid_thw``."""
    vision = _image_config(config)
    side = 2 * getattr(vision, "spatial_merge_size", 1)
    channels = getattr(vision, "in_channels", None) or getattr(vision, "num_channels", 3)
    width = channels * getattr(vision, "temporal_patch_size", 1) * vision.patch_size**2
    return {
        patches_name: torch.randn(images * side * side, width, generator=generator),
        "grid_thw": torch.tensor([[1, side, side]] * images),
    }


def _row_column_patches(config: PretrainedConfig, batch_size: int, generator: torch.Generator) -> torch.Tensor:
    """Pix2Struct: every patch as (row id, column id, pixels); ids count from 1, 0 marks padding."""
    side = 4
    rows, columns = torch.meshgrid(torch.arange(1, side + 1), torch.arange(1, side + 1), indexing="ij")
    ids = torch.stack([rows.flatten(), columns.flatten()], dim=-1).float().expand(batch_size, -1, -1)
    pixels = torch.randn(batch_size, side * side, _image_config(config).patch_embed_hidden_size, generator=generator)
    return torch.cat([ids, pixels], dim=-1)


def _native_resolution_patches(
    config: PretrainedConfig, batch_size: int, generator: torch.Generator
) -> dict[str, torch.Tensor]:
    """NaViT-style encoders (siglip2): flattened patches per image, their mask, and each image's patch grid."""
    vision = _image_config(config)
    side = 4
    width = vision.num_channels * vision.patch_size**2
    return {
        "pixel_values": torch.randn(batch_size, side * side, width, generator=generator),
        "pixel_attention_mask": torch.ones(batch_size, side * side, dtype=torch.long),
        "spatial_shapes": torch.tensor([[side, side]] * batch_size),
    }


_CODEBOOK_STACKED_TYPES = ("musicgen_decoder", "musicgen_melody_decoder")


def _waveform_length(config: PretrainedConfig, seq_length: int) -> int:
    # The conv feature extractor downsamples by the product of its strides; keep >= seq_length frames.
    stride = 1
    for step in getattr(config, "conv_stride", ()) or ():
        stride *= step
    receptive_field = sum(getattr(config, "conv_kernel", ()) or ()) * stride
    return max(1600, stride * seq_length + receptive_field)


def _audio_config(config: PretrainedConfig) -> PretrainedConfig:
    # Speech LMs and CTC wrappers keep the feature sizes on their audio encoder's sub-config.
    for key in ("audio_config", "encoder_config", "speech_config"):
        sub_config = getattr(config, key, None)
        if isinstance(sub_config, PretrainedConfig):
            return sub_config
    return config


def _input_features(
    config: PretrainedConfig, batch_size: int, seq_length: int, generator: torch.Generator
) -> torch.Tensor:
    audio = _audio_config(config)
    if hasattr(audio, "num_mel_bins") and hasattr(audio, "n_window"):
        # Chunked encoders (Qwen3-ASR) cut (batch, mel bins, frames) into windows of 2 * n_window frames.
        return torch.randn(batch_size, audio.num_mel_bins, 4 * audio.n_window, generator=generator)
    if hasattr(audio, "num_mel_bins") and hasattr(audio, "max_source_positions"):
        # Whisper-like encoders require exactly 2 * max_source_positions frames (two conv strides).
        frames = 2 * audio.max_source_positions
        return torch.randn(batch_size, audio.num_mel_bins, frames, generator=generator)
    features = next((getattr(audio, k) for k in _FEATURE_SIZE_KEYS if getattr(audio, k, None)), 80)
    channels = getattr(audio, "input_channels", 1)
    # Conv subsampling front ends shrink time by up to 8x: keep at least seq_length frames after it.
    return torch.randn(batch_size, 8 * seq_length, features * channels, generator=generator)


_FEATURE_SIZE_KEYS = ("feature_projection_input_dim", "num_mel_bins", "input_feat_per_channel", "feature_size")


def _forecast_windows(config: PretrainedConfig, batch_size: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
    # Probabilistic forecasters (autoformer, informer): the past window also holds the max(lags) older steps the lag
    # features read; the future window is the teacher-forced horizon.
    past = config.context_length + max(config.lags_sequence)
    future = config.prediction_length
    features = config.num_time_features
    return {
        "past_values": torch.randn(batch_size, past, generator=generator),
        "past_time_features": torch.randn(batch_size, past, features, generator=generator),
        "past_observed_mask": torch.ones(batch_size, past),
        "future_values": torch.randn(batch_size, future, generator=generator),
        "future_time_features": torch.randn(batch_size, future, features, generator=generator),
    }


def _forward_parameters(model: PreTrainedModel) -> set[str]:
    return set(inspect.signature(model.forward).parameters)


def _required_parameters(model: PreTrainedModel) -> set[str]:
    parameters = inspect.signature(model.forward).parameters.values()
    return {p.name for p in parameters if p.default is inspect.Parameter.empty and p.kind <= p.KEYWORD_ONLY}


def _is_dual_encoder(model: PreTrainedModel, parameters: set[str]) -> bool:
    # CLIP-like models embed text and image separately; VLMs instead splice images at placeholder tokens.
    config = model.config
    has_placeholder = any(hasattr(config, k) for k in ("image_token_id", "image_token_index"))
    has_image_encoder = any(hasattr(config, k) for k in ("vision_config", "image_size"))
    return {"input_ids", "pixel_values"} <= parameters and has_image_encoder and not has_placeholder


def _classifies_at_eos(model: PreTrainedModel) -> bool:
    config = model.config
    heads = _class_names("MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES", config.model_type)
    eos = getattr(config, "eos_token_id", None)
    return getattr(config, "is_encoder_decoder", False) and type(model).__name__ in heads and isinstance(eos, int)


def sample_inputs(
    model: PreTrainedModel, batch_size: int = 2, seq_length: int = 7, seed: int = 0
) -> dict[str, torch.Tensor]:
    """Return deterministic forward kwargs that fit the model's modality (text, vision, audio, seq2seq)."""
    if batch_size < 2 or seq_length < 2:
        raise ValueError("batch_size and seq_length must be >= 2 so exported dimensions stay dynamic")
    config = model.config
    parameters = _forward_parameters(model)
    main_input = getattr(model, "main_input_name", "input_ids")
    generator = torch.Generator().manual_seed(seed)
    inputs: dict[str, torch.Tensor] = {}
    # Audio LMs that stack their codebooks into the batch take (batch * num_codebooks, sequence) ids.
    id_rows = batch_size * config.num_codebooks if config.model_type in _CODEBOOK_STACKED_TYPES else batch_size
    if "input_ids" in parameters and (main_input == "input_ids" or main_input not in parameters):
        inputs["input_ids"] = _token_ids(config, (id_rows, seq_length), generator)
    if "grid_thw" in parameters:
        inputs.pop("input_ids", None)
        patches_name = "pixel_values" if "pixel_values" in parameters else "hidden_states"
        inputs.update(_flat_patches(config, batch_size, patches_name, generator))
    elif "spatial_shapes" in parameters:
        inputs.update(_native_resolution_patches(config, batch_size, generator))
    elif main_input in ("pixel_values", "pixel_values_videos") or _is_dual_encoder(model, parameters):
        if _is_dual_encoder(model, parameters):
            inputs["input_ids"] = _token_ids(config, (batch_size, seq_length), generator)
        pixels_name = "pixel_values_videos" if main_input == "pixel_values_videos" else "pixel_values"
        inputs[pixels_name] = _pixel_values(config, batch_size, generator)
    elif main_input == "input_values" and hasattr(config, "num_mel_bins") and hasattr(config, "max_length"):
        # Spectrogram transformers (AST) take fixed-length (batch, frames, mel bins) spectrograms.
        shape = (batch_size, config.max_length, config.num_mel_bins)
        inputs["input_values"] = torch.randn(shape, generator=generator)
    elif main_input == "input_values":
        length = _waveform_length(config, seq_length)
        # Neural audio codecs (encodec, dac, mimi, xcodec, pocket_tts) take (batch, channels, time); speech encoders
        # (batch, time).
        is_codec = hasattr(config, "codebook_size") or hasattr(config, "audio_channels")
        shape = (batch_size, getattr(config, "audio_channels", 1), length) if is_codec else ()
        inputs["input_values"] = torch.randn(shape or (batch_size, length), generator=generator)
    elif main_input == "past_values" and "past_time_features" in parameters:
        inputs.update(_forecast_windows(config, batch_size, generator))
    elif main_input == "past_values":
        # Time-series transformers: (batch, context, channels) windows, or (batch, context) for univariate ones.
        channels = getattr(config, "num_input_channels", None)
        shape = (batch_size, config.context_length, *((channels,) if channels else ()))
        inputs["past_values"] = torch.randn(shape, generator=generator)
        if "past_values_padding" in _required_parameters(model):
            # TimesFM: no padded steps, and frequency class 0 (high frequency).
            inputs["past_values_padding"] = torch.zeros(shape[:2])
            inputs["freq"] = torch.zeros(batch_size, 1, dtype=torch.long)
    elif main_input == "flattened_patches":
        inputs["flattened_patches"] = _row_column_patches(config, batch_size, generator)
    elif main_input == "input_features":
        inputs["input_features"] = _input_features(config, batch_size, seq_length, generator)
    missing = _required_parameters(model) - inputs.keys()
    if "input_ids" in missing:
        # Vision-first models whose forward still requires text (Blip2Model, GroundingDino).
        inputs["input_ids"] = _token_ids(config, (batch_size, seq_length), generator)
    if "pixel_values" in missing:
        # VLM vision towers built on their own keep the VLM's main input name (Idefics3, SmolVLM).
        inputs["pixel_values"] = _pixel_values(config, batch_size, generator)
    if "input_features_mask" in missing:
        inputs["input_features_mask"] = torch.ones(batch_size, inputs["input_features"].shape[-1], dtype=torch.long)
    for latents_name in missing & {"latents", "hidden_states"}:
        # Audio codec decoders built on their own (Mimi, VibeVoice) take the encoder's (batch, channels, frames).
        inputs[latents_name] = torch.randn(batch_size, config.hidden_size, 2 * seq_length, generator=generator)
    if "visual_feats" in parameters:
        # LXMERT reads region features and their boxes from an object detector.
        regions = 5
        inputs["visual_feats"] = torch.randn(batch_size, regions, config.visual_feat_dim, generator=generator)
        inputs["visual_pos"] = torch.rand(batch_size, regions, config.visual_pos_dim, generator=generator)
    if "pixel_values" in inputs and "noise" in parameters and hasattr(config, "mask_ratio"):
        # Masked autoencoders draw their patch mask from torch.rand: pass the noise, or no two runs agree.
        patches = (inputs["pixel_values"].shape[-1] // config.patch_size) ** 2
        inputs["noise"] = torch.rand(batch_size, patches, generator=generator)
    if "input_features" in inputs and "noise_sequence" in parameters and hasattr(config, "model_in_channels"):
        # Vocoders (UnivNet) draw their noise from torch.randn when none is given: pass it, as for the autoencoders.
        frames = inputs["input_features"].shape[1]
        inputs["noise_sequence"] = torch.randn(batch_size, frames, config.model_in_channels, generator=generator)
    if "input_ids" in inputs and _classifies_at_eos(model):
        # Encoder-decoder sequence classifiers (bart, t5) read each row's last <eos>: every row must end with one.
        inputs["input_ids"][:, -1] = config.eos_token_id
    if "input_ids" in inputs and "attention_mask" in parameters:
        inputs["attention_mask"] = torch.ones(batch_size, seq_length, dtype=torch.long)
    if getattr(config, "is_encoder_decoder", False) and "decoder_input_ids" in parameters:
        inputs["decoder_input_ids"] = _token_ids(config, (batch_size, seq_length), generator)
    return inputs


# ── Configs from a transformers checkout's model testers ──


@contextlib.contextmanager
def _checkout_tests_importable(checkout: Path) -> Iterator[None]:
    # The checkout's `tests` package would clash with any other `tests` package already imported.
    saved = {name: mod for name, mod in sys.modules.items() if name == "tests" or name.startswith("tests.")}
    for name in saved:
        del sys.modules[name]
    sys.path.insert(0, str(checkout))
    try:
        yield
    finally:
        sys.path.remove(str(checkout))
        for name in [n for n in sys.modules if n == "tests" or n.startswith("tests.")]:
            del sys.modules[name]
        sys.modules.update(saved)


def _model_tester_class(module: Any, model_type: str) -> type | None:
    # Only testers the file defines: the common bases it imports (CausalLMModelTester) need a subclass's attributes.
    wanted = model_type.replace("_", "").replace("-", "").lower() + "modeltester"
    testers = [
        obj
        for name, obj in vars(module).items()
        if name.endswith("ModelTester") and inspect.isclass(obj) and obj.__module__ == module.__name__
    ]
    exact = [cls for cls in testers if cls.__name__.lower() == wanted]
    return (exact or testers or [None])[0]


def _tests_package_name(model_type: str) -> str:
    # Tests live in the model's package, which sub-model types share (gemma3_text: tests/models/gemma3).
    try:
        return CONFIG_MAPPING[model_type].__module__.split(".")[-2]
    except (KeyError, IndexError):
        return model_type.replace("-", "_")


def tester_config(model_type: str, checkout: Path) -> PretrainedConfig | None:
    """Return the config of ``<Name>ModelTester`` from a transformers checkout, or None if unavailable."""
    package = _tests_package_name(model_type)
    test_file = Path(checkout) / "tests" / "models" / package / f"test_modeling_{package}.py"
    if not test_file.is_file():
        logger.debug("No model tester file %s", test_file)
        return None
    try:
        with _checkout_tests_importable(Path(checkout)):
            module = importlib.import_module(f"tests.models.{package}.test_modeling_{package}")
            tester_cls = _model_tester_class(module, model_type)
            if tester_cls is None:
                logger.debug("No ModelTester class in %s", test_file)
                return None
            # Positionally, as transformers' own test cases pass themselves to their testers.
            config = tester_cls(unittest.TestCase()).get_config()
    except Exception as error:
        # Test files track the checkout, not the installed transformers: any failure means "shrink instead".
        logger.debug("Model tester config for %s failed: %s", model_type, error)
        return None
    if getattr(config, "model_type", None) != model_type:
        logger.debug("%s's config is a %s, not a %s", tester_cls.__name__, type(config).__name__, model_type)
        return None
    return config
