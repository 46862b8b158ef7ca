"""ExecuTorch patches every delegate needs (key ``"executorch"``): torch patches while tracing (stage 2) and patches
of ExecuTorch's own passes while lowering (stage 3).
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Callable
from typing import Any

import torch
from executorch.exir.dialects._ops import ops as exir_ops
from executorch.exir.sym_util import eval_shape_upper_bound
from executorch.exir.tensor import determine_tensor_dynanism

from ....torch_compat import (
    FloorDiv,
    GuardOnDataDependentSymNode,
    Max,
    _triple,
    bound_sympy,
    fake_impls,
    free_unbacked_symbols,
    guard_or_false,
    int_oo,
)
from ...registry import register_patch

# ── Torch patches (stage 2) ──


@register_patch("executorch", "torch.nn.functional.scaled_dot_product_attention")
def _patch_sdpa_contiguous_output(original: Callable) -> Callable:
    # gpt2: decomposition re-traces SDPA via the CPU flash kernel, whose output strides differ from the traced
    # ones, so a later recorded view fails ("Cannot view a tensor with shape ... and strides"); copy it contiguous.
    def scaled_dot_product_attention(*args: Any, **kwargs: Any) -> torch.Tensor:
        return original(*args, **kwargs).clone(memory_format=torch.contiguous_format)

    return scaled_dot_product_attention


@register_patch("executorch", "transformers.models.vits.modeling_vits.VitsModel.forward")
def _patch_vits_frames_bounded(original: Callable) -> Callable:
    # vits: the frame count (`arange(predicted_lengths.max())`, summed durations) has no upper bound, so memory planning
    # gave it the largest input size (16 planned, 41 run at the second shape: 0x12); bound it at one second of audio
    # per input token (sampling_rate / prod(upsample_rates) frames), a bound the program checks at run time.
    @functools.wraps(original)
    def forward(self: Any, input_ids: torch.Tensor | None = None, *args: Any, **kwargs: Any) -> Any:
        outputs = original(self, input_ids, *args, **kwargs)
        frames_per_second = math.ceil(self.config.sampling_rate / math.prod(self.config.upsample_rates))
        torch._check(outputs[2].shape[-1] <= frames_per_second * input_ids.shape[1])  # outputs[2]: the spectrogram
        return outputs

    return forward


@register_patch("executorch", "transformers.integrations.moe.ExpertsInterface._global_mapping")
def _patch_experts_batched_mm(original: dict[str, Callable]) -> dict[str, Callable]:
    # mixtral (every MoE on grouped_mm): ExecuTorch has no out-variant kernel for transformers::grouped_mm_fallback.
    return {**original, "grouped_mm": original["batched_mm"]}


@register_patch("executorch", "torch.nn.functional.conv3d")
def _patch_conv3d_as_conv2d(original: Callable) -> Callable:
    # videomae, vivit (patch embeddings): ExecuTorch has no 3-D convolution kernel, portable or XNNPACK ("Expect
    # input tensor to be 3-D or 4-D"); where the time kernel tiles the input, fold time steps into channels.
    def conv3d(
        input: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None = None,
        stride: Any = 1,
        padding: Any = 0,
        dilation: Any = 1,
        groups: int = 1,
    ) -> torch.Tensor:
        stride, dilation = _triple(stride), _triple(dilation)
        padding = padding if isinstance(padding, str) else _triple(padding)
        frames = weight.shape[2]
        time_padding = 0 if padding == "valid" else None if isinstance(padding, str) else padding[0]
        if (stride[0], dilation[0], time_padding, groups, input.dim()) != (frames, 1, 0, 1, 5):
            return original(input, weight, bias, stride, padding, dilation, groups)
        batch, channels, time, height, width = input.shape
        steps = time // frames
        folded = input[:, :, : steps * frames].reshape(batch, channels, steps, frames, height, width)
        folded = folded.permute(0, 2, 1, 3, 4, 5).reshape(batch * steps, channels * frames, height, width)
        kernel = weight.reshape(weight.shape[0], channels * frames, *weight.shape[3:])
        spatial = padding if isinstance(padding, str) else padding[1:]
        output = torch.nn.functional.conv2d(folded, kernel, bias, stride[1:], spatial, dilation[1:])
        return output.reshape(batch, steps, *output.shape[1:]).permute(0, 2, 1, 3, 4)

    return conv3d


@register_patch("executorch", "torch._subclasses.fake_impls.op_implementations_dict")
def _patch_nonzero_written_row_by_row(original: dict[Any, Callable]) -> dict[Any, Callable]:
    # qwen3_asr's valid frames (`mask.flatten().nonzero().squeeze(-1)`): torch traces nonzero's (count, dims) output
    # with strides (1, count), so ExecuTorch labels it dim order (1, 0) though its kernel writes it row by row, and
    # the kernels after it refuse it ("2 input tensors have different dim orders", 0x12 at run time); trace it with
    # the strides the kernel writes (every retrace in lowering runs this fake kernel again).
    nonzero = original[torch.ops.aten.nonzero.default]

    def nonzero_by_rows(fake_mode: Any, func: Any, arg: torch.Tensor) -> torch.Tensor:
        indices = nonzero(fake_mode, func, arg)
        return arg.new_empty_strided(indices.shape, (indices.shape[1], 1), dtype=indices.dtype)

    return {**original, torch.ops.aten.nonzero.default: nonzero_by_rows}


@register_patch("executorch", "torch._subclasses.fake_tensor.op_implementations_checks")
def _patch_slice_copy_to_an_item_traced_like_a_slice(original: list) -> list:
    # blt, lfm2_vl: a slice ending at an .item() (`feature[: lengths[i]]`) traces, torch's fake slice rule sizing it
    # unbacked; lowering renames it slice_copy, whose meta kernel asks `end < 0` of that end ("Could not guard on
    # data-dependent expression u10 < 0" in the first re-trace): trace such a slice_copy by the slice rule.
    slice_rule = fake_impls.op_implementations_dict[torch.ops.aten.slice.Tensor]

    def slice_copy(fake_mode: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
        bounds = (*args[2:4], kwargs.get("start"), kwargs.get("end"))
        if not any(isinstance(bound, torch.SymInt) and free_unbacked_symbols(bound) for bound in bounds):
            return NotImplemented
        view = slice_rule(fake_mode, torch.ops.aten.slice.Tensor, *args, **kwargs)
        return view.new_empty(view.shape)

    return [(functools.partial(operator.is_, torch.ops.aten.slice_copy.Tensor), slice_copy), *original]


# ── ExecuTorch patches (stage 3) ──


@register_patch("executorch", "executorch.exir.passes.replace_view_copy_with_view_pass._is_view_copy")
def _patch_view_within_its_base(original: Callable) -> Callable:
    # rf_detr (dynamic, windowed backbone): memory planning bounds each dim of a view on its own, so a view that
    # splits a dim of its base can claim more memory than the base got ("offset_bytes + size_bytes >= allocator size"
    # when the program loads); such a view_copy stays a copy, with memory of its own. (rf_detr's views plan within
    # their bases with the strides of _patch_view_of_contiguous_as_strided; views of other layouts keep the walk's.)
    def _is_view_copy(node: torch.fx.Node) -> bool:
        return original(node) and _upper_bound_numel(node) <= _upper_bound_numel(node.args[0])

    return _is_view_copy


@register_patch(
    "executorch",
    "executorch.exir.tensor.dim_order_from_stride",
    "executorch.exir.tensor_layout.dim_order_from_stride",
    "executorch.exir.emit._emitter.dim_order_from_stride",
    "executorch.exir.passes.replace_view_copy_with_view_pass.dim_order_from_stride",
)
def _patch_dim_order_of_unbacked_strides(original: Callable) -> Callable:
    # glm5_next (dynamic): boolean-mask indexing leaves strides (16*u0, 16, 1), and ExecuTorch's stride sort cannot
    # decide 16*u0 < 16 ("Could not guard on data-dependent expression"); strides are never 0, so a multiple of
    # another stride is not the smaller one: sort by that where the sort cannot decide (upstream: exir/tensor.py's
    # stride key proves u0 < k*u0 but not the converse).
    def dim_order_from_stride(stride: tuple[Any, ...]) -> tuple[int, ...]:
        try:
            return original(stride)
        except GuardOnDataDependentSymNode:
            # Largest stride first; equal or unrelated strides keep their order, as in upstream's stable sort.
            larger_first = functools.cmp_to_key(
                lambda i, j: _stride_less(stride[i], stride[j]) - _stride_less(stride[j], stride[i])
            )
            return tuple(sorted(range(len(stride)), key=larger_first))

    return dim_order_from_stride


def _stride_less(smaller: Any, larger: Any) -> bool:
    if guard_or_false(smaller < larger):
        return True
    return guard_or_false(larger % smaller == 0) and not guard_or_false(smaller % larger == 0)


@register_patch("executorch", "executorch.exir.passes.replace_view_copy_with_view_pass._is_view_copy")
def _patch_view_as_dynamic_as_its_base(original: Callable) -> Callable:
    # pvt (dynamic): a view with symbolic sizes of a base whose sizes are static fails the pass's own check
    # ("_ViewSpec is incompatible with its base on creation"); such a view_copy stays a copy.
    def _is_view_copy(node: torch.fx.Node) -> bool:
        return original(node) and _dynamism(node) == _dynamism(node.args[0])

    return _is_view_copy


def _dynamism(node: torch.fx.Node) -> Any:
    return determine_tensor_dynanism(node.meta["val"].shape)  # what the pass's check compares


def _upper_bound_numel(node: torch.fx.Node) -> int:
    return math.prod(eval_shape_upper_bound(node.meta["val"].shape))


@register_patch(
    "executorch",
    "executorch.exir.sym_util.eval_upper_bound",
    "executorch.exir.passes.sym_shape_eval_pass.eval_upper_bound",
)
def _patch_upper_bound_of_a_floor_division(original: Callable) -> Callable:
    # qwen2_5_vl, exaone4_5 vision towers (dynamic; windows of `rows // (rows // 4)` rows): a divisor whose range
    # starts at 0 leaves the size unbounded, and ExecuTorch then plans the traced size as its capacity ("Attempted to
    # resize a bounded tensor with a maximum capacity of 32 elements to 48", 0x12 at the second shape); a size is
    # never divided by 0 (eager would have failed), so bound it with every divisor at least 1.
    def eval_upper_bound(maybe_symint: Any) -> int:
        if isinstance(maybe_symint, torch.SymInt) and maybe_symint.node.expr.has(FloorDiv):
            expr, ranges = maybe_symint.node.expr, maybe_symint.node.shape_env.var_to_range
            if bound_sympy(expr, ranges).upper is int_oo:
                upper = bound_sympy(expr.replace(FloorDiv, lambda a, b: FloorDiv(a, Max(b, 1))), ranges).upper
                if upper is not int_oo and upper.is_Integer:
                    return int(upper)
        return original(maybe_symint)

    return eval_upper_bound


@register_patch("executorch", "executorch.exir.passes.memory_format_ops_pass.MemoryFormatOpsPass.call_operator")
def _patch_dynamic_empty_as_zeros(original: Callable) -> Callable:
    # nemotron3_5 (dynamic; `new_empty(batch, frames, hidden)`), informer (circular conv padding decomposes to an
    # empty): ExecuTorch swaps aten.empty for its dim order op, whose sizes are int[], not SymInt[], so the swap pins
    # each dynamic size to the traced one (batch 2 planned: "Attempted to resize a bounded tensor with a maximum
    # capacity of 3584 elements to 4224", 0x10 at the second shape); an empty tensor of dynamic size is filled with
    # zeros instead (any content is an empty's), by a kernel that takes symbolic sizes.
    def call_operator(self: Any, op: Any, args: tuple, kwargs: dict, meta: Any) -> Any:
        if op is not exir_ops.edge.aten.empty.memory_format:
            return original(self, op, args, kwargs, meta)
        contiguous = kwargs.get("memory_format") in (None, torch.contiguous_format)
        if contiguous and any(isinstance(getattr(size, "data", size), torch.SymInt) for size in args[0]):
            options = {key: value for key, value in kwargs.items() if key != "memory_format"}
            return original(self, exir_ops.edge.aten.full.default, (args[0], 0), options, meta)
        return original(self, op, args, kwargs, meta)

    return call_operator
