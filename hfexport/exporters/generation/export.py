"""Export of the generation components and the ``generation`` entry of export.json that the greedy loop reads."""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch.export import Dim
from transformers import Cache, EncoderDecoderCache, GenerationConfig

from ..errors import ExportStageError
from .cache import CacheLayerMixin, layout_from_cache
from .components import DecoderPrefill, DecoderStep, Seq2SeqDecoderStep, Seq2SeqEncoder
from .static_cache import (
    StaticCachePrefill,
    StaticCacheStep,
    mask_over_slots,
    sliding_windows,
    static_cache,
    static_layout,
)

if TYPE_CHECKING:
    from transformers import PreTrainedModel

logger = logging.getLogger("hfexport")

DEFAULT_MAX_CACHE_LEN = 128
DECODER_ONLY = "decoder-only"
ENCODER_DECODER = "encoder-decoder"
SLOT_CACHE, STATIC_CACHE = "slots", "static"
CACHES = (SLOT_CACHE, STATIC_CACHE)


def _max_positions(model: PreTrainedModel) -> int | None:
    config = model.config.get_text_config(decoder=True)
    if "dynamic" in _rope_types(config):  # dynamic NTK rescales its frequencies past max_position_embeddings
        return None
    for key in ("max_target_positions", "max_position_embeddings", "n_positions"):
        if isinstance(value := getattr(config, key, None), int):
            return value if value > 0 else None  # XLNet's -1: relative positions, no table to run past
    return None


def _rope_types(config: Any) -> set[str]:
    """The rope types of ``config.rope_parameters``: one dict, or one per layer type."""
    parameters = getattr(config, "rope_parameters", None)
    if not isinstance(parameters, dict):
        return set()
    if "rope_type" in parameters:
        return {parameters["rope_type"]}
    return {value.get("rope_type") for value in parameters.values() if isinstance(value, dict)}


def token_id_list(value: Any) -> list[int]:
    if value is None:
        return []
    return [int(v) for v in (value if isinstance(value, (list, tuple)) else [value])]


def _special_tokens(model: PreTrainedModel) -> dict[str, Any]:
    """The generation-config entries the greedy loop honours, as eager ``generate`` reads them."""
    generation_config = getattr(model, "generation_config", None) or model.config
    pad = getattr(generation_config, "pad_token_id", None)
    start = getattr(generation_config, "decoder_start_token_id", None)
    if start is None:  # eager generate falls back to bos for encoder-decoder models
        start = getattr(generation_config, "bos_token_id", None)
    return {
        "eos_token_id": token_id_list(getattr(generation_config, "eos_token_id", None)),
        "pad_token_id": None if pad is None else int(pad),
        "decoder_start_token_id": None if start is None or not model.config.is_encoder_decoder else int(start),
        "suppress_tokens": token_id_list(getattr(generation_config, "suppress_tokens", None)),
        "begin_suppress_tokens": token_id_list(getattr(generation_config, "begin_suppress_tokens", None)),
        "forced_eos_token_id": token_id_list(getattr(generation_config, "forced_eos_token_id", None)),
    }


# Generation-config entries that change which token greedy decoding picks and that the loop below does not apply.
_IGNORED_SETTINGS = (
    "repetition_penalty",
    "encoder_repetition_penalty",
    "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size",
    "bad_words_ids",
    "sequence_bias",
    "forced_bos_token_id",
    "forced_decoder_ids",
    "min_length",
    "min_new_tokens",  # from the config; ExportedModel.generate takes it as an argument
)


