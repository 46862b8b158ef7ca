"""Workarounds only the XNNPACK delegate needs (key ``"executorch.xnnpack"``): run when ``backend="xnnpack"`` lowers.

Most keep an op XNNPACK rejects from cutting a model into several delegate partitions, or stop XNNPACK's partitioner
from taking a node its serializer then refuses. Sections follow ``ExecutorchExporter``'s stages: 2 torch patches, 3
ExecuTorch patches, 5 FX node fixes, then the lowering swaps ``fast_lowering`` installs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from executorch.exir.dialects._ops import ops as exir_ops
from torch.export import ExportedProgram

from ....torch_compat import PassResult, free_symbols
from ...registry import register_fx_node_fix, register_lowering_swap, register_patch
from .fixes import _call_with_value

# ── Torch patches (stage 2) ──


@register_patch("executorch.xnnpack", "torch.nn.functional.scaled_dot_product_attention")
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


@register_patch("executorch.xnnpack", "transformers.integrations.sdpa_attention.repeat_kv")
def _patch_repeat_kv_as_broadcast(original: Callable) -> Callable:
    # GQA (llama, mistral, qwen2, gemma): repeat_kv's expand has no XNNPACK kernel and splits every attention (3 -> 1).
    def repeat_kv(hidden_states: torch.Tensor, n_rep: int) -> torch.Tensor:
        return hidden_states if n_rep == 1 else _repeat_heads(hidden_states, n_rep)

    return repeat_kv


# ── ExecuTorch patches (stage 3) ──


@register_patch(
    "executorch.xnnpack",
    "executorch.backends.xnnpack.partition.config.gemm_configs.ConvolutionConfig.check_constraints",
)
def _patch_conv1d_one_dynamic_dim(original: Callable) -> Callable:
    # wav2vec2 (dynamic): XNNPACK lowers conv1d as unsqueeze/conv2d/squeeze, and its reshape takes one dynamic dim
    # only ("XNNPACK reshape only supports 1 dynamic dimension"): leave such a conv1d to the portable kernel.
    return _declining(original, _is_1d_with_two_dynamic_dims)


@register_patch(
    "executorch.xnnpack", "executorch.backends.xnnpack.partition.config.node_configs.BatchNormConfig.check_constraints"
)
def _patch_batch_norm_1d_one_dynamic_dim(original: Callable) -> Callable:
    # parakeet, wav2vec2_conformer (dynamic): XNNPACK decomposes a BatchNorm1d it cannot fuse into a conv1d, which
    # meets the reshape limit above ("XNNPACK reshape only supports 1 dynamic dimension"): leave it to portable.
    return _declining(original, lambda node: _is_1d_with_two_dynamic_dims(node.all_input_nodes[0]))


def _is_1d_with_two_dynamic_dims(node: torch.fx.Node) -> bool:
    return _dynamic_output_dims(node) > 1 and node.meta["val"].dim() == 3


@register_patch(
    "executorch.xnnpack",
    "executorch.backends.xnnpack.partition.config.generic_node_configs.UnsqueezeCopyConfig.check_constraints",
)
def _patch_unsqueeze_one_dynamic_dim(original: Callable) -> Callable:
    # gemma3n, falcon_h1, long_t5 (dynamic): the partitioner takes an unsqueeze its serializer then rejects (a static
    # reshape with two dynamic dims: "XNNPACK reshape only supports 1 dynamic dimension"); leave it to portable.
    return _declining(original, lambda node: _dynamic_output_dims(node) > 1)


@register_patch(
    "executorch.xnnpack", "executorch.backends.xnnpack._passes.XNNPACKRemoveCloneOpsTransform._is_input_output_copy"
)
def _patch_keep_clone_of_an_output(original: Callable) -> Callable:
    # bloom, xglm (dynamic): a partition returns a permute and a contiguous clone of it; XNNPACK's clone removal
    # merges the two outputs into one node ("Output node ... is already in the inputs"): keep such a clone.
    def _is_input_output_copy(self: Any, node: torch.fx.Node) -> bool:
        returned = any(user.op == "output" for user in node.users)
        source_returned = any(user.op == "output" for user in node.args[0].users)
        return original(self, node) or (returned and source_returned)

    return _is_input_output_copy


@register_patch(
    "executorch.xnnpack", "executorch.backends.xnnpack.partition.config.node_configs.MaxDimConfig.check_constraints"
)
def _patch_max_dim_two_or_three(original: Callable) -> Callable:
    # gpt_oss attention sinks (`logits.max(dim=-1, keepdim=True)` on 4D): the partitioner takes a max over any dim,
    # its serializer takes dim 2 or 3 only ("amax.default only supports dim == 2 or dim == 3"), and written as 3
    # XNNPACK's result is wrong in that model (0.29 off); leave any other max to the portable kernel.
    return _declining(original, lambda node: node.args[1] not in (2, 3))


# XNN_MAX_TENSOR_DIMS in XNNPACK's xnnpack.h: the most dimensions a tensor of its runtime has.
_XNNPACK_MAX_DIMS = 6


@register_patch(
    "executorch.xnnpack",
    "executorch.backends.xnnpack.partition.config.xnnpack_config.XNNPartitionerConfig.check_common_constraints",
)
def _patch_at_most_six_dims(original: Callable) -> Callable:
    # univnet (location-variable convolution, an einsum of 6-D operands): einsum's decomposition unsqueezes them to
    # 7-D and the partitioner takes the permutes between, which XNNPACK's runtime cannot define ("Failed to define
    # tensor 0 with code: xnn_status_unsupported_parameter", 0x1 at load); leave such nodes to the portable kernels.
    def more_dims(node: torch.fx.Node) -> bool:
        values = [node.meta.get("val"), *(source.meta.get("val") for source in node.all_input_nodes)]
        return any(isinstance(value, torch.Tensor) and value.dim() > _XNNPACK_MAX_DIMS for value in values)

    return _declining(original, more_dims)


def _declining(original: Callable, declined: Callable[[torch.fx.Node], bool]) -> Callable:
    """An XNNPACK partitioner ``check_constraints`` that also turns down the nodes ``declined`` picks."""

    def check_constraints(self: Any, node: torch.fx.Node, ep: ExportedProgram) -> bool:
        return not declined(node) and original(self, node, ep)

    return check_constraints


def _dynamic_output_dims(node: torch.fx.Node) -> int:
    output = node.meta.get("val")
    return sum(1 for size in output.shape if free_symbols(size)) if isinstance(output, torch.Tensor) else 0


@register_patch("executorch.xnnpack", "executorch.backends.xnnpack._passes.convert_to_sdpa.ConvertToSDPAPass.call")
def _patch_convert_to_sdpa_noop(original: Callable) -> Callable:
    # t5 (XNNPACK preprocess): the pass traces its SDPA pattern under `_patch_sdpa_as_math_attention`, matches our
    # math attention, then asserts "Could not find scale" (it reads a mul.Scalar, which XNNPACK never delegates).
    def call(self: Any, graph_module: torch.fx.GraphModule) -> Any:
        return PassResult(graph_module, False)

    return call


# ── FX node fixes (stage 5) ──


@register_fx_node_fix("executorch.xnnpack")
def _fix_mean_last_dim_as_4d(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    # RMSNorm (llama, mistral, qwen2, gemma, t5): XNNPACK takes mean.dim over the two inner dims of a 4D tensor only,
    # so `x.pow(2).mean(-1)` splits every norm out of the delegate (6 -> 1); average a static [N, 1, D, 1] view.
    if node.target is not torch.ops.aten.mean.dim or node.kwargs.get("dtype"):
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


@register_fx_node_fix("executorch.xnnpack")
def _fix_cat_without_empty_tensors(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    # DynamicCache (every decoder): the first update concatenates the new keys to a legacy empty 1-D tensor, a cat
    # XNNPACK rejects, which cuts each attention in two (3 -> 1); concatenating an empty tensor is a no-op: drop it.
    if node.target is not torch.ops.aten.cat.default:
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


@register_fx_node_fix("executorch.xnnpack")
def _fix_cat_repeated_input(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    # rotary embeddings (`torch.cat((freqs, freqs))`): XNNPACK counts distinct inputs and rejects a cat of one
    # tensor twice, splitting the rotary setup (2 -> 1); concatenate a clone (XNNPACK removes it) for each repeat.
    if node.target is not torch.ops.aten.cat.default:
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


@register_fx_node_fix("executorch.xnnpack")
def _fix_unsqueeze_as_view(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    # rotary cos/sin `unsqueeze(1)` (llama, mistral, qwen2, gemma): XNNPACK unsqueezes the last dim only and splits
    # the rotary setup from the layers (2 -> 1); a static view to the same shape is an op it takes.
    if node.target is not torch.ops.aten.unsqueeze.default:
        return False
    output = node.meta.get("val")
    if not isinstance(output, torch.Tensor) or not output.is_floating_point() or free_symbols(output.shape):
        return False
    node.target, node.args = torch.ops.aten.view.default, (node.args[0], list(output.shape))
    return True


# ── Lowering swaps (stage 3, only with fast_lowering) ──

# XNNPACK preprocess passes that only rewrite specific ops: skipped for partitions that contain none of them.
_XNNPACK_PASS_TRIGGERS = {
    "XNNPACKRemoveCloneOpsTransform": ("clone",),
    "DimOrderOpsRevertPass": ("dim_order",),
    "ConvertToUpsampleBilinear2d": ("index", "upsample"),
    "PropagateCustomMetaPass": ("quantize",),
    "ConvertToSDPAPass": ("softmax",),
    # Matrix products become linear ops; a linear's view_copy input and output are folded into it.
    "ConvertToLinearPass": ("mm", "linear"),
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


@register_lowering_swap("executorch.xnnpack", "executorch.backends.xnnpack._passes.XNNPACKPassManager.__init__")
def _patch_skip_idle_xnnpack_passes(original: Callable) -> Callable:
    # XNNPACK preprocesses each partition with 17 passes that each re-trace it: skip those for ops it does not contain.
    # (~1 s a partition; _XNNPACK_PASS_TRIGGERS names the ops each pass rewrites.)
    def pruned_init(self: Any, exported_program: ExportedProgram, passes: list | None = None) -> None:
        original(self, exported_program, passes)
        if not passes:  # the default list, not an explicit one
            self.passes = _needed_passes(self.passes, exported_program.graph)

    return pruned_init


def _needed_passes(passes: list[type], graph: torch.fx.Graph) -> list[type]:
    targets = " ".join(str(node.target) for node in graph.nodes if node.op == "call_function")
    return [
        p
        for p in passes
        if p.__name__ not in _XNNPACK_PASS_TRIGGERS or any(t in targets for t in _XNNPACK_PASS_TRIGGERS[p.__name__])
    ]


@register_lowering_swap(
    "executorch.xnnpack", "executorch.backends.xnnpack._passes.remove_redundant_copy_pass.RemoveRedundantCopyPass.call"
)
def _patch_copy_removal_idle_without_copies(original: Callable) -> Callable:
    # XNNPACK's last preprocess pass re-traces each partition to drop redundant _to_copy pairs, also when the partition
    # has none (ChannelsLastTaggedReshapePass, just before, inserts them around NHWC ops): then it is skipped.
    def call(self: Any, graph_module: torch.fx.GraphModule) -> Any:
        if graph_module.graph.find_nodes(op="call_function", target=exir_ops.edge.aten._to_copy.default):
            return original(self, graph_module)
        return PassResult(graph_module, False)

    return call
