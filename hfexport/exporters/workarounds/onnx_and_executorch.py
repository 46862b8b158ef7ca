"""Model patches every backend that lowers the torch.export program needs (keys ``"onnx"`` and ``"executorch"``).

torch.export traces these models as they are (dynamo exports keep their complex numbers and erfinv); ONNX and
ExecuTorch have no lowering for what they trace to, so both register each patch here under their own key. Installed
while tracing, right after the "dynamo" patches (``HfExporter.workaround_keys``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from typing import Any

import torch

from ... import compat
from ..registry import register_patch

_GEMMA3N_TOPK = "transformers.models.gemma3n.modeling_gemma3n.Gemma3nTextMLP._gaussian_topk"


@register_patch("onnx", _GEMMA3N_TOPK)
@register_patch("executorch", _GEMMA3N_TOPK)
def _patch_gaussian_cutoff_as_constant(_original: Callable) -> Callable:
    # gemma3n (activation sparsity): Normal(0, 1).icdf of a constant traces to erfinv, which has no ONNX function
    # (prims.erf_inv) and no ExecuTorch kernel (aten::erfinv.out); the multiplier is a constant, computed here.
    def _gaussian_topk(self: torch.nn.Module, inputs: torch.Tensor) -> torch.Tensor:
        multiplier = statistics.NormalDist().inv_cdf(self.activation_sparsity)
        mean = inputs.mean(dim=-1, keepdim=True)
        deviation = inputs.std(dim=-1, keepdim=True, unbiased=False)
        return torch.nn.functional.relu(inputs - (mean + deviation * multiplier))

    return _gaussian_topk


_DEEPSEEK_V2 = "transformers.models.deepseek_v2.modeling_deepseek_v2"
_LLAMA4 = "transformers.models.llama4.modeling_llama4"
_ROTARY_EMBEDDINGS = (
    f"{_DEEPSEEK_V2}.DeepseekV2RotaryEmbedding.forward",
    f"{_LLAMA4}.Llama4TextRotaryEmbedding.forward",
)


@register_patch("onnx", *_ROTARY_EMBEDDINGS)
@register_patch("executorch", *_ROTARY_EMBEDDINGS)
def _patch_rotary_frequencies_as_cos_sin(original: Callable) -> Callable:
    # deepseek_v2, llama4 rotate by complex products (torch.polar, view_as_complex), which neither ONNX ("No
    # decompositions registered for the complex-valued input") nor ExecuTorch's edge dialect ("view_as_complex_copy
    # does not support automatic differentiation") expresses: carry each frequency as a real (cos, sin) pair.
    dynamic_rope_update = compat.internal("transformers.modeling_rope_utils.dynamic_rope_update")
    if dynamic_rope_update is None:
        return original

    @torch.no_grad()
    @dynamic_rope_update
    def forward(self: Any, x: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        freqs = position_ids[..., None].float() * self.inv_freq.to(device=x.device, dtype=torch.float)
        return torch.stack((freqs.cos(), freqs.sin()), dim=-1) * self.attention_scaling

    return forward


@register_patch("onnx", f"{_DEEPSEEK_V2}.apply_rotary_emb")
@register_patch("executorch", f"{_DEEPSEEK_V2}.apply_rotary_emb")
def _patch_rotary_product_as_real(original: Callable) -> Callable:
    # deepseek_v2 (queries as batch, heads, positions): the complex product of the (cos, sin) pairs, in real numbers.
    return _real_rotary_product(heads_dim=1)


@register_patch("onnx", f"{_LLAMA4}.apply_rotary_emb")
@register_patch("executorch", f"{_LLAMA4}.apply_rotary_emb")
def _patch_llama4_rotary_product_as_real(original: Callable) -> Callable:
    # llama4 (queries as batch, positions, heads): the same product, broadcast over the heads at dim 2.
    return _real_rotary_product(heads_dim=2)


def _real_rotary_product(heads_dim: int) -> Callable:
    def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        pairs = x.float().reshape(*x.shape[:-1], -1, 2)
        real, imag = pairs[..., 0], pairs[..., 1]
        return torch.stack((real * cos - imag * sin, real * sin + imag * cos), dim=-1).flatten(3).type_as(x)

    def apply_rotary_emb(xq: torch.Tensor, xk: torch.Tensor, freqs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        cos, sin = freqs[..., 0].unsqueeze(heads_dim), freqs[..., 1].unsqueeze(heads_dim)
        return rotate(xq, cos, sin), rotate(xk, cos, sin)

    return apply_rotary_emb


@register_patch("onnx", "torch.cummax")
@register_patch("executorch", "torch.cummax")
def _patch_cummax_as_masked_max(original: Callable) -> Callable:
    # grounding_dino, mm_grounding_dino (each token's previous phrase delimiter): aten.cummax has no ONNX function and
    # no ExecuTorch kernel.
    return lambda values, dim: _prefix_extremum(values, dim, largest=True, result=torch.return_types.cummax)


@register_patch("onnx", "torch.cummin")
@register_patch("executorch", "torch.cummin")
def _patch_cummin_as_masked_min(original: Callable) -> Callable:
    # grounding_dino, mm_grounding_dino (each token's next phrase delimiter): aten.cummin has no ONNX function and no
    # ExecuTorch kernel.
    return lambda values, dim: _prefix_extremum(values, dim, largest=False, result=torch.return_types.cummin)


def _prefix_extremum(values: torch.Tensor, dim: int, largest: bool, result: type) -> Any:
    """cummax / cummin as one reduction over every prefix at once (a lower-triangular mask): values, and the index of
    the last position in the prefix holding that value, as torch's own kernels give ties."""
    moved = values.movedim(dim, -1)
    positions = torch.arange(moved.shape[-1], device=values.device)
    in_prefix = positions.unsqueeze(0) <= positions.unsqueeze(1)  # [i, j]: position j is in prefix i
    info = torch.finfo(values.dtype) if values.is_floating_point() else torch.iinfo(values.dtype)
    outside = info.min if largest else info.max
    prefixes = torch.where(in_prefix, moved.unsqueeze(-2), outside)
    extremum = prefixes.amax(-1) if largest else prefixes.amin(-1)
    held = (prefixes == extremum.unsqueeze(-1)) & in_prefix
    if values.is_floating_point():  # a NaN holds on to the end, at its own position
        held = held | (prefixes.isnan() & extremum.isnan().unsqueeze(-1))
    index = torch.where(held, positions, -1).amax(-1)
    return result((extremum.movedim(-1, dim), index.movedim(-1, dim)))


