"""``ExecutorchExporter``: a transformers model as an ExecuTorch ``.pte`` program (XNNPACK, portable or CUDA).

``ExecutorchExporter.export_program`` traces with ``DynamoExporter`` (which also installs this backend's patches),
then runs five stages, each marked below by a ``# ── Stage N: … ──`` banner, around ``to_edge_transform_and_lower``
and ``to_executorch``. ``grep -nE "^def (_patch_|_fix_)" hfexport/exporters/exporter_executorch.py`` lists every
workaround. Lowering is tuned for speed (see ``_fast_lowering``): the cost of ExecuTorch lowering follows the number
of delegate partitions and of graph re-traces, not the model size.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import math
import operator
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .utils import require

require("executorch", extra="executorch")

import torch  # noqa: E402
import torch.utils._pytree as pytree  # noqa: E402
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner  # noqa: E402
from executorch.exir import (  # noqa: E402
    EdgeCompileConfig,
    ExecutorchProgramManager,
    to_edge_transform_and_lower,
)
from executorch.exir.passes.executorch_prim_ops_registry import (  # noqa: E402
    _PYTHON_SYM_OPS_TO_EXECUTORCH_SYM_OPS,
)
from torch.export import ExportedProgram  # noqa: E402
from torch.fx.experimental.symbolic_shapes import free_symbols  # noqa: E402

from .exporter_dynamo import DynamoConfig, DynamoExporter, auto_dynamic_shapes  # noqa: E402
from .utils import (  # noqa: E402
    PatchReport,
    apply_node_fixes,
    apply_patches,
    apply_program_fixes,
    export_stage,
    register_fx_node_fix,
    register_patch,
)

BACKEND = "executorch"
_DELEGATE_CALL = "executorch_call_delegate"


@dataclasses.dataclass
class ExecutorchConfig(DynamoConfig):
    """ExecuTorch options on top of torch.export's.

    ``backend``: ``"xnnpack"`` (CPU, delegated), ``"portable"`` (CPU, no delegate) or ``"cuda"`` (needs a GPU).
    ``dynamic_upper_bound``: with ``dynamic=True``, the largest size every dynamic dimension accepts (at least its
    traced size); ExecuTorch plans memory for the bound, so keep it as small as the inputs you will feed.
    ``fast_lowering``: lower with the speed-ups of ``_fast_lowering`` (same program semantics, XNNPACK kept).
    """

    export_format: str = "executorch"
    backend: str = "xnnpack"
    dynamic_upper_bound: int = 256
    fast_lowering: bool = True


# ── Stage 1: Backend preparation ──
# Each ``prepare_for_<name>(model, sample_inputs)`` moves the model to its device/dtype and returns
# ``(model, sample_inputs, partitioners)``. Add a backend by registering its function in ``_BACKEND_PREPARE``.


def _contiguous_inputs(sample_inputs: dict[str, Any]) -> dict[str, Any]:
    # ExecuTorch rejects stride-0 (broadcast) graph inputs: materialize every input tensor.
    return {name: pytree.tree_map_only(torch.Tensor, torch.Tensor.contiguous, v) for name, v in sample_inputs.items()}


def prepare_for_xnnpack(model: torch.nn.Module, sample_inputs: dict[str, Any]) -> tuple[Any, dict[str, Any], list]:
    """CPU, float32, the XNNPACK delegate for what it supports and portable kernels for the rest."""
    return model.to("cpu"), _contiguous_inputs(sample_inputs), [XnnpackPartitioner()]


def prepare_for_portable(model: torch.nn.Module, sample_inputs: dict[str, Any]) -> tuple[Any, dict[str, Any], list]:
    """CPU, portable kernels only: no delegate (the reference every delegate is compared with)."""
    return model.to("cpu"), _contiguous_inputs(sample_inputs), []


def prepare_for_cuda(model: torch.nn.Module, sample_inputs: dict[str, Any]) -> tuple[Any, dict[str, Any], list]:
    """The ExecuTorch CUDA backend (AOTInductor kernels): needs a visible GPU at export time, runs in bfloat16."""
    if not torch.cuda.is_available():
        raise RuntimeError(
            "the ExecuTorch 'cuda' backend compiles kernels for a visible GPU and this machine has none "
            "(torch.cuda.is_available() is False); use backend='xnnpack' or 'portable' on CPU"
        )
    from executorch.backends.cuda.cuda_backend import CudaBackend
    from executorch.backends.cuda.cuda_partitioner import CudaPartitioner

    model = copy.deepcopy(model).to(dtype=torch.bfloat16)  # a bfloat16 copy: the caller's model stays as it is
    inputs = pytree.tree_map_only(
        torch.Tensor, lambda t: t.to(torch.bfloat16) if t.is_floating_point() else t, sample_inputs
    )
    compile_spec = CudaBackend.generate_method_name_compile_spec("forward")
    return model, _contiguous_inputs(inputs), [CudaPartitioner([compile_spec])]


_BACKEND_PREPARE: dict[str, Callable[[torch.nn.Module, dict[str, Any]], tuple[Any, dict[str, Any], list]]] = {
    "xnnpack": prepare_for_xnnpack,
    "portable": prepare_for_portable,
    "cuda": prepare_for_cuda,
}


# ── Stage 2: Torch patches ──
# Reversible swaps of ``torch`` ops an ExecuTorch backend rejects, installed while tracing.
# Extend with ``@register_patch("executorch", "torch.<op>")``; the factory receives the real op.


@register_patch(BACKEND, "torch.nn.functional.scaled_dot_product_attention")
def _patch_sdpa_contiguous_output(original: Callable) -> Callable:
    # gpt2: decomposition re-traces SDPA via the CPU flash kernel, whose output strides differ from the traced
    # ones, so a later recorded view fails ("Cannot view a tensor with shape ... and strides"); copy it contiguous.
    def scaled_dot_product_attention(*args: Any, **kwargs: Any) -> torch.Tensor:
        return original(*args, **kwargs).clone(memory_format=torch.contiguous_format)

    return scaled_dot_product_attention


@register_patch(BACKEND, "transformers.integrations.moe.ExpertsInterface._global_mapping")
def _patch_experts_batched_mm(original: dict[str, Callable]) -> dict[str, Callable]:
    # mixtral (every MoE on grouped_mm): ExecuTorch has no out-variant kernel for transformers::grouped_mm_fallback.
    return {**original, "grouped_mm": original["batched_mm"]}


# ── Stage 3: ExecuTorch patches ──
# Reversible swaps of ExecuTorch internals that crash on valid graphs, installed around
# ``to_edge_transform_and_lower`` / ``to_executorch``. Same ``@register_patch("executorch", ...)`` registry.


@register_patch(
    BACKEND, "executorch.backends.xnnpack.partition.config.gemm_configs.ConvolutionConfig.check_constraints"
)
def _patch_conv1d_one_dynamic_dim(original: Callable) -> Callable:
    # wav2vec2 (dynamic): XNNPACK lowers conv1d as unsqueeze/conv2d/squeeze, and its reshape takes one dynamic dim
    # only ("XNNPACK reshape only supports 1 dynamic dimension"): leave such a conv1d to the portable kernel.
    def check_constraints(self: Any, node: torch.fx.Node, ep: ExportedProgram) -> bool:
        output = node.meta.get("val")
        if isinstance(output, torch.Tensor) and output.dim() == 3 and len(free_symbols(output.shape)) > 1:
            return False
        return original(self, node, ep)

    return check_constraints


# ── Stage 4: FX program fixes ──
# ``@register_fx_program_fix("executorch")``: ``fix(exported_program) -> changed``, for repairs that need the whole
# program (range constraints, graph signature, state dict). Run once, after tracing.


# ── Stage 5: FX node fixes ──
# ``@register_fx_node_fix("executorch")``: ``fix(graph_module, node) -> changed``, run over every node after the
# program fixes.


@register_fx_node_fix(BACKEND)
def _fix_python_sym_op(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    # sym_max/sym_min/ceil on sizes are Python callables the edge IR verifier rejects (IR validation on).
    # to_executorch maps them to executorch_prim ops itself, but only after the verifier has run.
    if node.op != "call_function" or node.target not in (torch.sym_max, torch.sym_min, math.ceil, math.trunc, round):
        return False
    replacement = _PYTHON_SYM_OPS_TO_EXECUTORCH_SYM_OPS.get(node.target)
    if replacement is None:
        return False
    node.target = replacement
    return True


@register_fx_node_fix(BACKEND)
def _fix_sym_pow_as_mul(graph_module: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    # `size ** n` traces to operator.pow, which the ExecuTorch emitter cannot serialize: multiply instead.
    if node.op != "call_function" or node.target is not operator.pow:
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


# ── Lowering speed ──
# Measured on a tiny 2-layer Llama (see scripts/bench_executorch.py): the cost of to_edge_transform_and_lower is
# re-tracing. Every XNNPACK partition is preprocessed on its own by 17 passes that each re-trace the partition
# with fake tensors (~1 s per partition), the EDGE_DO_NOT_DECOMP path decomposes the whole program three times,
# and every intermediate ExportedProgram pretty-prints all shape guards. These levers change no program semantics.

# XNNPACK preprocess passes that only rewrite specific ops: skipped for partitions that contain none of them.
_XNNPACK_PASS_TRIGGERS = {
    "XNNPACKRemoveCloneOpsTransform": ("clone",),
    "DimOrderOpsRevertPass": ("dim_order",),
    "ConvertToUpsampleBilinear2d": ("index", "upsample"),
    "PropagateCustomMetaPass": ("quantize",),
    "ConvertToSDPAPass": ("softmax",),
    "FuseBatchNormPass": ("batch_norm",),
    "DecomposeBatchNorm": ("batch_norm",),
    "FuseActivationPass": ("relu", "hardtanh"),
    "DecomposeConcatenate": ("cat",),
    "RemoveGetItemPass": ("max_pool2d_with_indices", "max.dim"),
    "InsertPadQDQPass": ("constant_pad_nd",),
    "Conv1dUnsqueezePass": ("convolution",),
    "PReLUReshapePass": ("prelu",),
}


class _UnfilteredXnnpackPartitioner(XnnpackPartitioner):
    """XNNPACK without the per-node "do not decompose" filter, so lowering decomposes the program once, not thrice.

    With a filter, ExecuTorch decomposes, swaps the kept ops for placeholders, and decomposes again. Without one, an
    op kept whole that XNNPACK then declines stays in the program, so only ops with a portable kernel are kept.
    """

    def ops_to_not_decompose(self, ep: ExportedProgram) -> tuple[list[torch._ops.OpOverload], None]:
        ops, _ = super().ops_to_not_decompose(ep)
        return [op for op in ops if op._schema.name in _portable_kernel_names()], None


@functools.cache
def _portable_kernel_names() -> frozenset[str]:
    from executorch.runtime import Runtime

    return frozenset(name.split(".")[0] for name in Runtime.get().operator_registry.operator_names)


def _unfiltered(partitioners: list) -> list:
    """The partitioners with XNNPACK's swapped for ``_UnfilteredXnnpackPartitioner`` (same configs and options)."""
    swapped = []
    for partitioner in partitioners:
        if type(partitioner) is XnnpackPartitioner:
            partitioner = copy.copy(partitioner)
            partitioner.__class__ = _UnfilteredXnnpackPartitioner
        swapped.append(partitioner)
    return swapped


