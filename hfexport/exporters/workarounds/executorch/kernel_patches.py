"""ExecuTorch: ops its portable runtime has no kernel for (key ``"executorch"``) that are Python-level calls, patched
(stage 2) into ops it has. A model whose program loads with "Missing operator: aten::<op>.out" (error 0x14) gets a
decomposition here, or in ``kernel_node_fixes.py`` where the op only appears in the traced graph. Each keeps
eager's numerics (exact or to float rounding) and says which models need it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from ...registry import register_patch


@register_patch("executorch", "transformers.models.fnet.modeling_fnet.FNetBasicFourierTransform.forward")
def _patch_fnet_fourier_as_real_dft(original: Callable) -> Callable:
    # fnet (fftn(x, dim=(1, 2)).real): the runtime has no FFT kernel ("Missing operator: aten::_fft_c2c.out", 0x14 at
    # load); the real part of a real input's 2-D DFT is C_s x C_h - S_s x S_h, with cos/sin DFT matrices of each size.
    def forward(self: Any, hidden_states: torch.Tensor) -> tuple[torch.Tensor]:
        if hasattr(self, "dft_mat_hidden") or hidden_states.dim() != 3:  # TPU branch: sliced DFT matrices, kept
            return original(self, hidden_states)
        cos_seq, sin_seq = _dft_matrices(hidden_states.shape[1], hidden_states)
        cos_hidden, sin_hidden = _dft_matrices(hidden_states.shape[2], hidden_states)
        return (cos_seq @ hidden_states @ cos_hidden - sin_seq @ hidden_states @ sin_hidden,)

    return forward


def _dft_matrices(size: Any, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The real and minus the imaginary part of the ``size``-point DFT matrix: cos and sin of 2 pi j k / size."""
    index = torch.arange(size, device=like.device)
    turns = (index[:, None] * index[None, :]) % size  # exact in integers, before any rounding
    angle = turns.to(like.dtype) * (2 * math.pi) / size
    return angle.cos(), angle.sin()


@register_patch("executorch", "torch.Tensor.scatter_reduce", "torch.scatter_reduce")
def _patch_scatter_reduce_as_scatter_add(original: Callable) -> Callable:
    # tapas (segment min/mean over its flattened cell index): the runtime has no scatter_reduce kernel ("Missing
    # operator: aten::scatter_reduce.two_out", 0x14 at load); on 1-D tensors a segment's sum is a scatter_add, and
    # its min or max the scatter_add of the one element no other of its segment beats.
    def scatter_reduce(
        input: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor, reduce: str, *, include_self: bool = True
    ) -> torch.Tensor:
        decomposed = reduce in ("sum", "mean", "amax", "amin") and input.is_floating_point()
        if not decomposed or (input.dim(), index.dim(), src.dim()) != (1, 1, 1) or src.dtype != input.dtype:
            return original(input, dim, index, src, reduce, include_self=include_self)
        zeros = torch.zeros_like(input)
        counts = zeros.scatter_add(0, index, torch.ones_like(src))
        if reduce in ("amax", "amin"):
            reduced = zeros.scatter_add(0, index, src.where(_segment_winners(index, src, reduce == "amax"), 0))
            if include_self:
                reduced = (torch.maximum if reduce == "amax" else torch.minimum)(input, reduced)
        else:
            reduced = zeros.scatter_add(0, index, src) + (input if include_self else 0)
            reduced = reduced / (counts + include_self) if reduce == "mean" else reduced
        return torch.where(counts > 0, reduced, input)

    return scatter_reduce


def _segment_winners(index: torch.Tensor, src: torch.Tensor, largest: bool) -> torch.Tensor:
    """Per element of ``src``: whether it is its segment's max (or min), the first of equal ones."""
    same_segment = index[:, None] == index[None, :]
    beats = src[None, :] > src[:, None] if largest else src[None, :] < src[:, None]  # [i, j]: j beats i
    position = torch.arange(index.shape[0], device=index.device)
    ties_before = (src[None, :] == src[:, None]) & (position[None, :] < position[:, None])
    return ~(same_segment & (beats | ties_before)).any(dim=1)


