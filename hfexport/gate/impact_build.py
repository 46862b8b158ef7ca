"""``hfexport impact build``: run a selection as ``check`` would, recording what each class's check executed.

Apart from ``impact.py`` (the map itself, which selection reads) because it drives the gate's run: ``run`` selects
with the map, and the map is built by a run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .cells import Cell
from .impact import RECORDING_PYTHON, ImpactMap, ImpactMapError, expected_versions, recording_supported
from .run import run_check
from .targets import CheckOptions, Target


def build_map(target: Target, options: CheckOptions, echo: Callable[[str], None] = print) -> ImpactMap:
    """Run ``target``'s selection as ``check`` would, recording, and return the map of what each class ran."""
    if not recording_supported():
        python = ".".join(map(str, RECORDING_PYTHON))
        raise ImpactMapError(f"impact maps are recorded on Python {python} with slipcover installed only")
    options.record_impact = True
    built = ImpactMap(expected_versions(target.checkout))

    def keep(cell: Cell, outcome: dict[str, Any]) -> None:
        record = outcome.get("impact")
        if isinstance(record, dict) and record.get("versions") == built.versions:
            built.add(cell.model_class, record)

    run_check(target, options, echo, on_outcome=keep)
    return built