def _needed_passes(passes: list[type], graph: torch.fx.Graph) -> list[type]:
    targets = " ".join(str(node.target) for node in graph.nodes if node.op == "call_function")
    return [
        p
        for p in passes
        if p.__name__ not in _XNNPACK_PASS_TRIGGERS or any(t in targets for t in _XNNPACK_PASS_TRIGGERS[p.__name__])
    ]


@contextlib.contextmanager
def _swapped(owner: Any, name: str, replacement: Any) -> Iterator[None]:
    original = getattr(owner, name)
    setattr(owner, name, replacement)
    try:
        yield
    finally:
        setattr(owner, name, original)


@contextlib.contextmanager
def _fast_lowering() -> Iterator[None]:
    """Speed levers for to_edge_transform_and_lower / to_executorch; every swap is undone on exit."""
    import executorch.backends.xnnpack._passes as xnnpack_passes
    import torch.export.exported_program as exported_program_module

    manager = xnnpack_passes.XNNPACKPassManager
    original_init = manager.__init__

    def pruned_init(self: Any, exported_program: ExportedProgram, passes: list | None = None) -> None:
        original_init(self, exported_program, passes)
        if not passes:  # the default list, not an explicit one
            self.passes = _needed_passes(self.passes, exported_program.graph)

    with (
        _swapped(manager, "__init__", pruned_init),
        # Guards are only turned into code by ExportedProgram.module(), which ExecuTorch never calls.
        _swapped(exported_program_module, "_convert_guards_to_code", lambda graph_module: []),
    ):
        yield


