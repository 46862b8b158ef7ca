"""``SharedTrace``: one torch.export trace of a model, reused by the later exports of other backends it serves.

ONNX and ExecuTorch lower a torch.export program traced with their own keys' patches installed besides dynamo's.
Where none of those patches is reached and the dynamic shapes are declared alike, that trace is dynamo's: the gate
traces a class once for dynamo and ONNX. ExecuTorch bounds every dynamic dimension and patches attention, so its trace
differs for nearly every model and it traces its own.
"""

from __future__ import annotations

import copy
import dataclasses
import warnings
from typing import Any, Protocol

import torch
from torch.export import ExportedProgram

from ..torch_compat import pytree


class TraceConfig(Protocol):
    """What a shared trace compares of an export's config (a ``DynamoConfig`` or a subclass's)."""

    dynamic: bool
    dynamic_shapes: Any
    strict: bool


class Tracer(Protocol):
    """What a shared trace reads of an exporter (``DynamoExporter`` or a subclass), named here so that this module
    does not import exporter_dynamo, which imports it."""

    export_format: str

    def workaround_keys(self, config: Any) -> tuple[str, ...]: ...

    def dynamic_upper_bound(self, config: Any) -> int | None: ...


@dataclasses.dataclass
class SharedTrace:
    """One torch.export trace of a model, made by the first export given it and reused by later ones it serves.

    ``watch``: the workaround keys of the later exports (``for_exports``). The first export traces with its own patches
    and records which patches of the watched keys the trace reaches (``registry.watch_patches``) and which of their
    static-dims declarations match the model; a later export reuses the program only when none did and it would
    trace with the same options on the same inputs. Each export gets its own copy of the program: a backend's fixes
    rewrite it in place.
    """

    watch: tuple[str, ...] = ()
    program: ExportedProgram | None = None
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)
    traced_by: str | None = None
    keys: tuple[str, ...] = ()
    options: tuple[Any, ...] = ()
    inputs: dict[str, Any] = dataclasses.field(default_factory=dict)
    reached: frozenset[tuple[str, str]] = frozenset()  # (key, name) of the watched workarounds the trace reached

    @classmethod
    def for_exports(cls, *exports: tuple[Tracer, TraceConfig]) -> SharedTrace:
        """An empty trace that watches the keys of these (exporter, config) pairs: the exports meant to reuse it."""
        keys = (key for exporter, config in exports for key in exporter.workaround_keys(config))
        return cls(tuple(dict.fromkeys(keys)))

    def keep(
        self,
        exporter: Tracer,
        config: TraceConfig,
        sample_inputs: dict[str, Any],
        program: ExportedProgram,
        metadata: dict[str, Any],
        reached: set[tuple[str, str]],
    ) -> None:
        self.program, self.metadata = _copy_of(program), copy.deepcopy(metadata)
        self.traced_by, self.keys = exporter.export_format, exporter.workaround_keys(config)
        self.options = _trace_options(exporter, config)
        self.inputs, self.reached = copy.deepcopy(sample_inputs), frozenset(reached)

    def refusal(self, exporter: Tracer, config: TraceConfig, sample_inputs: dict[str, Any]) -> str | None:
        """Why this export cannot reuse the trace, or None when the trace is the one it would make."""
        keys = exporter.workaround_keys(config)
        own = set(keys) - set(self.keys)
        if self.program is None:
            return "nothing traced yet"
        if not set(self.keys) <= set(keys) or not own <= set(self.watch):
            return f"traced with the keys {', '.join(self.keys)}, this export runs {', '.join(keys)}"
        reached = sorted(name for key, name in self.reached if key in own)
        if reached:
            return f"the trace reaches this export's own workarounds: {', '.join(reached)}"
        if _trace_options(exporter, config) != self.options:
            return "traced with other dynamic shapes or options"
        if not _same_inputs(self.inputs, sample_inputs):
            return "traced on other sample inputs"
        return None

    def take(
        self, exporter: Tracer, config: TraceConfig, sample_inputs: dict[str, Any]
    ) -> tuple[ExportedProgram, dict[str, Any]] | None:
        """A copy of the program and its metadata for this export, or None when it must trace its own."""
        if self.refusal(exporter, config, sample_inputs) is not None:
            return None
        metadata = copy.deepcopy(self.metadata)
        metadata["trace_shared_from"] = self.traced_by
        # Not spent here: what tracing took the export that made the trace (comparisons with other exporters add it).
        metadata["timings"] = {
            "torch.export": 0.0,
            "reused trace (not spent)": self.metadata["timings"]["torch.export"],
        }
        return _copy_of(self.program), metadata


def _trace_options(exporter: Tracer, config: TraceConfig) -> tuple[Any, ...]:
    automatic = config.dynamic and config.dynamic_shapes is None
    bound = exporter.dynamic_upper_bound(config) if automatic else None
    return (config.dynamic, repr(config.dynamic_shapes), config.strict, bound)


def _same_inputs(first: dict[str, Any], second: dict[str, Any]) -> bool:
    leaves, spec = pytree.tree_flatten(first)
    other_leaves, other_spec = pytree.tree_flatten(second)
    if spec != other_spec:
        return False
    return all(_same_leaf(a, b) for a, b in zip(leaves, other_leaves, strict=True))


def _same_leaf(first: Any, second: Any) -> bool:
    if not isinstance(first, torch.Tensor) or not isinstance(second, torch.Tensor):
        return type(first) is type(second) and first == second
    layout = (first.dtype, first.device, first.shape, first.stride())
    return layout == (second.dtype, second.device, second.shape, second.stride()) and torch.equal(first, second)


def _copy_of(program: ExportedProgram) -> ExportedProgram:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # copying a TreeSpec warns of torch's own LeafSpec check
        return copy.deepcopy(program)
