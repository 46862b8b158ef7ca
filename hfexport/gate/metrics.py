"""What a passing cell's exported program is: its size, its operators and its latency on the backend's runtime.

Runs in a job's child (``checks/``), on the export the cell saved and loaded. ``program_metrics`` measures one
program; ``keep_program`` leaves it (and the inputs it ran on) where the base run of the same cell finds it, and
``paired_latency`` times the head's program and the base's in one process, interleaved, since two latencies measured
apart on a shared runner differ by more than the change being measured. ``health.py`` (the parent) compares them.
"""

from __future__ import annotations

import collections
import copy
import json
import shutil
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..exporters import ExportedModel

# Latency at the traced shape: a few warm-up calls (first-call allocations, lazy initializations), then the median of
# up to LATENCY_CALLS calls or of those that fit in LATENCY_SECONDS (a larger model gets fewer, never under 3).
WARMUP_CALLS = 2
LATENCY_CALLS = 15
LATENCY_SECONDS = 0.5
# Base against head: rounds of PAIRED_CALLS calls each, the side that goes first alternating from round to round.
PAIRED_ROUNDS = 7
PAIRED_CALLS = 3
INPUTS_FILE = "inputs.pt"


def program_metrics(folder: Path, loaded: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    """``nodes``, ``bytes``, ``latency_ms``, ``ops`` (kind -> count), ``dynamic_dims`` and, on ExecuTorch,
    ``partitions`` (delegated subgraphs) and ``planned_bytes`` (memory planned for activations).

    ``bytes`` leaves out the debug metadata dynamo and ONNX programs carry per node (stack traces naming the files'
    paths, module names): two-thirds of a tiny program, and larger where the checkout's path is longer."""
    manifest = loaded.manifest
    ops: collections.Counter[str] = collections.Counter()
    extra: dict[str, int] = {"debug_bytes": 0}
    for program in loaded.programs.values():
        counted, more = _COUNTERS[loaded.export_format](program)
        ops.update(counted)
        for key, value in more.items():
            extra[key] = extra.get(key, 0) + value
    dynamic = [dims for c in manifest.get("components", {}).values() for dims in (c.get("dynamic_dims") or {}).values()]
    files = sum((folder / name).stat().st_size for name in manifest.get("files", []))
    return {
        "nodes": sum(ops.values()),
        "bytes": files - extra.pop("debug_bytes"),
        "latency_ms": round(median_latency_ms(loaded, inputs), 4),
        "ops": dict(sorted(ops.items())),
        "dynamic_dims": sum(len(dims) for dims in dynamic),
        **extra,
    }


def _dynamo_ops(program: Any) -> tuple[dict[str, int], dict[str, int]]:
    """The operator nodes of an ``ExportedProgram`` (placeholders and the output are no work), and the bytes of the
    stack traces its serialized nodes carry."""
    nodes = list(program.graph_module.graph.nodes)
    traces = sum(len(json.dumps(n.meta["stack_trace"])) for n in nodes if n.meta.get("stack_trace"))
    return collections.Counter(str(n.target) for n in nodes if n.op == "call_function"), {"debug_bytes": traces}


def _onnx_ops(program: Any) -> tuple[dict[str, int], dict[str, int]]:
    """The nodes of an ONNX model, those of its subgraphs (``If``, ``Loop`` bodies) included, and the bytes of their
    metadata (torch.onnx's stack traces, module scopes and FX names)."""
    from onnx_ir.traversal import RecursiveGraphIterator  # optional dependency (the onnx extra)

    nodes = list(RecursiveGraphIterator(program.graph))
    metadata = sum(len(key) + len(value) for n in nodes for key, value in n.metadata_props.items())
    ops = collections.Counter(f"{n.domain}::{n.op_type}" if n.domain else n.op_type for n in nodes)
    return ops, {"debug_bytes": metadata}


def _executorch_ops(program: Any) -> tuple[dict[str, int], dict[str, int]]:
    """The instructions of a ``.pte``'s plans by operator (a delegate call counts as its backend), its delegated
    partitions and the bytes planned for its activations."""
    # Optional dependency (the executorch extra). The .pte's flatbuffer schema has no public reader; executorch's own
    # serializer reads it back.
    from executorch.exir._serialize._program import deserialize_pte_binary

    from ..exporters.exporter_executorch import program_bytes

    ops: collections.Counter[str] = collections.Counter()
    extra = {"partitions": 0, "planned_bytes": 0}
    for plan in deserialize_pte_binary(program_bytes(program)).program.execution_plan:
        for instruction in (i for chain in plan.chains for i in chain.instructions):
            arguments = instruction.instr_args
            if hasattr(arguments, "op_index"):
                operator = plan.operators[arguments.op_index]
                ops[f"{operator.name}.{operator.overload}" if operator.overload else operator.name] += 1
            elif hasattr(arguments, "delegate_index"):
                ops[f"delegate::{plan.delegates[arguments.delegate_index].id}"] += 1
        extra["partitions"] += len(plan.delegates)
        extra["planned_bytes"] += sum(plan.non_const_buffer_sizes)
    return ops, extra


_COUNTERS: dict[str, Callable[[Any], tuple[dict[str, int], dict[str, int]]]] = {
    "dynamo": _dynamo_ops,
    "onnx": _onnx_ops,
    "executorch": _executorch_ops,
}


def median_latency_ms(program: Callable[..., Any], inputs: dict[str, Any]) -> float:
    """The median milliseconds of ``program(**inputs)`` after ``WARMUP_CALLS``: ``LATENCY_CALLS`` calls or as many as
    fit in ``LATENCY_SECONDS``."""
    for _ in range(WARMUP_CALLS):
        _timed_ms(program, inputs)
    samples: list[float] = []
    until = time.perf_counter() + LATENCY_SECONDS
    while len(samples) < LATENCY_CALLS and (len(samples) < 3 or time.perf_counter() < until):
        samples.append(_timed_ms(program, inputs))
    return statistics.median(samples)


def _timed_ms(program: Callable[..., Any], inputs: dict[str, Any]) -> float:
    """One call's milliseconds, on a fresh copy of the inputs (a program may update a cache in place), copy untimed."""
    fresh = copy.deepcopy(inputs)
    with torch.no_grad():
        started = time.perf_counter()
        program(**fresh)
        return (time.perf_counter() - started) * 1000


def keep_program(folder: Path, inputs: dict[str, Any], destination: Path) -> None:
    """Leave the saved export and its inputs at ``destination`` for the base run of this cell to time against."""
    if destination.exists():
        shutil.rmtree(destination)
    shutil.copytree(folder, destination)
    torch.save(inputs, destination / INPUTS_FILE)


def paired_latency(base: Any, base_inputs: dict[str, Any], head_folder: Path) -> dict[str, Any]:
    """The head's kept program and this base program timed in one process, interleaved: ``head_ms`` and ``base_ms``
    (medians of every call) and their ``ratio``; ``{"error": ...}`` when the head's program cannot run here."""
    try:
        # Saved by this run's own head job: its pickled parts are the gate's own.
        head = ExportedModel.from_pretrained(head_folder, trust_remote_code=True)
        head_inputs = torch.load(head_folder / INPUTS_FILE, weights_only=False)
        _timed_ms(head, head_inputs)
    except Exception as error:  # a head program this base cannot load (an output type the base lacks): say so
        return {"error": f"the head's program does not run beside the base's: {type(error).__name__}: {error}"[:300]}
    sides = {"head": (head, head_inputs), "base": (base, base_inputs)}
    samples: dict[str, list[float]] = {"head": [], "base": []}
    for program, inputs in sides.values():
        for _ in range(WARMUP_CALLS):
            _timed_ms(program, inputs)
    head_slower = 0  # rounds whose head median was the larger: a sign test against noise
    for round_number in range(PAIRED_ROUNDS):
        order = ("head", "base") if round_number % 2 == 0 else ("base", "head")
        medians = {}
        for side in order:
            timed = [_timed_ms(*sides[side]) for _ in range(PAIRED_CALLS)]
            samples[side].extend(timed)
            medians[side] = statistics.median(timed)
        head_slower += medians["head"] > medians["base"]
    head_ms, base_ms = statistics.median(samples["head"]), statistics.median(samples["base"])
    return {
        "head_ms": round(head_ms, 4),
        "base_ms": round(base_ms, 4),
        "ratio": round(head_ms / base_ms, 4) if base_ms > 0 else None,
        "rounds": PAIRED_ROUNDS,
        "head_slower_rounds": head_slower,
    }


def measure(
    folder: Path, loaded: Any, inputs: dict[str, Any], backend: str, plan: dict[str, str] | None
) -> dict[str, Any]:
    """A passing cell's ``metrics``; with the run's ``plan`` (``health.ProgramStore.job_fields``) its program kept for
    the base run (``keep``), or timed against the head's kept program (``compare``: ``paired_latency``)."""
    found: dict[str, Any] = {"metrics": program_metrics(folder, loaded, inputs)}
    head_folder = Path(plan["compare"]) / backend if plan and plan.get("compare") else None
    if head_folder is not None and head_folder.is_dir():
        found["paired_latency"] = paired_latency(loaded, inputs, head_folder)
    if plan and plan.get("keep"):
        keep_program(folder, inputs, Path(plan["keep"]) / backend)
    return found
