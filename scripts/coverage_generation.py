"""The coverage document's generation column and totals: which decoder-LM cells ran the gate's greedy generation.

``hfexport.tiny_models`` is imported where used: it imports torch (seconds).
"""

from __future__ import annotations

import functools
from collections import Counter
from typing import Any

from coverage_record import Key, exporter_passed, not_built

from hfexport.gate.cells import BACKENDS, EXPORT_MODULE_BACKENDS, GENERATION_KEYS, Cell


@functools.cache
def generating_class(model_class: str) -> bool:
    """Whether the gate runs greedy generation on the tiny model of ``model_class`` (``generation.generates``)."""
    from hfexport import tiny_models
    from hfexport.gate.checks.generation import generates

    try:
        cls = tiny_models.resolve_model_class(model_class)
        return generates(cls, tiny_models.tiny_config(cls))
    except Exception:  # a class the builder cannot make: its cells are in the builder's list, counted nowhere else
        return False


def runs_with_generation(runs: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """(engine, created_at) of the runs swept with ``--generation``: their cells ran it wherever the gate does."""
    return {(run["engine"], run["created_at"]) for run in runs if (run.get("sweep") or {}).get("generation")}


def _generation_state(cell: dict[str, Any], generation_runs: set[tuple[str, str]]) -> str:
    """A cell's generation: "ran" (its parts are in the cell), "not reached" (swept with generation, but the cell
    failed before it), "not run" (swept without ``--generation``), or "" (the gate does not generate with the class)."""
    if any(cell.get(key) for key in GENERATION_KEYS):
        return "ran"
    if (cell["engine"], cell.get("created_at")) in generation_runs:  # the gate itself decided, in the run
        return "not reached" if cell["status"] != "pass" and generating_class(cell["model_class"]) else ""
    return "not run" if generating_class(cell["model_class"]) else ""


def generation_totals(cells: dict[Key, dict[str, Any]], generation_runs: set[tuple[str, str]]) -> list[str]:
    """Per backend, hfexport's decoder-LM cells: swept with generation, passing with it, and not run."""
    lines = [
        "",
        "Generation, hfexport alone. The gate runs greedy generation on every decoder LM (hfexport's slot cache,",
        "transformers' StaticCache, and transformers' exportable module on dynamo and ExecuTorch); a generation",
        "failure fails the cell. Over the decoder-LM cells whose tiny model builds and runs eagerly, hfexport's",
        "exporters with their generation parts, then transformers' own exportable module in a column of its own:",
        "it runs last, through transformers' code and `torch.export` alone on dynamo, so it measures transformers'",
        "export path (a cell where it alone fails counts as an hfexport pass here and in every table above).",
        "",
        "| backend | decoder-LM cells | swept with generation | hfexport pass, generation included | pass rate "
        "| of the passes, a part not checked | generation not run | transformers' exportable module passes |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for backend in BACKENDS:
        states: Counter = Counter()
        for (engine, _, cell_backend), cell in cells.items():
            if engine != "hfexport" or cell_backend != backend or not_built(cell):
                continue
            state = _generation_state(cell, generation_runs)
            if not state:
                continue
            states[state] += 1
            module = (cell.get("export_module") or {}).get("status")
            states[f"module {module}"] += state == "ran"
            if state == "ran" and exporter_passed(cell):
                states["pass"] += 1
                parts = [cell.get(key) or {} for key in GENERATION_KEYS]
                states["declined"] += any(part.get("status") == "not_checked" for part in parts)
        swept = states["ran"] + states["not reached"]
        if swept + states["not run"]:
            rate = f"{100 * states['pass'] / swept:.1f} %" if swept else "—"
            module_ran = states["module pass"] + states["module fail"]
            module = f"{states['module pass']} of {module_ran}" if module_ran else "—"
            if backend in EXPORT_MODULE_BACKENDS and module_ran:
                module += f" ({100 * states['module pass'] / module_ran:.1f} %)"
            lines.append(
                f"| {backend} | {swept + states['not run']} | {swept} | **{states['pass']}** | {rate} "
                f"| {states['declined']} | {states['not run']} | {module} |"
            )
    return [
        *lines,
        "",
        "Swept with generation: the cells of runs with `--generation`, those whose export failed before generation",
        "included (they fail). A part `not checked` is one an exporter declines (hfexport's slot cache on",
        "linear-attention layers, which keep conv and recurrent states; transformers' module where the StaticCache",
        "part declined): the cell passes on the parts that ran, and its row says which part. Not run: swept without",
        "`--generation`, so the cell's pass is the export's alone (the backend tables say `not run`).",
    ]


def generation_column(cell: dict[str, Any], generation_runs: set[tuple[str, str]]) -> str:
    """A backend table's generation column: "pass", each part that did not pass, "not run", "not reached" or "—"."""
    state = _generation_state(cell, generation_runs)
    if state != "ran":
        return state or "—"
    odd = []
    for label, part in Cell.from_dict(cell).generation_parts():
        if part.status != "pass":
            detail = (part.detail or "").removeprefix("not checked: ")
            detail = detail.replace("|", "/").replace("\n", " ").replace("`", "'")[:80]
            odd.append(f"{label} {part.status.replace('_', ' ')}" + (f": {detail}" if detail else ""))
    return "; ".join(odd) or "pass"
