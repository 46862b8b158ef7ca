"""Patches of one model's own code that torch.export needs (key ``"dynamo"``), installed around the trace of every
backend (``DynamoExporter``'s stage 2): each swaps code torch.export cannot trace, or cannot save, for an export-safe
equivalent for the duration of one export. Patches of torch and of code many models share are in ``patches.py``.
"""

from __future__ import annotations

import functools
import math
import sys
import types
from collections.abc import Callable
from typing import Any

import torch

from ....torch_compat import free_unbacked_symbols
from ...registry import (
    register_patch,
)


@register_patch("dynamo", "transformers.models.longcat_flash.modeling_longcat_flash.LongcatFlashExperts.forward")
def _patch_longcat_experts_dense(_original: Callable) -> Callable:
    # longcat_flash: the experts loop over the experts the router picked (nonzero, then .item()), a loop of
    # data-dependent length ("Could not guard on data-dependent expression Eq(u0, 0)"); run every expert on every
    # token and weight each result by its routing weight, zero where not picked (identity experts included).
    def forward(
        self: Any, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor
    ) -> torch.Tensor:
        routed = 0 if self.gate_up_proj is None else self.num_routed_experts
        identities = hidden_states.expand(self.total_experts - routed, *hidden_states.shape)
        if not routed:
            return _weighted_by_routing(identities, top_k_index, top_k_weights)
        gate, up = torch.einsum("th,eoh->eto", hidden_states, self.gate_up_proj[:routed]).chunk(2, dim=-1)
        expert_outputs = torch.einsum("eti,ehi->eth", self.act_fn(gate) * up, self.down_proj)
        return _weighted_by_routing(torch.cat([expert_outputs, identities]), top_k_index, top_k_weights)

    return forward


@register_patch("dynamo", "transformers.models.dbrx.modeling_dbrx.DbrxExperts.forward")
def _patch_dbrx_experts_dense(_original: Callable) -> Callable:
    # dbrx: its experts loop over the experts the router picked, a data-dependent loop (as longcat_flash's), and
    # take no experts implementation to switch to: run every expert on every token, weighted by routing.
    def forward(
        self: Any, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor
    ) -> torch.Tensor:
        batch_size, tokens = hidden_states.shape[0], hidden_states.reshape(-1, self.hidden_size)
        shape = (self.num_experts, self.ffn_hidden_size, self.hidden_size)
        gate = torch.einsum("th,efh->etf", tokens, self.mlp.w1.view(shape))
        up = torch.einsum("th,efh->etf", tokens, self.mlp.v1.view(shape))
        expert_outputs = torch.einsum("etf,efh->eth", self.mlp.activation_fn(gate) * up, self.mlp.w2.view(shape))
        return _weighted_by_routing(expert_outputs, top_k_index, top_k_weights).view(batch_size, -1, self.hidden_size)

    return forward


@register_patch("dynamo", "transformers.models.step3p7.modeling_step3p7.Step3p7Experts.forward")
def _patch_step3p7_experts_dense(_original: Callable) -> Callable:
    # step3p7: `for expert_idx in hit` loops over the experts the router picked (a data-dependent loop, as dbrx's):
    # run every expert on every token, weighted by routing; index num_experts picks no expert (a zero output).
    def forward(
        self: Any, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor
    ) -> torch.Tensor:
        gate_up = torch.einsum("th,eoh->eto", hidden_states, self.gate_up_proj)
        expert_outputs = torch.einsum("eti,ehi->eth", self._apply_gate(gate_up), self.down_proj)
        no_expert = expert_outputs.new_zeros(1, *expert_outputs.shape[1:])
        return _weighted_by_routing(torch.cat([expert_outputs, no_expert]), top_k_index, top_k_weights)

    return forward


def _weighted_by_routing(
    expert_outputs: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor
) -> torch.Tensor:
    """Each token's sum of (experts, tokens, hidden) outputs weighted by its routing weights (zero where not picked)."""
    weights = top_k_weights.new_zeros(top_k_index.shape[0], expert_outputs.shape[0])
    weights = weights.scatter_add(1, top_k_index, top_k_weights)
    return torch.einsum("te,eth->th", weights, expert_outputs.to(weights.dtype)).to(expert_outputs.dtype)


_NLLB_MOE = "transformers.models.nllb_moe.modeling_nllb_moe"


