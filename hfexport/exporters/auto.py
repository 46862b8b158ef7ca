"""The backend table and the auto classes that dispatch on ``export_format``.

Built-in backends are named by import path, so importing hfexport loads neither onnx nor executorch: a backend's
heavy imports happen on first use.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

from .base import ExportConfigMixin, HfExporter, ModelRunner

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


def get_exporter_class(export_format: str) -> type[HfExporter]:
    return _load(_entry(export_format)[0])


def get_runner_class(export_format: str) -> type[ModelRunner]:
    runner = _entry(export_format)[1]
    if runner is None:
        raise ValueError(f"export format {export_format!r} was registered without a runner: its exports cannot be run")
    return _load(runner)


def import_backend_modules(only: str | None = None) -> list[str]:
    """Import exporter modules so their registries are populated; return why a backend could not be loaded."""
    from .utils import MissingDependencyError

    problems = []
    for export_format in available_formats():
        if only is None or only == export_format:
            try:
                get_exporter_class(export_format)
            except (MissingDependencyError, ImportError) as error:
                problems.append(f"{export_format} workarounds not listed: {error}")
    return problems


def register_backend(exporter: type[HfExporter], runner: type[ModelRunner] | None = None) -> None:
    """Make ``exporter.export_format`` available to the auto classes; with a runner its exports can also be run."""
    if not (isinstance(exporter, type) and issubclass(exporter, HfExporter)):
        raise TypeError(f"register_backend expects an HfExporter subclass, got {exporter!r}")
    if runner is not None and not (isinstance(runner, type) and issubclass(runner, ModelRunner)):
        raise TypeError(f"register_backend expects a ModelRunner subclass as runner, got {runner!r}")
    export_format = exporter.export_format
    if not isinstance(export_format, str) or not export_format:
        raise ValueError(f"{exporter.__name__}.export_format must be a non-empty string")
    config_class = exporter.config_class
    if not (dataclasses.is_dataclass(config_class) and issubclass(config_class, ExportConfigMixin)):
        raise TypeError(f"{exporter.__name__}.config_class must be an ExportConfigMixin dataclass")
    if config_class().export_format != export_format:
        raise ValueError(
            f"{config_class.__name__}.export_format defaults to {config_class().export_format!r}, "
            f"but {exporter.__name__}.export_format is {export_format!r}"
        )
    _BACKENDS[export_format] = (exporter, runner)


class AutoExportConfig:
    """Builds the config dataclass of the backend named by ``export_format``."""

    @staticmethod
    def from_dict(values: dict[str, Any]) -> ExportConfigMixin:
        if "export_format" not in values:
            raise ValueError(f"the config needs an 'export_format' (one of {', '.join(available_formats())})")
        exporter_class = get_exporter_class(values["export_format"])
        return exporter_class.config_class.from_dict(dict(values))


class AutoHfExporter:
    """Instantiates the exporter registered for a config's ``export_format``."""

    @staticmethod
    def from_config(config: ExportConfigMixin) -> HfExporter:
        if not isinstance(config, ExportConfigMixin):
            raise TypeError(f"expected an export config (ExportConfigMixin), got {type(config).__name__}")
        return get_exporter_class(config.export_format)()
