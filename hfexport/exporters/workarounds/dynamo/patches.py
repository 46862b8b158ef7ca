"""Patches of torch and of transformers code many models share (key ``"dynamo"``): attention, masks, experts,
distributions, packed attention and dynamic rope, installed around the trace of every backend.

A patch swaps code torch.export cannot trace, or cannot save, for an export-safe equivalent for the duration of one
export (``DynamoExporter``'s stage 2). Patches of one model's own code are in ``model_patches.py``; model patches
only ONNX and ExecuTorch need are in ``workarounds/onnx_and_executorch.py``.
"""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Callable
from typing import Any

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers import AttentionInterface

from .... import compat
from ....torch_compat import free_unbacked_symbols
from ...registry import (
    LoadedTargets,
    register_loaded_patch,
    register_patch,
)


@register_patch("dynamo", "torch.nn.functional.scaled_dot_product_attention")
def _patch_sdpa_math_kernel_on_cpu(original: Callable) -> Callable:
    # sam3 (dynamic image size): CPU SDPA's fused-kernel choice guards on data-dependent sizes, "Could not guard on
    # data-dependent expression Eq(u0*u1, 16)"; the math kernel has no such check (upstream: torch's CPU sdp choice).
    # Only then: the math kernel's output strides break later views when torch.onnx re-decomposes (t5 dynamic).
    def scaled_dot_product_attention(query: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        tensors = [value for value in (query, *args, *kwargs.values()) if isinstance(value, torch.Tensor)]
        if query.device.type != "cpu" or not any(free_unbacked_symbols(tensor.shape) for tensor in tensors):
            return original(query, *args, **kwargs)
        with sdpa_kernel(SDPBackend.MATH):
            return original(query, *args, **kwargs)

    return scaled_dot_product_attention


@register_patch("dynamo", "transformers.masking_utils._vmap_expansion_sdpa")
def _patch_mask_expansion_by_broadcast(_original: Callable) -> Callable:
    # unlimited_ocr, gemma3/gemma4 VLMs, t5gemma2 (custom or/and mask functions): the torch.vmap mask expansion fails
    # in torch.onnx's run_decompositions ("tensor may have escaped from inside a function being vmapped").
    # Mask functions only index tensors with the four index grids, so broadcasting the grids is equivalent.
    def expansion(mask_function: Callable) -> Callable:
        def expanded(batch: torch.Tensor, head: torch.Tensor, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
            grid = (batch[:, None, None, None], head[None, :, None, None], q[None, None, :, None], kv[None, None, None])
            return mask_function(*grid).expand(batch.shape[0], head.shape[0], q.shape[0], kv.shape[0])

        return expanded

    return expansion


@register_patch("dynamo", "transformers.masking_utils.TransformGetItemToIndex")
def _patch_mask_indexing_as_getitem(_original: Callable) -> Callable:
    # t5gemma2 (vmap masks): indexing inside the mask functions becomes a ModIndex higher-order op that
    # torch.export.save rejects ("Unsupported getattr attribute function_const_func_spec0"). Only vmap needs that
    # op, and the broadcast expansion above replaces vmap, so plain indexing is equivalent.
    return contextlib.nullcontext


@register_patch("dynamo", "transformers.integrations.moe.ExpertsInterface._global_mapping")
def _patch_eager_experts_as_batched_mm(original: dict[str, Callable]) -> dict[str, Callable]:
    # openai_privacy_filter (its experts default to "eager"): the eager loop over the experts the router picked has
    # a data-dependent length ("Could not guard on data-dependent expression Eq(u0, 0)"); batched_mm runs the same
    # experts as batched matmuls (the other MoEs export their default grouped_mm).
    return {**original, "eager": original["batched_mm"]}


@register_patch("dynamo", "torch.distributions.Distribution._validate_args")
def _patch_distributions_unvalidated(_original: bool) -> bool:
    # autoformer, informer, time_series_transformer (ForPrediction's loss): building the output distribution checks
    # its parameters' values ("Could not guard on data-dependent expression Eq(u0, 1)", time_series_utils.py:98); the
    # check only raises on invalid parameters, so export without it.
    return False


# Attentions over packed sequences (one flat row per patch or frame of every image or clip, boundaries in cu_seqlens),
# as "<model_type>.<class>": transformers 5.22-5.24's vision towers and Qwen-Omni/ASR audio encoders.
_PACKED_ATTENTIONS = (
    "cohere_compass.CohereCompassVisionAttention",
    "cosmos3_edge.Cosmos3EdgeVisionAttention",
    "dots3_note.Dots3NoteVisionAttention",
    "ernie4_5_vl_moe.Ernie4_5_VLMoeVisionAttention",
    "exaone4_5.Exaone4_5_VisionAttention",
    "glm4v.Glm4vVisionAttention",
    "glm4v_moe.Glm4vMoeVisionAttention",
    "glm5_next.Glm5NextVisionAttention",
    "glm_image.GlmImageVisionAttention",
    "glm_ocr.GlmOcrVisionAttention",
    "hunyuan_vl.HunYuanVLVisionAttention",
    "inkling2.Inkling2VisionAttention",
    "kimi_k25.Kimi_K25VisionAttention",
    "lfm3_vl.Lfm3VlVisionAttention",
    "minicpm_ocr.MiniCPMOcrVisionAttention",
    "minicpmv4_6.MiniCPMV4_6VisionAttention",
    "minicpmv4_7.MiniCPMV4_7VisionAttention",
    "minimax_m3_vl.MiniMaxM3VLVisionAttention",
    "muse_glimmer.MuseGlimmerVisionAttention",
    "muse_spark.MuseSparkVisionAttention",
    "paddleocr_vl.PaddleOCRVisionAttention",
    "qwen2_5_omni.Qwen2_5OmniAudioAttention",
    "qwen2_5_omni.Qwen2_5OmniVisionAttention",
    "qwen2_5_vl.Qwen2_5_VLVisionAttention",
    "qwen2_vl.VisionAttention",
    "qwen3_5.Qwen3_5VisionAttention",
    "qwen3_5_moe.Qwen3_5MoeVisionAttention",
    "qwen3_asr.Qwen3ASRAudioAttention",
    "qwen3_omni_moe.Qwen3OmniMoeAudioAttention",
    "qwen3_omni_moe.Qwen3OmniMoeVisionAttention",
    "qwen3_vl.Qwen3VLVisionAttention",
    "qwen3_vl_moe.Qwen3VLMoeVisionAttention",
    "qwen4_exp.Qwen4ExpVisionAttention",
    "radio.RadioAttention",
    "video_llama_3.VideoLlama3VisionAttention",
)


_PACKED_SDPA = "hfexport_flash_varlen_as_masked_sdpa"  # "flash" in the name selects the cu_seqlens branch


@register_patch(
    "dynamo", *(f"transformers.models.{path.partition('.')[0]}.modeling_{path}.forward" for path in _PACKED_ATTENTIONS)
)
def _patch_packed_attention_as_masked_sdpa(original: Callable) -> Callable:
    # Qwen-VL-style towers: outside flash attention each packed sequence is attended on its own, split by
    # `lengths.tolist()` ("Could not guard on data-dependent expression u0 > 1", sdpa_attention.py); the flash branch
    # hands cu_seqlens to the attention function instead, run here as one SDPA masked to each sequence's own rows.
    AttentionInterface.register(_PACKED_SDPA, _packed_sdpa)  # a name nothing selects outside this patch

    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        saved = self.config._attn_implementation_internal
        self.config._attn_implementation_internal = _PACKED_SDPA
        try:
            return original(self, *args, **kwargs)
        finally:
            self.config._attn_implementation_internal = saved

    return forward


def _packed_sdpa(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    scaling: float | None = None,
    cu_seq_lens_q: torch.Tensor | None = None,
    **_varlen: Any,
) -> tuple[torch.Tensor, None]:
    """SDPA over (1, heads, rows, dim) packed rows, each row attending only to the rows of its own sequence.

    torch's SDPA, not transformers' wrapper: that one branches on the query length (``q_length > 1``), which is
    data-dependent where a tower's row count comes from its inputs' values (Qwen3-ASR's chunked audio). A call
    without cu_seqlens (Radio's unpacked batches) is plain SDPA, as without the patch.
    """
    if cu_seq_lens_q is None:
        return AttentionInterface()["sdpa"](module, query, key, value, attention_mask, scaling=scaling, **_varlen)
    rows = torch.arange(query.shape[2], device=query.device)
    sequence = (rows[:, None] >= cu_seq_lens_q[None, 1:]).sum(-1)  # which packed sequence each row belongs to
    mask = (sequence[:, None] == sequence[None, :])[None, None]
    # Grouped key/value heads repeated here, not by enable_gqa: torchlib's SDPA compares head counts as symbolic
    # dims on grouped heads ("'>' not supported between instances of 'SymbolicDim'", exaone4_5's vision tower).
    groups = query.shape[1] // key.shape[1]
    key, value = (states[:, :, None].expand(-1, -1, groups, -1, -1).flatten(1, 2) for states in (key, value))
    output = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=scaling)
    return output.transpose(1, 2).contiguous(), None


def _rope_update_code() -> types.CodeType | None:
    """The code of every wrapper ``dynamic_rope_update`` makes (None where this transformers lacks it); asked each time,
    never kept: the gate's impact recording gives the decorator and its wrappers new code, and a kept one goes stale."""
    decorator = compat.internal("transformers.modeling_rope_utils.dynamic_rope_update")
    return decorator(lambda self, x, position_ids: None).__code__ if decorator is not None else None


def _rope_update_wrapper(function: Any) -> Any:
    """The ``dynamic_rope_update`` wrapper among ``function``'s decorators (``torch.no_grad()`` on top), or None."""
    wrapper_code = _rope_update_code()
    while function is not None and getattr(function, "__code__", None) is not wrapper_code:
        function = getattr(function, "__wrapped__", None)
    return function


def _rope_updated_forwards() -> list[str]:
    """The forwards ``dynamic_rope_update`` wraps, in every modeling module loaded so far (one per rotary class)."""
    found = []
    for name, module in list(sys.modules.items()):
        if not name.startswith("transformers.models.") or ".modeling_" not in name:
            continue
        for owner in list(vars(module).values()):
            if not isinstance(owner, type) or owner.__module__ != name:
                continue
            if _rope_update_wrapper(vars(owner).get("forward")) is not None:
                found.append(f"{name}.{owner.__qualname__}.forward")
    return found


@register_loaded_patch("dynamo", LoadedTargets(_rope_updated_forwards))
def _patch_dynamic_rope_as_tensor_select(original: Callable) -> Callable:
    # rope_type "dynamic" (NTK): dynamic_rope_update branches in Python on the largest position id ("Could not guard on
    # data-dependent expression Eq(u0, 1)"); both frequency sets are computed and torch.where picks one, as eager would.
    update = _rope_update_wrapper(original)
    rope_forward = update.__wrapped__

    def forward(self: Any, x: torch.Tensor, position_ids: torch.Tensor, layer_type: str | None = None) -> Any:
        rope_type = self.rope_type if layer_type is None else self.rope_type[layer_type]
        kwargs = {} if layer_type is None else {"layer_type": layer_type}
        if "dynamic" not in rope_type:
            return original(self, x, position_ids, **kwargs)
        prefix = "" if layer_type is None else f"{layer_type}_"
        with torch.no_grad():
            seq_len = torch.max(position_ids) + 1
            rope_init_fn = update.__globals__["ROPE_INIT_FUNCTIONS"][rope_type]  # the one eager's update calls
            grown, _ = rope_init_fn(self.config, x.device, seq_len=seq_len, **kwargs)
            original_inv_freq = getattr(self, f"{prefix}original_inv_freq")
            inv_freq = torch.where(seq_len > self.original_max_seq_len, grown, original_inv_freq)
            saved = getattr(self, f"{prefix}inv_freq")
            setattr(self, f"{prefix}inv_freq", inv_freq)
            try:
                return rope_forward(self, x, position_ids, **kwargs)
            finally:
                setattr(self, f"{prefix}inv_freq", saved)

    return forward