@register_patch("dynamo", f"{_NLLB_MOE}.NllbMoeTop2Router._cast_classifier")
def _patch_nllb_moe_router_cast_when_needed(original: Callable) -> Callable:
    # nllb_moe (sparse layers): the router's .to(router_dtype) in forward fails on traced weights ("Couldn't swap
    # Linear.weight": Module.to swaps fake parameters even when the dtype already matches); cast only when it differs.
    def _cast_classifier(self: Any) -> None:
        if self.classifier.weight.dtype != self.dtype:
            original(self)

    return _cast_classifier


@register_patch(
    "dynamo",
    *(
        f"transformers.models.{name}.modeling_{name}.len"
        for name in ("rt_detr", "rt_detr_v2", "d_fine", "deimv2", "pp_doclayout_v2", "pp_doclayout_v3", "depth_pro")
    ),
)
def _patch_len_keeps_batch_symbolic(original: Callable) -> Callable:
    # rt_detr family (`batch_size = len(source_flatten)`), depth_pro (`len(i) for i in scaled_images`): len() makes the
    # batch a Python int (guard Eq(batch, 2)), the program takes batch 2 only; here len(tensor) stays symbolic.
    def length(value: Any) -> Any:
        return value.shape[0] if isinstance(value, torch.Tensor) else original(value)

    return length


