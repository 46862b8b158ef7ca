"""Greedy generation on exported programs: what ``export_for_generation`` exports and the loop that runs it.

Components (each traced with ``exporter.export_program``, so every backend's own stages and workarounds apply):

- decoder-only models: ``prefill`` (the prompt, from an empty cache) and ``decode`` (one token on a filled cache);
- encoder-decoder models: ``encoder`` (run once) and ``decoder`` (one decoder token on a filled cache).

The KV cache is a **static slot cache passed in and out as plain tensors**: per layer one key and one value tensor
``[batch, kv_heads, max_cache_len, head_dim]``; the token at sequence index ``i`` lives in slot ``i``. Decode takes
the slot to write as a ``cache_position`` input and a ``[batch, max_cache_len]`` attention mask over the slots, so
one traced graph serves every cache length up to ``max_cache_len`` without any shape changing between steps. This
one layout is used on every backend: programs stay pure functions (no mutable state to reset between requests on
the ExecuTorch runtime, no ONNX in-place semantics), the loop stays backend-agnostic, and fixed cache shapes suit
ExecuTorch's memory planning. Sliding-window layers keep all ``max_cache_len`` slots: the window is applied by the
model's own mask, which compares absolute slot indices exactly as eager generation does.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
from typing import TYPE_CHECKING, Any

import torch
from transformers import Cache, DynamicCache, EncoderDecoderCache

from .. import compat
from .utils import ExportFailure

if TYPE_CHECKING:
    from transformers import PreTrainedModel

# base.py calls in here (HfExporter.export_for_generation, ExportedModel.generate), so the exporter, its config and the
# exported model it passes are typed Any: this module needs nothing from base.py.

logger = logging.getLogger("hfexport")

DEFAULT_MAX_CACHE_LEN = 128
DECODER_ONLY = "decoder-only"
ENCODER_DECODER = "encoder-decoder"

# ── KV cache as plain tensors ──

# Without it (a transformers older or newer than the names here) generation is off, not the export.
CacheLayerMixin = compat.internal("transformers.cache_utils.CacheLayerMixin") or object


class SlotCacheLayer(CacheLayerMixin):
    """One layer of a static slot cache whose update is out of place, so a traced graph returns the new tensors."""

    is_compileable = True
    is_sliding = False

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, positions: torch.Tensor):
        super().__init__()
        self.keys, self.values, self.positions = keys, values, positions
        self.is_initialized = True

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        raise RuntimeError("a slot cache is allocated by the caller")

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        self.keys = self.keys.index_copy(2, self.positions, key_states.to(self.keys.dtype))
        self.values = self.values.index_copy(2, self.positions, value_states.to(self.values.dtype))
        return self.keys, self.values

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.keys.shape[-2], 0

    def get_seq_length(self) -> torch.Tensor:
        # A tensor, as StaticLayer returns: masks and relative position biases offset the queries by it.
        return self.positions[0]

    def get_max_length(self) -> int:
        return self.keys.shape[-2]


def slot_cache(keys: list[torch.Tensor], values: list[torch.Tensor], positions: torch.Tensor) -> Cache:
    return Cache(layers=[SlotCacheLayer(k, v, positions) for k, v in zip(keys, values, strict=True)])


@dataclasses.dataclass(frozen=True)
class CacheLayout:
    """Shapes of the slot cache (without the batch dimension), read from one eager forward of the model."""

    key_shapes: list[list[int]]
    value_shapes: list[list[int]]
    dtype: torch.dtype

    def zeros(self, batch_size: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        keys = [torch.zeros(batch_size, *shape, dtype=self.dtype) for shape in self.key_shapes]
        values = [torch.zeros(batch_size, *shape, dtype=self.dtype) for shape in self.value_shapes]
        return keys, values

    def to_dict(self) -> dict[str, Any]:
        return {
            "layout": "static-slots",
            "num_layers": len(self.key_shapes),
            "key_shapes": self.key_shapes,
            "value_shapes": self.value_shapes,
            "dtype": str(self.dtype).removeprefix("torch."),
            "inputs": ["past_keys.<layer>", "past_values.<layer>"],
            "outputs": ["present_keys.<layer>", "present_values.<layer>"],
        }

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> CacheLayout:
        return cls(values["key_shapes"], values["value_shapes"], getattr(torch, values["dtype"]))


def _layout_from_cache(cache: Cache, max_cache_len: int, dtype: torch.dtype) -> CacheLayout:
    key_shapes, value_shapes = [], []
    for layer in cache.layers:
        if not isinstance(layer, CacheLayerMixin) or layer.keys is None:
            raise NotImplementedError(
                f"export_for_generation supports attention KV caches only, got a {type(layer).__name__} layer"
            )
        key_shapes.append([layer.keys.shape[1], max_cache_len, layer.keys.shape[3]])
        value_shapes.append([layer.values.shape[1], max_cache_len, layer.values.shape[3]])
    return CacheLayout(key_shapes, value_shapes, dtype)


# ── Components ──


def _cache_outputs(cache: Cache) -> dict[str, list[torch.Tensor]]:
    return {
        "present_keys": [layer.keys for layer in cache.layers],
        "present_values": [layer.values for layer in cache.layers],
    }


def _decoder_outputs(model: PreTrainedModel, cache: Cache, **inputs: torch.Tensor) -> dict[str, Any]:
    outputs = model(**inputs, past_key_values=cache, use_cache=True)
    # Greedy decoding only reads the last position: the other logits never leave the graph.
    return {"logits": outputs.logits[:, -1, :], **_cache_outputs(cache)}


class DecoderPrefill(torch.nn.Module):
    """The prompt on an empty cache: the last position's logits and the cache with the prompt in slots 0..S-1."""

    def __init__(self, model: PreTrainedModel, layout: CacheLayout):
        super().__init__()
        self.model = model
        self.layout = layout

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor
    ) -> dict[str, Any]:
        keys, values = self.layout.zeros(input_ids.shape[0])
        cache = slot_cache(keys, values, torch.arange(input_ids.shape[1]))
        return _decoder_outputs(
            self.model, cache, input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids
        )