# ── The exporter ──


def dynamic_dim_bounds(program: ExportedProgram, input_names: list[str]) -> dict[str, dict[str, list[int]]]:
    """``{input name: {dim: [min, max]}}`` for every dynamic dimension of the user inputs of a traced program."""
    user_inputs = set(program.graph_signature.user_inputs)
    placeholders = [n for n in program.graph.nodes if n.op == "placeholder" and n.name in user_inputs]
    bounds: dict[str, dict[str, list[int]]] = {}
    for name, node in zip(input_names, placeholders, strict=True):
        value = node.meta.get("val")
        if not isinstance(value, torch.Tensor):
            continue
        for dim, size in enumerate(value.shape):
            if isinstance(size, torch.SymInt):
                ranges = program.range_constraints.get(size.node.expr)
                if ranges is not None:
                    bounds.setdefault(name, {})[str(dim)] = [int(ranges.lower), int(ranges.upper)]
    return bounds


def delegate_count(program: ExecutorchProgramManager | Any) -> int:
    """How many delegate calls (XNNPACK partitions) an edge or ExecuTorch program makes."""
    graph_module = program.exported_program().graph_module
    return sum(1 for n in graph_module.graph.nodes if n.op == "call_function" and _DELEGATE_CALL in str(n.target))


class ExecutorchExporter(DynamoExporter):
    export_format = "executorch"
    config_class = ExecutorchConfig
    program_suffix = ".pte"
    recorded_packages = ("executorch",)

    def export_program(
        self, model: torch.nn.Module, sample_inputs: dict[str, Any], config: ExecutorchConfig
    ) -> tuple[ExecutorchProgramManager, dict[str, Any]]:
        """Trace, fix and lower ``model``; return the ExecuTorch program and the metadata recorded on the way."""
        with export_stage(BACKEND, 1, "backend preparation"):
            prepare = _BACKEND_PREPARE.get(config.backend)
            if prepare is None:
                raise ValueError(f"unknown ExecuTorch backend {config.backend!r}; known: {', '.join(_BACKEND_PREPARE)}")
            model, sample_inputs, partitioners = prepare(model, sample_inputs)
            if config.fast_lowering:
                partitioners = _unfiltered(partitioners)
        if config.dynamic and config.dynamic_shapes is None:
            # ExecuTorch plans memory for the largest shape a program accepts: every dynamic dimension needs a bound.
            shapes = auto_dynamic_shapes(sample_inputs, config.dynamic_upper_bound)
            config = dataclasses.replace(config, dynamic_shapes=shapes)
        # Stages 2 and 3: DynamoExporter installs the "executorch" patches while tracing.
        program, metadata = super().export_program(model, sample_inputs, config)
        fixes = metadata["workarounds"]["fixes"]
        timings = metadata["timings"]
        started = time.perf_counter()
        with export_stage(BACKEND, 4, "FX program fixes"):
            apply_program_fixes(BACKEND, program, fixes)
        with export_stage(BACKEND, 5, "FX node fixes"):
            apply_node_fixes(BACKEND, program.graph_module, fixes)
        timings["fixes"] = round(time.perf_counter() - started, 3)
        metadata["dynamic_dims"] = dynamic_dim_bounds(program, metadata["input_names"])
        report = PatchReport()
        # Lowering crashes inside ExecuTorch are repaired by stage 3 patches: report them there.
        with (
            export_stage(BACKEND, 3, "ExecuTorch patches"),
            apply_patches(BACKEND, report),
            _fast_lowering() if config.fast_lowering else contextlib.nullcontext(),
        ):
            started = time.perf_counter()
            # The edge verifier only re-checks what to_executorch rejects anyway (ops without a kernel).
            compile_config = EdgeCompileConfig(_check_ir_validity=not config.fast_lowering)
            edge = to_edge_transform_and_lower(program, partitioner=partitioners, compile_config=compile_config)
            timings["to_edge_transform_and_lower"] = round(time.perf_counter() - started, 3)
            started = time.perf_counter()
            executorch_program = edge.to_executorch()
            timings["to_executorch"] = round(time.perf_counter() - started, 3)
        metadata["backend"] = config.backend
        metadata["delegate_partitions"] = delegate_count(executorch_program)
        for installed in report.installed:
            if installed not in metadata["workarounds"]["patches"]:
                metadata["workarounds"]["patches"].append(installed)
        return executorch_program, metadata

    @classmethod
    def save_program(cls, program: ExecutorchProgramManager | bytes, path: Path) -> None:
        Path(path).write_bytes(program_bytes(program))

    @classmethod
    def load_program(cls, path: Path) -> bytes:
        """The ``.pte`` bytes: the runner hands them to the ExecuTorch runtime, saving writes them back as they are."""
        return Path(path).read_bytes()


def program_bytes(program: ExecutorchProgramManager | bytes) -> bytes:
    return program if isinstance(program, (bytes, bytearray)) else program.buffer