@register_patch(
    "dynamo",
    "transformers.models.pe_audio_video.modeling_pe_audio_video.PeAudioVideoEncoderEmbedder._align_video_hidden_state",
)
def _patch_pe_audio_video_alignment_as_gather(_original: Callable) -> Callable:
    # pe_audio_video: aligning video frames to audio steps branches on mask sums (`(audio_lengths == T).all()`) and
    # loops over the batch ("Could not guard on data-dependent expression Eq(u0, 1)"): the same nearest-neighbour
    # interpolation per sample (source step floor(step * video_length / audio_length)), as one gather.
    def align(
        self: Any,
        video_hidden_state: torch.Tensor,
        audio_hidden_state: torch.Tensor,
        padding_mask_videos: torch.Tensor | None = None,
        padding_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if video_hidden_state.shape[1] == audio_hidden_state.shape[1]:
            return video_hidden_state
        batch, video_steps, width = video_hidden_state.shape
        audio_steps = audio_hidden_state.shape[1]
        full = torch.ones(batch, dtype=torch.long, device=video_hidden_state.device)
        video_lengths = padding_mask_videos.sum(-1) if padding_mask_videos is not None else full * video_steps
        audio_lengths = padding_mask.sum(-1) if padding_mask is not None else full * audio_steps
        steps = torch.arange(audio_steps, device=video_hidden_state.device)[None]
        scale = video_lengths[:, None].float() / audio_lengths[:, None].clamp(min=1).float()
        source = torch.minimum((steps * scale).floor().long(), (video_lengths[:, None] - 1).clamp(min=0))
        aligned = video_hidden_state.gather(1, source[..., None].expand(batch, audio_steps, width))
        kept = (steps < audio_lengths[:, None]) & (video_lengths[:, None] > 0)
        return torch.where(kept[..., None], aligned, torch.zeros((), dtype=aligned.dtype))

    return align


@register_patch("dynamo", "transformers.models.qwen4_exp.modeling_qwen4_exp.Qwen4ExpTextQSAIndexer.forward")
def _patch_qwen4_exp_block_selection_by_masks(original: Callable) -> Callable:
    # qwen4_exp (QSA layers): the indexer loops over batch rows and query positions, finds each query's visible
    # tokens with nonzero and branches on their count ("Could not guard on data-dependent expression"); the same
    # blocks for every query at once: tokens found by their visible rank, the top block_topk kept by counting.
    rotate = original.__globals__["apply_rotary_pos_emb"]

    def forward(
        self: Any,
        hidden_states: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor],
        attention_mask: torch.Tensor,
        past_key_values: Any,
    ) -> torch.Tensor:
        batch, queries, _ = hidden_states.shape
        full_cos, full_sin = position_embeddings
        sizes = [self.index_n_heads * self.index_head_dim, self.index_kv_heads * self.index_head_dim]
        q, raw_keys = self.index_qk_proj(hidden_states).split(sizes, dim=-1)
        q = self.q_layernorm(q.reshape(batch, queries, -1, self.index_head_dim))
        q = rotate(q, cos=full_cos[:, -queries:], sin=full_sin[:, -queries:], unsqueeze_dim=2)
        if past_key_values is not None:
            raw_keys = past_key_values.update_indexer(raw_keys, self.layer_idx)
        visible = attention_mask if attention_mask.dtype == torch.bool else attention_mask == 0
        visible = visible[:, 0].expand(batch, queries, -1)
        ratio, keys = self.compress_ratio, visible.shape[-1]
        ranks = visible.to(torch.int64).cumsum(-1)  # visible tokens up to each position, itself included
        complete = ranks[..., -1:] // ratio  # whole blocks per query
        # Block j holds the visible tokens of ranks j*ratio .. j*ratio+ratio-1; the token of rank m is the first
        # position whose count reaches m + 1, i.e. the number of positions whose count is at most m.
        block_ranks = torch.arange(keys // ratio * ratio, device=visible.device)
        tokens = (ranks[..., None, :] <= block_ranks[:, None]).sum(-1).clamp(max=keys - 1)
        rows = torch.arange(batch, device=visible.device)[:, None, None]
        grouped = raw_keys[rows, tokens].unflatten(2, (-1, ratio))
        pooled = self.k_layernorm(grouped.float().mean(dim=3).to(raw_keys.dtype))
        starts = tokens[..., ::ratio]
        cos, sin = full_cos[rows, starts], full_sin[rows, starts]
        block_keys = rotate(pooled[..., None, :], cos=cos, sin=sin, unsqueeze_dim=-2).squeeze(-2)
        scores = torch.matmul(q.float(), block_keys.float().transpose(-1, -2)).transpose(-1, -2)
        scores = torch.relu(scores).sum(dim=-1) / math.sqrt(self.index_head_dim)
        blocks = torch.arange(scores.shape[-1], device=visible.device)
        valid = blocks < complete
        # A valid block beats another with a higher score, or an equal one at a lower index (ties go to the first).
        beats = (scores[..., :, None] > scores[..., None, :]) | (
            (scores[..., :, None] == scores[..., None, :]) & (blocks[:, None] < blocks[None, :])
        )
        kept = valid & ((beats & valid[..., :, None]).sum(-2) < self.block_topk)
        kept = torch.cat([kept, kept.new_zeros(*kept.shape[:-1], 1)], dim=-1)  # a false block for tail tokens
        rank = ranks - 1
        in_tail = rank >= complete * ratio
        in_kept_block = kept.gather(-1, (rank // ratio).clamp(0, kept.shape[-1] - 1))
        return (visible & (in_tail | in_kept_block)).unsqueeze(1)

    return forward


_FASTSPEECH2 = "transformers.models.fastspeech2_conformer.modeling_fastspeech2_conformer"


@register_patch("dynamo", f"{_FASTSPEECH2}.length_regulator")
def _patch_fastspeech2_length_regulator_as_gather(original: Callable) -> Callable:
    # fastspeech2_conformer: the length regulator branches on the predicted durations (`if duration_labels.sum() ==
    # 0`) and repeats each phoneme in a loop over the batch ("Could not guard on data-dependent expression"); the
    # same frames in one gather, each from the phoneme whose span holds it, the frame count an unbacked size.
    def length_regulator(
        encoded_embeddings: torch.Tensor, duration_labels: torch.Tensor, speaking_speed: float = 1.0
    ) -> torch.Tensor:
        if speaking_speed <= 0:
            return original(encoded_embeddings, duration_labels, speaking_speed)  # its error
        if speaking_speed != 1.0:
            duration_labels = torch.round(duration_labels.float() * speaking_speed).long()
        # Eager sets every duration to 1 in place (in the model's output too) when all are 0.
        duration_labels.copy_(torch.where(duration_labels.sum() == 0, 1, duration_labels))
        ends = duration_labels.cumsum(1)
        frames = ends[:, -1].max().item()
        torch._check(frames >= 1)  # the longest row has a frame: when all durations are 0, each phoneme gets one
        positions = torch.arange(frames, device=ends.device)
        phonemes = (ends[:, None, :] <= positions[:, None]).sum(-1).clamp(max=ends.shape[1] - 1)
        repeated = encoded_embeddings.gather(1, phonemes[..., None].expand(-1, -1, encoded_embeddings.shape[2]))
        return torch.where(positions[:, None] < ends[:, -1:, None], repeated, 0).to(torch.float)

    return length_regulator


@register_patch("dynamo", f"{_FASTSPEECH2}.FastSpeech2ConformerRelPositionalEncoding.forward")
def _patch_fastspeech2_relative_positions_built_to_size(original: Callable) -> Callable:
    # fastspeech2_conformer: the decoder rebuilds its relative position table when the frames outgrow it (`if
    # pos_enc.size(1) >= x.size(1) * 2 - 1`), a test of the predicted frame count ("Could not guard on data-dependent
    # expression 2*u0 - 1 <= 9999"); at such a count, build the positions it slices to its size, as the rebuild does.
    def forward(self: Any, feature_representation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if not free_unbacked_symbols(feature_representation.shape[1]):
            return original(self, feature_representation)
        positions = self.extend_pos_enc(feature_representation)
        return self.dropout(feature_representation * self.input_scale), self.dropout(positions)

    return forward


@register_patch("dynamo", "transformers.models.neucodec.modeling_neucodec.int")
def _patch_int_of_a_size_keeps_it_symbolic(original: Callable) -> Callable:
    # neucodec: `output_length = int(input_length * self.sample_rate_conversion_factor)` makes the output length a
    # Python int (guard trunc(1.5 * length) == 3360): the program took one audio length; torch.sym_int truncates too.
    def to_int(value: Any = 0, *args: Any) -> Any:
        return torch.sym_int(value) if isinstance(value, torch.SymFloat) and not args else original(value, *args)

    return to_int


@register_patch("dynamo", f"{_NLLB_MOE}.math")
def _patch_nllb_moe_ceil_as_sym_ite(original: types.ModuleType) -> Any:
    # nllb_moe (sparse layers): torch.export.save cannot serialize the expert capacity's math.ceil of the token count
    # ("Failed serializing node ceil"; nor floor, for -(-x // 1)): the same ceiling of a size from trunc and sym_ite.
    def ceil(value: Any) -> Any:
        if not isinstance(value, torch.SymFloat):
            return original.ceil(value)
        truncated = torch.sym_int(value)
        return torch.sym_ite(value > truncated, truncated + 1, truncated)

    return types.SimpleNamespace(**{**vars(original), "ceil": ceil})


@register_patch("dynamo", f"{_NLLB_MOE}.NllbMoeExperts.forward")
def _patch_nllb_moe_experts_dense(_original: Callable) -> Callable:
    # nllb_moe (sparse layers): the experts loop over the experts hit (nonzero), a data-dependent loop as dbrx's: run
    # every expert on every token, each weighted by the router probabilities of the pairs its mask selects.
    def forward(self: Any, hidden_states: torch.Tensor, router_mask: torch.Tensor, router_probs: torch.Tensor) -> Any:
        expert_mask = torch.nn.functional.one_hot(router_mask, num_classes=self.num_experts).permute(2, 1, 0)
        weights = torch.einsum("ejt,tj->te", expert_mask.to(router_probs.dtype), router_probs)
        outputs = torch.stack([self[f"expert_{index}"](hidden_states) for index in range(self.num_experts)])
        if self.moe_token_dropout > 0:
            outputs = self.token_dropout(outputs) if self.training else outputs * (1 - self.moe_token_dropout)
        return torch.einsum("te,eth->th", weights, outputs.to(weights.dtype)).to(hidden_states.dtype)

    return forward


_LONGFORMER, _LED = "transformers.models.longformer.modeling_longformer", "transformers.models.led.modeling_led"


@register_patch("dynamo", f"{_LONGFORMER}.torch", f"{_LED}.torch")
def _patch_longformer_chunk_counts_as_sizes(original: types.ModuleType) -> Any:
    # longformer, led: the sliding-window chunk counts are torch.div of sizes, a tensor that view() and new_zeros() read
    # back ("Could not guard on data-dependent expression"); sizes divided as sizes stay symbolic (never negative,
    # so trunc is floor).
    def div(dividend: Any, divisor: Any, *, rounding_mode: str | None = None, **kwargs: Any) -> Any:
        sizes = all(isinstance(value, (int, torch.SymInt)) for value in (dividend, divisor))
        if sizes and rounding_mode in ("trunc", "floor") and not kwargs:
            return dividend // divisor
        return original.div(dividend, divisor, rounding_mode=rounding_mode, **kwargs)

    return types.SimpleNamespace(**{**vars(original), "div": div})


@register_patch("dynamo", f"{_LONGFORMER}.LongformerSelfAttention.forward", f"{_LED}.LEDEncoderSelfAttention.forward")
def _patch_longformer_local_attention_checked(original: Callable) -> Callable:
    # longformer, led: `if is_global_attn` branches on whether attention_mask marks any token global (`.any().item()`,
    # "Could not guard on data-dependent expression Eq(u0, 1)"): the program keeps the local path and checks at run
    # time that no token is global, as torch.export checks the sizes a trace fixed. Known gap: ONNX and ExecuTorch
    # drop that check, so their programs compute local attention even where the mask marks a token global.
    def forward(self: Any, *args: Any, is_global_attn: Any = None, **kwargs: Any) -> Any:
        if isinstance(is_global_attn, torch.SymBool):
            torch._check(torch.sym_not(is_global_attn), lambda: "the export runs local attention only")
            is_global_attn = False
        return original(self, *args, is_global_attn=is_global_attn, **kwargs)

    return forward


_AUTOFORMER = "transformers.models.autoformer.modeling_autoformer"


_INFORMER = "transformers.models.informer.modeling_informer"


@register_patch("dynamo", f"{_AUTOFORMER}.create_bidirectional_mask", f"{_INFORMER}.create_bidirectional_mask")
def _patch_no_padding_mask_as_none(original: Callable) -> Callable:
    # autoformer, informer (encoder, no padding mask given): eager gets None, but while exporting the mask is always
    # materialized, and it fits neither the per-channel autocorrelation weights ("shape '[s11, 2, 4, 4]' is invalid")
    # nor the distilled encoder's halved lengths ("Attention mask should be of size (s11, 1, 2, 2)"): keep None.
    def create_bidirectional_mask(*args: Any, attention_mask: torch.Tensor | None = None, **kwargs: Any) -> Any:
        return None if attention_mask is None else original(*args, attention_mask=attention_mask, **kwargs)

    return create_bidirectional_mask


_MIMI, _ENCODEC = "transformers.models.mimi.modeling_mimi", "transformers.models.encodec.modeling_encodec"


_POCKET_TTS = "transformers.models.pocket_tts_audio_tokenizer.modeling_pocket_tts_audio_tokenizer"


@register_patch(
    "dynamo",
    f"{_MIMI}.MimiConv1d.forward",
    f"{_ENCODEC}.EncodecConv1d.forward",
    f"{_POCKET_TTS}.PocketTTSAudioTokenizerConv1d.forward",
)
def _patch_conv1d_padding_from_sizes(original: Callable) -> Callable:
    # mimi, encodec, pocket_tts codecs: the padding comes from int64 buffers and torch.ceil, so every pad size is
    # read from a tensor ("Could not guard on data-dependent expression Eq(u26 + u27, ...)"); the same sizes in
    # integer arithmetic on the conv's own kernel, stride and dilation.
    def forward(self: Any, hidden_states: torch.Tensor, padding_cache: Any = None) -> torch.Tensor:
        if padding_cache is not None:
            return original(self, hidden_states, padding_cache)
        conv = self.conv
        kernel = (conv.kernel_size[0] - 1) * conv.dilation[0] + 1
        stride, length = conv.stride[0], hidden_states.shape[-1]
        total = kernel - stride
        extra = -((kernel - total - length) // stride) * stride + kernel - total - length  # to a whole last frame
        left, right = (total, extra) if self.causal else (total - total // 2, total // 2 + extra)
        hidden_states = conv(self._pad1d(hidden_states, (left, right), mode=self.pad_mode))
        return self.norm(hidden_states) if getattr(self, "norm_type", None) == "time_group_norm" else hidden_states

    return forward


@register_patch("dynamo", "transformers.models.cpmant.modeling_cpmant.CpmAntModel._prepare_attention_mask")
def _patch_cpmant_padding_mask_from_arange(_original: Callable) -> Callable:
    # cpmant: the left-padding mask is torch.tensor(list(range(seqlen - prompt_length))[::-1]), a Python list as long
    # as the text, so the trace pins the sequence length; the same mask, with the distances from the end as an arange.
    def prepare_attention_mask(
        self: Any, input_ids: torch.Tensor, span: torch.Tensor, context: torch.Tensor, length: torch.Tensor
    ) -> torch.Tensor:
        (batch, seqlen), device = input_ids.shape, input_ids.device
        positions = torch.arange(seqlen, device=device)
        causal = positions[None, :] <= positions[:, None]
        mask = context[:, None, :] | (context[:, :, None].logical_not() & causal[None])
        mask = mask & (span[:, None, :] == span[:, :, None])
        from_end = torch.arange(seqlen - self.prompt_length - 1, -1, -1, device=device)
        kept = torch.cat(
            (torch.ones(batch, self.prompt_length, dtype=torch.bool, device=device), from_end[None] < length[:, None]),
            dim=1,
        )
        return kept[:, :, None] & kept[:, None, :] & mask

    return prepare_attention_mask


@register_patch("dynamo", "transformers.models.udop.modeling_udop.combine_image_text_embeddings")
def _patch_udop_uncovered_patches_by_scatter(original: Callable) -> Callable:
    # udop: the image patches no OCR box centre falls in are picked in Python (zip(*ind) over a tensor, then a boolean
    # selection per row of data-dependent length padded to max_len, modeling_udop.py:218); the same rows by scatter.
    udop = sys.modules[original.__module__]

    def combine_image_text_embeddings(
        image_embeddings: torch.Tensor,
        inputs_embeds: torch.Tensor,
        bbox: torch.Tensor,
        visual_bbox: torch.Tensor | None,
        attention_mask: torch.Tensor | None = None,
        num_patches: int = 14,
        max_len: int = 0,
        image_size: int = 224,
        patch_size: int = 16,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        batch, patches, width = image_embeddings.shape
        # Each token's box centre, as the cell of the num_patches x num_patches grid it falls in.
        centres = (bbox[:, :, :2] + bbox[:, :, 2:]) / 2.0
        cells = torch.clip(torch.floor(centres * num_patches).long(), 0, num_patches - 1)
        ocr_points = cells[..., 0] + cells[..., 1] * num_patches
        bbox = bbox.to(torch.float32 if bbox.device.type == "mps" else torch.float64)
        blank = (bbox.mean(-1) == 0.0) | (bbox.mean(-1) == 1.0)
        covering = torch.gather(image_embeddings, 1, ocr_points.unsqueeze(-1).expand(-1, -1, width))
        inputs_embeds = inputs_embeds + covering.masked_fill(blank.unsqueeze(-1), 0.0)
        kept = torch.ones(batch, patches, dtype=torch.bool, device=bbox.device).scatter(1, ocr_points, False)
        # Kept patches move to the front in their order; dropped ones to a spare last slot, cut off below.
        slots = torch.where(kept, kept.long().cumsum(1) - 1, patches)
        length = patches if max_len == 0 else max_len - inputs_embeds.size(1)

        def front(values: torch.Tensor) -> torch.Tensor:
            index = slots.unsqueeze(-1).expand(-1, -1, values.size(-1))
            packed = values.new_zeros(batch, patches + 1, values.size(-1)).scatter_add(1, index, values)[:, :patches]
            if length > patches:
                return torch.cat([packed, packed.new_zeros(batch, length - patches, values.size(-1))], 1)
            return packed[:, :length]

        if visual_bbox is None:
            visual_bbox = udop.get_visual_bbox(image_size=image_size, patch_size=patch_size)
            visual_bbox = visual_bbox.unsqueeze(0).repeat(batch, 1, 1).to(image_embeddings.device)
        inputs_embeds = torch.cat([inputs_embeds, front(image_embeddings)], 1)
        bbox = torch.cat([bbox, front(visual_bbox)], 1)
        if attention_mask is not None:
            visual_mask = front(kept.unsqueeze(-1).to(attention_mask.dtype)).squeeze(-1)
            attention_mask = torch.cat([attention_mask, visual_mask], 1)
        return inputs_embeds, bbox, attention_mask

    return combine_image_text_embeddings


@register_patch("dynamo", "transformers.models.reformer.modeling_reformer.AxialPositionEmbeddings.forward")
def _patch_reformer_axial_positions_gathered_at_once(original: Callable) -> Callable:
    # reformer: outside training, each row's positions are index_select-ed in `for i in range(batch_size)` from a table
    # cut at a .item() of the largest id (the trace pinned the batch to 2); the same rows gathered from the whole table.
    def forward(self: Any, position_ids: torch.Tensor) -> torch.Tensor:
        if self.training or math.prod(self.axial_pos_shape) < position_ids.shape[1]:
            return original(self, position_ids)  # training's own path, or its error for a too short axial shape
        shape = (1, *self.axial_pos_shape)
        table = torch.cat([weight.expand(*shape, weight.shape[-1]) for weight in self.weights], dim=-1)
        return table.reshape(-1, table.shape[-1])[position_ids]

    return forward


@register_patch("dynamo", "transformers.models.gpt_neo.modeling_gpt_neo.GPTNeoSelfAttention.forward")
def _patch_gpt_neo_window_at_query_positions(original: Callable) -> Callable:
    # gpt_neo: `_attn` takes its causal/local-window rows at the last query_length of key_length; a fixed-size cache
    # (hfexport's slot cache, StaticCache) returns its capacity in keys, so each decode step was windowed around the
    # cache's end (greedy tokens differed from eager). The rows are taken at the queries' positions instead.
    def forward(self: Any, hidden_states: torch.Tensor, attention_mask: Any = None, layer_past: Any = None, **kwargs):
        past = 0 if layer_past is None else layer_past.get_seq_length(self.layer_id)
        rows = torch.arange(hidden_states.shape[1], device=hidden_states.device) + past
        self._attn = functools.partial(_gpt_neo_attention_at_rows, self, rows)
        try:
            return original(self, hidden_states, attention_mask, layer_past, **kwargs)
        finally:
            del self._attn

    return forward


def _gpt_neo_attention_at_rows(
    module: Any, rows: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    weights = torch.matmul(query.to(torch.float32), key.to(torch.float32).transpose(-1, -2))
    allowed = module.bias.index_select(2, rows)[..., : key.shape[-2]]
    weights = torch.where(allowed, weights, torch.finfo(weights.dtype).min)
    if attention_mask is not None:
        weights = weights + attention_mask
    weights = module.attn_dropout(weights.softmax(dim=-1).to(value.dtype))
    return torch.matmul(weights, value), weights


@register_patch("dynamo", "transformers.models.trocr.modeling_trocr.TrOCRLearnedPositionalEmbedding.forward")
def _patch_trocr_positions_offset_by_the_cached_count(original: Callable) -> Callable:
    # trocr: positions are arange(past, past + seq_len); on a StaticCache the cached count is a tensor, so both bounds
    # are data-dependent and the size a guard (Eq(u0 - u1, 1)); arange(seq_len) + past gives the same positions.
    def forward(self: Any, input_ids: torch.Tensor, past_key_values_length: Any = 0, position_ids: Any = None):
        if position_ids is not None or not isinstance(past_key_values_length, torch.Tensor):
            return original(self, input_ids, past_key_values_length, position_ids)
        batch_size, seq_len = input_ids.shape[:2]
        positions = _positions_after(past_key_values_length, seq_len, self.weight.device)
        return torch.nn.Embedding.forward(self, positions.expand(batch_size, -1) + self.offset)

    return forward


@register_patch(
    "dynamo", "transformers.models.roformer.modeling_roformer.RoFormerSinusoidalPositionalEmbedding.forward"
)
def _patch_roformer_positions_offset_by_the_cached_count(original: Callable) -> Callable:
    # roformer: trocr's arange(past, past + seq_len) on StaticCache's tensor count; the trace keeps both bounds, and
    # ExecuTorch plans no memory for their difference ("Cannot evaluate a finite upper bound for ... -u12 + u13").
    @torch.no_grad()
    def forward(self: Any, input_ids_shape: torch.Size, past_key_values_length: Any = 0, position_ids: Any = None):
        if position_ids is not None or not isinstance(past_key_values_length, torch.Tensor):
            return original(self, input_ids_shape, past_key_values_length, position_ids)
        positions = _positions_after(past_key_values_length, input_ids_shape[1], self.weight.device)
        return torch.nn.Embedding.forward(self, positions)

    return forward


def _positions_after(cached: torch.Tensor, length: int, device: torch.device) -> torch.Tensor:
    """``arange(cached, cached + length)`` with one data-dependent bound, not two."""
    return torch.arange(length, dtype=torch.long, device=device) + cached