class DecoderStep(torch.nn.Module):
    """One new token per sequence, written to slot ``cache_position``; the mask covers every slot."""

    def __init__(self, model: PreTrainedModel):
        super().__init__()
        self.model = model

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        cache_position: torch.Tensor,
        past_keys: list[torch.Tensor],
        past_values: list[torch.Tensor],
    ) -> dict[str, Any]:
        cache = slot_cache(past_keys, past_values, cache_position)
        return _decoder_outputs(
            self.model, cache, input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids
        )


class Seq2SeqEncoder(torch.nn.Module):
    def __init__(self, model: PreTrainedModel):
        super().__init__()
        self.encoder = model.get_encoder()

    def forward(self, **inputs: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"encoder_hidden_states": self.encoder(**inputs).last_hidden_state}


class Seq2SeqDecoderStep(torch.nn.Module):
    """One decoder token on the self-attention slot cache; cross-attention keys are recomputed from the encoder.

    Every sequence starts from the same decoder start token, so there is no decoder padding: causality alone masks
    the slots not written yet.
    """

    def __init__(self, model: PreTrainedModel):
        super().__init__()
        self.model = model
        self.takes_positions = "decoder_position_ids" in inspect.signature(model.forward).parameters

    def forward(
        self,
        decoder_input_ids: torch.Tensor,
        cache_position: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        past_keys: list[torch.Tensor],
        past_values: list[torch.Tensor],
        encoder_attention_mask: torch.Tensor | None = None,
    ) -> dict[str, Any]:
        self_cache = slot_cache(past_keys, past_values, cache_position)
        extra = {}
        if self.takes_positions:
            # Whisper slices its position table by the cache length otherwise, a data-dependent slice.
            extra["decoder_position_ids"] = cache_position.unsqueeze(0).expand(decoder_input_ids.shape[0], -1)
        outputs = self.model(
            encoder_outputs=(encoder_hidden_states,),
            attention_mask=encoder_attention_mask,
            decoder_input_ids=decoder_input_ids,
            past_key_values=EncoderDecoderCache(self_cache, DynamicCache()),
            use_cache=True,
            **extra,
        )
        return {"logits": outputs.logits[:, -1, :], **_cache_outputs(self_cache)}


# ── Export ──


def _max_positions(model: PreTrainedModel) -> int | None:
    config = model.config.get_text_config(decoder=True)
    for key in ("max_target_positions", "max_position_embeddings", "n_positions"):
        if isinstance(value := getattr(config, key, None), int):
            return value
    return None


def _token_ids(value: Any) -> list[int]:
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
        "eos_token_id": _token_ids(getattr(generation_config, "eos_token_id", None)),
        "pad_token_id": None if pad is None else int(pad),
        "decoder_start_token_id": None if start is None or not model.config.is_encoder_decoder else int(start),
        "suppress_tokens": _token_ids(getattr(generation_config, "suppress_tokens", None)),
        "begin_suppress_tokens": _token_ids(getattr(generation_config, "begin_suppress_tokens", None)),
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
    "forced_eos_token_id",
    "forced_decoder_ids",
    "min_length",
    "min_new_tokens",
)


