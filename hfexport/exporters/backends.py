"""The backend table: each ``export_format`` names its exporter and runner classes, loaded on first use.

Built-in backends are named by import path, so importing hfexport loads neither onnx nor executorch: a backend's
heavy imports happen on first use. ``register_backend`` (auto.py) checks a backend's classes before adding it here.
"""

from __future__ import annotations

import importlib
from typing import Any

from .dependencies import MissingDependencyError

_BACKENDS: dict[str, tuple[Any, Any]] = {
    "dynamo": ("hfexport.exporters.exporter_dynamo:DynamoExporter", "hfexport.exporters.runner_dynamo:DynamoRunner"),
    "onnx": ("hfexport.exporters.exporter_onnx:OnnxExporter", "hfexport.exporters.runner_onnx:OnnxRunner"),
    "executorch": (
        "hfexport.exporters.exporter_executorch:ExecutorchExporter",
        "hfexport.exporters.runner_executorch:ExecutorchRunner",
    ),
}


def _load(reference: Any) -> Any:
    if not isinstance(reference, str):
        return reference
    module_name, _, attribute = reference.partition(":")
    return getattr(importlib.import_module(module_name), attribute)


def available_formats() -> list[str]:
    return sorted(_BACKENDS)


def _entry(export_format: str) -> tuple[Any, Any]:
    try:
        return _BACKENDS[export_format]
    except KeyError:
        raise ValueError(
            f"unknown export format {export_format!r}; registered: {', '.join(available_formats())}"
        ) from None


def get_exporter_class(export_format: str) -> type:
    """The ``HfExporter`` subclass registered for ``export_format``."""
    return _load(_entry(export_format)[0])


def get_runner_class(export_format: str) -> type:
    """The ``ModelRunner`` subclass registered for ``export_format``."""
    runner = _entry(export_format)[1]
    if runner is None:
        raise ValueError(f"export format {export_format!r} was registered without a runner: its exports cannot be run")
    return _load(runner)


def import_backend_modules(only: str | None = None) -> list[str]:
    """Import exporter modules so their registries are populated; return why a backend could not be loaded."""

    problems = []
    for export_format in available_formats():
        if only is None or only == export_format:
            try:
                get_exporter_class(export_format)
            except (MissingDependencyError, ImportError) as error:
                problems.append(f"{export_format} workarounds not listed: {error}")
    return problems
