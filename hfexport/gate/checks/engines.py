"""What exports a cell: hfexport's exporters with the gate's options (one dynamo trace shared with ONNX) or the
checkout's own ``transformers.exporters``, and the workarounds an export records that the report names."""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

from hfexport.exporters import AutoExportConfig, AutoHfExporter, ExportedModel, SharedTrace

from ..engine_transformers import transformers_engine

# Export options the gate sets on top of a backend's defaults. ExecuTorch plans memory for the largest shape a program
# accepts: the gate runs two shapes, so each dynamic dimension gets the smallest automatic bound (16, and never under
# twice its traced size: SECOND_SHAPE fits). At the default 256 a tiny decoder plans ~0.9 GiB, which every load of the
# program allocates (0.5-2.5 s), and large models were traced again at smaller bounds until they fit (PegasusX: 3x).
GATE_OPTIONS: dict[str, dict[str, Any]] = {"executorch": {"dynamic_upper_bound": 16}}


def _gate_export(backend: str, generation: bool = False) -> tuple[Any, Any]:
    """The exporter and config the gate exports a backend with."""
    # Greedy generation is compared at the traced prompt only, so its prefill and decode programs are static: half
    # the export time, and fewer XNNPACK partitions (4 against 33 on gemma3). Dynamic shapes are what the main
    # export and its second shape check.
    options = {"export_format": backend, "dynamic": not generation, **GATE_OPTIONS.get(backend, {})}
    config = AutoExportConfig.from_dict(options)
    return AutoHfExporter.from_config(config), config


def _hfexport_engine() -> tuple[Callable, Callable, Callable]:
    def export(
        model: Any, inputs: dict[str, Any], backend: str, generation: bool, trace: Any = None, cache: str = "slots"
    ) -> Any:
        exporter, config = _gate_export(backend, generation)
        if generation:  # ``trace``: one SharedTrace per generation component; ``cache``: slots or static
            return exporter.export_for_generation(model, inputs, config, traces=trace, cache=cache)
        return exporter.export(model, inputs, config, trace=trace)

    return export, lambda exported, path: exported.save_pretrained(path), ExportedModel.from_pretrained


def shared_trace(backends: list[str], engine_name: str, generation: bool = False) -> Any:
    """An empty ``SharedTrace`` for the cells of one class on ``backends`` (in order), or None when none can share."""
    if not _can_share_traces(backends, engine_name):
        return None
    return SharedTrace.for_exports(*(_gate_export(backend, generation) for backend in backends[1:]))


def shared_generation_traces(backends: list[str], engine_name: str) -> dict[str, Any] | None:
    """An empty ``SharedTrace`` per generation component (prefill and decode, or encoder and decoder), made as each
    is first exported; None when the backends cannot share traces."""
    if not _can_share_traces(backends, engine_name):
        return None
    return collections.defaultdict(lambda: shared_trace(backends, engine_name, generation=True))


def _can_share_traces(backends: list[str], engine_name: str) -> bool:
    # dynamo traces first and hands its trace on to the backends after it.
    return engine_name == "hfexport" and len(backends) >= 2 and backends[0] == "dynamo"


def engine(name: str) -> tuple[Callable, Callable, Callable]:
    """(export, save, load) of an engine: hfexport's exporters, or the checkout's own ``transformers.exporters``."""
    if name == "transformers":
        return transformers_engine()
    return _hfexport_engine()


def workarounds_used(exported: Any, model_module: str) -> list[str]:
    """Fixes that changed the graph, and patches and dims declarations of the model's own code (torch-op patches are
    installed always)."""
    model_package = model_module.rpartition(".")[0] + "."
    names: list[str] = []
    for component in getattr(exported, "manifest", {}).get("components", {}).values():
        used = component.get("workarounds", {})
        declarations = [*used.get("static_dims", []), *used.get("dim_multiples", [])]
        records = [_patch_record(entry) for entry in [*used.get("patches", []), *declarations]]
        patches = [record["name"] for record in records if record["target"].startswith(model_package)]
        for name in [*patches, *used.get("fixes", [])]:
            if name not in names:
                names.append(name)
    return names


def _patch_record(entry: dict[str, str] | str) -> dict[str, str]:
    """A manifest's patch record; schema 1 exports wrote it as a ``"name -> target"`` string."""
    if isinstance(entry, str):
        name, _, target = entry.partition(" -> ")
        return {"name": name, "target": target}
    return entry
