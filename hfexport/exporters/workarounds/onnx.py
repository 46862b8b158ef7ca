"""ONNX workarounds (key ``"onnx"``): torch.onnx patches, FX node fixes, onnxscript translations, IR fixes and
optimizer skips.

Sections follow ``OnnxExporter``'s stages: 1 torch patches, 2 ONNX patches, 3 FX node fixes, 4 ONNX translations,
5 ONNX IR fixes (optimizer skips first: the optimizer runs first in that stage).
Stage 1's patches that ExecuTorch needs as well are in ``lowered.py``.
"""

from __future__ import annotations

import contextvars
import copy
import functools
import inspect
import types
from collections.abc import Callable, Iterator
from typing import Any

import onnx_ir as ir
import torch
from onnxscript import opset18 as op
from torch.export import ExportedProgram

from ... import compat
from ...torch_compat import HigherOrderOperator, OpOverload, is_contiguous_or_false
from ..errors import export_stage
from ..registry import (
    apply_node_fixes,
    register_fx_node_fix,
    register_ir_fix,
    register_onnx_optimizer_skip,
    register_onnx_translation,
    register_patch,
)
from .graph import program_nodes

# ── Torch patches (stage 1) ──


@register_patch("onnx", "torch.isin")
def _patch_isin_as_comparison(original: Callable) -> Callable:
    # grounding_dino, mm_grounding_dino (phrase masks: torch.isin(input_ids, special_tokens)): the ONNX decomposition of
    # isin sorts and calls aten.searchsorted, which has no ONNX function; compare with every test element instead.
    def isin(elements: Any, test_elements: Any, *, assume_unique: bool = False, invert: bool = False) -> Any:
        if not isinstance(elements, torch.Tensor) or not isinstance(test_elements, torch.Tensor):
            return original(elements, test_elements, assume_unique=assume_unique, invert=invert)
        found = (elements.unsqueeze(-1) == test_elements.flatten()).any(-1)
        return ~found if invert else found

    return isin


# ── ONNX patches (stage 2) ──

# Fix names applied by the hook during the current export (the hook is a module-level patch, not a closure).
_APPLIED_FIXES: contextvars.ContextVar[list[str]] = contextvars.ContextVar("hfexport_onnx_applied_fixes")


@register_patch("onnx", "torch.onnx._internal.exporter._core._prepare_exported_program_for_export")
def _patch_refix_after_decompositions(original: Callable[..., ExportedProgram]) -> Callable[..., ExportedProgram]:
    # Nodes that run_decompositions creates bypass the stage 3 fixes run on the traced graph: re-run them here.
    def prepare(exported_program: ExportedProgram, *, registry: Any) -> ExportedProgram:
        with export_stage("onnx", 2, "ONNX patches"):
            decomposed = original(exported_program, registry=registry)
            apply_node_fixes("onnx", decomposed.graph_module, _APPLIED_FIXES.get([]))
        return decomposed

    return prepare


@register_patch("onnx", "onnxscript.rewriter._DEFAULT_REWRITE_RULES")
def _patch_optimizer_keeps_small_constants(original: tuple) -> tuple:
    # muse_spark, muse_glimmer (RMSNorm eps 1e-8 on expert outputs): onnxscript 0.7.2's no-op rules match constants
    # within abs_tol 1e-8 of 0 or 1, so `x + 1e-8` is removed as `x + 0` (8e-4 .. 1.8e-2 off): leave those rules out.
    from onnxscript.rewriter.rules.common import _no_op

    approximate = {id(rule) for rule in _no_op.rules.rules}
    approximate -= {id(_no_op.dropout_zero_rule), id(_no_op.dropout_inference_rule)}
    return tuple(rule for rule in original if id(rule) not in approximate)


@register_patch("onnx", "onnxscript.rewriter._rewrite_rule.RewriteRule.try_rewrite")
def _patch_rewrite_rule_tried_on_its_root_op_only(original: Callable) -> Callable:
    # Speed: the optimizer tries every rewrite rule on every node (43k tries on a tiny gemma3, most of its 1-3 s); a
    # rule whose pattern ends in a fixed op cannot match a node of another op, so those tries stop at the op type.
    def try_rewrite(self: Any, model: Any, graph_or_function: Any, node: Any, **kwargs: Any) -> Any:
        pattern = self._target_pattern
        root = pattern.output_node if pattern.has_single_output_node else None
        if root is not None and root.op_identifier() is not None and root.op_type != node.op_type:
            return None
        return original(self, model, graph_or_function, node, **kwargs)

    return try_rewrite


