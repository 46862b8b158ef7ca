"""Facts read off a report's cells that more than one view shows (terminal, markdown)."""

from __future__ import annotations

from typing import Any


def disabled_features(report: dict[str, Any]) -> dict[str, str]:
    """The transformers internals the checkout lacks, over every cell, with the feature each one turned off."""
    found: dict[str, str] = {}
    for cell in report.get("cells") or []:
        if isinstance(cell.get("disabled"), dict):
            found.update({str(name): str(feature) for name, feature in cell["disabled"].items()})
    return found
