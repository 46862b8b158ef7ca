"""The modules traced for generation: prefill and decode step (decoder-only), encoder and decoder step (seq2seq)."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

import torch
from transformers import Cache, DynamicCache, EncoderDecoderCache

from .cache import CacheLayout, slot_cache

if TYPE_CHECKING:
    from transformers import PreTrainedModel


def _cache_outputs(cache: Cache) -> dict[str, list[torch.Tensor]]:
    return {
        "present_keys": [layer.keys for layer in cache.layers],
        "present_values": [layer.values for layer in cache.layers],
    }


def generate_passes_positions(model: PreTrainedModel) -> bool:
    """Whether eager ``generate`` hands ``model`` position ids: it makes them from the mask where ``forward`` takes
    them, and a model's ``prepare_inputs_for_generation`` may drop them again (Kosmos-2.5 counts its own, offset by
    ``padding_idx + 1``, which the mask's would shift)."""
    if "position_ids" not in inspect.signature(model.forward).parameters:
        return False
    prepare = getattr(model, "prepare_inputs_for_generation", None)
    if prepare is None:
        return True
    prompt = torch.ones(1, 2, dtype=torch.long)
    positions = torch.arange(2).unsqueeze(0)
    inputs = prepare(prompt, attention_mask=prompt, position_ids=positions, use_cache=True, is_first_iteration=True)
    return "position_ids" in inputs


class GeneratingDecoder(torch.nn.Module):
    """A decoder LM called as eager ``generate`` calls it: with the position ids only where generate passes them."""

    def __init__(self, model: PreTrainedModel):
        super().__init__()
        self.model = model
        self.passes_positions = generate_passes_positions(model)

    def last_logits(self, cache: Cache, position_ids: torch.Tensor, **inputs: torch.Tensor) -> torch.Tensor:
        if self.passes_positions:
            inputs["position_ids"] = position_ids
        # Greedy decoding only reads the last position: the other logits never leave the graph.
        return self.model(**inputs, past_key_values=cache, use_cache=True).logits[:, -1, :]


class DecoderPrefill(GeneratingDecoder):
    """The prompt on an empty cache: the last position's logits and the cache with the prompt in slots 0..S-1.

    ``seen_as_int``: the cache counts the tokens it holds as an int (0 here), as ``DynamicCache`` does, instead of a
    tensor; for a model that branches on that count.
    """

    def __init__(self, model: PreTrainedModel, layout: CacheLayout, seen_as_int: bool = False):
        super().__init__(model)
        self.layout = layout
        self.seen_as_int = seen_as_int

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor
    ) -> dict[str, Any]:
        keys, values = self.layout.zeros(input_ids.shape[0])
        cache = slot_cache(keys, values, torch.arange(input_ids.shape[1]), 0 if self.seen_as_int else None)
        # A mask over every slot, as the decode step's and generate's on a fixed-size cache: Bloom builds its alibi
        # bias from the mask, one entry per key.
        slots_mask = torch.nn.functional.pad(attention_mask, (0, keys[0].shape[2] - attention_mask.shape[1]))
        logits = self.last_logits(cache, position_ids, input_ids=input_ids, attention_mask=slots_mask)
        return {"logits": logits, **_cache_outputs(cache)}


class DecoderStep(GeneratingDecoder):
    """One new token per sequence, written to slot ``cache_position``; the mask covers every slot.

    ``seen_as_int``: the cache counts the tokens it holds as an int read from ``cache_position``, checked to lie
    between the prompt's one token and the cache's end, so the trace decides ``seen > 0`` as generate's step does.
    """

    def __init__(self, model: PreTrainedModel, seen_as_int: bool = False):
        super().__init__(model)
        self.seen_as_int = seen_as_int

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        cache_position: torch.Tensor,
        past_keys: list[torch.Tensor],
        past_values: list[torch.Tensor],
    ) -> dict[str, Any]:
        seen = _checked_int(cache_position[0], 1, past_keys[0].shape[2] - 1) if self.seen_as_int else None
        cache = slot_cache(past_keys, past_values, cache_position, seen)
        logits = self.last_logits(cache, position_ids, input_ids=input_ids, attention_mask=attention_mask)
        return {"logits": logits, **_cache_outputs(cache)}


def _checked_int(value: torch.Tensor, low: int, high: int) -> int:
    number = value.item()
    torch._check(number >= low)
    torch._check(number <= high)
    return number


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
