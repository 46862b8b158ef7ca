"""ExecuTorch lowering swaps (key ``"executorch"``, stage 3): what ``ExecutorchConfig(fast_lowering=True)`` installs.

Measured on a tiny 2-layer Llama (scripts/bench_executorch.py): the cost of lowering is re-tracing. These swaps change
no program semantics; ``ExecutorchConfig(fast_lowering=False)`` lowers without them (the slow sweep
``test_reference_lowering_gives_the_same_program_semantics`` compares the two).
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import Any

import torch
from executorch.exir.backend import backend_api
from executorch.exir.passes import MemoryFormatOpsPass
from executorch.exir.passes.dim_order_ops_registry import DimOrderOpsMap
from executorch.exir.passes.normalize_transpose_pass import NormalizeTransposePass
from executorch.exir.passes.remove_mixed_type_operators import RemoveMixedTypeOperators
from executorch.exir.passes.replace_broken_ops_with_function_ops_pass import ReplaceBrokenOpsWithFunctionalOpsPass
from executorch.exir.passes.scalar_to_tensor_pass import ScalarToTensorPass
from executorch.exir.passes.sym_to_tensor_pass import SymToTensorPass
from torch.export import ExportedProgram

from ....torch_compat import (
    _NON_FUNCTIONAL_OPS_TO_FUNCTIONAL_OPS,
    OpOverload,
    PassBase,
    PassResult,
    get_view_copy_of_view_op,
    legalize_graph,
)
from ...registry import register_lowering_swap
from ..dynamo.fast_tracing import (
    GRAPH_MODULE_CONSTRUCTOR,
    RESHAPE_VIEW_HELPER,
    _patch_graph_modules_compiled_on_first_call,
    _patch_view_of_contiguous_as_strided,
)
from ..graph import program_nodes

# Lowering makes most of a program's GraphModules (each pass, each partition): their Python code too waits for a call.
register_lowering_swap("executorch", GRAPH_MODULE_CONSTRUCTOR)(_patch_graph_modules_compiled_on_first_call)
# Each re-trace of a dynamic program views its symbolic tensors again (swin2sr: 4.9 -> 4.6 s).
register_lowering_swap("executorch", RESHAPE_VIEW_HELPER)(_patch_view_of_contiguous_as_strided)


@register_lowering_swap("executorch", "torch.export.exported_program.ExportedProgram.run_decompositions")
def _patch_decompose_once(original: Callable) -> Callable:
    # Lowering's re-trace with an empty decomposition table only functionalizes, as the real table's does too: skip it.
    # (0.5 s on llama, 1.3 s on t5.)
    def run_decompositions(self: ExportedProgram, decomp_table: dict | None = None, *args: Any, **kwargs: Any) -> Any:
        if decomp_table is not None and not decomp_table:
            return self
        return original(self, decomp_table, *args, **kwargs)

    return run_decompositions


@register_lowering_swap("executorch", "executorch.exir.program._program.contains_any_call_fn_target_op")
def _patch_table_pass_always_runs(_original: Callable) -> Callable:
    # The decomposition-table pass is skipped when no op of the table is left, but it functionalizes: always run it.
    # (With _patch_decompose_once it is the only re-trace that functionalizes.)
    return lambda graph_module, ops: True


@register_lowering_swap("executorch", "torch.export.exported_program._convert_guards_to_code")
def _patch_no_guards_as_code(_original: Callable) -> Callable:
    # Every intermediate ExportedProgram prints its shape guards as code for .module(), which ExecuTorch never calls.
    return lambda graph_module: []


@register_lowering_swap("executorch", "executorch.exir.program._program._sanity_check_graph_for_non_decomp_ops")
def _patch_undelegated_kept_op_warns(original: Callable) -> Callable:
    # Fast lowering keeps whole only ops with a portable kernel, so an undelegated kept op warns instead of failing.
    # (higgs_audio_v2's linear, which XNNPACK declines, runs on its portable kernel.)
    def check(*args: Any, **kwargs: Any) -> None:
        original(*args, **{**kwargs, "generate_error": False})

    return check


@register_lowering_swap("executorch", "executorch.exir.program._program._get_aten_to_edge_passes")
def _patch_operator_passes_in_one_retrace(original: Callable) -> Callable:
    # Each aten-to-edge ExportPass re-traces the whole program (~1 s on a tiny decoder, mostly symbolic shapes); five
    # only rewrite single operators, so one re-trace runs them all. (llama: to_edge 15.7 -> 12.9 s, the same .pte)
    def passes(config: Any) -> tuple[list, list]:
        pre_op_replace, post_op_replace = original(config)
        return _operator_passes_fused(pre_op_replace), post_op_replace

    return passes


def _operator_passes_fused(passes: list) -> list:
    """``passes`` with the operator-only ones run as one ExportPass whose ``call_operator`` chains theirs in list order
    (an operator one rewrites reaches the next as the next would see it in its own re-trace); the rest keep their place.
    """

    # Each overrides only call_operator (ScalarToTensorPass's call only resets its flag): read in executorch 1.5.
    operator_only = (
        NormalizeTransposePass,
        ReplaceBrokenOpsWithFunctionalOpsPass,
        ScalarToTensorPass,
        SymToTensorPass,
        RemoveMixedTypeOperators,
    )
    # The pass manager wraps each pass in a function that keeps it as __wrapped__.
    unwrapped = [getattr(each, "__wrapped__", each) for each in passes]
    chained = [each for each in unwrapped if type(each) in operator_only]
    if len(chained) < 2:
        return passes
    fused = type("OperatorPasses", tuple(type(each) for each in chained), {})()
    first = unwrapped.index(chained[0])
    # The cheap in-place passes between them (no-ops, empty tensors, redundant copies) now run after them all.
    kept = [each for each, bare in zip(passes, unwrapped, strict=True) if bare not in chained]
    return [*kept[:first], fused, *kept[first:]]


@register_lowering_swap("executorch", "executorch.exir.program._program.ReplaceViewOpsWithViewCopyOpsPass")
def _patch_view_copies_renamed_in_place(_original: Callable) -> Callable:
    # Edge conversion re-traces the whole program only to rename view ops to their copies (0.7 s on gemma3's text
    # model); renamed in place, the operator passes' re-trace that follows recomputes the values the rename changes.
    return _ViewCopiesInPlace


class _ViewCopiesInPlace(PassBase):
    """Each view op (and ``_unsafe_view``) renamed to its ``*_copy`` op, as torch's ReplaceViewOpsWithViewCopyOpsPass
    does while it re-traces; node values are left for the next re-trace to recompute."""

    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        for module in graph_module.modules():
            if not isinstance(module, torch.fx.GraphModule):
                continue
            for node in module.graph.nodes:
                if node.op == "call_function" and isinstance(node.target, OpOverload):
                    functional = _NON_FUNCTIONAL_OPS_TO_FUNCTIONAL_OPS.get(node.target)
                    node.target = functional or get_view_copy_of_view_op(node.target._schema) or node.target
            module.recompile()
        return PassResult(graph_module, True)


@register_lowering_swap("executorch", "executorch.exir.program._program.OpReplacePass")
def _patch_dim_orders_in_op_replace_retrace(original: Callable) -> Callable:
    # Renaming aten ops to edge ops and memory formats to dim orders are two whole-program re-traces (0.4 s each on
    # gemma3's text model), one right after the other: one re-trace chains both, in the same order.
    # (EdgeCompileConfig._skip_dim_order stays False in our lowering, so the dim-order rename always runs there.)
    return type("OpReplaceAndDimOrderPass", (original, MemoryFormatOpsPass), {})


@register_lowering_swap("executorch", "executorch.exir.program._program.MemoryFormatOpsPass")
def _patch_idle_dim_order_rename_skipped(original: Callable) -> Callable:
    # The memory-format rename re-traces the program even when no op takes a memory format any more (the op-replace
    # re-trace renamed them all): then it returns the program as it is.
    def takes_memory_format(self: Any, node: torch.fx.Node) -> bool:
        return node.op == "call_function" and node.target in DimOrderOpsMap

    return type(original.__name__, (original,), {"call": _retraced_only_if(takes_memory_format, original.call)})


def _retraced_only_if(needs: Callable[[Any, torch.fx.Node], bool], call: Callable) -> Callable:
    """A pass's ``call`` run only when some node of the program (submodules' included) ``needs(pass, node)`` it; else
    the program is returned as it is, without the pass's whole-program re-trace."""

    def skipping(self: Any, graph_module: torch.fx.GraphModule) -> PassResult:
        if any(needs(self, node) for node in program_nodes(graph_module)):
            return call(self, graph_module)
        return PassResult(graph_module, False)

    return skipping


