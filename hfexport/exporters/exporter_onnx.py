"""``OnnxExporter``: a torch.export program lowered to ONNX by ``torch.onnx.export`` (dynamo path, onnxscript).

``OnnxExporter.export_program`` traces with ``DynamoExporter``, then runs five stages, each marked below by a
``# ── Stage N: … ──`` banner; the workarounds of stages 1-5 live in the ``workarounds/onnx/`` room (key ``"onnx"``):

1. torch patches: ``"onnx"`` patches of torch ops or model code (also ``onnx_and_executorch.py``), while tracing;
2. ONNX patches: torch.onnx and onnxscript internals, installed around lowering and optimizing (a hook re-runs stage 3
   after decomposition);
3. FX node fixes: single graph nodes torch.onnx cannot lower;
4. ONNX translations: onnxscript lowerings handed to ``torch.onnx.export``;
5. ONNX IR fixes: the finished program is optimized (unless an optimizer skip names the model class), named, fixed
   for onnxruntime and checked.
"""

from __future__ import annotations

from .dependencies import require

require("onnx", "onnxscript", "onnxruntime", extra="onnx")

import contextlib  # noqa: E402 - the dependency check above must run before the heavy imports
import dataclasses  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import onnx  # noqa: E402
import onnx_ir as ir  # noqa: E402
import torch  # noqa: E402

from ..torch_compat import _ir_passes  # noqa: E402
from .errors import ExportStageError, export_stage  # noqa: E402
from .exporter_dynamo import DynamoConfig, DynamoExporter  # noqa: E402
from .registry import (  # noqa: E402
    PatchReport,
    apply_ir_fixes,
    apply_node_fixes,
    apply_patches,
    merged_records,
    onnx_translation_table,
    optimizer_skips,
)
from .shared_trace import SharedTrace  # noqa: E402
from .workarounds import onnx_and_executorch as _shared_patches  # noqa: E402, F401 - registers model patches for "onnx"
from .workarounds.onnx.patches import _APPLIED_FIXES  # noqa: E402 - importing it registers the "onnx" room


@dataclasses.dataclass
class OnnxConfig(DynamoConfig):
    """ONNX options on top of torch.export's. ``opset=None`` takes torch.onnx's default opset."""

    export_format: str = "onnx"
    opset: int | None = None
    optimize: bool = True
    check: bool = True


