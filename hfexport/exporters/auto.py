"""``register_backend`` and the auto classes that dispatch on ``export_format`` through the backend table.

The table itself, and the lazy loading of the built-in backends, live in ``backends.py``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .backends import _BACKENDS, available_formats, get_exporter_class
from .base import ExportConfigMixin, HfExporter, ModelRunner


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