# Lanczos' approximation of the gamma function (g = 7, 9 terms): relative error under 1e-13 in float64.
_LANCZOS_G = 7
_LANCZOS_COEFFICIENTS = (
    0.99999999999980993,
    676.5203681218851,
    -1259.1392167224028,
    771.32342877765313,
    -176.61502916214059,
    12.507343278686905,
    -0.13857109526572012,
    9.9843695780195716e-6,
    1.5056327351493116e-7,
)


@register_patch("onnx", "torch.lgamma", "torch.Tensor.lgamma")
@register_patch("executorch", "torch.lgamma", "torch.Tensor.lgamma")
def _patch_lgamma_as_lanczos_series(original: Callable) -> Callable:
    # autoformer, informer, time_series_transformer *ForPrediction (the Student-T loss's log_prob): aten.lgamma has no
    # ONNX function (torchlib raises NotImplementedError) and no ExecuTorch kernel ("kernel 'aten::lgamma.out' not
    # found"); Lanczos' series in float64, with the reflection formula below 1/2.
    def lgamma(input: torch.Tensor) -> torch.Tensor:
        if not input.is_floating_point():
            return original(input)
        x = input.double()
        reflected = x < 0.5
        z = torch.where(reflected, 1 - x, x) - 1
        series = sum(c / (z + k) for k, c in enumerate(_LANCZOS_COEFFICIENTS[1:], start=1)) + _LANCZOS_COEFFICIENTS[0]
        t = z + _LANCZOS_G + 0.5
        value = 0.5 * math.log(2 * math.pi) + (z + 0.5) * t.log() - t + series.log()
        value = torch.where(reflected, math.log(math.pi) - (math.pi * x).sin().abs().log() - value, value)
        return value.to(input.dtype)

    return lgamma


_SLIDING_CHUNKS = (
    "transformers.models.longformer.modeling_longformer.LongformerSelfAttention._chunk",
    "transformers.models.led.modeling_led.LEDEncoderSelfAttention._chunk",
)


@register_patch("onnx", *_SLIDING_CHUNKS)
@register_patch("executorch", *_SLIDING_CHUNKS)
def _patch_sliding_chunks_unfolded(original: Callable) -> Callable:
    # longformer, led: `_chunk` overlaps the windows with as_strided on the strides of its input, which the projections
    # leave sequence-major; ONNX and ExecuTorch read them as a contiguous layout, so each chunk took other tokens'
    # queries and keys (LEDModel's encoder 3.1e-4 from eager). The model's own onnx_export path chunks by index, unfold.
    def _chunk(hidden_states: torch.Tensor, window_overlap: int, onnx_export: bool = False) -> torch.Tensor:
        return original(hidden_states, window_overlap, onnx_export=True)

    return _chunk
