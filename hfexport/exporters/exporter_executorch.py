"""``ExecutorchExporter``: a transformers model as an ExecuTorch ``.pte`` program (XNNPACK, portable or CUDA).

``ExecutorchExporter.export_program`` runs five stages, each marked below by a ``# ── Stage N: … ──`` banner:

1. backend preparation: device, dtype and partitioners of ``config.backend`` (xnnpack, portable or cuda);
2. torch patches: installed after dynamo's while ``DynamoExporter`` traces;
3. ExecuTorch patches: ExecuTorch internals, installed with stage 2's again around ``to_edge_transform_and_lower``
   and ``to_executorch``, which run after stages 4 and 5;
4. FX program fixes and 5. FX node fixes: repairs of the traced program before lowering.

Stages 2-5 run the workarounds of two registry keys (``workaround_keys``): ``"executorch"`` (every backend, in the
``workarounds/executorch/`` room, plus the model patches ONNX shares in ``onnx_and_executorch.py``) and
``"executorch.<backend>"`` (``executorch/xnnpack.py`` for XNNPACK). Lowering is tuned for speed (``fast_lowering``):
the cost of ExecuTorch lowering follows the number of delegate partitions and of graph re-traces, not the model size.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import logging
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .dependencies import require

require("executorch", extra="executorch")

import torch  # noqa: E402
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner  # noqa: E402
from executorch.exir import (  # noqa: E402
    EdgeCompileConfig,
    ExecutorchProgramManager,
    to_edge_transform_and_lower,
)
from executorch.exir.sym_util import eval_upper_bound  # noqa: E402
from torch.export import ExportedProgram  # noqa: E402

from ..torch_compat import OpOverload, ValueRanges, pytree  # noqa: E402
from .errors import export_stage  # noqa: E402
from .exporter_dynamo import (  # noqa: E402
    DynamoConfig,
    DynamoExporter,
    dynamic_dim_bounds,
    program_metadata,
)
from .registry import (  # noqa: E402
    LOWERING_SWAP,
    PatchReport,
    apply_node_fixes,
    apply_patches,
    apply_program_fixes,
    merged_records,
)
from .shared_trace import SharedTrace  # noqa: E402
from .workarounds import executorch as _executorch_room  # noqa: E402, F401 - registers "executorch" and its delegates'
from .workarounds import onnx_and_executorch as _shared_patches  # noqa: E402, F401 - model patches for "executorch"

logger = logging.getLogger(__name__)

BACKEND = "executorch"
_DELEGATE_CALL = "executorch_call_delegate"


@dataclasses.dataclass
class ExecutorchConfig(DynamoConfig):
    """ExecuTorch options on top of torch.export's.

    ``backend``: ``"xnnpack"`` (CPU, delegated), ``"portable"`` (CPU, no delegate) or ``"cuda"`` (needs a GPU).
    ``dynamic_upper_bound``: with ``dynamic=True``, the largest size every dynamic dimension accepts (at least twice
    its traced size); ExecuTorch plans memory for the bound, so keep it as small as the inputs you will feed.
    ``planned_memory_budget_gib``: with automatic dynamic shapes, a bound whose planned memory exceeds this is
    divided by 4 (down to 16) until it fits: a video model at 256 frames and batch 256 would plan 17 GiB. ``None``
    keeps ``dynamic_upper_bound`` whatever it costs.
    ``fast_lowering``: lower with the speed-ups of "Lowering speed" below (same program semantics, XNNPACK kept).
    """

    export_format: str = "executorch"
    backend: str = "xnnpack"
    dynamic_upper_bound: int = 256
    planned_memory_budget_gib: float | None = 2.0
    fast_lowering: bool = True


_SMALLEST_AUTOMATIC_BOUND = 16
# Planned memory over the traced graph's peak of live tensors (t5 at bound 256: 2.1 GiB planned, 0.59 GiB traced;
# at 64: 35 MiB, 13 MiB): decompositions add tensors and the planner reuses less than a perfect one.
_PLANNER_OVERHEAD = 4


def _smaller_bound(bound: int, planned: float, budget: float, verb: str) -> int:
    lower = max(bound // 4, _SMALLEST_AUTOMATIC_BOUND)
    message = "ExecuTorch: dynamic upper bound %d %s %.1f GiB of memory (budget %.1f GiB); bounding it by %d"
    logger.warning(message, bound, verb, planned / 2**30, budget, lower)
    return lower


def narrow_dynamic_bounds(program: ExportedProgram, metadata: dict[str, Any], bound: int) -> None:
    """Cap every dynamic input dimension of a traced program at ``max(bound, 2 x its traced size)``, in place.

    A program traced for sizes up to one bound is valid up to a smaller one: narrowing the ranges its symbols take (the
    shape environment's, which lowering plans memory from, and the program's) replaces a new trace.
    """
    user_inputs = set(program.graph_signature.user_inputs)
    placeholders = [n for n in program.graph.nodes if n.op == "placeholder" and n.name in user_inputs]
    uppers: dict[Any, int] = {}
    multiples: dict[Any, tuple[Any, int]] = {}  # a size declared a multiple: its expression, by root and multiple
    shape_env = None
    for node, traced_shape in zip(placeholders, metadata["input_shapes"], strict=True):
        value = node.meta.get("val")
        if not isinstance(value, torch.Tensor):
            continue
        for size, traced in zip(value.shape, traced_shape, strict=True):
            if not isinstance(size, torch.SymInt):
                continue
            multiple, symbol = size.node.expr.as_coeff_Mul()
            if symbol.is_symbol and multiple.is_Integer:
                shape_env = size.node.shape_env
                uppers[symbol] = max(uppers.get(symbol, 0), max(bound, 2 * traced) // int(multiple))
                if multiple != 1:
                    multiples[size.node.expr] = (symbol, int(multiple))
    for symbol, upper in uppers.items():
        ranges = shape_env.var_to_range[symbol]
        narrowed = ValueRanges(ranges.lower, min(ranges.upper, upper))
        shape_env.var_to_range[symbol] = narrowed
        if symbol in program.range_constraints:
            program.range_constraints[symbol] = narrowed
    for expr, (symbol, multiple) in multiples.items():
        if expr in program.range_constraints:
            root = shape_env.var_to_range[symbol]
            program.range_constraints[expr] = ValueRanges(root.lower * multiple, root.upper * multiple)
    metadata["dynamic_dims"] = dynamic_dim_bounds(program, metadata["input_names"])


class ExecutorchExporter(DynamoExporter):
    export_format = "executorch"
    config_class = ExecutorchConfig
    program_suffix = ".pte"
    # A flatbuffer the runtime parses in C++ with its verifier on (Verification.InternalConsistency); nothing from it
    # runs as Python: tests/test_loading.py feeds it corrupted programs.
    loads_code = False
    recorded_packages = ("executorch",)

    def workaround_keys(self, config: ExecutorchConfig) -> tuple[str, ...]:
        """``"dynamo"``, ``"executorch"``, then the configured delegate's key (``"executorch.xnnpack"``)."""
        return (*super().workaround_keys(config), f"{BACKEND}.{config.backend}")

    def export_program(
        self,
        model: torch.nn.Module,
        sample_inputs: dict[str, Any],
        config: ExecutorchConfig,
        trace: SharedTrace | None = None,
    ) -> tuple[ExecutorchProgramManager, dict[str, Any]]:
        """Trace, fix and lower ``model``; return the ExecuTorch program and the metadata recorded on the way.

        ``trace``: a trace of the model reused where it is the one this export would make (``SharedTrace``): rarely,
        since attention is patched and dynamic dimensions bounded here, and a bound too large is traced again smaller.
        """
        with export_stage(BACKEND, 1, "backend preparation"):
            prepare = _BACKEND_PREPARE.get(config.backend)
            if prepare is None:
                raise ValueError(f"unknown ExecuTorch backend {config.backend!r}; known: {', '.join(_BACKEND_PREPARE)}")
            model, sample_inputs, partitioners = prepare(model, sample_inputs)
            if config.fast_lowering:
                partitioners = _unfiltered(partitioners)
        if not config.dynamic or config.dynamic_shapes is not None:
            return self._lower(super().export_program(model, sample_inputs, config, trace), config, partitioners)
        # ExecuTorch plans memory for the largest shape a program accepts: every dynamic dimension needs a bound.
        bound, budget = config.dynamic_upper_bound, config.planned_memory_budget_gib
        limit = None if budget is None else budget * 2**30
        while True:
            bounded = dataclasses.replace(config, dynamic_upper_bound=bound)
            traced = super().export_program(model, sample_inputs, bounded, trace)
            # Lowering costs ten traces: a traced graph whose tensors alone cannot fit gets a smaller bound at once.
            while limit is not None and bound > _SMALLEST_AUTOMATIC_BOUND:
                foreseen = _PLANNER_OVERHEAD * peak_activation_bytes(traced[0])
                if foreseen <= limit:
                    break
                bound = _smaller_bound(bound, foreseen, budget, "foresees")
                bounded = dataclasses.replace(config, dynamic_upper_bound=bound)
                narrow_dynamic_bounds(*traced, bound)
            program, metadata = self._lower(traced, bounded, partitioners)
            if limit is None or bound <= _SMALLEST_AUTOMATIC_BOUND or metadata["planned_memory_bytes"] <= limit:
                return program, metadata
            bound = _smaller_bound(bound, metadata["planned_memory_bytes"], budget, "plans")

    def lower_program(
        self, program: ExportedProgram, sample_inputs: dict[str, Any], config: ExecutorchConfig
    ) -> tuple[ExecutorchProgramManager, dict[str, Any]]:
        """Stages 1 and 3-5 on a program traced elsewhere (transformers' own ``TorchExportableModule*.export``), for
        its ExecuTorch runtime; stage 2's patches were not installed while it was traced."""
        with export_stage(BACKEND, 1, "backend preparation"):
            _, sample_inputs, partitioners = _BACKEND_PREPARE[config.backend](program.module(), sample_inputs)
        metadata = program_metadata(program, sample_inputs)
        metadata.update(workarounds={"patches": [], "unresolved": [], "fixes": []}, timings={})
        return self._lower((program, metadata), config, partitioners)

    def dynamic_upper_bound(self, config: ExecutorchConfig) -> int | None:
        """ExecuTorch plans memory for the largest shape a program accepts: every dynamic dimension needs a bound."""
        return config.dynamic_upper_bound

    def _lower(
        self, traced: tuple[ExportedProgram, dict[str, Any]], config: ExecutorchConfig, partitioners: list
    ) -> tuple[ExecutorchProgramManager, dict[str, Any]]:
        """Stages 3-5 on a traced program (stage 2's patches were installed while DynamoExporter traced it)."""
        program, metadata = traced
        keys = self.lowering_keys(config)
        workarounds = metadata["workarounds"]
        timings = metadata["timings"]
        started = time.perf_counter()
        with export_stage(BACKEND, 4, "FX program fixes"):
            apply_program_fixes(keys, program, workarounds["fixes"])
        with export_stage(BACKEND, 5, "FX node fixes"):
            apply_node_fixes(keys, program.graph_module, workarounds["fixes"])
        timings["fixes"] = round(time.perf_counter() - started, 3)
        report = PatchReport()
        # Lowering crashes inside ExecuTorch are repaired by stage 3 patches: report them there.
        with (
            export_stage(BACKEND, 3, "ExecuTorch patches"),
            apply_patches(keys, report),
            apply_patches(keys if config.fast_lowering else (), report, kind=LOWERING_SWAP),
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
        metadata["planned_memory_bytes"] = planned_memory_bytes(executorch_program)
        workarounds["patches"] = merged_records(workarounds["patches"], report.installed)
        workarounds["unresolved"] = merged_records(workarounds["unresolved"], report.unresolved)
        return executorch_program, metadata

    @classmethod
    def save_program(cls, program: ExecutorchProgramManager | bytes, path: Path) -> None:
        Path(path).write_bytes(program_bytes(program))

    @classmethod
    def load_program(cls, path: Path) -> bytes:
        """The ``.pte`` bytes: the runner hands them to the ExecuTorch runtime, saving writes them back as they are."""
        return Path(path).read_bytes()


# ── Stage 1: Backend preparation ──
# Each ``prepare_for_<name>(model, sample_inputs)`` moves the model to its device/dtype and returns
# ``(model, sample_inputs, partitioners)``. Add a backend by registering its function in ``_BACKEND_PREPARE``; its
# delegate-only workarounds go under the key ``"executorch.<name>"``.


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
    # Optional: the CUDA backend's modules need its toolchain; only backend="cuda" imports them.
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
# Reversible swaps of torch ops (or model code) an ExecuTorch backend rejects, installed while tracing. Extend with
# ``@register_patch("executorch", "torch.<op>")`` in ``workarounds/executorch/patches.py`` (``kernel_patches.py``
# for an op without a runtime kernel, ``onnx_and_executorch.py`` when ONNX needs it too), or with
# ``"executorch.xnnpack"`` in ``executorch/xnnpack.py`` for what only the XNNPACK delegate needs.


# ── Stage 3: ExecuTorch patches ──
# Swaps of ExecuTorch internals that crash on valid graphs, active around lowering: same registry, same two modules
# (the XNNPACK partitioner and its passes under "executorch.xnnpack"). With ``fast_lowering`` the speed-ups
# registered with ``@register_lowering_swap`` are installed here too.


# ── Stage 4: FX program fixes ──
# ``fix(exported_program) -> changed`` for repairs that need the whole program (range constraints, graph signature),
# run once after tracing. Extend with ``@register_fx_program_fix("executorch")`` in ``executorch/fixes.py``.


# ── Stage 5: FX node fixes ──
# ``fix(graph_module, node) -> changed`` over every call_function node after the program fixes: the "executorch" fixes
# (what the runtime's kernels refuse), then the delegate's ("executorch.xnnpack": ops XNNPACK would leave out of its
# partition).


# ── Lowering speed ──
# Measured on a tiny 2-layer Llama (see scripts/bench_executorch.py): the cost of to_edge_transform_and_lower is
# re-tracing. With ``fast_lowering``, stage 1 swaps XNNPACK's partitioner for the one below and stage 3 installs the
# registered lowering swaps (``executorch/fast_lowering.py``, ``executorch/xnnpack.py``). No program semantics change.


class _UnfilteredXnnpackPartitioner(XnnpackPartitioner):
    """XNNPACK without the per-node "do not decompose" filter, so lowering decomposes the program once, not thrice.

    With a filter, ExecuTorch decomposes, swaps the kept ops for placeholders, and decomposes again. Without one, an
    op kept whole that XNNPACK then declines stays in the program, so only ops with a portable kernel are kept.
    """

    def ops_to_not_decompose(self, ep: ExportedProgram) -> tuple[list[OpOverload], None]:
        ops, _ = super().ops_to_not_decompose(ep)
        return [op for op in ops if op._schema.name in _portable_kernel_names()], None


@functools.cache
def _portable_kernel_names() -> frozenset[str]:
    # Loads the runtime's native library: only when the kernel list is asked for, not with the exporter.
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


# ── Reading programs ──


def delegate_count(program: ExecutorchProgramManager | Any) -> int:
    """How many delegate calls (XNNPACK partitions) an edge or ExecuTorch program makes."""
    graph_module = program.exported_program().graph_module
    return sum(1 for n in graph_module.graph.nodes if n.op == "call_function" and _DELEGATE_CALL in str(n.target))


def peak_activation_bytes(program: ExportedProgram) -> int:
    """The most bytes a traced program's intermediate tensors hold at once, each at its upper-bound size, each freed
    after its last use (0 when a size has no upper bound)."""

    def upper_bound(size: int | torch.SymInt) -> int | None:
        try:
            return eval_upper_bound(size)
        except (TypeError, AssertionError, RuntimeError):  # a data-dependent size with no upper bound
            return None

    nodes = list(program.graph.nodes)
    last_use = {source: index for index, node in enumerate(nodes) for source in node.all_input_nodes}
    held: dict[torch.fx.Node, int] = {}
    live = peak = 0
    for index, node in enumerate(nodes):
        if node.op == "call_function":
            tensors = [t for t in pytree.tree_leaves(node.meta.get("val")) if isinstance(t, torch.Tensor)]
            sizes = [[upper_bound(size) for size in t.shape] for t in tensors]
            if any(None in shape for shape in sizes):
                return 0  # nothing to foresee
            held[node] = sum(math.prod(shape) * t.element_size() for shape, t in zip(sizes, tensors, strict=True))
            live += held[node]
            peak = max(peak, live)
        for source in node.all_input_nodes:
            if last_use[source] == index and source in held:
                live -= held.pop(source)
    return peak


def planned_memory_bytes(program: ExecutorchProgramManager) -> int:
    """The activation memory the runtime allocates when it loads ``program`` (every method, every memory arena)."""
    return sum(sum(plan.non_const_buffer_sizes) for plan in program.executorch_program.execution_plan)


def program_bytes(program: ExecutorchProgramManager | bytes) -> bytes:
    return program if isinstance(program, (bytes, bytearray)) else program.buffer
