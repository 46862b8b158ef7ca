"""ONNX translations (stage 4): onnxscript functions for ops torchlib has no translation for."""

from __future__ import annotations

from typing import Any

import onnx_ir as ir
from onnxscript import opset18 as op

from .... import compat
from ...registry import (
    register_onnx_translation,
)


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
