"""ONNX IR fixes (key ``"onnx"``, stage 5): optimizer skips first (the optimizer runs first in that stage), then
fixes of the finished ONNX graph.
"""

from __future__ import annotations

import onnx_ir as ir

from ...registry import (
    register_ir_fix,
    register_onnx_optimizer_skip,
)

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
