"""Model patches every backend that lowers the torch.export program needs (keys ``"onnx"`` and ``"executorch"``).

torch.export traces these models as they are (dynamo exports keep their complex numbers and erfinv); ONNX and
ExecuTorch have no lowering for what they trace to, so both register each patch here under their own key. Installed
while tracing, right after the "dynamo" patches (``HfExporter.workaround_keys``).
"""

from __future__ import annotations

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
