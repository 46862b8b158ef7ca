"""ONNX patches (key ``"onnx"``): torch patches while tracing (stage 1) and patches of torch.onnx and onnxscript while
converting (stage 2). Stage 1's patches that ExecuTorch needs as well are in ``workarounds/onnx_and_executorch.py``.
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
from onnxscript.rewriter.rules.common import _no_op
from torch.export import ExportedProgram

from ....torch_compat import (
    HigherOrderOperator,
    OpOverload,
    TypePromotionTable,
    _decomp,
    _is_cia_op,
    _is_preservable_cia_op,
    from_scalar_type_to_torch_dtype,
    get_type_promotion_rule,
)
from ...errors import export_stage
from ...registry import (
    apply_node_fixes,
    register_patch,
)
from ..graph import program_nodes

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
        table = _decomp.create_onnx_friendly_decomposition_table(set(_decomp.get_onnx_implemented_overloads(registry)))
        targets = {node.target for node in program_nodes(exported_program.graph_module) if node.op == "call_function"}
        if any(_changed_by_decomposition(target, table, registry) for target in targets):
            return original(exported_program, registry)
        return exported_program

    return decompose_with_registry


def _changed_by_decomposition(target: Any, table: dict, registry: Any) -> bool:
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
    if isinstance(value, list | tuple):
        return any(_other_dtype(item, dtype, unknown) for item in value)
    if isinstance(value, torch.Tensor):
        return value.dtype != dtype
    found = None if value is unknown else from_scalar_type_to_torch_dtype(type(value))
    return found is None or found != dtype  # a value of no known dtype: let torch.onnx's pass decide


@functools.cache
def _type_promotion_table() -> Any:
    return TypePromotionTable()