def _warn_ignored_settings(model: PreTrainedModel) -> None:
    generation_config = getattr(model, "generation_config", None)
    if generation_config is None:
        return
    default = GenerationConfig()
    ignored = [
        name for name in _IGNORED_SETTINGS if getattr(generation_config, name, None) != getattr(default, name, None)
    ]
    if ignored:
        logger.warning(
            "%s: ExportedModel.generate is plain greedy decoding and ignores these generation-config settings: %s",
            type(model).__name__,
            ", ".join(ignored),
        )


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids of a left-padded batch, as eager ``generate`` computes them (padding at 0)."""
    positions = attention_mask.long().cumsum(-1) - 1
    return positions.masked_fill(attention_mask == 0, 0)


def _dynamic_shapes(
    config: Any, inputs: dict[str, Any], sequence: dict[str, int | None] | None = None
) -> dict[str, Any] | None:
    """Dynamic batch (dim 0 of every tensor) and dynamic dim 1 of the inputs named in ``sequence`` (up to its
    value); every other dimension static. ``None`` for a static export."""

    if not config.dynamic:
        return None
    # ExecuTorch plans memory for the largest size: bound the batch where the backend asks for a bound.
    upper = getattr(config, "dynamic_upper_bound", None)
    batch = Dim("batch", max=upper) if upper else Dim.DYNAMIC
    sequence = sequence or {}
    lengths = {limit: Dim(f"length_{limit or 'any'}", max=limit) for limit in set(sequence.values())}

    def for_value(name: str, value: Any) -> Any:
        if isinstance(value, list):
            return [for_value(name, v) for v in value]
        if not isinstance(value, torch.Tensor) or value.dim() == 1:
            return None
        return {0: batch, 1: lengths[sequence[name]]} if name in sequence else {0: batch}

    return {name: for_value(name, value) for name, value in inputs.items()}


def _component_config(config: Any, dynamic_shapes: dict[str, Any] | None) -> Any:
    # Generation decides which dimensions vary; a user's dynamic_shapes for the plain forward does not apply.
    return dataclasses.replace(config, dynamic_shapes=dynamic_shapes) if hasattr(config, "dynamic_shapes") else config


def export_generation_components(
    exporter: Any,
    model: PreTrainedModel,
    sample_inputs: dict[str, Any],
    config: Any,
    max_cache_len: int | None = None,
    traces: Mapping[str, Any] | None = None,
    cache: str = SLOT_CACHE,
) -> tuple[dict[str, tuple[Any, dict[str, Any]]], dict[str, Any]]:
    """Export the generation components of ``model``; return them with the ``generation`` entry of export.json.

    ``max_cache_len`` (default: 128, capped by the model's maximum positions) bounds prompt plus new tokens.
    With ``config.dynamic`` the batch size and the prompt length are dynamic; otherwise both are fixed to
    those of ``sample_inputs`` and :func:`generate` left-pads shorter prompts to that length.
    ``traces``: a ``SharedTrace`` per component name ("prefill", "decode"; "encoder", "decoder"), handed to each
    component's export as ``HfExporter.export``'s ``trace`` is.
    ``cache``: ``"slots"`` (hfexport's slot cache, every model kind) or ``"static"`` (transformers' ``StaticCache``,
    decoder-only models: see ``static_cache.py``).
    """
    if cache not in CACHES:
        raise ValueError(f"cache must be one of {', '.join(CACHES)}, got {cache!r}")
    if CacheLayerMixin is object:
        raise NotImplementedError("this transformers has no transformers.cache_utils.CacheLayerMixin")
    _warn_ignored_settings(model)
    limit = _max_positions(model)
    if max_cache_len is None:
        max_cache_len = min(DEFAULT_MAX_CACHE_LEN, limit or DEFAULT_MAX_CACHE_LEN)
    if limit is not None and max_cache_len > limit:
        raise ValueError(f"max_cache_len={max_cache_len} exceeds the model's {limit} positions")
    export = functools.partial(_export_component, exporter, traces)
    if model.config.is_encoder_decoder:
        if cache == STATIC_CACHE:
            raise NotImplementedError("the static-cache export covers decoder-only models")
        return _export_encoder_decoder(export, model, sample_inputs, config, max_cache_len)
    if cache == STATIC_CACHE:
        return _export_static_decoder(export, model, sample_inputs, config, max_cache_len)
    return _export_decoder_only(export, model, sample_inputs, config, max_cache_len)


def _export_component(
    exporter: Any, traces: Mapping[str, Any] | None, name: str, module: Any, inputs: dict[str, Any], config: Any
) -> tuple[Any, dict[str, Any]]:
    shared = {} if traces is None else {"trace": traces[name]}  # a backend of one's own may take no trace
    return exporter.export_program(module, inputs, config, **shared)


def _eager_cache(model: PreTrainedModel, inputs: dict[str, Any]) -> Cache:
    try:
        with torch.no_grad():
            outputs = model(**inputs, use_cache=True)
    except Exception as error:  # blt: its forward builds caches from config fields its own config lacks
        detail = f"{type(error).__name__}: {error}".splitlines()[0]
        raise NotImplementedError(f"{type(model).__name__} does not run with use_cache=True ({detail})") from error
    # Recurrent models keep their state elsewhere (xLSTM's cache_params): no past_key_values at all.
    cache = getattr(outputs, "past_key_values", None)
    if isinstance(cache, EncoderDecoderCache):
        cache = cache.self_attention_cache
    if not isinstance(cache, Cache):
        raise NotImplementedError(f"{type(model).__name__} returns no transformers Cache; cannot export generation")
    return cache


def _export_decoder_only(
    export: Callable[..., tuple[Any, dict[str, Any]]],
    model: PreTrainedModel,
    sample_inputs: dict[str, Any],
    config: Any,
    max_cache_len: int,
) -> tuple[dict[str, tuple[Any, dict[str, Any]]], dict[str, Any]]:
    prefill_inputs = _prompt_inputs(sample_inputs)
    input_ids, attention_mask = prefill_inputs["input_ids"], prefill_inputs["attention_mask"]
    batch_size, prompt_length = input_ids.shape
    if prompt_length >= max_cache_len:
        raise ValueError(f"the sample prompt ({prompt_length} tokens) does not fit max_cache_len={max_cache_len}")
    cache = _eager_cache(model, {"input_ids": input_ids, "attention_mask": attention_mask})
    _decline_whole_sequence_steps(model, input_ids, cache)
    layout = layout_from_cache(cache, max_cache_len, model.dtype)
    keys, values = layout.zeros(batch_size)
    step_mask = torch.zeros(batch_size, max_cache_len, dtype=attention_mask.dtype)
    step_mask[:, : prompt_length + 1] = 1
    decode_inputs = {
        "input_ids": input_ids[:, -1:],
        "attention_mask": step_mask,
        "position_ids": prefill_inputs["position_ids"][:, -1:] + 1,
        "cache_position": torch.tensor([prompt_length]),
        "past_keys": keys,
        "past_values": values,
    }
    # Prompt plus at least one new token fit the cache: a prompt takes at most max_cache_len - 1 slots.
    prompt = dict.fromkeys(prefill_inputs, max_cache_len - 1)
    prefill_config = _component_config(config, _dynamic_shapes(config, prefill_inputs, prompt))
    decode_config = _component_config(config, _dynamic_shapes(config, decode_inputs))

    def export_both(seen_as_int: bool) -> dict[str, tuple[Any, dict[str, Any]]]:
        return {
            "prefill": export("prefill", DecoderPrefill(model, layout, seen_as_int), prefill_inputs, prefill_config),
            "decode": export("decode", DecoderStep(model, seen_as_int), decode_inputs, decode_config),
        }

    try:
        components = export_both(seen_as_int=False)
    except ExportStageError as on_a_tensor:
        # A model that branches on the cached count or cuts by it (GIT widens its mask over cached image tokens once
        # there are any, MPT cuts its alibi at it) fails to trace on a tensor count, StaticCache's kind; counted as
        # DynamicCache counts, an int, each program takes generate's branch. Where both fail, the first error stands.
        try:
            components = export_both(seen_as_int=True)
        except ExportStageError:
            raise on_a_tensor from on_a_tensor.__cause__
    return components, _decoder_record(model, config, components, max_cache_len, input_ids.shape, layout.to_dict())


def _export_static_decoder(
    export: Callable[..., tuple[Any, dict[str, Any]]],
    model: PreTrainedModel,
    sample_inputs: dict[str, Any],
    config: Any,
    max_cache_len: int,
) -> tuple[dict[str, tuple[Any, dict[str, Any]]], dict[str, Any]]:
    """Prefill and decode on transformers' ``StaticCache``; the cache's shapes come from one eager prefill on it."""
    prefill_inputs = _prompt_inputs(sample_inputs)
    input_ids, attention_mask = prefill_inputs["input_ids"], prefill_inputs["attention_mask"]
    prompt_length = input_ids.shape[1]
    try:
        cache = static_cache(model, max_cache_len)
    except Exception as error:  # a config StaticCache cannot lay out (a layer type it does not map)
        raise NotImplementedError(f"{type(model).__name__}'s config takes no StaticCache: {error}") from error
    # A sliding window shorter than the cache holds fewer tokens: the request must fit the smallest window.
    max_cache_len = min([max_cache_len, *sliding_windows(cache)])
    if prompt_length >= max_cache_len:
        raise NotImplementedError(
            f"the sample prompt ({prompt_length} tokens) does not fit a {max_cache_len}-token window"
        )
    cache = static_cache(model, max_cache_len)
    _decline_whole_sequence_steps(model, input_ids, cache)  # generate's slicing reads the step, not the cache
    with torch.no_grad():
        mask = mask_over_slots(cache, attention_mask, max_cache_len)
        try:
            model(**{**prefill_inputs, "attention_mask": mask}, past_key_values=cache, use_cache=True)
        except Exception as error:
            if model._can_compile_fullgraph:
                raise
            # transformers marks the model as not running on compileable caches (MiniMax keeps a cache of its own
            # and refuses any other): there is no StaticCache path to export.
            detail = f"{type(error).__name__}: {error}".splitlines()[0]
            raise NotImplementedError(f"{type(model).__name__} does not run on a StaticCache ({detail})") from error
    layout = static_layout(cache, max_cache_len)
    decode_inputs = {
        "input_ids": input_ids[:, -1:],
        "attention_mask": torch.cat([attention_mask, torch.ones_like(attention_mask[:, :1])], 1),
        "position_ids": prefill_inputs["position_ids"][:, -1:] + 1,
        "cache_position": torch.tensor([prompt_length]),
        "past_states": layout.read(cache),
    }
    prompt = dict.fromkeys(prefill_inputs, max_cache_len - 1)
    prefill_config = _component_config(config, _dynamic_shapes(config, prefill_inputs, prompt))
    decode_config = _component_config(config, _static_decode_shapes(config, decode_inputs, max_cache_len))
    # Named apart from the slot cache's components: a shared trace is kept per component name.
    components = {
        "static_prefill": export("static_prefill", StaticCachePrefill(model, layout), prefill_inputs, prefill_config),
        "static_decode": export("static_decode", StaticCacheStep(model, layout), decode_inputs, decode_config),
    }
    # The decode program's guard keeps the last slot unused: a request fits max_cache_len - 1 tokens.
    return components, _decoder_record(model, config, components, max_cache_len - 1, input_ids.shape, layout.to_dict())


def _decline_whole_sequence_steps(model: PreTrainedModel, input_ids: torch.Tensor, cache: Cache) -> None:
    """The decode program takes the new token alone, as ``generate`` hands most models a step; a model whose
    ``prepare_inputs_for_generation`` keeps the whole sequence at every step (CpmAnt: its forward slices the cached
    prefix off itself, branching on the past length) cannot run as one, so it is declined with that reason."""
    longer = torch.cat([input_ids, input_ids[:, -1:]], 1)
    try:  # the arguments generate's decode step passes (transformers 5.23)
        step = model.prepare_inputs_for_generation(
            longer,
            past_key_values=cache,
            attention_mask=torch.ones_like(longer),
            cache_position=torch.tensor([input_ids.shape[1]]),
            next_sequence_length=1,
        )
    except Exception:  # a probe only: a preparation that needs more (another transformers, images) decides nothing
        return
    fed = step.get("input_ids")
    if isinstance(fed, torch.Tensor) and fed.shape[-1] > 1:
        raise NotImplementedError(
            f"{type(model).__name__}'s generate feeds it the whole sequence at every step ({fed.shape[-1]} tokens, "
            "its forward slicing off the cached prefix): a decode program takes the new token alone"
        )


def _prompt_inputs(sample_inputs: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The prefill's inputs: the prompt, its mask (all ones when the sample has none) and the positions it gives."""
    input_ids = sample_inputs["input_ids"]
    attention_mask = sample_inputs.get("attention_mask", torch.ones_like(input_ids))
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": position_ids_from_mask(attention_mask),
    }