class OnnxExporter(DynamoExporter):
    """Exports to an ``onnx_ir.Model`` that runs on onnxruntime (see ``runner_onnx.OnnxRunner``)."""

    export_format = "onnx"
    config_class = OnnxConfig
    program_suffix = ".onnx"
    # A protobuf graph: loading runs nothing from it, and onnx_ir and onnxruntime refuse external data outside the
    # model's folder ("..", absolute paths, symlinks out): tests/test_loading.py.
    loads_code = False
    recorded_packages = ("onnx", "onnxscript", "onnx_ir", "onnxruntime")

    def export_program(
        self,
        model: torch.nn.Module,
        sample_inputs: dict[str, Any],
        config: OnnxConfig,
        trace: SharedTrace | None = None,
    ) -> tuple[ir.Model, dict[str, Any]]:
        """Trace (stage 1 runs inside, with dynamo's patches), lower (stages 2-4), then fix and check (stage 5).

        ``trace``: a dynamo trace of the model this export reuses when it is the program it would trace.
        """
        program, metadata = super().export_program(model, sample_inputs, config, trace)
        keys, patches, applied = self.lowering_keys(config), PatchReport(), []
        timings = metadata["timings"]
        token = _APPLIED_FIXES.set(applied)
        try:
            with apply_patches(keys, patches):  # stage 2: active while torch.onnx lowers
                started = time.perf_counter()
                with _stage(3, "FX node fixes"):
                    apply_node_fixes(keys, program.graph_module, applied)
                with _stage(4, "ONNX translations"):
                    onnx_program = torch.onnx.export(
                        program,
                        (),
                        kwargs=dict(sample_inputs),
                        dynamo=True,
                        input_names=metadata["input_names"],
                        custom_translation_table=onnx_translation_table(keys, patches),
                        opset_version=config.opset,
                        optimize=False,
                        verbose=False,
                    )
                timings["torch.onnx.export"] = round(time.perf_counter() - started, 3)
                optimize = config.optimize and not optimizer_skips(keys, _class_path(model))
                if optimize:  # stage 5's first step, under stage 2's patches of onnxscript's optimizer
                    started = time.perf_counter()
                    with _stage(5, "ONNX IR fixes"):
                        onnx_program.optimize()
                    timings["optimize"] = round(time.perf_counter() - started, 3)
        finally:
            _APPLIED_FIXES.reset(token)
        with _stage(5, "ONNX IR fixes"):
            onnx_model = onnx_program.model
            input_names = metadata["input_names"]
            # torch.onnx leaves None outputs out of the graph (pe_audio's nested outputs), and stage 2 Python
            # constants (maskformer-swin's spatial sizes): the runner puts them back.
            traced_outputs = program.graph.output_node().args[0]
            metadata["none_outputs"] = [i for i, value in enumerate(traced_outputs) if value is None]
            constants = [[i, v] for i, v in enumerate(traced_outputs) if not isinstance(v, (torch.fx.Node, type(None)))]
            metadata["constant_outputs"] = constants
            left_out = {*metadata["none_outputs"], *(i for i, _ in constants)}
            names = [name for i, name in enumerate(metadata["output_names"]) if i not in left_out]
            metadata["output_names"] = _name_outputs(onnx_model.graph, names, input_names)
            _name_dynamic_axes(onnx_model, metadata["input_names"])
            apply_ir_fixes(keys, onnx_model, applied)
            if config.check:
                started = time.perf_counter()
                check_onnx_model(onnx_model)
                timings["onnx.checker"] = round(time.perf_counter() - started, 3)
        workarounds = metadata["workarounds"]
        workarounds["patches"] = merged_records(workarounds["patches"], patches.installed)
        workarounds["unresolved"] = merged_records(workarounds["unresolved"], patches.unresolved)
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


# ── Stage 1: Torch patches ──
# "onnx" patches of torch ops or model code the ONNX exporter cannot translate, installed right after dynamo's while
# tracing. Extend with ``@register_patch("onnx", "<path>")`` in ``workarounds/onnx/patches.py``, or
# in ``workarounds/onnx_and_executorch.py`` (also registered for "executorch") when ExecuTorch needs it too.


# ── Stage 2: ONNX patches ──
# Patches of torch.onnx internals, installed again around stages 3 and 4; one re-runs the stage 3 fixes on the graph
# torch.onnx decomposed. Extend with ``@register_patch("onnx", "torch.onnx…")`` in ``onnx/patches.py``.


# ── Stage 3: FX node fixes ──
# ``fix(graph_module, node) -> changed`` for nodes torch.onnx cannot lower, run on the traced graph and again after
# decomposition (stage 2). Extend with ``@register_fx_node_fix("onnx")`` in ``onnx/node_fixes.py``.


# ── Stage 4: ONNX translations ──
# onnxscript lowerings for ops whose torchlib default is missing or wrong, handed to ``torch.onnx.export``. Extend
# with ``@register_onnx_translation("<op path>")`` on an ``_aten_*`` function in ``onnx/translations.py``.


# ── Stage 5: ONNX IR fixes ──
# The finished program is optimized, named, fixed for onnxruntime and checked. Extend with ``@register_ir_fix("onnx")``
# (``fix(model) -> changed``) in ``onnx/ir_fixes.py``; a model class the optimizer breaks on gets
# ``@register_onnx_optimizer_skip("<class path>")`` there, beside the upstream bug (skips are meant to go).

# Above this many bytes of weights, ``model.onnx`` keeps its tensors in a ``model.onnx.data`` sidecar file.
EXTERNAL_DATA_THRESHOLD_BYTES = 1 << 30
# onnx.checker's full check needs the whole model in one protobuf, which cannot exceed 2 GiB.
_PROTOBUF_LIMIT_BYTES = (1 << 31) - (1 << 20)


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
