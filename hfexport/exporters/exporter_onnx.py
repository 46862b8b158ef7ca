"""``OnnxExporter``: a torch.export program lowered to ONNX by ``torch.onnx.export`` (dynamo path, onnxscript).

``OnnxExporter.export_program`` traces with ``DynamoExporter`` and then runs five stages, each marked below by a
``# ── Stage N: … ──`` banner. ``grep -nE "^def (_patch_|_fix_|_aten_)" hfexport/exporters/exporter_onnx.py`` lists
every workaround.
"""

from __future__ import annotations

from .utils import require

require("onnx", "onnxscript", "onnxruntime", extra="onnx")

import contextlib  # noqa: E402 - the dependency check above must run before the heavy imports
import contextvars  # noqa: E402
import dataclasses  # noqa: E402
import operator  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import onnx  # noqa: E402
import onnx_ir as ir  # noqa: E402
import torch  # noqa: E402
from onnxscript import opset18 as op  # noqa: E402
from torch._prims_common import is_contiguous_or_false  # noqa: E402
from torch.export import ExportedProgram  # noqa: E402

from .. import compat  # noqa: E402
from .exporter_dynamo import DynamoConfig, DynamoExporter  # noqa: E402
from .utils import (  # noqa: E402
    ExportStageError,
    PatchReport,
    Workaround,
    apply_node_fixes,
    apply_patches,
    export_stage,
    register_fx_node_fix,
    register_patch,
    register_workaround_source,
)

# Model classes whose export skips the onnxscript optimizer, each beside the upstream bug that requires it.
# The list is meant to shrink; no entry without a specific upstream bug.
_SPLIT_TO_SEQUENCE_BUG = (
    "onnxscript 0.7.2 constant folding crashes on SplitToSequence whose `split` is a non-constant scalar "
    "(split_to_sequence reads split_value.ndim of None; the split=None case was fixed in microsoft/onnxscript#2550)"
)
ONNX_DISABLE_OPTIMIZE: dict[str, str] = {
    f"transformers.models.prophetnet.modeling_prophetnet.{name}": _SPLIT_TO_SEQUENCE_BUG
    for name in ("ProphetNetModel", "ProphetNetForConditionalGeneration", "ProphetNetForCausalLM")
}

# Above this many bytes of weights, ``model.onnx`` keeps its tensors in a ``model.onnx.data`` sidecar file.
EXTERNAL_DATA_THRESHOLD_BYTES = 1 << 30
# onnx.checker's full check needs the whole model in one protobuf, which cannot exceed 2 GiB.
_PROTOBUF_LIMIT_BYTES = (1 << 31) - (1 << 20)


@dataclasses.dataclass
class OnnxConfig(DynamoConfig):
    """ONNX options on top of torch.export's. ``opset=None`` takes torch.onnx's default opset."""

    export_format: str = "onnx"
    opset: int | None = None
    optimize: bool = True
    check: bool = True


# ── Stage 1: Torch patches ──
# Replace torch ops, or model code, that the ONNX exporter cannot translate as they are, while tracing
# (DynamoExporter installs the "onnx" patches next to its own). Extend with ``@register_patch("onnx", "<path>")``.
# Patches that also make the saved torch.export program loadable (mask expansion by broadcast), or that ExecuTorch
# needs as well (complex rotary products as real ones), belong to DynamoExporter's stage 2 instead; none is left here.


# ── Stage 2: ONNX patches ──
# Replace torch.onnx internals for the duration of one export. ``torch.onnx.export`` decomposes the program with
# its own table before lowering; the hook below re-runs the stage 3 node fixes on the decomposed graph, so nodes
# that decomposition introduced are repaired before lowering. Extend with ``@register_patch("onnx", "torch.onnx…")``.

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


# ── Stage 3: FX node fixes ──
# Rewrite single graph nodes the ONNX exporter cannot lower (alias ops, in-place views, dead asserts). Each fix is
# ``fix(graph_module, node) -> changed``, run on the traced graph and again after decomposition (stage 2).
# Extend with ``@register_fx_node_fix("onnx")``.