@register_patch("onnx", "onnxscript.rewriter._matcher.SimplePatternMatcher.match")
def _patch_output_nodes_of_one_input_matched_among_its_consumers(original: Callable) -> Callable:
    # Speed: a pattern of several output nodes (SlicesSplit: two Slices of one x) is tried on every pair of same-op
    # nodes in the graph; nemotron3_5_transcribe's audio chunks give thousands of Slices: 280 s of optimize. Output
    # nodes reading one pattern input can only match nodes that consume the same value: only those are tried.
    def match(self: Any, model: Any, graph_or_function: Any, node: Any, **kwargs: Any) -> Any:
        outputs = self.pattern.output_nodes
        shared = len(outputs) > 1 and all(o.inputs and o.inputs[0] is outputs[0].inputs[0] for o in outputs)
        if not shared:
            return original(self, model, graph_or_function, node, **kwargs)
        graph = graph_or_function if isinstance(graph_or_function, ir.Graph) else graph_or_function.graph
        first = node.inputs[0] if node.inputs else None
        consumers = list(dict.fromkeys(first.consumers())) if first is not None else []
        return original(self, model, _NodesOf(graph, consumers), node, **kwargs)

    return match


class _NodesOf:
    """A graph as the multi-output matcher reads it: its ``graph``, and the nodes to try iterated."""

    def __init__(self, graph: Any, nodes: list[Any]):
        self.graph, self.nodes = graph, nodes

    def __iter__(self) -> Iterator[Any]:
        return iter(self.nodes)


@register_patch("onnx", "torch.onnx._internal.exporter._core._handle_output_node")
def _patch_constant_outputs_left_to_the_runner(original: Callable) -> Callable:
    # maskformer-swin (hidden_states_spatial_dimensions): a Python int among the outputs fails torch.onnx's output
    # translation ("'int' object has no attribute 'name'"); left out like a None, the runner puts it back.
    def handle_output_node(node: torch.fx.Node, *args: Any, **kwargs: Any) -> None:
        outputs = node.args[0]
        if isinstance(outputs, (tuple, list)) and not all(isinstance(o, (torch.fx.Node, type(None))) for o in outputs):
            kept = tuple(o if isinstance(o, torch.fx.Node) else None for o in outputs)
            node = types.SimpleNamespace(name=node.name, args=(kept,))
        return original(node, *args, **kwargs)

    return handle_output_node


# torch.onnx registries of torchlib translations built so far, by opset: every export gets a copy of its own.
_TORCHLIB_REGISTRIES: dict[Any, Any] = {}


@register_patch("onnx", "torch.onnx._internal.exporter._registration.ONNXRegistry.from_torchlib")
def _patch_torchlib_registry_built_once(original: Callable) -> Callable:
    # Speed: torch.onnx builds the registry of every torchlib translation anew for each export (1.3 s, a tenth of a
    # tiny decoder's export); build it once per opset, then copy it (an export adds its custom translations to it).
    def from_torchlib(cls: type, *args: Any, **kwargs: Any) -> Any:
        bound = inspect.signature(original).bind(cls, *args, **kwargs)
        bound.apply_defaults()
        key = (cls, bound.arguments.get("opset_version"))
        if key not in _TORCHLIB_REGISTRIES:
            _TORCHLIB_REGISTRIES[key] = original(cls, *args, **kwargs)
        built = _TORCHLIB_REGISTRIES[key]
        registry = copy.copy(built)
        registry.functions = {target: list(decompositions) for target, decompositions in built.functions.items()}
        return registry

    return from_torchlib


