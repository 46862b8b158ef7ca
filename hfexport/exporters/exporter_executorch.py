"""``ExecutorchExporter``: a transformers model as an ExecuTorch ``.pte`` program (XNNPACK, portable or CUDA).

``ExecutorchExporter.export_program`` traces with ``DynamoExporter`` (which also installs this backend's patches),
then runs five stages, each marked below by a ``# ── Stage N: … ──`` banner, around ``to_edge_transform_and_lower``
and ``to_executorch``. ``grep -nE "^def (_patch_|_fix_)" hfexport/exporters/exporter_executorch.py`` lists every
workaround. Lowering is tuned for speed (see ``_fast_lowering``): the cost of ExecuTorch lowering follows the number
of delegate partitions and of graph re-traces, not the model size.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import logging
import math
import operator
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .utils import require

require("executorch", extra="executorch")

import torch  # noqa: E402
import torch.utils._pytree as pytree  # noqa: E402
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner  # noqa: E402
from executorch.exir import (  # noqa: E402
    EdgeCompileConfig,
    ExecutorchProgramManager,
    to_edge_transform_and_lower,
)
from executorch.exir.passes.executorch_prim_ops_registry import (  # noqa: E402
    _PYTHON_SYM_OPS_TO_EXECUTORCH_SYM_OPS,
)
from executorch.exir.program import _program as exir_program  # noqa: E402
from executorch.exir.sym_util import eval_shape_upper_bound, eval_upper_bound  # noqa: E402
from executorch.exir.tensor import determine_tensor_dynanism  # noqa: E402
from torch.export import ExportedProgram  # noqa: E402
from torch.fx.experimental.symbolic_shapes import (  # noqa: E402
    GuardOnDataDependentSymNode,
    constrain_range,
    free_symbols,
    guard_or_false,
)
from torch.utils._sympy.numbers import int_oo  # noqa: E402
from torch.utils._sympy.symbol import SymT, symbol_is_type  # noqa: E402

from .exporter_dynamo import DynamoConfig, DynamoExporter, auto_dynamic_shapes  # noqa: E402
from .utils import (  # noqa: E402
    PatchReport,
    apply_node_fixes,
    apply_patches,
    apply_program_fixes,
    export_stage,
    register_fx_node_fix,
    register_fx_program_fix,
    register_patch,
)

logger = logging.getLogger(__name__)

BACKEND = "executorch"
_DELEGATE_CALL = "executorch_call_delegate"


@dataclasses.dataclass
class ExecutorchConfig(DynamoConfig):
    """ExecuTorch options on top of torch.export's.

    ``backend``: ``"xnnpack"`` (CPU, delegated), ``"portable"`` (CPU, no delegate) or ``"cuda"`` (needs a GPU).
    ``dynamic_upper_bound``: with ``dynamic=True``, the largest size every dynamic dimension accepts (at least its
    traced size); ExecuTorch plans memory for the bound, so keep it as small as the inputs you will feed.
    ``planned_memory_budget_gib``: with automatic dynamic shapes, a bound whose planned memory exceeds this is
    divided by 4 (down to 16) until it fits: a video model at 256 frames and batch 256 would plan 17 GiB. ``None``
    keeps ``dynamic_upper_bound`` whatever it costs.
    ``fast_lowering``: lower with the speed-ups of ``_fast_lowering`` (same program semantics, XNNPACK kept).
    """

    export_format: str = "executorch"
    backend: str = "xnnpack"
    dynamic_upper_bound: int = 256
    planned_memory_budget_gib: float | None = 2.0
    fast_lowering: bool = True


_SMALLEST_AUTOMATIC_BOUND = 16


# ── Stage 1: Backend preparation ──
# Each ``prepare_for_<name>(model, sample_inputs)`` moves the model to its device/dtype and returns
# ``(model, sample_inputs, partitioners)``. Add a backend by registering its function in ``_BACKEND_PREPARE``.


def _contiguous_inputs(sample_inputs: dict[str, Any]) -> dict[str, Any]:
    # ExecuTorch rejects stride-0 (broadcast) graph inputs: materialize every input tensor.
    return {name: pytree.tree_map_only(torch.Tensor, torch.Tensor.contiguous, v) for name, v in sample_inputs.items()}


def prepare_for_xnnpack(model: torch.nn.Module, sample_inputs: dict[str, Any]) -> tuple[Any, dict[str, Any], list]:
    """CPU, float32, the XNNPACK delegate for what it supports and portable kernels for the rest."""
    return model.to("cpu"), _contiguous_inputs(sample_inputs), [XnnpackPartitioner()]


def prepare_for_portable(model: torch.nn.Module, sample_inputs: dict[str, Any]) -> tuple[Any, dict[str, Any], list]:
    """CPU, portable kernels only: no delegate (the reference every delegate is compared with)."""
    return model.to("cpu"), _contiguous_inputs(sample_inputs), []


def prepare_for_cuda(model: torch.nn.Module, sample_inputs: dict[str, Any]) -> tuple[Any, dict[str, Any], list]:
    """The ExecuTorch CUDA backend (AOTInductor kernels): needs a visible GPU at export time, runs in bfloat16."""
    if not torch.cuda.is_available():
        raise RuntimeError(
            "the ExecuTorch 'cuda' backend compiles kernels for a visible GPU and this machine has none "
            "(torch.cuda.is_available() is False); use backend='xnnpack' or 'portable' on CPU"
        )
    from executorch.backends.cuda.cuda_backend import CudaBackend
    from executorch.backends.cuda.cuda_partitioner import CudaPartitioner

    model = copy.deepcopy(model).to(dtype=torch.bfloat16)  # a bfloat16 copy: the caller's model stays as it is
    inputs = pytree.tree_map_only(
        torch.Tensor, lambda t: t.to(torch.bfloat16) if t.is_floating_point() else t, sample_inputs
    )
    compile_spec = CudaBackend.generate_method_name_compile_spec("forward")
    return model, _contiguous_inputs(inputs), [CudaPartitioner([compile_spec])]


_BACKEND_PREPARE: dict[str, Callable[[torch.nn.Module, dict[str, Any]], tuple[Any, dict[str, Any], list]]] = {
    "xnnpack": prepare_for_xnnpack,
    "portable": prepare_for_portable,
    "cuda": prepare_for_cuda,
}


# ── Stage 2: Torch patches ──
# Reversible swaps of ``torch`` ops an ExecuTorch backend rejects, installed while tracing.
# Extend with ``@register_patch("executorch", "torch.<op>")``; the factory receives the real op.


@register_patch(BACKEND, "torch.nn.functional.scaled_dot_product_attention")
def _patch_sdpa_contiguous_output(original: Callable) -> Callable:
    # gpt2: decomposition re-traces SDPA via the CPU flash kernel, whose output strides differ from the traced
    # ones, so a later recorded view fails ("Cannot view a tensor with shape ... and strides"); copy it contiguous.
    def scaled_dot_product_attention(*args: Any, **kwargs: Any) -> torch.Tensor:
        return original(*args, **kwargs).clone(memory_format=torch.contiguous_format)

    return scaled_dot_product_attention


@register_patch(BACKEND, "torch.nn.functional.scaled_dot_product_attention")
def _patch_sdpa_as_math_attention(original: Callable) -> Callable:
    # every SDPA model: lowering decomposes SDPA to mul.Scalar and a safe softmax (eq/any/where on the scores) that
    # XNNPACK rejects, cutting each attention out of the delegate (tiny llama: 5 partitions without it, 1 with).
    def scaled_dot_product_attention(
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        dropout_p: float = 0.0,
        is_causal: bool = False,
        scale: float | None = None,
        enable_gqa: bool = False,
    ) -> torch.Tensor:
        # Dynamic shapes keep SDPA: with symbolic sizes the math form leaves a permute that XNNPACK passes through
        # its partition unchanged (t5 dynamic: "Output node ... is already in the inputs").
        symbolic = any(isinstance(size, torch.SymInt) for size in (*query.shape, *key.shape))
        if symbolic or dropout_p > 0.0 or (is_causal and attn_mask is not None):
            return original(query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)
        if enable_gqa and key.shape[-3] != query.shape[-3]:
            key = _repeat_heads(key, query.shape[-3] // key.shape[-3])
            value = _repeat_heads(value, query.shape[-3] // value.shape[-3])
        scale = query.shape[-1] ** -0.5 if scale is None else scale
        scores = _batched_matmul(query * scale, key.transpose(-2, -1))
        if is_causal:
            attn_mask = torch.ones(query.shape[-2], key.shape[-2], dtype=torch.bool, device=query.device).tril()
        if attn_mask is None:
            return _batched_matmul(torch.softmax(scores, dim=-1), value)
        if attn_mask.dtype != torch.bool:
            return _batched_matmul(torch.softmax(scores + attn_mask, dim=-1), value)
        # Built from the mask alone, so portable ops run before the delegate instead of between its parts. A
        # finite minimum and a zeroing factor give SDPA's zeros, not NaN, on rows that attend to nothing.
        bias = torch.zeros(attn_mask.shape, dtype=scores.dtype, device=scores.device)
        bias = bias.masked_fill(attn_mask.logical_not(), torch.finfo(scores.dtype).min)
        attends = attn_mask.any(dim=-1, keepdim=True).to(scores.dtype)
        return _batched_matmul(torch.softmax(scores + bias, dim=-1) * attends, value)

    return scaled_dot_product_attention


def _batched_matmul(left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """``left @ right`` as reshapes around one bmm: matmul's own decomposition adds an expand XNNPACK rejects."""
    if left.shape[:-2] != right.shape[:-2]:
        return torch.matmul(left, right)
    batch = left.shape[:-2]
    flat = torch.bmm(left.reshape(-1, *left.shape[-2:]), right.reshape(-1, *right.shape[-2:]))
    return flat.reshape(*batch, *flat.shape[-2:])