def _decoder_record(
    model: PreTrainedModel,
    config: Any,
    components: dict[str, Any],
    max_cache_len: int,
    prompt_shape: torch.Size,
    cache: dict[str, Any],
) -> dict[str, Any]:
    """The manifest's ``generation`` entry of a decoder-only export (a static export fixes the prompt's shape)."""
    batch_size, prompt_length = prompt_shape
    return {
        "kind": DECODER_ONLY,
        "components": dict(zip(("prefill", "decode"), components, strict=True)),  # the names, prefill first
        "max_cache_len": max_cache_len,
        "batch_size": None if config.dynamic else batch_size,
        "prefill_length": None if config.dynamic else prompt_length,
        "cache": cache,
        **_special_tokens(model),
    }


def _static_decode_shapes(config: Any, inputs: dict[str, Any], max_cache_len: int) -> dict[str, Any]:
    """The decode step's mask grows by one token a step: its length is dynamic (up to the cache), whether or not the
    export is; the batch is dynamic as ``_dynamic_shapes`` makes it."""

    shapes = _dynamic_shapes(config, inputs) or dict.fromkeys(inputs)
    # Eager pads the mask to the cache's length (a pad of at least one): the last slot stays unused.
    seen = Dim("seen", min=2, max=max_cache_len - 1)
    shapes["attention_mask"] = {**(shapes["attention_mask"] or {}), 1: seen}
    if shapes["past_states"] is None:
        shapes["past_states"] = [None] * len(inputs["past_states"])
    return shapes