@register_patch("onnx", "torch.onnx._internal.exporter._fx_passes.decompose_with_registry")
def _patch_decomposition_only_when_needed(original: Callable) -> Callable:
    # Speed: torch.onnx re-traces the whole program to decompose it (1-1.5 s a dynamic program, most of torch.onnx's
    # export) also when the re-trace would change nothing: no op of its table, no mutation, no composite op it would
    # break up that torchlib does not translate. Such a program is translated as it is.
    def decompose_with_registry(exported_program: ExportedProgram, registry: Any) -> ExportedProgram:
        from ...torch_compat import _decomp

        table = _decomp.create_onnx_friendly_decomposition_table(set(_decomp.get_onnx_implemented_overloads(registry)))
        targets = {node.target for node in program_nodes(exported_program.graph_module) if node.op == "call_function"}
        if any(_changed_by_decomposition(target, table, registry) for target in targets):
            return original(exported_program, registry)
        return exported_program

    return decompose_with_registry


def _changed_by_decomposition(target: Any, table: dict, registry: Any) -> bool:
    from ...torch_compat import _is_cia_op, _is_preservable_cia_op

    if isinstance(target, HigherOrderOperator):
        return True
    if not isinstance(target, OpOverload):
        return False  # operator.getitem, SymInt arithmetic
    if target in table or target._schema.is_mutable:
        return True
    # A composite op the re-trace breaks up (it aliases, so export cannot keep it) and torchlib does not translate.
    return _is_cia_op(target) and not _is_preservable_cia_op(target) and not registry.is_registered(target)


@register_patch("onnx", "torch.onnx._internal.exporter._fx_passes.insert_type_promotion_nodes")
def _patch_type_promotion_only_when_needed(original: Callable) -> Callable:
    # Speed: torch.onnx runs the whole program again on fake tensors (0.15 s a program) to find the ops whose inputs
    # need a cast to their promoted dtype, also when none does; the traced values already say whether one does.
    def insert_type_promotion_nodes(graph_module: torch.fx.GraphModule) -> None:
        if any(_needs_promotion(node) for node in program_nodes(graph_module)):
            original(graph_module)

    return insert_type_promotion_nodes


def _needs_promotion(node: torch.fx.Node) -> bool:
    """Whether torch.onnx's type promotion would cast an input of ``node``; True where the traced values cannot say."""
    from ...torch_compat import get_type_promotion_rule

    rule = get_type_promotion_rule(node, _type_promotion_table()) if node.op == "call_function" else None
    if rule is None:
        return False
    unknown = object()
    args, kwargs = torch.fx.node.map_aggregate(
        (node.args, node.kwargs), lambda arg: arg.meta.get("val", unknown) if isinstance(arg, torch.fx.Node) else arg
    )
    try:
        promotion = rule.preview_type_promotion(args, kwargs)
    except Exception:
        return True
    # Argument by argument, as torch.onnx's pass reads them (an argument the rule names no dtype for is left alone).
    wanted = [(value, promotion.args_dtypes.get(i)) for i, value in enumerate(args)]
    wanted += [(value, promotion.kwargs_dtypes.get(name)) for name, value in kwargs.items()]
    return any(dtype is not None and _other_dtype(value, dtype, unknown) for value, dtype in wanted)


def _other_dtype(value: Any, dtype: torch.dtype, unknown: object) -> bool:
    from ...torch_compat import from_scalar_type_to_torch_dtype

    if isinstance(value, list | tuple):
        return any(_other_dtype(item, dtype, unknown) for item in value)
    if isinstance(value, torch.Tensor):
        return value.dtype != dtype
    found = None if value is unknown else from_scalar_type_to_torch_dtype(type(value))
    return found is None or found != dtype  # a value of no known dtype: let torch.onnx's pass decide


@functools.cache
def _type_promotion_table() -> Any:
    from ...torch_compat import TypePromotionTable

    return TypePromotionTable()


# ── FX node fixes (stage 3) ──


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
    if node.target is not torch.ops.aten.detach_.default:
        return False
    node.replace_all_uses_with(node.args[0])
    graph_module.graph.erase_node(node)
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


# ── ONNX translations (stage 4) ──


@register_onnx_translation("operator.floordiv")
def _aten_sym_floordiv(self: Any, other: Any) -> Any:
    # torchlib lowers SymInt `//` to Div, which truncates: the ceil-div idiom -(-n // k) (minimax_m3_vl) is off by one.
    return op.Div(op.Sub(self, op.Mod(self, other)), other)


