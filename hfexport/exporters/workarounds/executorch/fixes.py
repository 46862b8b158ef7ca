"""FX program fixes (stage 4) and FX node fixes (stage 5) every ExecuTorch delegate needs (key ``"executorch"``)."""

from __future__ import annotations

import math
import operator
from collections.abc import Iterator
from typing import Any

import sympy
import torch
from executorch.exir.passes.executorch_prim_ops_registry import _PYTHON_SYM_OPS_TO_EXECUTORCH_SYM_OPS
from executorch.exir.sym_util import eval_upper_bound
from torch.export import ExportedProgram

from ....torch_compat import (
    SymT,
    bound_sympy,
    constrain_range,
    int_oo,
    pytree,
    statically_known_true,
    symbol_is_type,
)
from ...registry import register_fx_node_fix, register_fx_program_fix

# ── FX program fixes (stage 4) ──


@register_fx_program_fix("executorch")
def _fix_unbounded_data_dependent_sizes(program: ExportedProgram) -> bool:
    # vjepa2's `repeat(B, mask.max() + 1)` (also sam3, pocket_tts's codec decoder): a size read from a tensor has
    # no upper bound, and memory planning needs one ("Cannot evaluate a finite upper bound ... int_oo"). A size that
    # splits a dimension (jetmoe's rows per expert, lfm3_vl's frames per image) is at most that dimension; any other
    # gets the bound of what the program checks it against (vits's frames `u0 <= 63*s1`), else the largest size an input
    # dimension accepts. The runtime refuses to grow a tensor past its planned capacity.
    # Upstream: ExecuTorch's memory planning has no place for a tensor without a bound (DYNAMIC_UNBOUND).
    unbounded: dict[Any, torch.SymInt] = {}
    for node in program.graph.nodes:
        for size in _symbolic_sizes(node.meta.get("val")):
            if _is_unbounded_unbacked(size):
                unbounded.setdefault(size.node.expr, size)
    if not unbounded:
        return False
    fallback = _largest_input_size(program)
    for symbol, size in unbounded.items():
        shape_env = size.node.shape_env
        bound = _bound_as_a_part(symbol, shape_env) or _bound_by_a_check(symbol, shape_env) or fallback
        constrain_range(size, min=None, max=bound)
    return True


def _bound_by_a_check(symbol: Any, shape_env: Any) -> int | None:
    """The least upper bound of what the runtime asserts hold ``symbol`` at or under (``u0 <= 63*s1``, ``s1`` at most
    16: 1008); None where no assert bounds it."""
    ranges, bounds = shape_env.var_to_range, []
    for asserts in shape_env.deferred_runtime_asserts.values():
        for relation in (a.expr for a in asserts if isinstance(a.expr, (sympy.Le, sympy.Lt, sympy.Ge, sympy.Gt))):
            if relation.lts == symbol and not relation.gts.has(symbol):
                upper = bound_sympy(relation.gts, ranges).upper
                if upper is not int_oo:
                    bounds.append(int(upper) - isinstance(relation, (sympy.Lt, sympy.Gt)))
    return min(bounds, default=None)


def _bound_as_a_part(symbol: Any, shape_env: Any) -> int | None:
    """The least upper bound the runtime asserts give ``symbol`` as one part of a bounded sum, as torch asserts
    ``Eq(u0 + u1 + ..., 2*s0*s1)`` for ``split(sizes)``; None where no assert bounds it."""
    ranges, bounds = shape_env.var_to_range, []
    for asserts in shape_env.deferred_runtime_asserts.values():
        for equality in (a.expr for a in asserts if isinstance(a.expr, sympy.Eq)):
            for parts, total in (equality.args, equality.args[::-1]):
                upper = bound_sympy(total, ranges).upper
                if upper is int_oo or not parts.has(symbol):
                    continue
                terms = list(sympy.Add.make_args(parts))
                part = next(term for term in terms if term.has(symbol))
                others = [term for term in terms if term != part]
                factor = part / symbol  # sympy cancels a monomial's symbol
                at_least_one = not factor.has(symbol) and bound_sympy(factor, ranges).lower >= 1
                if at_least_one and all(bound_sympy(term, ranges).lower >= 0 for term in others):
                    bounds.append(int(upper))
    return min(bounds, default=None)


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
def _fix_buffer_reassigned_to_itself(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    # ctrl (`self.pos_encoding = self.pos_encoding.to(device, dtype)` in forward): the copy_ of the buffer onto itself
    # becomes a buffer mutation, and ExecuTorch serializes a mutated buffer without its values (zeros at run time).
    if node.target is not torch.ops.aten.copy_.default or node.users:
        return False
    buffer, source = node.args[:2]
    if not isinstance(source, torch.fx.Node) or source.target not in _SAME_VALUE_CONVERSIONS:
        return False
    value, converted = buffer.meta.get("val"), source.meta.get("val")
    if source.args[0] is not buffer or buffer.op != "placeholder":
        return False
    if not isinstance(value, torch.Tensor) or not isinstance(converted, torch.Tensor):
        return False
    if (converted.dtype, converted.device, converted.shape) != (value.dtype, value.device, value.shape):
        return False
    graph_module.graph.erase_node(node)
    return True


_SAME_VALUE_CONVERSIONS = (
    torch.ops.aten.to.device,
    torch.ops.aten.to.dtype,
    torch.ops.aten.to.dtype_layout,
    torch.ops.aten._to_copy.default,
)


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
def _fix_whole_view_as_its_tensor(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    # An alias, or a slice keeping all of its tensor, computes nothing but lowers to a copy: XNNPACK has no kernel for
    # it (CausalLM heads' `[:, -0:]` put the lm_head in a partition of its own, 2 -> 1), and the portable one refuses a
    # channels-last input planned contiguous (swin2sr's super-resolution crop [:, :, :2H, :2W]: 0x12, "different dim
    # orders"); use the tensor.
    if node.target not in (torch.ops.aten.slice.Tensor, torch.ops.aten.alias.default):
        return False
    source = node.args[0]
    if not isinstance(source, torch.fx.Node) or source.op == "placeholder":
        return False
    value = source.meta.get("val")
    if not isinstance(value, torch.Tensor):
        return False
    if node.target is torch.ops.aten.slice.Tensor and not _keeps_whole_dim(value, *node.args[1:]):
        return False
    node.replace_all_uses_with(source)
    graph_module.graph.erase_node(node)
    return True


def _keeps_whole_dim(value: torch.Tensor, dim: int = 0, start: Any = None, end: Any = None, step: int = 1) -> bool:
    """Whether ``value[start:end:step]`` along ``dim`` is all of ``value``; bounds may be nodes of symbolic sizes, a
    data-dependent one among them (MPT's alibi cut at the cached count: ``start in (None, 0)`` guarded on it)."""
    start, end = (bound.meta.get("val") if isinstance(bound, torch.fx.Node) else bound for bound in (start, end))
    from_the_start = start is None or statically_known_true(start == 0)
    return step == 1 and from_the_start and (end is None or statically_known_true(end >= value.shape[dim]))


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


def _call_with_value(graph: torch.fx.Graph, target: Any, *args: Any, **kwargs: Any) -> torch.fx.Node:
    """A ``target`` node, its ``meta["val"]`` computed from its arguments' own."""
    node = graph.call_function(target, args, kwargs)
    fake_args, fake_kwargs = pytree.tree_map_only(torch.fx.Node, lambda n: n.meta["val"], (args, kwargs))
    node.meta["val"] = target(*fake_args, **fake_kwargs)
    return node
