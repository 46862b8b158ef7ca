"""Builders of the ``AUXILIARY`` stage (side inputs drawn at random otherwise) and the ``FINISH`` stage."""

from __future__ import annotations

import math

import torch
from transformers import DynamicCache

from ...model_keyed import TINY_MODEL_ENTRY, declare
from ..classes import class_names
from ..tables import (
    CODEBOOK_STACKED_TYPES,
    DECODER_CODEBOOKS,
    PADDED_MASK_TYPES,
    SEPARATED_QUESTION_TYPES,
    TIME_CONDITIONED_STACKS,
)
from .draw import sequence_ids, token_ids
from .registry import Request, Stage, builds

# ── Auxiliary inputs ──


@builds(Stage.AUXILIARY, when=lambda r: "visual_feats" in r.parameters)
def _detector_regions(r: Request) -> dict[str, torch.Tensor]:
    # LXMERT reads region features and their boxes from an object detector.
    regions = 5
    return {
        "visual_feats": torch.randn(r.batch_size, regions, r.config.visual_feat_dim, generator=r.generator),
        "visual_pos": torch.rand(r.batch_size, regions, r.config.visual_pos_dim, generator=r.generator),
    }


@builds(Stage.AUXILIARY, when=lambda r: "region_to_phrase_position" in r.parameters and "input_ids" in r.inputs)
def _phrase_regions(r: Request) -> dict[str, torch.Tensor]:
    """VisualBERT's region-to-phrase head (Flickr30k entities) scores detector regions against the tokens it selects:
    the regions' features and mask, and one position per text and region token (each its own) to select."""
    regions = 5
    tokens = r.inputs["input_ids"].shape[1] + regions
    return {
        "visual_embeds": torch.randn(r.batch_size, regions, r.config.visual_embedding_dim, generator=r.generator),
        "visual_attention_mask": torch.ones(r.batch_size, regions, dtype=torch.long),
        "region_to_phrase_position": torch.arange(tokens).expand(r.batch_size, -1).clone(),
    }