@register_onnx_translation("torch.ops.aten.repeat_interleave.self_int")
def _aten_repeat_interleave_self_int(self: Any, repeats: Any, dim: int | None = None, output_size: Any = None) -> Any:
    # instructblipvideo (ids repeated per frame): torchlib (onnxscript 0.7.2) puts a symbolic repeat count at axis dim,
    # not dim + 1, of its Expand ("invalid expand shape" in onnxruntime): expand a new axis after dim, then merge.
    if dim is None:
        self, dim = op.Reshape(self, op.Constant(value_ints=[-1])), 0
    else:
        dim %= len(self.shape)
    count = op.Constant(value_ints=[repeats]) if isinstance(repeats, int) else op.Reshape(repeats, [-1])
    expanded = op.Expand(
        op.Unsqueeze(self, [dim + 1]),
        op.Concat(op.Shape(self, start=0, end=dim + 1), count, op.Shape(self, start=dim + 1), axis=0),
    )
    merged = op.Mul(op.Shape(self, start=dim, end=dim + 1), count)
    return op.Reshape(
        expanded, op.Concat(op.Shape(self, start=0, end=dim), merged, op.Shape(self, start=dim + 1), axis=0)
    )


@register_onnx_translation("torch.ops.aten._is_all_true.default")
def _aten_is_all_true(self: Any) -> Any:
    # lfm2_vl (transformers' torch_compilable_check on a tensor condition calls torch._check_tensor_all): it
    # traces to aten._is_all_true, which torchlib has no translation for.
    # The minimum of an empty tensor is the identity (the largest int64), so an empty check holds, as in torch.
    return op.Cast(op.ReduceMin(op.Cast(self, to=ir.DataType.INT64), keepdims=0), to=ir.DataType.BOOL)


# Importing transformers.integrations.moe defines torch.ops.transformers.grouped_mm_fallback, when it has one.
compat.internal("transformers.integrations.moe")


@register_onnx_translation(
    "torch.ops.transformers.grouped_mm_fallback.default", defined_by="transformers.integrations.moe"
)
def _aten_grouped_mm(mat_a: Any, mat_b: Any, offs: Any) -> Any:
    # MoE experts (mixtral, qwen2_moe, ...) run transformers::grouped_mm_fallback, which torchlib cannot lower.
    # Rows are sorted by expert and offs holds cumulative row counts: every expert runs on every row, each row keeps
    # its own expert's result (rows past offs[-1] stay zero, as in the fallback).
    offs = op.Cast(offs, to=ir.DataType.INT64)
    rows = op.Range(op.Constant(value_int=0), op.Squeeze(op.Shape(mat_a, start=0, end=1)), op.Constant(value_int=1))
    row_ends_before = op.GreaterOrEqual(op.Unsqueeze(rows, [1]), op.Unsqueeze(offs, [0]))
    expert = op.ReduceSum(op.Cast(row_ends_before, to=ir.DataType.INT64), [1], keepdims=0)
    last_expert = op.Sub(op.Shape(mat_b, start=0, end=1), op.Constant(value_ints=[1]))
    every_expert = op.MatMul(op.Unsqueeze(mat_a, [0]), mat_b)  # (experts, rows, out)
    index = op.Expand(op.Unsqueeze(op.Min(expert, last_expert), [0, 2]), op.Shape(every_expert))
    picked = op.Squeeze(op.GatherElements(every_expert, op.Slice(index, [0], [1], [0]), axis=0), [0])
    in_a_group = op.Unsqueeze(op.Less(rows, op.Slice(offs, [-1], [9223372036854775807])), [1])
    return op.Where(in_a_group, picked, op.CastLike(op.Constant(value_float=0.0), picked))


# ── ONNX IR fixes (stage 5) ──


_PROPHETNET = "transformers.models.prophetnet.modeling_prophetnet"


@register_onnx_optimizer_skip(
    f"{_PROPHETNET}.ProphetNetModel",
    f"{_PROPHETNET}.ProphetNetForConditionalGeneration",
    f"{_PROPHETNET}.ProphetNetForCausalLM",
)
def _skip_optimizer_on_split_to_sequence_of_scalar() -> None:
    """onnxscript 0.7.2 constant folding crashes on SplitToSequence whose `split` is a non-constant scalar (prophetnet).

    It reads split_value.ndim of None; the split=None case was fixed in microsoft/onnxscript#2550.
    """