def _export_encoder_decoder(
    export: Callable[..., tuple[Any, dict[str, Any]]],
    model: PreTrainedModel,
    sample_inputs: dict[str, Any],
    config: Any,
    max_cache_len: int,
) -> tuple[dict[str, tuple[Any, dict[str, Any]]], dict[str, Any]]:
    encoder_inputs = {k: v for k, v in sample_inputs.items() if not k.startswith("decoder_")}
    main_input = model.main_input_name
    batch_size = encoder_inputs[main_input].shape[0]
    tokens = _special_tokens(model)
    if tokens["decoder_start_token_id"] is None:
        raise ValueError(f"{type(model).__name__} has no decoder_start_token_id to start generation from")
    start = torch.full((batch_size, 1), tokens["decoder_start_token_id"], dtype=torch.long)
    layout = layout_from_cache(
        _eager_cache(model, {**encoder_inputs, "decoder_input_ids": start}), max_cache_len, model.dtype
    )
    encoder = Seq2SeqEncoder(model)
    with torch.no_grad():
        encoder_hidden_states = encoder(**encoder_inputs)["encoder_hidden_states"]
    keys, values = layout.zeros(batch_size)
    decoder_inputs = {
        "decoder_input_ids": start,
        "cache_position": torch.tensor([0]),
        "encoder_hidden_states": encoder_hidden_states,
        "past_keys": keys,
        "past_values": values,
    }
    if "attention_mask" in encoder_inputs:
        decoder_inputs["encoder_attention_mask"] = encoder_inputs["attention_mask"]
    # Token sources vary in length (T5); audio features and their encoding keep the traced length (Whisper).
    source_names = ("input_ids", "attention_mask", "encoder_attention_mask")
    if main_input == "input_ids":
        source_names += ("encoder_hidden_states",)
    source = dict.fromkeys(source_names, getattr(config, "dynamic_upper_bound", None))
    encoder_config = _component_config(config, _dynamic_shapes(config, encoder_inputs, source))
    decoder_config = _component_config(config, _dynamic_shapes(config, decoder_inputs, source))
    components = {
        "encoder": export("encoder", encoder, encoder_inputs, encoder_config),
        "decoder": export("decoder", Seq2SeqDecoderStep(model), decoder_inputs, decoder_config),
    }
    dynamic = config.dynamic
    generation = {
        "kind": ENCODER_DECODER,
        "components": {"encoder": "encoder", "decoder": "decoder"},
        "encoder_inputs": list(encoder_inputs),
        "max_cache_len": max_cache_len,
        "batch_size": None if dynamic else batch_size,
        "encoder_length": None if dynamic else _sequence_length(encoder_inputs, main_input),
        "cache": layout.to_dict(),
        **tokens,
    }
    return components, generation


def _sequence_length(inputs: dict[str, Any], main_input: str) -> int | None:
    return inputs[main_input].shape[1] if main_input == "input_ids" else None