@builds(
    Stage.AUXILIARY,
    when=lambda r: "pixel_values" in r.inputs and "noise" in r.parameters and hasattr(r.config, "mask_ratio"),
)
def _patch_mask_noise(r: Request) -> dict[str, torch.Tensor]:
    # Masked autoencoders draw their patch mask from torch.rand: pass the noise, or no two runs agree.
    side = r.inputs["pixel_values"].shape[-1]
    if hasattr(r.config, "masked_unit_size"):
        # Hiera masks units of masked_unit_size tokens, each token patch_stride pixels.
        strides = zip(r.config.patch_stride, r.config.masked_unit_size, strict=True)
        units = [side // stride // unit for stride, unit in strides]
        return {"noise": torch.rand(r.batch_size, math.prod(units), generator=r.generator)}
    patches = (side // r.config.patch_size) ** 2
    return {"noise": torch.rand(r.batch_size, patches, generator=r.generator)}


@builds(
    Stage.AUXILIARY,
    when=lambda r: (
        "input_features" in r.inputs and "noise_sequence" in r.parameters and hasattr(r.config, "model_in_channels")
    ),
)
def _vocoder_noise(r: Request) -> dict[str, torch.Tensor]:
    # Vocoders (UnivNet) draw their noise from torch.randn when none is given: pass it, as for the autoencoders.
    frames = r.inputs["input_features"].shape[1]
    return {"noise_sequence": torch.randn(r.batch_size, frames, r.config.model_in_channels, generator=r.generator)}


@builds(
    Stage.AUXILIARY,
    when=lambda r: "state" in r.inputs and {"noise", "timestep"} <= r.parameters and hasattr(r.config, "chunk_size"),
)
def _flow_matching_noise(r: Request) -> dict[str, torch.Tensor]:
    # Flow-matching action experts (PI0) draw the noisy action chunk and its time at random when none is given.
    chunk = (r.batch_size, r.config.chunk_size, r.config.max_action_dim)
    return {
        "noise": torch.randn(chunk, generator=r.generator),
        "timestep": torch.rand(r.batch_size, generator=r.generator),
    }


@builds(Stage.AUXILIARY, when=lambda r: type(r.model).__name__ in TIME_CONDITIONED_STACKS)
def _time_condition(r: Request) -> dict[str, torch.Tensor]:
    # Its model passes a (1, hidden) sinusoid (cos and sin values) that broadcasts over batch and sequence; without it
    # every layer's ada-norm reads None.
    return {"t_cond": 2 * torch.rand(1, r.config.hidden_size, generator=r.generator) - 1}


# ── Finishing: what reads the final token ids, then decoder ids ──


def _classifies_at_eos(r: Request) -> bool:
    heads = class_names("MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES", r.config.model_type)
    eos = getattr(r.config, "eos_token_id", None)
    return getattr(r.config, "is_encoder_decoder", False) and type(r.model).__name__ in heads and isinstance(eos, int)


@builds(Stage.FINISH, when=lambda r: "input_ids" in r.inputs and _classifies_at_eos(r))
def _eos_ended_rows(r: Request) -> dict[str, torch.Tensor]:
    # Encoder-decoder sequence classifiers (bart, t5) read each row's last <eos>: every row must end with one.
    input_ids = r.inputs["input_ids"].clone()
    input_ids[:, -1] = r.config.eos_token_id
    return {"input_ids": input_ids}


@builds(
    Stage.FINISH,
    when=lambda r: {"context_hidden_states", "noise_embeds"} <= r.inputs.keys() and "attention_mask" in r.parameters,
)
def _drafter_attention_mask(r: Request) -> dict[str, torch.Tensor]:
    # Drafters (DFlash) attend over the target's context and the noise block together. Without a mask, eager attends
    # unmasked but a traced one is built over the noise block only (muse_glimmer's create_bidirectional_mask): "The
    # size of tensor a (s30 + s39) must match the size of tensor b (s30)". Generation passes one spanning both.
    positions = r.inputs["context_hidden_states"].shape[1] + r.inputs["noise_embeds"].shape[1]
    return {"attention_mask": torch.ones(r.batch_size, positions, dtype=torch.long)}


declare(
    TINY_MODEL_ENTRY,
    "_drafter_attention_mask",
    "a mask over the target's context and the noise block: a trace without one masks the noise block alone",
    ("muse_glimmer_assistant",),
)


def _is_prefix_lm(r: Request) -> bool:
    # The decoder's: get_text_config() refuses a model with two text configs (Musicgen's text encoder and decoder).
    text_config = r.config.get_text_config(decoder=True)
    return "token_type_ids" in r.parameters and bool(getattr(text_config, "use_bidirectional_attention", False))


@builds(Stage.FINISH, when=lambda r: "input_ids" in r.inputs and _is_prefix_lm(r))
def _prefix_and_suffix_token_types(r: Request) -> dict[str, torch.Tensor]:
    # Prefix LMs (PaliGemma): the text model attends bidirectionally and token types keep the suffix causal. Without
    # them eager skips the mask (all bidirectional) while a trace builds a causal one: 0.36 apart. The processor
    # passes them; half of each row is prefix (0), the rest suffix (1), so both kinds of attention run.
    token_types = torch.zeros_like(r.inputs["input_ids"])
    token_types[:, (r.inputs["input_ids"].shape[1] + 1) // 2 :] = 1
    return {"token_type_ids": token_types}


@builds(Stage.FINISH, when=lambda r: "input_ids" in r.inputs and "attention_mask" in r.parameters)
def _attention_mask(r: Request) -> dict[str, torch.Tensor]:
    # As long as the rows, which image placeholders lengthen (ids may have a stream dimension after the sequence).
    mask = torch.ones(r.batch_size, r.inputs["input_ids"].shape[1], dtype=torch.long)
    if r.config.model_type in PADDED_MASK_TYPES:
        mask[0, -1] = 0  # the first row right-padded by one token (see PADDED_MASK_TYPES)
    return {"attention_mask": mask}


def _is_local_decoder(r: Request) -> bool:
    # BLT's local decoder (its local encoder, which also takes patch_embeds, pools patch_ids: tiny_models.UNRUNNABLE).
    return "patch_embeds" in r.parameters and "patch_ids" not in r.parameters and hasattr(r.config, "cross_attn_k")


@builds(Stage.FINISH, when=lambda r: _is_local_decoder(r) and "input_ids" in r.inputs, drops=("attention_mask",))
def _byte_patches(r: Request) -> dict[str, torch.Tensor]:
    """BLT's local decoder built alone, fed as BltModel feeds it without an entropy patcher: the encoder's byte states,
    the global model's patch states (every byte its own patch, one empty patch after them) and the mask letting each
    byte attend to its patch's cross_attn_k slots. No self-attention mask: the model passes its causal mask, which SDPA
    leaves to is_causal without padding."""
    bytes_, k = r.inputs["input_ids"].shape[1], r.config.cross_attn_k
    patches = bytes_ + 1
    holds = torch.arange(bytes_)[:, None] == torch.arange(patches)[None, :]  # (bytes, patches): byte b in patch b
    mask = torch.zeros(bytes_, patches * k).masked_fill(~holds.repeat_interleave(k, dim=-1), torch.finfo().min)
    return {
        "inputs_embeds": torch.randn(r.batch_size, bytes_, r.config.hidden_size, generator=r.generator),
        "patch_embeds": torch.randn(r.batch_size, patches, r.config.hidden_size_global, generator=r.generator),
        "encoder_attention_mask": mask.expand(r.batch_size, 1, -1, -1),  # additive, as BltModel builds it
    }


@builds(
    Stage.FINISH,
    when=lambda r: (
        "input_ids" in r.inputs and "decoder_input_ids" in r.parameters and hasattr(r.config, "canvas_length")
    ),
)
def _diffusion_canvas(r: Request) -> dict[str, torch.Tensor]:
    # Block-diffusion LMs (diffusion_gemma) fill the canvas with torch.randint when none is given: no two runs agree.
    # A canvas as long as the prompt, so the second shape lengthens it too.
    return {"decoder_input_ids": token_ids(r.config.get_text_config(), (r.batch_size, r.seq_length), r.generator)}


def _decodes_ids(r: Request) -> bool:
    # Encoder-decoders, and heads that cannot run without decoder ids (BlipForQuestionAnswering decodes its answer).
    encoder_decoder = getattr(r.config, "is_encoder_decoder", False)
    return "decoder_input_ids" in r.parameters and (encoder_decoder or "decoder_input_ids" in r.missing)


@builds(Stage.FINISH, when=_decodes_ids)
def _decoder_input_ids(r: Request) -> dict[str, torch.Tensor]:
    codebooks = DECODER_CODEBOOKS.get(r.config.model_type)
    decoder = r.config.get_text_config(decoder=True)
    if decoder.model_type in CODEBOOK_STACKED_TYPES:
        # Musicgen's decoder stacks its codebooks into the batch: (batch * num_codebooks, sequence) ids.
        shape = (r.batch_size * decoder.num_codebooks, r.seq_length)
        return {"decoder_input_ids": token_ids(decoder, shape, r.generator)}
    if codebooks is None:
        return {"decoder_input_ids": sequence_ids(r)}
    # (batch, sequence, codebooks) ids of the decoder's vocabulary: Dia's flat (batch * codebooks, sequence) form
    # transposes into a view its embedding cannot read.
    shape = (r.batch_size, r.seq_length, getattr(decoder, codebooks))
    return {"decoder_input_ids": token_ids(decoder, shape, r.generator)}


def _cache_name(r: Request) -> str | None:
    # transformers 5.25 renamed past_key_values to cache.
    return next((name for name in ("cache", "past_key_values") if name in r.parameters), None)


def _reads_encoded_prefix(r: Request) -> bool:
    # A block-diffusion decoder built alone: its model encodes the prompt into the cache, which it cannot do itself.
    return hasattr(r.config, "canvas_length") and bool(_cache_name(r)) and "input_ids" not in r.parameters


@builds(Stage.FINISH, when=lambda r: "decoder_input_ids" in r.inputs and _reads_encoded_prefix(r))
def _encoded_prefix(r: Request) -> dict[str, DynamicCache]:
    """DiffusionGemmaDecoderModel reads the prompt its model's encoder wrote into the cache, read-only: every layer's
    keys and values of a seq_length prompt, (batch, key heads, prompt, head width) at that layer's attention sizes."""
    cache = DynamicCache(config=r.config.get_text_config())
    for index, layer in enumerate(r.model.layers):
        attention = layer.self_attn
        shape = (r.batch_size, attention.k_proj.out_features // attention.head_dim, r.seq_length, attention.head_dim)
        cache.update(torch.randn(shape, generator=r.generator), torch.randn(shape, generator=r.generator), index)
    return {_cache_name(r): cache}


# AlphaFold's residue types: 20 amino acids and X (openfold's residue_constants.restypes_with_x).
_RESIDUE_TYPES = 21


@builds(Stage.FINISH, when=lambda r: "input_ids" in r.inputs and getattr(r.config, "is_folding_model", False))
def _residue_indices(r: Request) -> dict[str, torch.Tensor]:
    # ESMFold reads residue indices, which it maps to its language model's tokens ("index out of bounds" on others).
    return {"input_ids": r.inputs["input_ids"] % _RESIDUE_TYPES}


def _question_end(r: Request) -> int:
    # The first half of each row is the question, the rest its context (before the choices dimension stacks them).
    return (r.inputs["input_ids"].shape[1] - 1) // 2


@builds(Stage.FINISH, when=lambda r: "input_ids" in r.inputs and getattr(r.config, "question_token_id", None))
def _question_tokens(r: Request) -> dict[str, torch.Tensor]:
    # Splinter answers at its question tokens: the pre-training head refuses rows without one ("All samples in the
    # batch must have at least one question token"), the QA head would read position 0. One per row, after the question.
    input_ids = r.inputs["input_ids"].clone()
    input_ids[:, _question_end(r)] = r.config.question_token_id
    return {"input_ids": input_ids}


def _finds_question_by_separators(r: Request) -> bool:
    heads = ("MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES", "MODEL_FOR_MULTIPLE_CHOICE_MAPPING_NAMES")
    in_heads = any(type(r.model).__name__ in class_names(heads_map, r.config.model_type) for heads_map in heads)
    return "input_ids" in r.inputs and r.config.model_type in SEPARATED_QUESTION_TYPES and in_heads


@builds(Stage.FINISH, when=_finds_question_by_separators)
def _question_separators(r: Request) -> dict[str, torch.Tensor]:
    # Rows laid out as the tokenizer pairs a question and its context, "question </s></s> context </s>": exactly three
    # separators (Longformer asserts it), the first ending the question its global attention covers.
    input_ids = r.inputs["input_ids"].clone()
    end = _question_end(r)
    input_ids[:, [end, end + 1, -1]] = r.config.sep_token_id
    return {"input_ids": input_ids}


@builds(Stage.FINISH, when=lambda r: type(r.model).__name__.endswith("ForMultipleChoice"))
def _choices_dimension(r: Request) -> dict[str, torch.Tensor]:
    # Multiple-choice heads read (batch, choices, sequence) text inputs ("shape '[-1, 7]' is invalid" on 2D ones):
    # each sample's text and its reverse as the two candidates, so the choices' scores differ.
    texts = {name: value for name, value in r.inputs.items() if value.shape[:2] == (r.batch_size, r.seq_length)}
    return {name: torch.stack([value, value.flip(1)], dim=1) for name, value in texts.items()}


# Entities per sample and tokens per entity mention that entity heads (LUKE) read.
_ENTITIES, _MENTION = 2, 2


@builds(Stage.FINISH, when=lambda r: "entity_ids" in r.parameters and "Entity" in type(r.model).__name__)
def _entity_mentions(r: Request) -> dict[str, torch.Tensor]:
    """Heads that classify entities or entity pairs and spans (LukeForEntityClassification): entity ids, each a
    mention of consecutive tokens after the first, its positions, its start and end."""
    starts = 1 + _MENTION * torch.arange(_ENTITIES)
    positions = starts[:, None] + torch.arange(_MENTION)
    inputs = {
        "entity_ids": torch.randint(1, r.config.entity_vocab_size, (r.batch_size, _ENTITIES), generator=r.generator),
        "entity_attention_mask": torch.ones(r.batch_size, _ENTITIES, dtype=torch.long),
        "entity_position_ids": positions.expand(r.batch_size, -1, -1).clone(),
    }
    if "entity_start_positions" in r.parameters:
        inputs["entity_start_positions"] = starts.expand(r.batch_size, -1).clone()
        inputs["entity_end_positions"] = positions[:, -1].expand(r.batch_size, -1).clone()
    return inputs