@register_ir_fix("onnx")
def _fix_ir_bool_where(model: ir.Model) -> bool:
    # onnxruntime's CPU provider has no Where kernel for BOOL data (masked_fill/where on a bool mask): use logic ops.
    changed = False
    for node in list(ir.traversal.RecursiveGraphIterator(model.graph)):
        if node.op_type != "Where" or node.domain not in ("", "ai.onnx") or node.outputs[0].dtype != ir.DataType.BOOL:
            continue
        condition, if_true, if_false = node.inputs
        negated = ir.node("Not", [condition])
        kept_true = ir.node("And", [condition, if_true])
        kept_false = ir.node("And", [negated.outputs[0], if_false])
        merged = ir.node("Or", [kept_true.outputs[0], kept_false.outputs[0]])
        _replace_node(node, [negated, kept_true, kept_false, merged])
        changed = True
    return changed


def _replace_node(node: ir.Node, steps: list[ir.Node]) -> None:
    """Put ``steps`` in place of the one-output ``node``: the last step's output takes its name, type and users."""
    old, new = node.outputs[0], steps[-1].outputs[0]
    new.shape, new.type = old.shape, old.type
    node.graph.insert_before(node, steps)
    ir.convenience.replace_all_uses_with(old, new, replace_graph_outputs=True)
    node.graph.remove(node, safe=True)
    new.name = old.name


_WRAPPING_INTEGERS = (ir.DataType.INT32, ir.DataType.INT64)


@register_ir_fix("onnx")
def _fix_ir_integer_reduce_sum_as_cumsum(model: ir.Model) -> bool:
    # blt's byte-group hashes (sum of token * prime**i in int64, wrapping as in torch): onnxruntime's CPU ReduceSum
    # sums integers inexactly past 2**53 and saturates where torch wraps (logits 5.86 off); its CumSum is exact, so
    # each axis is summed by CumSum and its last row kept.
    changed = False
    for node in list(ir.traversal.RecursiveGraphIterator(model.graph)):
        if node.op_type != "ReduceSum" or node.domain not in ("", "ai.onnx"):
            continue
        axes = _reduced_axes(node)
        if axes is None or node.outputs[0].dtype not in _WRAPPING_INTEGERS:
            continue
        summed, steps = node.inputs[0], []
        for axis in axes:
            cumulative = ir.node("CumSum", [summed, _constant(steps, axis)])
            last = ir.node("Slice", [cumulative.outputs[0], *(_constant(steps, [v]) for v in (-1, 2**63 - 1, axis))])
            steps += [cumulative, last]
            summed = last.outputs[0]
        if not node.attributes.get_int("keepdims", 1):
            steps.append(ir.node("Squeeze", [summed, _constant(steps, axes)]))
        _replace_node(node, steps)
        changed = True
    return changed


def _reduced_axes(node: ir.Node) -> list[int] | None:
    """The axes a ReduceSum sums over, when known before running it (None: unknown, or no sum at all)."""
    given = node.inputs[1] if len(node.inputs) > 1 else None
    tensor = None if given is None else ir.convenience.get_const_tensor(given)
    if given is not None and tensor is None:
        return None
    axes = [] if tensor is None else [int(axis) for axis in tensor.numpy().reshape(-1)]
    if axes:
        return axes
    rank = node.inputs[0].shape.rank() if node.inputs[0].shape is not None else None
    if node.attributes.get_int("noop_with_empty_axes", 0) or rank is None:
        return None
    return list(range(rank)) or None


def _constant(steps: list[ir.Node], value: int | list[int]) -> ir.Value:
    """An int64 Constant node appended to ``steps`` (a scalar for an int, 1-D for a list); its output."""
    steps.append(ir.node("Constant", [], attributes={"value": ir.tensor(value, dtype=ir.DataType.INT64)}))
    return steps[-1].outputs[0]


@register_ir_fix("onnx")
def _fix_ir_unregistered_constants(model: ir.Model) -> bool:
    # gemma4 audio: onnxscript 0.7.2's optimizer gives a Clip constant -inf/inf bounds it never registers as
    # initializers ('mul_322_min_1'); onnx.checker rejects the graph ("Nodes in a graph must be topologically
    # sorted"): register them.
    changed = False
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        for value in node.inputs:
            if value is None or value.producer() is not None or value.const_value is None:
                continue
            if not value.is_graph_input() and not value.is_initializer():
                model.graph.register_initializer(value)
                changed = True
    return changed