def _repeat_heads(states: torch.Tensor, repeats: int) -> torch.Tensor:
    """``repeat_interleave`` on the heads dim as a broadcast multiply: XNNPACK has no expand, nor a middle unsqueeze."""
    batch, heads, length, dim = states.shape
    ones = torch.ones(1, 1, repeats, 1, 1, dtype=states.dtype, device=states.device)
    return (states.reshape(batch, heads, 1, length, dim) * ones).reshape(batch, heads * repeats, length, dim)


@register_patch(BACKEND, "transformers.integrations.sdpa_attention.repeat_kv")
def _patch_repeat_kv_as_broadcast(original: Callable) -> Callable:
    # GQA (llama, mistral, qwen2, gemma): repeat_kv's expand has no XNNPACK kernel and splits every attention (3 -> 1).
    def repeat_kv(hidden_states: torch.Tensor, n_rep: int) -> torch.Tensor:
        return hidden_states if n_rep == 1 else _repeat_heads(hidden_states, n_rep)

    return repeat_kv


@register_patch(BACKEND, "transformers.integrations.moe.ExpertsInterface._global_mapping")
def _patch_experts_batched_mm(original: dict[str, Callable]) -> dict[str, Callable]:
    # mixtral (every MoE on grouped_mm): ExecuTorch has no out-variant kernel for transformers::grouped_mm_fallback.
    return {**original, "grouped_mm": original["batched_mm"]}


