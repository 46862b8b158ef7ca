"""``--engine transformers``: gate a transformers version that ships its own ``transformers.exporters``.

The only module of hfexport that imports ``transformers.exporters``, lazily, through its public API
(``AutoExportConfig``, ``AutoHfExporter``, ``ExportedModel``), so the gate can hold that in-tree code to the same
checks as hfexport's exporters.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any


class EngineUnavailableError(ImportError):
    """The transformers being checked has no ``transformers.exporters``."""


def transformers_exporters_present(checkout: Path | None) -> bool:
    """Whether the code under test ships ``transformers.exporters`` (the checkout's, else the installed one's)."""
    if checkout is not None and (checkout / "src" / "transformers" / "__init__.py").is_file():
        return (checkout / "src" / "transformers" / "exporters" / "__init__.py").is_file()
    spec = importlib.util.find_spec("transformers")
    locations = spec.submodule_search_locations if spec else None
    return any((Path(p) / "exporters" / "__init__.py").is_file() for p in locations or ())


def transformers_engine() -> tuple[Callable, Callable, Callable]:
    """(export, save, load) backed by ``transformers.exporters``."""
    try:
        exporters = importlib.import_module("transformers.exporters")
    except ImportError as error:
        raise EngineUnavailableError(f"this transformers has no transformers.exporters: {error}") from error

    def export(model: Any, inputs: dict[str, Any], backend: str, generation: bool) -> Any:
        config = exporters.AutoExportConfig.from_dict({"export_format": backend, "dynamic": True})
        exporter = exporters.AutoHfExporter.from_config(config)
        if generation:
            return exporter.export_for_generation(model, inputs, config)
        return exporter.export(model, inputs, config)

    def save(exported: Any, path: Path) -> None:
        exported.save_pretrained(path)

    def load(path: Path) -> Any:
        return exporters.ExportedModel.from_pretrained(path)

    return export, save, load
