"""FX node fixes (key ``"onnx"``, stage 3): single graph nodes torch.onnx cannot lower, rewritten before translation."""

from __future__ import annotations

from typing import Any

import torch

from ....torch_compat import OpOverload, is_contiguous_or_false
from ...registry import (
    register_fx_node_fix,
)


def _fake_value(node: Any) -> torch.Tensor | None:
    value = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return value if isinstance(value, torch.Tensor) else None


def _read_contiguous_copy(graph_module: torch.fx.GraphModule, node: torch.fx.Node, source: torch.fx.Node) -> None:
    """Make ``node`` read a contiguous clone of its input ``source`` instead of ``source`` itself."""
    with graph_module.graph.inserting_before(node):
        contiguous = graph_module.graph.call_function(
            torch.ops.aten.clone.default, (source,), {"memory_format": torch.contiguous_format}
        )
    value = _fake_value(source)
    if value is not None:
        contiguous.meta["val"] = value.clone(memory_format=torch.contiguous_format)
    node.replace_input_with(source, contiguous)


@register_fx_node_fix("onnx")
def _fix_contiguous_as_clone(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    # sam3 (DETR decoder cross-attention): torch.onnx's decomposition passes disagree on SDPA's output layout, so a
    # .contiguous() dropped as a no-op in one pass leaves a view of a transposed tensor in the next; clone always stays.
    if node.target is not torch.ops.aten.contiguous.default:
        return False
    value = _fake_value(node.args[0])
    if value is None or is_contiguous_or_false(value):
        return False
    node.target, node.kwargs = torch.ops.aten.clone.default, {"memory_format": torch.contiguous_format}
    return True


@register_fx_node_fix("onnx")
def _fix_view_of_transpose(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    # A view (or reshape) of a transposed SDPA output is traced against one kernel's layout and torch.onnx
    # re-decomposes with another ("Cannot view a tensor": t5, on transformers 5.22 and 5.23): read a contiguous
    # copy, an Identity in ONNX.
    if node.target not in (torch.ops.aten.view.default, torch.ops.aten.reshape.default):
        return False
    source = node.args[0]
    transposes = (torch.ops.aten.transpose.int, torch.ops.aten.permute.default)
    if not isinstance(source, torch.fx.Node) or source.target not in transposes:
        return False
    _read_contiguous_copy(graph_module, node, source)
    return True


@register_fx_node_fix("onnx")
def _fix_squeeze_of_non_unit_dim(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    # parakeet TDT (joint output): squeeze(2) of a dim of size 7 is a no-op in torch, but becomes an ONNX Squeeze that
    # the checker rejects ("Dimension of input 2 must be 1 instead of 7"); drop the dims that are statically not 1.
    if node.target not in (torch.ops.aten.squeeze.dim, torch.ops.aten.squeeze.dims):
        return False
    value = _fake_value(node.args[0])
    if value is None:
        return False
    dims = list(node.args[1]) if isinstance(node.args[1], list | tuple) else [node.args[1]]
    kept = [dim for dim in dims if not (isinstance(value.shape[dim], int) and value.shape[dim] != 1)]
    if len(kept) == len(dims):
        return False
    if kept:
        node.target, node.args = torch.ops.aten.squeeze.dims, (node.args[0], kept)
    else:
        node.replace_all_uses_with(node.args[0])
        graph_module.graph.erase_node(node)
    return True


@register_fx_node_fix("onnx")
def _fix_rsub_of_integer_tensor(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    # prophetnet's `1.0 - int_mask`: torch's decomposition of aten.rsub.Scalar(integer tensor, float) finds no aten.sub
    # overload ("Cannot find a compatible OpOverload"); cast the tensor to the promoted float dtype first.
    if node.target is not torch.ops.aten.rsub.Scalar:
        return False
    source, scalar = node.args[0], node.args[1]
    value = _fake_value(source)
    if value is None or value.is_floating_point() or value.is_complex() or not isinstance(scalar, float):
        return False
    dtype = torch.result_type(value, scalar)
    with graph_module.graph.inserting_before(node):
        cast = graph_module.graph.call_function(torch.ops.aten._to_copy.default, (source,), {"dtype": dtype})
    cast.meta["val"] = value.to(dtype)
    node.replace_input_with(source, cast)
    return True


@register_fx_node_fix("onnx")
def _fix_bfloat16_product_in_float32(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    # falcon's alibi (`slopes.bfloat16() * positions`): onnxruntime has no bfloat16 Mul on CPU ("Could not find an
    # implementation for Mul(14)"); multiply the bfloat16 operands in float32 and round to bfloat16, as torch does.
    value = _fake_value(node)
    if node.target is not torch.ops.aten.mul.Tensor or value is None or value.dtype is not torch.bfloat16:
        return False
    graph = graph_module.graph
    with graph.inserting_before(node):
        for source in dict.fromkeys(arg for arg in node.args if isinstance(arg, torch.fx.Node)):
            operand = _fake_value(source)
            if operand is not None:  # torch rounds each operand to bfloat16 (a no-op for bfloat16 ones) first
                rounded = _cast(graph, source, operand, value.dtype) if operand.dtype != value.dtype else source
                node.replace_input_with(source, _cast(graph, rounded, operand.to(value.dtype), torch.float32))
    with graph.inserting_after(node):
        product = _cast(graph, node, value.to(torch.float32), value.dtype)
    node.replace_all_uses_with(product, delete_user_cb=lambda user: user is not product)
    node.meta["val"] = value.to(torch.float32)
    return True


def _cast(graph: torch.fx.Graph, source: torch.fx.Node, value: torch.Tensor, dtype: torch.dtype) -> torch.fx.Node:
    """A ``_to_copy`` of ``source`` (whose fake value is ``value``) to ``dtype``, at the graph's insertion point."""
    cast = graph.call_function(torch.ops.aten._to_copy.default, (source,), {"dtype": dtype})
    cast.meta["val"] = value.to(dtype)
    return cast


_CONVERSIONS = (torch.ops.aten.to.dtype, torch.ops.aten.to.device, torch.ops.aten.to.dtype_layout)


@register_fx_node_fix("onnx")
def _fix_conversion_as_copy(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    # Every model's `.to(dtype)`: a composite op torch.onnx breaks up into _to_copy by re-tracing the whole program
    # (see _patch_decomposition_only_when_needed); as _to_copy to the same dtype, no re-trace is needed for it.
    value = _fake_value(node)
    if node.target not in _CONVERSIONS or value is None:
        return False
    memory_format = node.kwargs.get("memory_format")
    kwargs = {"dtype": value.dtype, **({"memory_format": memory_format} if memory_format is not None else {})}
    node.target, node.args, node.kwargs = torch.ops.aten._to_copy.default, (node.args[0],), kwargs
    return True


_BITWISE_OPERATORS = {
    torch.ops.aten.__and__.Tensor: torch.ops.aten.bitwise_and.Tensor,
    torch.ops.aten.__and__.Scalar: torch.ops.aten.bitwise_and.Scalar,
    torch.ops.aten.__or__.Tensor: torch.ops.aten.bitwise_or.Tensor,
    torch.ops.aten.__or__.Scalar: torch.ops.aten.bitwise_or.Scalar,
    torch.ops.aten.__xor__.Tensor: torch.ops.aten.bitwise_xor.Tensor,
    torch.ops.aten.__xor__.Scalar: torch.ops.aten.bitwise_xor.Scalar,
}


@register_fx_node_fix("onnx")
def _fix_bitwise_operator_as_its_op(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    # Attention masks' `a & b`: aten.__and__ is in torch.onnx's decomposition table only to become bitwise_and, by
    # re-tracing the whole program; named bitwise_and here, it needs no re-trace.
    if node.target not in _BITWISE_OPERATORS:
        return False
    node.target = _BITWISE_OPERATORS[node.target]
    return True


@register_fx_node_fix("onnx")
def _fix_in_place_detach_dropped(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    # `torch.tensor(...)` in a forward traces to lift_fresh_copy then detach_, an in-place op that only drops autograd
    # history and that torch.onnx functionalizes by re-tracing the whole program; an export's values never have any.
    # Retargeted, not erased: the node may be an output the program's signature names (Reformer's cached buckets).
    if node.target is not torch.ops.aten.detach_.default:
        return False
    node.target = torch.ops.aten.detach.default
    return True


@register_fx_node_fix("onnx")
def _fix_index_copy_as_index_put(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    # Every generation program's static-cache update: torchlib has no index_copy, and torch.onnx re-traces the whole
    # program (0.8 s a program) for its table to write it as the index_put it is; named index_put here, none is needed.
    if node.target is not torch.ops.aten.index_copy.default or len(node.args) != 4 or node.kwargs:
        return False
    source, dim, index, written = node.args
    value, positions = _fake_value(source), _fake_value(index)
    if value is None or positions is None or value.ndim == 0 or positions.ndim != 1:
        return False
    indices = [None] * (dim % value.ndim) + [index]
    node.target, node.args = torch.ops.aten.index_put.default, (source, indices, written)
    return True


@register_fx_node_fix("onnx")
def _fix_adaptive_avg_pool1d_to_one_as_mean(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    # The swin family's poolers: torchlib has no adaptive_avg_pool1d, and torch.onnx re-traces the whole program
    # (1-2 s on swin) for its table to write it; pooled to one value it is the mean of the last dim.
    pooled_to_one = len(node.args) == 2 and not node.kwargs and node.args[1] in (1, [1], (1,))
    if node.target is not torch.ops.aten.adaptive_avg_pool1d.default or not pooled_to_one:
        return False
    node.target, node.args = torch.ops.aten.mean.dim, (node.args[0], [-1], True)
    return True


@register_fx_node_fix("onnx")
def _fix_inplace_relu_of_an_unshared_value(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    # swinv2, swin2sr (nn.ReLU(inplace=True) after a Linear or a conv): an in-place op makes torch.onnx re-trace the
    # whole program to make it functional; on a fresh value no other node reads, relu_ is relu.
    if node.target is not torch.ops.aten.relu_.default or len(node.args) != 1 or node.kwargs:
        return False
    (source,) = node.args
    if not isinstance(source, torch.fx.Node) or source.op != "call_function" or len(source.users) != 1:
        return False
    if not isinstance(source.target, OpOverload) or _returns_an_alias(source.target):
        return False
    node.target = torch.ops.aten.relu.default
    return True


def _returns_an_alias(op: OpOverload) -> bool:
    """Whether ``op`` returns a view of (or writes into) one of its inputs."""
    return op._schema.is_mutable or any(result.alias_info is not None for result in op._schema.returns)