@register_patch(BACKEND, "torch.nn.functional.conv3d")
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


# ── Stage 3: ExecuTorch patches ──
# Reversible swaps of ExecuTorch internals that crash on valid graphs, installed around
# ``to_edge_transform_and_lower`` / ``to_executorch``. Same ``@register_patch("executorch", ...)`` registry.


@register_patch(
    BACKEND, "executorch.backends.xnnpack.partition.config.gemm_configs.ConvolutionConfig.check_constraints"
)
def _patch_conv1d_one_dynamic_dim(original: Callable) -> Callable:
    # wav2vec2 (dynamic): XNNPACK lowers conv1d as unsqueeze/conv2d/squeeze, and its reshape takes one dynamic dim
    # only ("XNNPACK reshape only supports 1 dynamic dimension"): leave such a conv1d to the portable kernel.
    return _declining(original, _is_1d_with_two_dynamic_dims)


@register_patch(BACKEND, "executorch.backends.xnnpack.partition.config.node_configs.BatchNormConfig.check_constraints")
def _patch_batch_norm_1d_one_dynamic_dim(original: Callable) -> Callable:
    # parakeet, wav2vec2_conformer (dynamic): XNNPACK decomposes a BatchNorm1d it cannot fuse into a conv1d, which
    # meets the reshape limit above ("XNNPACK reshape only supports 1 dynamic dimension"): leave it to portable.
    return _declining(original, lambda node: _is_1d_with_two_dynamic_dims(node.all_input_nodes[0]))


def _is_1d_with_two_dynamic_dims(node: torch.fx.Node) -> bool:
    return _dynamic_output_dims(node) > 1 and node.meta["val"].dim() == 3


@register_patch(
    BACKEND, "executorch.backends.xnnpack.partition.config.generic_node_configs.UnsqueezeCopyConfig.check_constraints"
)
def _patch_unsqueeze_one_dynamic_dim(original: Callable) -> Callable:
    # gemma3n, falcon_h1, long_t5 (dynamic): the partitioner takes an unsqueeze its serializer then rejects (a static
    # reshape with two dynamic dims: "XNNPACK reshape only supports 1 dynamic dimension"); leave it to portable.
    return _declining(original, lambda node: _dynamic_output_dims(node) > 1)


@register_patch(BACKEND, "executorch.backends.xnnpack._passes.XNNPACKRemoveCloneOpsTransform._is_input_output_copy")
def _patch_keep_clone_of_an_output(original: Callable) -> Callable:
    # bloom, xglm (dynamic): a partition returns a permute and a contiguous clone of it; XNNPACK's clone removal
    # merges the two outputs into one node ("Output node ... is already in the inputs"): keep such a clone.
    def _is_input_output_copy(self: Any, node: torch.fx.Node) -> bool:
        returned = any(user.op == "output" for user in node.users)
        source_returned = any(user.op == "output" for user in node.args[0].users)
        return original(self, node) or (returned and source_returned)

    return _is_input_output_copy