@register_lowering_swap("executorch", "executorch.exir.backend.backend_api._create_partitions_in_graph_module")
def _patch_partitions_sorted_once(original: Callable) -> Callable:
    # Each delegate partition re-sorts the whole program (legalize_graph copies every node and recompiles), O(partitions
    # x nodes): 350 of SeamlessM4T speech's 615 profiled lowering seconds (451 partitions). Sort once, after the last.
    def create_partitions(graph_module: torch.fx.GraphModule, *args: Any, **kwargs: Any) -> dict[str, list]:
        create_submodule = backend_api.create_submodule_from_nodes
        backend_api.create_submodule_from_nodes = functools.partial(create_submodule, skip_legalize_graph=True)
        try:
            created = original(graph_module, *args, **kwargs)
        finally:
            backend_api.create_submodule_from_nodes = create_submodule
        legalize_graph(graph_module)  # a new node for each: find the partitions' call_module nodes again
        calls = {node.target: node for node in graph_module.graph.nodes if node.op == "call_module"}
        return {backend: [calls[node.target] for node in nodes] for backend, nodes in created.items()}

    return create_partitions


@register_lowering_swap("executorch", "executorch.exir.program._program.LegalizePortableDimOrderPass")
def _patch_idle_dim_order_legalization_skipped(original: Callable) -> Callable:
    # to_executorch re-traces the whole program (0.2 s on gemma3's text model) to put a contiguous copy before the few
    # portable ops that need one; with no such op on a non-contiguous input the program stays as it is.
    return type(original.__name__, (original,), {"call": _retraced_only_if(_needs_contiguous_input, original.call)})