@register_patch("executorch", "transformers.models.blt.modeling_blt.BltLocalEncoder.patch_reduce")
def _patch_blt_patch_max_by_doubling_strides(original: Callable) -> Callable:
    # blt (each patch's max token state, a 3-D scatter_reduce amax): the runtime has no scatter_reduce kernel (0x14 at
    # load). Patches are consecutive token spans: a running max over doubling strides ends each span with its max.
    def patch_reduce(self: Any, hidden_states: torch.Tensor, max_num_patches: Any, patch_ids: torch.Tensor) -> Any:
        positions = torch.arange(hidden_states.shape[1], device=hidden_states.device)
        running = hidden_states
        stride = 1
        while stride < self.config.max_position_embeddings:  # the longest span a sequence can hold
            earlier = (positions - stride).clamp(min=0)
            same_patch = (patch_ids[:, earlier] == patch_ids) & (positions >= stride)
            running = torch.where(same_patch.unsqueeze(-1), torch.maximum(running, running[:, earlier]), running)
            stride *= 2
        counts = patch_ids.new_zeros(patch_ids.shape[0], max_num_patches)
        counts = counts.scatter_add(1, patch_ids, torch.ones_like(patch_ids))
        span_ends = (counts.cumsum(1) - 1).clamp(min=0).unsqueeze(-1).expand(-1, -1, running.shape[-1])
        return running.gather(1, span_ends).where(counts.unsqueeze(-1) > 0, 0)

    return patch_reduce


@register_patch("executorch", "torch.nn.functional.interpolate")
def _patch_antialiased_bilinear_as_matmuls(original: Callable) -> Callable:
    # siglip2 (position embeddings resized to each image's patch grid, a size read from data): the runtime's
    # _upsample_bilinear2d_aa kernel checks its output against that size before resizing it ("Check failed
    # (out.size(2) == output_size[0])", 0x12); the same resize is two matmuls by the filter's weight matrices.
    def interpolate(
        input: torch.Tensor,
        size: Any = None,
        scale_factor: Any = None,
        mode: str = "nearest",
        align_corners: bool | None = None,
        recompute_scale_factor: bool | None = None,
        antialias: bool = False,
    ) -> torch.Tensor:
        if not antialias or mode != "bilinear" or align_corners or size is None or input.dim() != 4:
            return original(input, size, scale_factor, mode, align_corners, recompute_scale_factor, antialias)
        height, width = (size, size) if isinstance(size, int) else size
        rows = _antialias_weights(input.shape[2], height, input)
        columns = _antialias_weights(input.shape[3], width, input)
        return rows @ input @ columns.T

    return interpolate


def _antialias_weights(in_size: Any, out_size: Any, like: torch.Tensor) -> torch.Tensor:
    """(out_size, in_size) weights of torch's antialiased bilinear resize: a triangle filter widened by the scale."""
    scale = torch.full((), in_size, dtype=like.dtype, device=like.device) / out_size
    centers = (torch.arange(out_size, device=like.device).to(like.dtype) + 0.5) * scale
    taps = torch.arange(in_size, device=like.device).to(like.dtype) + 0.5
    weights = (1 - ((taps[None, :] - centers[:, None]) / scale.clamp(min=1)).abs()).clamp(min=0)
    return weights / weights.sum(dim=1, keepdim=True)


@register_patch("executorch", "torch.nn.functional.embedding_bag")
def _patch_embedding_bag_as_gather(original: Callable) -> Callable:
    # kimi_k25 (position grid resampled as a weighted embedding_bag): the runtime has no embedding_bag kernel
    # ("Missing operator: aten::_embedding_bag.out", 0x14 at load); bags of equal size (a 2-D input) are a gather of
    # their rows, weighted, then reduced over the bag.
    def embedding_bag(
        input: torch.Tensor,
        weight: torch.Tensor,
        offsets: torch.Tensor | None = None,
        max_norm: float | None = None,
        norm_type: float = 2,
        scale_grad_by_freq: bool = False,
        mode: str = "mean",
        sparse: bool = False,
        per_sample_weights: torch.Tensor | None = None,
        include_last_offset: bool = False,
        padding_idx: int | None = None,
    ) -> torch.Tensor:
        if input.dim() != 2 or (offsets, max_norm, padding_idx) != (None,) * 3 or mode not in ("sum", "mean", "max"):
            return original(
                input,
                weight,
                offsets,
                max_norm,
                norm_type,
                scale_grad_by_freq,
                mode,
                sparse,
                per_sample_weights,
                include_last_offset,
                padding_idx,
            )
        rows = torch.nn.functional.embedding(input, weight)
        if per_sample_weights is not None:  # mode "sum" only
            rows = rows * per_sample_weights.unsqueeze(-1)
        return {"sum": rows.sum, "mean": rows.mean, "max": rows.amax}[mode](dim=1)

    return embedding_bag