def _fake_value(node: Any) -> torch.Tensor | None:
    value = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return value if isinstance(value, torch.Tensor) else None


@register_fx_node_fix("onnx")
def _fix_reshape_of_strided_view(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    # T5 reshapes a transposed attention output: decomposing reshape with backed_size_oblivious picks an invalid view.
    if node.op != "call_function" or node.target is not torch.ops.aten.reshape.default:
        return False
    source = node.args[0]
    value = _fake_value(source)
    if value is None or value.dim() < 2:
        return False
    if is_contiguous_or_false(value):
        return False
    _read_contiguous_copy(graph_module, node, source)
    return True


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
    if node.op != "call_function" or node.target is not torch.ops.aten.contiguous.default:
        return False
    value = _fake_value(node.args[0])
    if value is None or is_contiguous_or_false(value):
        return False
    node.target, node.kwargs = torch.ops.aten.clone.default, {"memory_format": torch.contiguous_format}
    return True


@register_fx_node_fix("onnx")
def _fix_view_of_transpose(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    # A view (or reshape) of a transposed SDPA output is traced against one kernel's layout and torch.onnx
    # re-decomposes with another ("Cannot view a tensor": jetmoe; T5 on transformers 5.22): read a contiguous copy,
    # an Identity in ONNX.
    if node.op != "call_function" or node.target not in (torch.ops.aten.view.default, torch.ops.aten.reshape.default):
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
    if node.op != "call_function" or node.target not in (torch.ops.aten.squeeze.dim, torch.ops.aten.squeeze.dims):
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
    if node.op != "call_function" or node.target is not torch.ops.aten.rsub.Scalar:
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


# ── Stage 4: ONNX translations ──
# Custom onnxscript lowerings for aten ops whose torchlib default is missing or wrong in the installed versions.
# Write an ``_aten_*`` function and add it to ``_ONNX_TRANSLATION_TABLE`` (passed as ``custom_translation_table``).


def _aten_sym_floordiv(self: Any, other: Any) -> Any:
    # torchlib lowers SymInt `//` to Div, which truncates: the ceil-div idiom -(-n // k) (minimax_m3_vl) is off by one.
    return op.Div(op.Sub(self, op.Mod(self, other)), other)


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


_ONNX_TRANSLATION_TABLE: dict[Any, Callable[..., Any]] = {
    operator.floordiv: _aten_sym_floordiv,
}


def _register_grouped_mm() -> None:
    # Importing transformers.integrations.moe defines torch.ops.transformers.grouped_mm_fallback, when it has one.
    if compat.internal("transformers.integrations.moe") is not None and hasattr(
        torch.ops.transformers, "grouped_mm_fallback"
    ):
        _ONNX_TRANSLATION_TABLE[torch.ops.transformers.grouped_mm_fallback.default] = _aten_grouped_mm


_register_grouped_mm()


# ── Stage 5: ONNX IR fixes ──
# Rewrite the finished ONNX program (onnx_ir) to dodge onnxruntime bugs; then the program is checked with
# onnx.checker. Each fix is ``fix(model) -> changed``; add a ``_fix_ir_*`` function to ``_IR_FIXES``.


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
        old, new = node.outputs[0], merged.outputs[0]
        new.shape, new.type = old.shape, old.type
        node.graph.insert_before(node, [negated, kept_true, kept_false, merged])
        ir.convenience.replace_all_uses_with(old, new, replace_graph_outputs=True)
        node.graph.remove(node, safe=True)
        new.name = old.name
        changed = True
    return changed


_IR_FIXES: list[Callable[[ir.Model], bool]] = [_fix_ir_bool_where]


def _registered_tables() -> list[Workaround]:
    translations = [
        Workaround("onnx", "onnx_translation", function, (str(target),))
        for target, function in _ONNX_TRANSLATION_TABLE.items()
    ]
    return translations + [Workaround("onnx", "ir_fix", fix) for fix in _IR_FIXES]


register_workaround_source(_registered_tables)


@contextlib.contextmanager
def _stage(number: int, name: str) -> Iterator[None]:
    """Like ``export_stage``, but a stage error raised deeper (inside torch.onnx's own wrapping) wins."""
    try:
        with export_stage("onnx", number, name):
            yield
    except ExportStageError as error:
        cause: BaseException | None = error.__cause__
        while cause is not None:
            if isinstance(cause, ExportStageError):
                raise cause from cause.__cause__
            cause = cause.__cause__
        raise


class OnnxExporter(DynamoExporter):
    """Exports to an ``onnx_ir.Model`` that runs on onnxruntime (see ``runner_onnx.OnnxRunner``)."""

    export_format = "onnx"
    config_class = OnnxConfig
    program_suffix = ".onnx"
    recorded_packages = ("onnx", "onnxscript", "onnx_ir", "onnxruntime")

    def export_program(
        self, model: torch.nn.Module, sample_inputs: dict[str, Any], config: OnnxConfig
    ) -> tuple[ir.Model, dict[str, Any]]:
        patches = PatchReport()
        applied: list[str] = []
        token = _APPLIED_FIXES.set(applied)
        try:
            with apply_patches("onnx", patches):  # stages 1 and 2: active while tracing and while lowering
                program, metadata = super().export_program(model, sample_inputs, config)
                timings = metadata["timings"]
                started = time.perf_counter()
                with _stage(3, "FX node fixes"):
                    apply_node_fixes("onnx", program.graph_module, applied)
                with _stage(4, "ONNX translations"):
                    onnx_program = torch.onnx.export(
                        program,
                        (),
                        kwargs=dict(sample_inputs),
                        dynamo=True,
                        input_names=metadata["input_names"],
                        custom_translation_table=_ONNX_TRANSLATION_TABLE,
                        opset_version=config.opset,
                        optimize=False,
                        verbose=False,
                    )
                timings["torch.onnx.export"] = round(time.perf_counter() - started, 3)
        finally:
            _APPLIED_FIXES.reset(token)
        with _stage(5, "ONNX IR fixes"):
            started = time.perf_counter()
            optimize = config.optimize and _class_path(model) not in ONNX_DISABLE_OPTIMIZE
            if optimize:
                onnx_program.optimize()
                timings["optimize"] = round(time.perf_counter() - started, 3)
            onnx_model = onnx_program.model
            input_names = metadata["input_names"]
            metadata["output_names"] = _name_outputs(onnx_model.graph, metadata["output_names"], input_names)
            _name_dynamic_axes(onnx_model, metadata["input_names"])
            applied += [fix.__name__ for fix in _IR_FIXES if fix(onnx_model)]
            if config.check:
                started = time.perf_counter()
                check_onnx_model(onnx_model)
                timings["onnx.checker"] = round(time.perf_counter() - started, 3)
        workarounds = metadata["workarounds"]
        workarounds["patches"] = sorted(set(workarounds["patches"]) | set(patches.installed))
        workarounds["unresolved"] = sorted(set(workarounds["unresolved"]) | set(patches.unresolved))
        workarounds["fixes"] += [name for name in applied if name not in workarounds["fixes"]]
        metadata["opset"] = onnx_model.opset_imports.get("", None)
        metadata["optimized"] = optimize
        return onnx_model, metadata

    @classmethod
    def save_program(cls, program: ir.Model, path: Path) -> None:
        """One ``.onnx`` file; weights past ``EXTERNAL_DATA_THRESHOLD_BYTES`` go to a ``<name>.data`` sidecar."""
        path = Path(path)
        external = _weight_bytes(program) > EXTERNAL_DATA_THRESHOLD_BYTES
        ir.save(program, path, external_data=f"{path.name}.data" if external else None)

    @classmethod
    def load_program(cls, path: Path) -> ir.Model:
        """The saved graph; external weights stay on disk until onnxruntime reads them from ``meta["path"]``."""
        model = ir.load(Path(path))
        model.meta["path"] = str(path)
        return model


def _class_path(model: torch.nn.Module) -> str:
    return f"{type(model).__module__}.{type(model).__qualname__}"


def _weight_bytes(model: ir.Model) -> int:
    return sum(value.const_value.nbytes for value in model.graph.initializers.values() if value.const_value is not None)


def _name_outputs(graph: ir.Graph, leaf_names: list[str | None], input_names: list[str]) -> list[str]:
    """Give graph outputs the model's leaf names and return them; a graph input or a repeated value is first copied
    by Identity. A bare tensor's unnamed leaf becomes ``output_<i>``; an output named like an input (qwen2_audio
    returns its attention_mask) gets an ``.output`` suffix, since ONNX names are unique."""
    if len(leaf_names) != len(graph.outputs):
        raise ValueError(f"the ONNX graph has {len(graph.outputs)} outputs, the traced program {len(leaf_names)}")
    names = [name or f"output_{i}" for i, name in enumerate(leaf_names)]
    names = [f"{name}.output" if name in input_names else name for name in names]
    seen: set[int] = set()
    for index, (value, name) in enumerate(zip(list(graph.outputs), names, strict=True)):
        if value.is_graph_input() or id(value) in seen:
            identity = ir.node("Identity", [value])
            copy = identity.outputs[0]
            copy.shape, copy.type = value.shape, value.type
            graph.append(identity)
            graph.outputs[index] = value = copy
        seen.add(id(value))
        value.name = name
    # The optimizer's OutputFixPass renames an input returned as is to "<name>_orig": give it its name back.
    for value in graph.inputs:
        if value.name and value.name.endswith("_orig") and value.name.removesuffix("_orig") in input_names:
            value.name = value.name.removesuffix("_orig")
    return names


# Readable names for dynamic axes, by input name and axis; the first input that uses a symbol names it.
_AXIS_NAMES = {
    ("input_ids", 1): "sequence_length",
    ("attention_mask", 1): "sequence_length",
    ("token_type_ids", 1): "sequence_length",
    ("position_ids", 1): "sequence_length",
    ("decoder_input_ids", 1): "decoder_sequence_length",
    ("decoder_attention_mask", 1): "decoder_sequence_length",
    ("input_values", 1): "audio_length",
    ("input_features", 1): "num_frames",
    ("pixel_values", 2): "height",
    ("pixel_values", 3): "width",
}


def _axis_name(input_name: str, axis: int) -> str:
    if axis == 0:
        return "batch_size"
    if input_name.startswith("past_key_values.") and axis == 2:
        return "past_sequence_length"
    return _AXIS_NAMES.get((input_name, axis), f"{input_name}_dim_{axis}")


def _name_dynamic_axes(model: ir.Model, input_names: list[str]) -> None:
    """Rename torch's ``s72``-style symbols after the input axes they stand for, everywhere they appear."""
    from torch.onnx._internal.exporter import _ir_passes

    mapping: dict[str, str] = {}
    for value in model.graph.inputs:
        if value.name not in input_names or value.shape is None:
            continue
        for axis, dim in enumerate(value.shape):
            if not isinstance(dim, ir.SymbolicDim) or dim.value is None or dim.value in mapping:
                continue
            name = _axis_name(value.name, axis)
            if name in mapping.values():
                name = f"{value.name}_{name}"
            mapping[dim.value] = name
    _ir_passes.rename_axis(model, mapping)


def check_onnx_model(model: ir.Model) -> None:
    """onnx.checker on the program: the full check (with shape inference) in memory, through a file past 2 GiB."""
    if _weight_bytes(model) < _PROTOBUF_LIMIT_BYTES:
        onnx.checker.check_model(ir.serde.serialize_model(model), full_check=True)
        return
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "model.onnx"
        ir.save(model, path, external_data="model.onnx.data")
        onnx.checker.check_model(str(path), full_check=True)