@register_patch(BACKEND, "executorch.backends.xnnpack.partition.config.node_configs.MaxDimConfig.check_constraints")
def _patch_max_dim_two_or_three(original: Callable) -> Callable:
    # gpt_oss attention sinks (`logits.max(dim=-1, keepdim=True)` on 4D): the partitioner takes a max over any dim,
    # its serializer takes dim 2 or 3 only ("amax.default only supports dim == 2 or dim == 3"), and written as 3
    # XNNPACK's result is wrong in that model (0.29 off); leave any other max to the portable kernel.
    return _declining(original, lambda node: node.args[1] not in (2, 3))


@register_patch(BACKEND, "executorch.exir.passes.replace_view_copy_with_view_pass._is_view_copy")
def _patch_view_within_its_base(original: Callable) -> Callable:
    # falcon_h1 (dynamic): memory planning bounds each dim of a view on its own, so a view that splits a dim of its
    # base can claim more memory than the base got ("offset_bytes + size_bytes >= allocator size" when the program
    # loads); such a view_copy stays a copy, with memory of its own.
    def _is_view_copy(node: torch.fx.Node) -> bool:
        return original(node) and _upper_bound_numel(node) <= _upper_bound_numel(node.args[0])

    return _is_view_copy


@register_patch(
    BACKEND,
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


@register_patch(BACKEND, "executorch.exir.passes.replace_view_copy_with_view_pass._is_view_copy")
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


def _declining(original: Callable, declined: Callable[[torch.fx.Node], bool]) -> Callable:
    """An XNNPACK partitioner ``check_constraints`` that also turns down the nodes ``declined`` picks."""

    def check_constraints(self: Any, node: torch.fx.Node, ep: ExportedProgram) -> bool:
        return not declined(node) and original(self, node, ep)

    return check_constraints


def _dynamic_output_dims(node: torch.fx.Node) -> int:
    output = node.meta.get("val")
    return sum(1 for size in output.shape if free_symbols(size)) if isinstance(output, torch.Tensor) else 0


@register_patch(BACKEND, "executorch.backends.xnnpack._passes.convert_to_sdpa.ConvertToSDPAPass.call")
def _patch_convert_to_sdpa_noop(original: Callable) -> Callable:
    # t5 (XNNPACK preprocess): the pass traces its SDPA pattern under `_patch_sdpa_as_math_attention`, matches our
    # math attention, then asserts "Could not find scale" (it reads a mul.Scalar, which XNNPACK never delegates).
    def call(self: Any, graph_module: torch.fx.GraphModule) -> Any:
        from torch.fx.passes.infra.pass_base import PassResult

        return PassResult(graph_module, False)

    return call


# ── Stage 4: FX program fixes ──
# ``@register_fx_program_fix("executorch")``: ``fix(exported_program) -> changed``, for repairs that need the whole
# program (range constraints, graph signature, state dict). Run once, after tracing.


@register_fx_program_fix(BACKEND)
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


# ── Stage 5: FX node fixes ──
# ``@register_fx_node_fix("executorch")``: ``fix(graph_module, node) -> changed``, run over every node after the
# program fixes.


@register_fx_node_fix(BACKEND)
def _fix_python_sym_op(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    # sym_max/sym_min/ceil on sizes are Python callables the edge IR verifier rejects (IR validation on).
    # to_executorch maps them to executorch_prim ops itself, but only after the verifier has run.
    if node.op != "call_function" or node.target not in (torch.sym_max, torch.sym_min, math.ceil, math.trunc, round):
        return False
    replacement = _PYTHON_SYM_OPS_TO_EXECUTORCH_SYM_OPS.get(node.target)
    if replacement is None:
        return False
    node.target = replacement
    return True


@register_fx_node_fix(BACKEND)
def _fix_sym_pow_as_mul(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    # `size ** n` traces to operator.pow, which the ExecuTorch emitter cannot serialize: multiply instead.
    if node.op != "call_function" or node.target is not operator.pow:
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


@register_fx_node_fix(BACKEND)
def _fix_sym_mod_of_negative(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    # long_t5 (dynamic; `-length % block`): the runtime's executorch_prim::mod takes C++'s sign (-7 % 128 == -7, not
    # Python's 121), and the block count built on it becomes 0 and a divisor (SIGFPE); add the modulus once more.
    # Fixes visit the nodes the graph had before any fix ran, so the nodes added here are not fixed again.
    if node.op != "call_function" or node.target is not operator.mod:
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


@register_fx_node_fix(BACKEND)
def _fix_mean_last_dim_as_4d(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    # RMSNorm (llama, mistral, qwen2, gemma, t5): XNNPACK takes mean.dim over the two inner dims of a 4D tensor only,
    # so `x.pow(2).mean(-1)` splits every norm out of the delegate (6 -> 1); average a static [N, 1, D, 1] view.
    if node.op != "call_function" or node.target is not torch.ops.aten.mean.dim or node.kwargs.get("dtype"):
        return False
    source, dims = (*node.args, None)[:2]
    value, output = source.meta.get("val"), node.meta.get("val")
    if not isinstance(value, torch.Tensor) or not value.is_floating_point() or value.dim() == 0:
        return False
    if not isinstance(dims, (list, tuple)) or list(dims) not in ([-1], [value.dim() - 1]) or free_symbols(value.shape):
        return False
    size = value.shape[-1]
    graph = graph_module.graph
    with graph.inserting_before(node):
        as_4d = _call_with_value(graph, torch.ops.aten.reshape.default, source, [value.numel() // size, 1, size, 1])
        mean = _call_with_value(graph, torch.ops.aten.mean.dim, as_4d, [2, 3], True)
        result = _call_with_value(graph, torch.ops.aten.reshape.default, mean, list(output.shape))
    for new in (as_4d, mean, result):
        new.meta.update({k: v for k, v in node.meta.items() if k in ("stack_trace", "nn_module_stack")})
    node.replace_all_uses_with(result)
    graph.erase_node(node)
    return True


@register_fx_node_fix(BACKEND)
def _fix_cat_without_empty_tensors(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    # DynamicCache (every decoder): the first update concatenates the new keys to a legacy empty 1-D tensor, a cat
    # XNNPACK rejects, which cuts each attention in two (3 -> 1); concatenating an empty tensor is a no-op: drop it.
    if node.op != "call_function" or node.target is not torch.ops.aten.cat.default:
        return False
    tensors = node.args[0]
    kept = [t for t in tensors if not _is_legacy_empty(t)]
    if len(kept) == len(tensors) or not kept:
        return False
    if len(kept) == 1 and kept[0].op != "placeholder":  # an output aliasing an input is not allowed
        node.replace_all_uses_with(kept[0])
        graph_module.graph.erase_node(node)
    else:
        node.args = (kept, *node.args[1:])
    return True


def _is_legacy_empty(node: Any) -> bool:
    value = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return isinstance(value, torch.Tensor) and value.dim() == 1 and value.shape[0] == 0


@register_fx_node_fix(BACKEND)
def _fix_cat_repeated_input(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    # rotary embeddings (`torch.cat((freqs, freqs))`): XNNPACK counts distinct inputs and rejects a cat of one
    # tensor twice, splitting the rotary setup (2 -> 1); concatenate a clone (XNNPACK removes it) for each repeat.
    if node.op != "call_function" or node.target is not torch.ops.aten.cat.default:
        return False
    tensors, seen, changed = list(node.args[0]), set(), False
    for index, tensor in enumerate(tensors):
        if tensor in seen:
            with graph_module.graph.inserting_before(node):
                tensors[index] = graph_module.graph.call_function(torch.ops.aten.clone.default, (tensor,))
            tensors[index].meta["val"] = tensor.meta.get("val")
            changed = True
        seen.add(tensor)
    if changed:
        node.args = (tensors, *node.args[1:])
    return changed


@register_fx_node_fix(BACKEND)
def _fix_alias_passthrough(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    # CausalLM heads (`hidden_states[:, slice(-0, None)]` traces to aten.alias): XNNPACK has no alias kernel, so the
    # lm_head linear lands in a partition of its own (2 -> 1); an alias computes nothing, use its input.
    if node.op != "call_function" or node.target is not torch.ops.aten.alias.default:
        return False
    source = node.args[0]
    if not isinstance(source, torch.fx.Node) or source.op == "placeholder" or any(u.op == "output" for u in node.users):
        return False
    node.replace_all_uses_with(source)
    graph_module.graph.erase_node(node)
    return True


@register_fx_node_fix(BACKEND)
def _fix_unsqueeze_as_view(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    # rotary cos/sin `unsqueeze(1)` (llama, mistral, qwen2, gemma): XNNPACK unsqueezes the last dim only and splits
    # the rotary setup from the layers (2 -> 1); a static view to the same shape is an op it takes.
    if node.op != "call_function" or node.target is not torch.ops.aten.unsqueeze.default:
        return False
    output = node.meta.get("val")
    if not isinstance(output, torch.Tensor) or not output.is_floating_point() or free_symbols(output.shape):
        return False
    node.target, node.args = torch.ops.aten.view.default, (node.args[0], list(output.shape))
    return True


_CONSTANT_PADS = (torch.ops.aten.pad.default, torch.ops.aten.constant_pad_nd.default)


@register_fx_node_fix(BACKEND)
def _fix_negative_pad_as_slice(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    # rwkv's time shift (`ZeroPad2d((0, 0, 1, -1))`): ExecuTorch's constant_pad_nd kernel rejects negative padding
    # at run time ("Padding values must be non-negative"); crop those sides with a slice, then pad the rest.
    if node.op != "call_function" or node.target not in _CONSTANT_PADS:
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


@register_fx_node_fix(BACKEND)
def _fix_int32_index_as_int64(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    # glm5_next (`scatter_add` by an int32 index): torch takes int32 indices, ExecuTorch's portable kernels int64
    # only ("Expected dtype int64 for index", 0x12 at run time): cast the index.
    if node.op != "call_function" or node.target not in _INDEXED_OPS:
        return False
    index = node.args[2]
    if not isinstance(index, torch.fx.Node) or index.meta["val"].dtype != torch.int32:
        return False
    with graph_module.graph.inserting_before(node):
        cast = _call_with_value(graph_module.graph, torch.ops.aten._to_copy.default, index, dtype=torch.int64)
    node.replace_input_with(index, cast)
    return True


_UNSTABLE_SORTS = (torch.ops.aten.sort.default, torch.ops.aten.argsort.default)


@register_fx_node_fix(BACKEND)
def _fix_sort_as_topk(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    # vjepa2's token argsort, jetmoe's expert grouping: the runtime has no sort kernel ("Missing operator:
    # aten::sort.values", 0x14 at load); a sorted topk of the whole dimension orders the same (stable sorts stay).
    # Upstream: ExecuTorch's portable kernels have topk but no sort.
    if node.op != "call_function" or node.target not in _UNSTABLE_SORTS:
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


@register_fx_node_fix(BACKEND)
def _fix_bucketize_as_count(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    # idefics3/smolvlm's patch positions: the runtime has no bucketize kernel ("Missing operator:
    # aten::bucketize.Tensor_out", 0x14 at load); a value's bucket is the number of boundaries below it (or at it,
    # with right=True). Upstream: ExecuTorch's portable kernels have no bucketize.
    if node.op != "call_function" or node.target is not torch.ops.aten.bucketize.Tensor:
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


# ── Lowering speed ──
# Measured on a tiny 2-layer Llama (see scripts/bench_executorch.py): the cost of to_edge_transform_and_lower is
# re-tracing. Every XNNPACK partition is preprocessed on its own by 17 passes that each re-trace the partition
# with fake tensors (~1 s per partition), the EDGE_DO_NOT_DECOMP path decomposes the whole program three times,
# and every intermediate ExportedProgram pretty-prints all shape guards. These levers change no program semantics.

# XNNPACK preprocess passes that only rewrite specific ops: skipped for partitions that contain none of them.
_XNNPACK_PASS_TRIGGERS = {
    "XNNPACKRemoveCloneOpsTransform": ("clone",),
    "DimOrderOpsRevertPass": ("dim_order",),
    "ConvertToUpsampleBilinear2d": ("index", "upsample"),
    "PropagateCustomMetaPass": ("quantize",),
    "ConvertToSDPAPass": ("softmax",),
    "FuseBatchNormPass": ("batch_norm",),
    "DecomposeBatchNorm": ("batch_norm",),
    "FuseActivationPass": ("relu", "hardtanh"),
    "DecomposeConcatenate": ("cat",),
    "RemoveGetItemPass": ("max_pool2d_with_indices", "max.dim"),
    "InsertPadQDQPass": ("constant_pad_nd",),
    # DecomposeBatchNorm turns a batch norm XNNPACK cannot fuse into a convolution, a 1d one after BatchNorm1d.
    "Conv1dUnsqueezePass": ("convolution", "batch_norm"),
    "PReLUReshapePass": ("prelu",),
}


class _UnfilteredXnnpackPartitioner(XnnpackPartitioner):
    """XNNPACK without the per-node "do not decompose" filter, so lowering decomposes the program once, not thrice.

    With a filter, ExecuTorch decomposes, swaps the kept ops for placeholders, and decomposes again. Without one, an
    op kept whole that XNNPACK then declines stays in the program, so only ops with a portable kernel are kept.
    """

    def ops_to_not_decompose(self, ep: ExportedProgram) -> tuple[list[torch._ops.OpOverload], None]:
        ops, _ = super().ops_to_not_decompose(ep)
        return [op for op in ops if op._schema.name in _portable_kernel_names()], None


@functools.cache
def _portable_kernel_names() -> frozenset[str]:
    from executorch.runtime import Runtime

    return frozenset(name.split(".")[0] for name in Runtime.get().operator_registry.operator_names)


def _unfiltered(partitioners: list) -> list:
    """The partitioners with XNNPACK's swapped for ``_UnfilteredXnnpackPartitioner`` (same configs and options)."""
    swapped = []
    for partitioner in partitioners:
        if type(partitioner) is XnnpackPartitioner:
            partitioner = copy.copy(partitioner)
            partitioner.__class__ = _UnfilteredXnnpackPartitioner
        swapped.append(partitioner)
    return swapped


def _needed_passes(passes: list[type], graph: torch.fx.Graph) -> list[type]:
    targets = " ".join(str(node.target) for node in graph.nodes if node.op == "call_function")
    return [
        p
        for p in passes
        if p.__name__ not in _XNNPACK_PASS_TRIGGERS or any(t in targets for t in _XNNPACK_PASS_TRIGGERS[p.__name__])
    ]


@contextlib.contextmanager
def _swapped(owner: Any, name: str, replacement: Any) -> Iterator[None]:
    original = getattr(owner, name)
    setattr(owner, name, replacement)
    try:
        yield
    finally:
        setattr(owner, name, original)


_check_undelegated_ops = exir_program._sanity_check_graph_for_non_decomp_ops


def _warn_on_undelegated_ops(*args: Any, **kwargs: Any) -> None:
    _check_undelegated_ops(*args, **{**kwargs, "generate_error": False})


@contextlib.contextmanager
def _fast_lowering() -> Iterator[None]:
    """Speed levers for to_edge_transform_and_lower / to_executorch; every swap is undone on exit."""
    import executorch.backends.xnnpack._passes as xnnpack_passes
    import torch.export.exported_program as exported_program_module

    manager = xnnpack_passes.XNNPACKPassManager
    original_init = manager.__init__

    def pruned_init(self: Any, exported_program: ExportedProgram, passes: list | None = None) -> None:
        original_init(self, exported_program, passes)
        if not passes:  # the default list, not an explicit one
            self.passes = _needed_passes(self.passes, exported_program.graph)

    original_decompose = ExportedProgram.run_decompositions

    def decompose_once(self: ExportedProgram, decomp_table: dict | None = None, *args: Any, **kwargs: Any) -> Any:
        # Lowering re-traces once with an empty table (to functionalize), then again with the real table, which
        # functionalizes too: skip the first (0.5 s on llama, 1.3 s on t5), and always run the second.
        if decomp_table is not None and not decomp_table:
            return self
        return original_decompose(self, decomp_table, *args, **kwargs)

    with (
        _swapped(manager, "__init__", pruned_init),
        _swapped(ExportedProgram, "run_decompositions", decompose_once),
        # The table pass is skipped when no op of the table is left; it is now the one that functionalizes.
        _swapped(exir_program, "contains_any_call_fn_target_op", lambda graph_module, ops: True),
        # Guards are only turned into code by ExportedProgram.module(), which ExecuTorch never calls.
        _swapped(exported_program_module, "_convert_guards_to_code", lambda graph_module: []),
        # An op kept whole that XNNPACK declines (higgs_audio_v2's linear) runs on its portable kernel: only
        # ops with one are kept, so the check that every kept op was delegated warns instead of failing.
        _swapped(exir_program, "_sanity_check_graph_for_non_decomp_ops", _warn_on_undelegated_ops),
    ):
        yield


# ── The exporter ──


def dynamic_dim_bounds(program: ExportedProgram, input_names: list[str]) -> dict[str, dict[str, list[int]]]:
    """``{input name: {dim: [min, max]}}`` for every dynamic dimension of the user inputs of a traced program."""
    bounds: dict[str, dict[str, list[int]]] = {}
    for name, node in zip(input_names, _user_input_placeholders(program), strict=True):
        value = node.meta.get("val")
        if not isinstance(value, torch.Tensor):
            continue
        for dim, size in enumerate(value.shape):
            if isinstance(size, torch.SymInt):
                ranges = program.range_constraints.get(size.node.expr)
                if ranges is not None:
                    bounds.setdefault(name, {})[str(dim)] = [int(ranges.lower), int(ranges.upper)]
    return bounds


def delegate_count(program: ExecutorchProgramManager | Any) -> int:
    """How many delegate calls (XNNPACK partitions) an edge or ExecuTorch program makes."""
    graph_module = program.exported_program().graph_module
    return sum(1 for n in graph_module.graph.nodes if n.op == "call_function" and _DELEGATE_CALL in str(n.target))


def planned_memory_bytes(program: ExecutorchProgramManager) -> int:
    """The activation memory the runtime allocates when it loads ``program`` (every method, every memory arena)."""
    return sum(sum(plan.non_const_buffer_sizes) for plan in program.executorch_program.execution_plan)


class ExecutorchExporter(DynamoExporter):
    export_format = "executorch"
    config_class = ExecutorchConfig
    program_suffix = ".pte"
    recorded_packages = ("executorch",)

    def export_program(
        self, model: torch.nn.Module, sample_inputs: dict[str, Any], config: ExecutorchConfig
    ) -> tuple[ExecutorchProgramManager, dict[str, Any]]:
        """Trace, fix and lower ``model``; return the ExecuTorch program and the metadata recorded on the way."""
        with export_stage(BACKEND, 1, "backend preparation"):
            prepare = _BACKEND_PREPARE.get(config.backend)
            if prepare is None:
                raise ValueError(f"unknown ExecuTorch backend {config.backend!r}; known: {', '.join(_BACKEND_PREPARE)}")
            model, sample_inputs, partitioners = prepare(model, sample_inputs)
            if config.fast_lowering:
                partitioners = _unfiltered(partitioners)
        if not config.dynamic or config.dynamic_shapes is not None:
            return self._trace_and_lower(model, sample_inputs, config, partitioners)
        # ExecuTorch plans memory for the largest shape a program accepts: every dynamic dimension needs a bound.
        bound, budget = config.dynamic_upper_bound, config.planned_memory_budget_gib
        while True:
            shapes = auto_dynamic_shapes(sample_inputs, bound)
            bounded = dataclasses.replace(config, dynamic_shapes=shapes)
            program, metadata = self._trace_and_lower(model, sample_inputs, bounded, partitioners)
            planned = metadata["planned_memory_bytes"]
            if budget is None or planned <= budget * 2**30 or bound <= _SMALLEST_AUTOMATIC_BOUND:
                return program, metadata
            lower = max(bound // 4, _SMALLEST_AUTOMATIC_BOUND)
            message = "ExecuTorch: dynamic upper bound %d plans %.1f GiB (budget %.1f GiB); exporting again with %d"
            logger.warning(message, bound, planned / 2**30, budget, lower)
            bound = lower

    def _trace_and_lower(
        self, model: torch.nn.Module, sample_inputs: dict[str, Any], config: ExecutorchConfig, partitioners: list
    ) -> tuple[ExecutorchProgramManager, dict[str, Any]]:
        # Stages 2 and 3: DynamoExporter installs the "executorch" patches while tracing.
        program, metadata = super().export_program(model, sample_inputs, config)
        fixes = metadata["workarounds"]["fixes"]
        timings = metadata["timings"]
        started = time.perf_counter()
        with export_stage(BACKEND, 4, "FX program fixes"):
            apply_program_fixes(BACKEND, program, fixes)
        with export_stage(BACKEND, 5, "FX node fixes"):
            apply_node_fixes(BACKEND, program.graph_module, fixes)
        timings["fixes"] = round(time.perf_counter() - started, 3)
        metadata["dynamic_dims"] = dynamic_dim_bounds(program, metadata["input_names"])
        report = PatchReport()
        # Lowering crashes inside ExecuTorch are repaired by stage 3 patches: report them there.
        with (
            export_stage(BACKEND, 3, "ExecuTorch patches"),
            apply_patches(BACKEND, report),
            _fast_lowering() if config.fast_lowering else contextlib.nullcontext(),
        ):
            started = time.perf_counter()
            # The edge verifier only re-checks what to_executorch rejects anyway (ops without a kernel).
            compile_config = EdgeCompileConfig(_check_ir_validity=not config.fast_lowering)
            edge = to_edge_transform_and_lower(program, partitioner=partitioners, compile_config=compile_config)
            timings["to_edge_transform_and_lower"] = round(time.perf_counter() - started, 3)
            started = time.perf_counter()
            executorch_program = edge.to_executorch()
            timings["to_executorch"] = round(time.perf_counter() - started, 3)
        metadata["backend"] = config.backend
        metadata["delegate_partitions"] = delegate_count(executorch_program)
        metadata["planned_memory_bytes"] = planned_memory_bytes(executorch_program)
        for installed in report.installed:
            if installed not in metadata["workarounds"]["patches"]:
                metadata["workarounds"]["patches"].append(installed)
        return executorch_program, metadata

    @classmethod
    def save_program(cls, program: ExecutorchProgramManager | bytes, path: Path) -> None:
        Path(path).write_bytes(program_bytes(program))

    @classmethod
    def load_program(cls, path: Path) -> bytes:
        """The ``.pte`` bytes: the runner hands them to the ExecuTorch runtime, saving writes them back as they are."""
        return Path(path).read_bytes()


def program_bytes(program: ExecutorchProgramManager | bytes) -> bytes:
    return program if isinstance(program, (bytes, bytearray)) else program.buffer