def _warn_ignored_settings(model: PreTrainedModel) -> None:
    from transformers import GenerationConfig

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


def _position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids of a left-padded batch, as eager ``generate`` computes them (padding at 0)."""
    positions = attention_mask.long().cumsum(-1) - 1
    return positions.masked_fill(attention_mask == 0, 0)


def _dynamic_shapes(
    config: Any, inputs: dict[str, Any], sequence: dict[str, int | None] | None = None
) -> dict[str, Any] | None:
    """Dynamic batch (dim 0 of every tensor) and dynamic dim 1 of the inputs named in ``sequence`` (up to its
    value); every other dimension static. ``None`` for a static export."""
    from torch.export import Dim

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
) -> tuple[dict[str, tuple[Any, dict[str, Any]]], dict[str, Any]]:
    """Export the generation components of ``model``; return them with the ``generation`` entry of export.json.

    ``max_cache_len`` (default: 128, capped by the model's maximum positions) bounds prompt plus new tokens.
    With ``config.dynamic`` the batch size and the prompt length are dynamic; otherwise both are fixed to
    those of ``sample_inputs`` and :func:`generate` left-pads shorter prompts to that length.
    """
    if CacheLayerMixin is object:
        raise NotImplementedError("this transformers has no transformers.cache_utils.CacheLayerMixin")
    _warn_ignored_settings(model)
    limit = _max_positions(model)
    if max_cache_len is None:
        max_cache_len = min(DEFAULT_MAX_CACHE_LEN, limit or DEFAULT_MAX_CACHE_LEN)
    if limit is not None and max_cache_len > limit:
        raise ValueError(f"max_cache_len={max_cache_len} exceeds the model's {limit} positions")
    if model.config.is_encoder_decoder:
        return _export_encoder_decoder(exporter, model, sample_inputs, config, max_cache_len)
    return _export_decoder_only(exporter, model, sample_inputs, config, max_cache_len)


def _eager_cache(model: PreTrainedModel, inputs: dict[str, Any]) -> Cache:
    with torch.no_grad():
        cache = model(**inputs, use_cache=True).past_key_values
    if isinstance(cache, EncoderDecoderCache):
        cache = cache.self_attention_cache
    if not isinstance(cache, Cache):
        raise NotImplementedError(f"{type(model).__name__} returns no transformers Cache; cannot export generation")
    return cache


def _export_decoder_only(
    exporter: Any,
    model: PreTrainedModel,
    sample_inputs: dict[str, Any],
    config: Any,
    max_cache_len: int,
) -> tuple[dict[str, tuple[Any, dict[str, Any]]], dict[str, Any]]:
    input_ids = sample_inputs["input_ids"]
    batch_size, prompt_length = input_ids.shape
    if prompt_length >= max_cache_len:
        raise ValueError(f"the sample prompt ({prompt_length} tokens) does not fit max_cache_len={max_cache_len}")
    attention_mask = sample_inputs.get("attention_mask", torch.ones_like(input_ids))
    layout = _layout_from_cache(
        _eager_cache(model, {"input_ids": input_ids, "attention_mask": attention_mask}),
        max_cache_len,
        model.dtype,
    )
    prefill_inputs = {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": _position_ids(attention_mask),
    }
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
    components = {
        "prefill": exporter.export_program(DecoderPrefill(model, layout), prefill_inputs, prefill_config),
        "decode": exporter.export_program(DecoderStep(model), decode_inputs, decode_config),
    }
    dynamic = config.dynamic
    generation = {
        "kind": DECODER_ONLY,
        "components": {"prefill": "prefill", "decode": "decode"},
        "max_cache_len": max_cache_len,
        "batch_size": None if dynamic else batch_size,
        "prefill_length": None if dynamic else prompt_length,
        "cache": layout.to_dict(),
        **_special_tokens(model),
    }
    return components, generation


def _export_encoder_decoder(
    exporter: Any,
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
    layout = _layout_from_cache(
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
        "encoder": exporter.export_program(encoder, encoder_inputs, encoder_config),
        "decoder": exporter.export_program(Seq2SeqDecoderStep(model), decoder_inputs, decoder_config),
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


# ── Greedy generation ──


class GenerationLengthError(ExportFailure):
    """A request needs more cache slots, or another batch or prompt size, than the export was made for."""


@dataclasses.dataclass
class _Greedy:
    """Token choice as eager greedy ``generate`` makes it: suppressed ids, then argmax, then EOS bookkeeping."""

    eos: torch.Tensor | None
    pad: int | None
    suppress: list[int]
    begin_suppress: list[int]
    unfinished: torch.Tensor
    steps: int = 0

    def next_tokens(self, logits: torch.Tensor) -> torch.Tensor:
        suppressed = self.suppress + (self.begin_suppress if self.steps == 0 else [])
        if suppressed:
            logits = logits.clone()
            logits[:, suppressed] = -float("inf")
        self.steps += 1
        tokens = logits.argmax(-1)
        if self.eos is None:
            return tokens
        # Finished sequences keep emitting padding; a sequence finishes on any EOS id.
        tokens = torch.where(self.unfinished, tokens, torch.full_like(tokens, self.pad))
        self.unfinished &= ~torch.isin(tokens, self.eos)
        return tokens

    @property
    def done(self) -> bool:
        return self.eos is not None and not bool(self.unfinished.any())


def _greedy(generation: dict[str, Any], batch_size: int, eos_token_id: Any, pad_token_id: int | None) -> _Greedy:
    eos = _token_ids(generation.get("eos_token_id") if eos_token_id is None else eos_token_id)
    pad = generation.get("pad_token_id") if pad_token_id is None else pad_token_id
    if eos and pad is None:
        pad = eos[0]  # what eager generate falls back to
    return _Greedy(
        eos=torch.tensor(eos) if eos else None,
        pad=pad,
        suppress=generation.get("suppress_tokens", []),
        begin_suppress=generation.get("begin_suppress_tokens", []),
        unfinished=torch.ones(batch_size, dtype=torch.bool),
    )


def generate(
    exported: Any,
    input_ids: torch.Tensor,
    max_new_tokens: int = 20,
    attention_mask: torch.Tensor | None = None,
    eos_token_id: int | list[int] | None = None,
    pad_token_id: int | None = None,
) -> torch.Tensor:
    """Greedy decoding on the exported components: token for token what ``model.generate(do_sample=False)`` gives.

    ``input_ids`` is the prompt (left-padded, with ``attention_mask``) of a decoder-only model, or the encoder's
    main input (``input_ids``, ``input_features``...) of an encoder-decoder model. Returns the prompt followed by
    the new tokens (decoder-only) or the decoder sequence from its start token (encoder-decoder), as
    ``GenerationMixin.generate`` does; generation stops early once every sequence has produced an EOS id.
    """
    generation = exported.manifest.get("generation")
    if generation is None:
        raise ValueError("this export has no generation components: export it with export_for_generation")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    batch_size = input_ids.shape[0]
    if generation["batch_size"] is not None and batch_size != generation["batch_size"]:
        raise GenerationLengthError(
            f"this export has a static batch of {generation['batch_size']}, got {batch_size}; export with dynamic=True"
        )
    greedy = _greedy(generation, batch_size, eos_token_id, pad_token_id)
    if generation["kind"] == ENCODER_DECODER:
        return _generate_encoder_decoder(exported, generation, input_ids, attention_mask, max_new_tokens, greedy)
    return _generate_decoder_only(exported, generation, input_ids, attention_mask, max_new_tokens, greedy)


def _check_slots(generation: dict[str, Any], needed: int, request: str) -> None:
    if needed > generation["max_cache_len"]:
        raise GenerationLengthError(
            f"{request} needs {needed} cache slots but this export holds max_cache_len={generation['max_cache_len']}; "
            f"ask for fewer tokens or re-export with export_for_generation(..., max_cache_len={needed})"
        )


def _left_pad(input_ids: torch.Tensor, attention_mask: torch.Tensor, length: int, pad: int) -> tuple[Any, Any]:
    missing = length - input_ids.shape[1]
    if missing <= 0:
        return input_ids, attention_mask
    ids = torch.nn.functional.pad(input_ids, (missing, 0), value=pad)
    return ids, torch.nn.functional.pad(attention_mask, (missing, 0), value=0)


def _generate_decoder_only(
    exported: Any,
    generation: dict[str, Any],
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    max_new_tokens: int,
    greedy: _Greedy,
) -> torch.Tensor:
    attention_mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask.to(input_ids.dtype)
    # A static prefill takes exactly its traced length; a dynamic one at least 2 tokens (torch.export's 0/1 rule).
    # Extra left padding changes no real token's positions or attention.
    prefill_length = generation["prefill_length"] or max(2, input_ids.shape[1])
    prompt_ids, prompt_mask = _left_pad(input_ids, attention_mask, prefill_length, greedy.pad or 0)
    prompt_length = prompt_ids.shape[1]
    request = f"a {input_ids.shape[1]}-token prompt + {max_new_tokens} new tokens"
    _check_slots(generation, prompt_length + max_new_tokens, request)
    components = generation["components"]
    slots_mask = torch.zeros(input_ids.shape[0], generation["max_cache_len"], dtype=input_ids.dtype)
    slots_mask[:, :prompt_length] = prompt_mask
    positions = _position_ids(prompt_mask)
    outputs = exported.run(
        components["prefill"],
        input_ids=prompt_ids[:, :prefill_length],
        attention_mask=prompt_mask[:, :prefill_length],
        position_ids=positions[:, :prefill_length],
    )

    def decode(tokens: torch.Tensor, slot: int, position: torch.Tensor, cache: dict[str, Any]) -> dict[str, Any]:
        return exported.run(
            components["decode"],
            input_ids=tokens,
            attention_mask=slots_mask,
            position_ids=position,
            cache_position=torch.tensor([slot]),
            past_keys=list(cache["present_keys"]),
            past_values=list(cache["present_values"]),
        )

    # A prompt longer than a static prefill: the rest goes through decode, one token per step.
    for slot in range(prefill_length, prompt_length):
        outputs = decode(prompt_ids[:, slot : slot + 1], slot, positions[:, slot : slot + 1], outputs)
    position = positions[:, -1:]
    new_tokens = [greedy.next_tokens(outputs["logits"])]
    for slot in range(prompt_length, prompt_length + max_new_tokens - 1):
        if greedy.done:
            break
        slots_mask[:, slot] = 1
        position = position + 1
        outputs = decode(new_tokens[-1][:, None], slot, position, outputs)
        new_tokens.append(greedy.next_tokens(outputs["logits"]))
    return torch.cat([input_ids, torch.stack(new_tokens, 1)], 1)


def _encoder_inputs(
    generation: dict[str, Any], encoder_input: torch.Tensor, attention_mask: torch.Tensor | None, pad: int
) -> dict[str, torch.Tensor]:
    names = generation["encoder_inputs"]
    inputs = {names[0]: encoder_input}
    if "attention_mask" in names:
        ones = torch.ones(encoder_input.shape[:2], dtype=torch.long)
        inputs["attention_mask"] = ones if attention_mask is None else attention_mask
    static_length = generation.get("encoder_length")
    if static_length is None:
        return inputs
    if encoder_input.shape[1] > static_length:
        raise GenerationLengthError(
            f"this export's encoder takes at most {static_length} tokens, got {encoder_input.shape[1]}; "
            "export with dynamic=True"
        )
    # Right padding: the encoder is bidirectional and its mask hides the padding, from the decoder too.
    missing = static_length - encoder_input.shape[1]
    return {
        name: torch.nn.functional.pad(value, (0, missing), value=0 if name == "attention_mask" else pad)
        for name, value in inputs.items()
    }


def _generate_encoder_decoder(
    exported: Any,
    generation: dict[str, Any],
    encoder_input: torch.Tensor,
    attention_mask: torch.Tensor | None,
    max_new_tokens: int,
    greedy: _Greedy,
) -> torch.Tensor:
    _check_slots(generation, max_new_tokens, f"{max_new_tokens} new tokens")
    components = generation["components"]
    encoder_inputs = _encoder_inputs(generation, encoder_input, attention_mask, greedy.pad or 0)
    encoder_hidden_states = exported.run(components["encoder"], **encoder_inputs)["encoder_hidden_states"]
    batch_size = encoder_input.shape[0]
    keys, values = CacheLayout.from_dict(generation["cache"]).zeros(batch_size)
    sequence = torch.full((batch_size, 1), generation["decoder_start_token_id"], dtype=torch.long)
    cross_mask = (
        {"encoder_attention_mask": encoder_inputs["attention_mask"]} if "attention_mask" in encoder_inputs else {}
    )
    for slot in range(max_new_tokens):
        outputs = exported.run(
            components["decoder"],
            decoder_input_ids=sequence[:, -1:],
            cache_position=torch.tensor([slot]),
            encoder_hidden_states=encoder_hidden_states,
            past_keys=keys,
            past_values=values,
            **cross_mask,
        )
        keys, values = list(outputs["present_keys"]), list(outputs["present_values"])
        sequence = torch.cat([sequence, greedy.next_tokens(outputs["logits"])[:, None]], 1)
        if greedy.done:
            break
    return sequence