def _needs_contiguous_input(legalization: Any, node: torch.fx.Node) -> bool:
    if node.op != "call_function" or node.target not in legalization._target_ops:
        return False
    value = node.args[0].meta.get("val") if node.args and isinstance(node.args[0], torch.fx.Node) else None
    return not isinstance(value, torch.Tensor) or tuple(value.dim_order()) != tuple(range(value.dim()))


@register_lowering_swap("executorch", "torch._higher_order_ops.executorch_call_delegate.call_delegate_cpu")
def _patch_delegate_program_unlifted_once(original: Callable) -> Callable:
    # Each re-trace after partitioning runs every delegate's program in fake mode, unlifting it into a new module each
    # time (85 unliftings, 0.6 of gemma3 causal LM's 12.5 s in ExecuTorch): each program is unlifted once per lowering.
    unlifted: dict[int, tuple[ExportedProgram, torch.nn.Module]] = {}

    def call_delegate(lowered_module: Any, *args: Any) -> Any:
        program = lowered_module.original_module
        if unlifted.get(id(program), (None,))[0] is not program:
            unlifted[id(program)] = (program, program.module())
        module = unlifted[id(program)][1]
        # The original converts the arguments, then calls ``original_module.module()``: hand it the one unlifted.
        stand_in = types.SimpleNamespace(original_module=types.SimpleNamespace(module=lambda: module))
        return original(stand_in, *args)

    return call_delegate


@register_lowering_swap("executorch", "executorch.exir.passes.const_prop_pass.ConstPropPass.call")
def _patch_idle_constant_folding_skipped(original: Callable) -> Callable:
    # XNNPACK re-traces each partition to fold the ops whose arguments are all constants (41 partitions, 0.4 s of
    # gemma3 causal LM's 12.5 s); a partition where every op reads a graph input or parameter has nothing to fold.
    return _retraced_only_if(lambda folding, node: _reads_only_constants(node), original)


def _reads_only_constants(node: torch.fx.Node) -> bool:
    # ConstPropPass runs an op eagerly when none of its arguments is a traced value: literals and get_attr tensors only.
    if node.op != "call_function":
        return False
    inputs = node.all_input_nodes
    return all(each.op == "get_attr" for each in inputs)
