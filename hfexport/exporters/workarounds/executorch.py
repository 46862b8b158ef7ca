"""ExecuTorch workarounds every delegate needs (key ``"executorch"``): xnnpack, portable and cuda programs alike.

Sections follow ``ExecutorchExporter``'s stages: 2 torch patches, 3 ExecuTorch patches, 4 FX program fixes, 5 FX
node fixes. What only the XNNPACK delegate needs is in ``xnnpack.py``; the lowering swaps ``fast_lowering`` installs
(speed, not correctness) are in ``fast_lowering.py``.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.utils._pytree as pytree
from executorch.exir.passes.executorch_prim_ops_registry import _PYTHON_SYM_OPS_TO_EXECUTORCH_SYM_OPS
from executorch.exir.sym_util import eval_shape_upper_bound, eval_upper_bound
from executorch.exir.tensor import determine_tensor_dynanism
from torch.export import ExportedProgram
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode, constrain_range, guard_or_false
from torch.utils._sympy.numbers import int_oo
from torch.utils._sympy.symbol import SymT, symbol_is_type

from ..registry import register_fx_node_fix, register_fx_program_fix, register_patch

# ── Torch patches (stage 2) ──


@register_patch("executorch", "torch.nn.functional.scaled_dot_product_attention")
def _patch_sdpa_contiguous_output(original: Callable) -> Callable:
    # gpt2: decomposition re-traces SDPA via the CPU flash kernel, whose output strides differ from the traced
    # ones, so a later recorded view fails ("Cannot view a tensor with shape ... and strides"); copy it contiguous.
    def scaled_dot_product_attention(*args: Any, **kwargs: Any) -> torch.Tensor:
        return original(*args, **kwargs).clone(memory_format=torch.contiguous_format)

    return scaled_dot_product_attention


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
        stride, dilation = torch.nn.modules.utils._triple(stride), torch.nn.modules.utils._triple(dilation)
        padding = padding if isinstance(padding, str) else torch.nn.modules.utils._triple(padding)
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


# ── ExecuTorch patches (stage 3) ──


@register_patch("executorch", "executorch.exir.passes.replace_view_copy_with_view_pass._is_view_copy")
def _patch_view_within_its_base(original: Callable) -> Callable:
    # falcon_h1 (dynamic): memory planning bounds each dim of a view on its own, so a view that splits a dim of its
    # base can claim more memory than the base got ("offset_bytes + size_bytes >= allocator size" when the program
    # loads); such a view_copy stays a copy, with memory of its own.
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


# ── FX program fixes (stage 4) ──


@register_fx_program_fix("executorch")
def _fix_unbounded_data_dependent_sizes(program: ExportedProgram) -> bool:
    # vjepa2's `repeat(B, mask.max() + 1)` (also sam3, pocket_tts's codec decoder): a size read from a tensor has
    # no upper bound, and memory planning needs one ("Cannot evaluate a finite upper bound ... int_oo"). It gets
    # the largest size an input dimension accepts; the runtime refuses to grow a tensor past its planned capacity.
    # Upstream: ExecuTorch's memory planning has no place for a tensor without a bound (DYNAMIC_UNBOUND).
    unbounded: dict[Any, torch.SymInt] = {}
    for node in program.graph.nodes:
        for size in _symbolic_sizes(node.meta.get("val")):
            if _is_unbounded_unbacked(size):
                unbounded.setdefault(size.node.expr, size)
    if not unbounded:
        return False
    bound = _largest_input_size(program)
    for size in unbounded.values():
        constrain_range(size, min=None, max=bound)
    return True


def _is_unbounded_unbacked(size: torch.SymInt) -> bool:
    symbol = size.node.expr
    return (
        bool(symbol.is_Symbol)
        and symbol_is_type(symbol, SymT.UNBACKED_INT)
        and (size.node.shape_env.var_to_range[symbol].upper is int_oo)
    )


def _symbolic_sizes(value: Any) -> Iterator[torch.SymInt]:
    for leaf in pytree.tree_leaves(value):
        for size in leaf.shape if isinstance(leaf, torch.Tensor) else (leaf,):
            if isinstance(size, torch.SymInt):
                yield size


def _user_input_placeholders(program: ExportedProgram) -> list[torch.fx.Node]:
    user_inputs = set(program.graph_signature.user_inputs)
    return [node for node in program.graph.nodes if node.op == "placeholder" and node.name in user_inputs]


def _largest_input_size(program: ExportedProgram) -> int:
    """The largest bound of a dynamic input dimension; in a static program, the largest input dimension."""
    sizes = [
        size
        for node in _user_input_placeholders(program)
        if isinstance(node.meta.get("val"), torch.Tensor)
        for size in node.meta["val"].shape
    ]
    dynamic = [eval_upper_bound(size) for size in sizes if isinstance(size, torch.SymInt)]
    return max(dynamic or sizes or [1])


# ── FX node fixes (stage 5) ──


@register_fx_node_fix("executorch")
def _fix_python_sym_op(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    # sym_max/sym_min/ceil on sizes are Python callables the edge IR verifier rejects (IR validation on).
    # to_executorch maps them to executorch_prim ops itself, but only after the verifier has run.
    if node.target not in (torch.sym_max, torch.sym_min, math.ceil, math.trunc, round):
        return False
    replacement = _PYTHON_SYM_OPS_TO_EXECUTORCH_SYM_OPS.get(node.target)
    if replacement is None:
        return False
    node.target = replacement
    return True


@register_fx_node_fix("executorch")
def _fix_sym_pow_as_mul(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    # `size ** n` traces to operator.pow, which the ExecuTorch emitter cannot serialize: multiply instead.
    if node.target is not operator.pow:
        return False
    base, exponent = node.args
    if not isinstance(exponent, int) or exponent < 1 or not isinstance(base, torch.fx.Node):
        return False
    multiply = _PYTHON_SYM_OPS_TO_EXECUTORCH_SYM_OPS[operator.mul]
    running, value = base, base.meta.get("val")
    with graph_module.graph.inserting_before(node):
        for _ in range(exponent - 1):
            running = graph_module.graph.call_function(multiply, (running, base))
            if value is not None:
                value = value * base.meta["val"]
                running.meta["val"] = value
    node.replace_all_uses_with(running)
    graph_module.graph.erase_node(node)
    return True


@register_fx_node_fix("executorch")
def _fix_sym_mod_of_negative(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    # long_t5 (dynamic; `-length % block`): the runtime's executorch_prim::mod takes C++'s sign (-7 % 128 == -7, not
    # Python's 121), and the block count built on it becomes 0 and a divisor (SIGFPE); add the modulus once more.
    # Fixes visit the nodes the graph had before any fix ran, so the nodes added here are not fixed again.
    if node.target is not operator.mod:
        return False
    dividend, modulus = node.args
    if not isinstance(dividend, torch.fx.Node) or not isinstance(modulus, int) or modulus <= 0:
        return False
    graph = graph_module.graph
    with graph.inserting_after(node):
        shifted = graph.call_function(operator.add, (node, modulus))
    with graph.inserting_after(shifted):
        result = graph.call_function(operator.mod, (shifted, modulus))
    node.replace_all_uses_with(result, delete_user_cb=lambda user: user is not shifted)
    shifted.meta["val"] = node.meta["val"] + modulus
    result.meta["val"] = shifted.meta["val"] % modulus
    return True


_CONSTANT_PADS = (torch.ops.aten.pad.default, torch.ops.aten.constant_pad_nd.default)


@register_fx_node_fix("executorch")
def _fix_negative_pad_as_slice(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    # rwkv's time shift (`ZeroPad2d((0, 0, 1, -1))`): ExecuTorch's constant_pad_nd kernel rejects negative padding
    # at run time ("Padding values must be non-negative"); crop those sides with a slice, then pad the rest.
    if node.target not in _CONSTANT_PADS:
        return False
    source, pad = node.args[:2]
    mode = "constant"  # constant_pad_nd's third argument is its fill value, aten.pad's its mode
    if node.target is torch.ops.aten.pad.default:
        mode = node.args[2] if len(node.args) > 2 else node.kwargs.get("mode", "constant")
    if mode != "constant" or not any(isinstance(p, int) and p < 0 for p in pad):
        return False
    cropped, rank = source, source.meta["val"].dim()
    with graph_module.graph.inserting_before(node):
        for index in range(0, len(pad), 2):
            before, after = pad[index], pad[index + 1]
            if before < 0 or after < 0:
                dim, start, end = rank - 1 - index // 2, max(-before, 0), after if after < 0 else None
                cropped = _call_with_value(graph_module.graph, torch.ops.aten.slice.Tensor, cropped, dim, start, end)
    node.args = (cropped, [max(p, 0) for p in pad], *node.args[2:])
    return True


# Ops whose index is their third argument (the traced graph keeps in-place forms).
_INDEXED_OPS = (
    torch.ops.aten.gather.default,
    torch.ops.aten.scatter.src,
    torch.ops.aten.scatter.value,
    torch.ops.aten.scatter_.src,
    torch.ops.aten.scatter_.value,
    torch.ops.aten.scatter_add.default,
    torch.ops.aten.scatter_add_.default,
    torch.ops.aten.scatter_reduce.two,
    torch.ops.aten.scatter_reduce_.two,
)


@register_fx_node_fix("executorch")
def _fix_int32_index_as_int64(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    # glm5_next (`scatter_add` by an int32 index): torch takes int32 indices, ExecuTorch's portable kernels int64
    # only ("Expected dtype int64 for index", 0x12 at run time): cast the index.
    if node.target not in _INDEXED_OPS:
        return False
    index = node.args[2]
    if not isinstance(index, torch.fx.Node) or index.meta["val"].dtype != torch.int32:
        return False
    with graph_module.graph.inserting_before(node):
        cast = _call_with_value(graph_module.graph, torch.ops.aten._to_copy.default, index, dtype=torch.int64)
    node.replace_input_with(index, cast)
    return True


_UNSTABLE_SORTS = (torch.ops.aten.sort.default, torch.ops.aten.argsort.default)


@register_fx_node_fix("executorch")
def _fix_sort_as_topk(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    # vjepa2's token argsort, jetmoe's expert grouping: the runtime has no sort kernel ("Missing operator:
    # aten::sort.values", 0x14 at load); a sorted topk of the whole dimension orders the same (stable sorts stay).
    # Upstream: ExecuTorch's portable kernels have topk but no sort.
    if node.target not in _UNSTABLE_SORTS:
        return False
    source, dim, descending = node.args[0], *_sort_arguments(*node.args[1:], **node.kwargs)
    graph, length = graph_module.graph, source.meta["val"].shape[dim]
    with graph.inserting_before(node):
        if isinstance(length, torch.SymInt):
            length = _call_with_value(graph, torch.ops.aten.sym_size.int, source, dim)
        topk = _call_with_value(graph, torch.ops.aten.topk.default, source, length, dim, descending, True)
        if node.target is torch.ops.aten.argsort.default:
            topk = _call_with_value(graph, operator.getitem, topk, 1)
    node.replace_all_uses_with(topk)
    graph.erase_node(node)
    return True


def _sort_arguments(dim: int = -1, descending: bool = False) -> tuple[int, bool]:
    return dim, descending


@register_fx_node_fix("executorch")
def _fix_bucketize_as_count(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    # idefics3/smolvlm's patch positions: the runtime has no bucketize kernel ("Missing operator:
    # aten::bucketize.Tensor_out", 0x14 at load); a value's bucket is the number of boundaries below it (or at it,
    # with right=True). Upstream: ExecuTorch's portable kernels have no bucketize.
    if node.target is not torch.ops.aten.bucketize.Tensor:
        return False
    values, boundaries = node.args[:2]
    below = torch.ops.aten.ge.Tensor if node.kwargs.get("right", False) else torch.ops.aten.gt.Tensor
    dtype = torch.int32 if node.kwargs.get("out_int32", False) else torch.int64
    graph = graph_module.graph
    with graph.inserting_before(node):
        column = _call_with_value(graph, torch.ops.aten.unsqueeze.default, values, -1)
        passed = _call_with_value(graph, below, column, boundaries)
        count = _call_with_value(graph, torch.ops.aten.sum.dim_IntList, passed, [-1], False, dtype=dtype)
    node.replace_all_uses_with(count)
    graph.erase_node(node)
    return True


def _call_with_value(graph: torch.fx.Graph, target: Any, *args: Any, **kwargs: Any) -> torch.fx.Node:
    """A ``target`` node, its ``meta["val"]`` computed from its arguments' own."""
    node = graph.call_function(target, args, kwargs)
    fake_args, fake_kwargs = pytree.tree_map_only(torch.fx.Node, lambda n: n.meta["val"], (args, kwargs))
    node.meta["val"] = target(*fake_args, **fake_kwargs)
    return node
