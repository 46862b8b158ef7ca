"""Greedy decoding on the exported components, token for token what eager ``generate(do_sample=False)`` gives."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from ..errors import ExportFailure
from .cache import CacheLayout
from .export import ENCODER_DECODER, position_ids_from_mask, token_id_list
from .static_cache import STATIC_LAYOUT


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
    min_new_tokens: int = 0
    forced_eos: list[int] = dataclasses.field(default_factory=list)
    last_step: int = -1  # the index of the last new token (where a forced EOS goes)
    steps: int = 0

    def next_tokens(self, logits: torch.Tensor) -> torch.Tensor:
        suppressed = self.suppress + (self.begin_suppress if self.steps == 0 else [])
        if self.eos is not None and self.steps < self.min_new_tokens:
            suppressed = suppressed + self.eos.tolist()  # eager's min_new_tokens: no EOS before that many tokens
        if suppressed:
            logits = logits.clone()
            logits[:, suppressed] = -float("inf")
        if self.forced_eos and self.steps == self.last_step:
            # eager's forced_eos_token_id (BART-like configs): the last token allowed is EOS, whatever came before.
            logits = torch.full_like(logits, -float("inf"))
            logits[:, self.forced_eos] = 0
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


def _greedy(
    generation: dict[str, Any],
    batch_size: int,
    eos_token_id: Any,
    pad_token_id: int | None,
    min_new_tokens: int,
    max_new_tokens: int,
) -> _Greedy:
    eos = token_id_list(generation.get("eos_token_id") if eos_token_id is None else eos_token_id)
    pad = generation.get("pad_token_id") if pad_token_id is None else pad_token_id
    if eos and pad is None:
        pad = eos[0]  # what eager generate falls back to
    return _Greedy(
        eos=torch.tensor(eos) if eos else None,
        pad=pad,
        suppress=generation.get("suppress_tokens", []),
        begin_suppress=generation.get("begin_suppress_tokens", []),
        unfinished=torch.ones(batch_size, dtype=torch.bool),
        min_new_tokens=min_new_tokens,
        forced_eos=token_id_list(generation.get("forced_eos_token_id")),
        last_step=max_new_tokens - 1,
    )


def generate(
    exported: Any,
    input_ids: torch.Tensor,
    max_new_tokens: int = 20,
    attention_mask: torch.Tensor | None = None,
    eos_token_id: int | list[int] | None = None,
    pad_token_id: int | None = None,
    min_new_tokens: int = 0,
) -> torch.Tensor:
    """Greedy decoding on the exported components: token for token what ``model.generate(do_sample=False)`` gives.

    ``input_ids`` is the prompt (left-padded, with ``attention_mask``) of a decoder-only model, or the encoder's
    main input (``input_ids``, ``input_features``...) of an encoder-decoder model. Returns the prompt followed by
    the new tokens (decoder-only) or the decoder sequence from its start token (encoder-decoder), as
    ``GenerationMixin.generate`` does; generation stops early once every sequence has produced an EOS id, and as
    with eager's ``min_new_tokens`` no EOS id is chosen before that many new tokens.
    """
    generation = exported.manifest.get("generation")
    if generation is None:
        raise ValueError("this export has no generation components: export it with export_for_generation")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if min_new_tokens < 0:
        raise ValueError(f"min_new_tokens must be >= 0, got {min_new_tokens}")
    batch_size = input_ids.shape[0]
    if generation["batch_size"] is not None and batch_size != generation["batch_size"]:
        raise GenerationLengthError(
            f"this export has a static batch of {generation['batch_size']}, got {batch_size}; export with dynamic=True"
        )
    greedy = _greedy(generation, batch_size, eos_token_id, pad_token_id, min_new_tokens, max_new_tokens)
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
    positions = position_ids_from_mask(prompt_mask)
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
            position_ids=position,
            cache_position=torch.tensor([slot]),
            **_decode_cache_inputs(generation, slots_mask, slot, cache),
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


def _decode_cache_inputs(
    generation: dict[str, Any], slots_mask: torch.Tensor, slot: int, outputs: dict[str, Any]
) -> dict[str, Any]:
    """The mask and cache a decode step takes: the mask over every slot and the slot cache's keys and values, or (on
    transformers' StaticCache) the mask over the tokens seen so far and the cache's states."""
    if generation["cache"]["layout"] == STATIC_LAYOUT:
        return {"attention_mask": slots_mask[:, : slot + 1], "past_states": list(outputs["present_states"])}
    return {
        "attention_mask": slots_mask,
        "past_keys": list(outputs["present_keys"]),
        "past_values": list(outputs["present_values"]),
    }


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
