"""Export health: what a change does to the exported programs of the cells that pass, head against base.

A passing cell carries its program's ``metrics`` (``metrics.py``: nodes, bytes, latency, ops, dynamic dimensions,
ExecuTorch partitions and planned memory) and, where the base revision ran too, ``base_metrics``; ``assess`` compares
them under ``Thresholds`` and records on the cell what moved (``Cell.health``). Latency is compared only as the ratio
of medians of the two programs timed in one process, interleaved (the base job times the head's kept program beside
its own, see ``ProgramStore``): absolute times measured apart on a shared runner differ by more than most changes.
Findings are warnings (``--fail-on-health`` makes them fail the gate). Imported by the gate's parent: no torch.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from .cells import Annotation, Cell, Health, Metrics


@dataclass(frozen=True)
class Thresholds:
    """When a change to a program is reported: growth past a percentage, or latency past a ratio and a floor."""

    nodes_percent: float = 10.0  # all nodes, and the nodes of one operator kind ...
    op_min_nodes: float = 2  # ... when that kind changes by at least this many (one more op in one layer is not)
    bytes_percent: float = 10.0  # the saved program and, on ExecuTorch, the memory planned for activations
    latency_ratio: float = 1.25
    latency_floor_ms: float = 0.05  # a smaller difference in median latency is noise, whatever its ratio

    @classmethod
    def parse(cls, text: str) -> Thresholds:
        """``"nodes=10,bytes=10,latency=1.25,latency-floor-ms=0.05"`` (any of them); ``ValueError`` names a bad one."""
        names = {f.name.replace("_percent", "").replace("_ratio", "").replace("_", "-"): f.name for f in fields(cls)}
        values: dict[str, float] = {}
        for item in filter(None, (part.strip() for part in text.split(","))):
            name, _, value = item.partition("=")
            if name.strip() not in names:
                raise ValueError(f"unknown health threshold {name.strip()!r}; choose from {', '.join(names)}")
            try:
                number = float(value)
            except ValueError:
                number = math.nan
            if not math.isfinite(number) or number < 0:
                raise ValueError(f"health threshold {name.strip()}: expected a number >= 0, got {value.strip()!r}")
            values[names[name.strip()]] = number
        return cls(**values)


@dataclass(frozen=True)
class ProgramStore:
    """Where a run keeps the programs its head cells saved, so that each cell's base job can time both together."""

    root: Path
    side: str = "head"  # "head": jobs keep their programs here; "base": jobs time theirs against those

    def job_fields(self, model_class: str) -> dict[str, Any]:
        """A job's ``health`` plan (``metrics.measure``), for one model class's programs."""
        folder = str(self.root / model_class)
        return {"health": {"keep": folder} if self.side == "head" else {"compare": folder}}

    def for_base(self) -> ProgramStore:
        return dataclasses.replace(self, side="base")


def metrics_from(data: Any) -> Metrics | None:
    """A job's ``metrics`` object, typed (None when the job measured none)."""
    return Metrics(**{f.name: data.get(f.name) for f in fields(Metrics)}) if isinstance(data, dict) else None


# ── Comparing ──

OP_KINDS_SHOWN = 3  # operator kinds named per cell and direction; the rest are counted


def usable(metrics: Metrics | None) -> bool:
    """Whether every number present is a finite, non-negative one (a report is data: it may hold anything)."""
    if metrics is None:
        return False
    numbers = [getattr(metrics, f.name) for f in fields(Metrics) if f.name != "ops"]
    return all(_count(value) for value in numbers if value is not None) and _count(metrics.nodes)


def _count(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


def assess(cell: Cell, paired_latency: dict[str, Any] | None, thresholds: Thresholds) -> None:
    """Record on a passing cell what moved from ``base_metrics`` to ``metrics`` past ``thresholds``."""
    if cell.status != "pass" or cell.metrics is None:
        return
    if cell.base_metrics is None:
        cell.health = Health(note="not compared: no passing program at the base revision")
        return
    if not (usable(cell.metrics) and usable(cell.base_metrics)):
        cell.health = Health(note="not compared: metrics missing or invalid")
        return
    regressions: list[str] = []
    improvements: list[str] = []
    head, base = cell.metrics, cell.base_metrics
    _size_changes(head, base, thresholds, regressions, improvements)
    _op_changes(head.ops, base.ops, thresholds, regressions, improvements)
    _count_change(head.dynamic_dims, base.dynamic_dims, "dynamic dimensions", improvements, regressions)
    _count_change(head.partitions, base.partitions, "delegated partitions", regressions, improvements)
    latency, note = _latency(paired_latency, thresholds, regressions, improvements)
    cell.health = Health(regressions, improvements, latency, note)


def _size_changes(
    head: Metrics, base: Metrics, thresholds: Thresholds, regressions: list[str], improvements: list[str]
) -> None:
    """Nodes, program bytes and planned memory past their percentage, either way."""
    for key, percent, shown in (
        ("nodes", thresholds.nodes_percent, "{} → {} nodes"),
        ("bytes", thresholds.bytes_percent, "program {} → {}"),
        ("planned_bytes", thresholds.bytes_percent, "planned memory {} → {}"),
    ):
        after, before = getattr(head, key), getattr(base, key)
        if after is None or before is None or after == before:
            continue
        change = 100.0 * (after - before) / before if before else math.inf
        text = f"{shown.format(_amount(before, key), _amount(after, key))} ({change:+.0f} %)"
        if change >= percent:
            regressions.append(text)
        elif change <= -percent:
            improvements.append(text)


def _amount(value: float, key: str) -> str:
    if key == "nodes":
        return f"{value:,.0f}"
    for unit, size in (("MB", 1e6), ("kB", 1e3)):
        if value >= size:
            return f"{value / size:.3g} {unit}"
    return f"{value:.0f} B"


def _op_changes(
    after: Any, before: Any, thresholds: Thresholds, regressions: list[str], improvements: list[str]
) -> None:
    """Operator kinds whose nodes grew or shrank past the thresholds (a copy or transpose per layer, an attention no
    longer fused), the largest changes first, ``OP_KINDS_SHOWN`` of each direction and a count of the rest."""
    after, before = _op_counts(after), _op_counts(before)
    if after is None or before is None:
        return
    moved: dict[bool, list[tuple[float, float, str]]] = {True: [], False: []}
    for kind in sorted(set(after) | set(before)):
        new, old = after.get(kind, 0), before.get(kind, 0)
        change = 100.0 * (new - old) / old if old else math.inf
        if abs(new - old) >= thresholds.op_min_nodes and abs(change) >= thresholds.nodes_percent:
            percent = "new" if not old else f"{change:+.0f} %"
            moved[new > old].append((abs(new - old), abs(change), f"{kind} {old} → {new} ({percent})"))
    for grew, found in ((True, regressions), (False, improvements)):
        largest = [text for *_, text in sorted(moved[grew], key=lambda item: (-item[0], -item[1]))]
        found.extend(largest[:OP_KINDS_SHOWN])
        if len(largest) > OP_KINDS_SHOWN:
            found.append(f"operator kinds {'grown' if grew else 'shrunk'} too: {len(largest) - OP_KINDS_SHOWN}")


def _op_counts(ops: Any) -> dict[str, int] | None:
    """Nodes by operator kind, when every count is a non-negative integer."""
    if not isinstance(ops, dict) or not all(isinstance(n, int) and _count(n) for n in ops.values()):
        return None
    return ops


def _count_change(after: Any, before: Any, label: str, more: list[str], fewer: list[str]) -> None:
    """A count where more is the regression (``more``) or the improvement: delegated partitions, dynamic dims."""
    if after is None or before is None or after == before:
        return
    (more if after > before else fewer).append(f"{before:.0f} → {after:.0f} {label}")


def _latency(
    paired: dict[str, Any] | None, thresholds: Thresholds, regressions: list[str], improvements: list[str]
) -> tuple[dict[str, float] | None, str | None]:
    """The latency of head and base timed together, and a finding past the ratio and the floor; else why not."""
    if paired is None:
        return None, "latency not compared: head and base were not both run in this check (a cached result)"
    if paired.get("error"):
        return None, f"latency not compared: {paired['error']}"
    timing = [paired.get(key) for key in ("head_ms", "base_ms", "ratio", "rounds", "head_slower_rounds")]
    if not all(_count(value) for value in timing):
        return None, "latency not compared: no valid timing"
    head_ms, base_ms, ratio, rounds, slower = timing
    latency = {"head_ms": head_ms, "base_ms": base_ms, "ratio": ratio}
    text = f"latency ×{ratio:.2g} ({base_ms:.3g} → {head_ms:.3g} ms)"  # noqa: RUF001 - the times sign, as written
    # Past the ratio and the floor, and on the same side in all rounds but one at most: noise seldom is (p < 0.07).
    if ratio >= thresholds.latency_ratio and head_ms - base_ms >= thresholds.latency_floor_ms and slower >= rounds - 1:
        regressions.append(text)
    elif ratio * thresholds.latency_ratio <= 1 and base_ms - head_ms >= thresholds.latency_floor_ms and slower <= 1:
        improvements.append(text)
    return latency, None


# ── Reporting ──

SECTION_LINES = 20  # cells shown in the comment's section; the report lists every one


def summary_entries(cells: list[Cell]) -> dict[str, list[dict[str, str]]]:
    """``health_regressions`` and ``health_improvements``: one ``{model_class, backend, what}`` per finding."""
    found: dict[str, list[dict[str, str]]] = {"health_regressions": [], "health_improvements": []}
    for cell in _compared(cells):
        for key, items in (
            ("health_regressions", cell.health.regressions),
            ("health_improvements", cell.health.improvements),
        ):
            found[key].extend(
                {"model_class": cell.model_class, "backend": cell.backend, "what": what} for what in items or []
            )
    return found


def _compared(cells: list[Cell]) -> list[Cell]:
    """Passing cells with a health record whose metrics are usable: what the report may show."""
    return [c for c in cells if c.status == "pass" and c.health is not None and _both_usable(c)]


def _both_usable(cell: Cell) -> bool:
    return usable(cell.metrics) and (cell.base_metrics is None or usable(cell.base_metrics))


def section(cells: list[Cell], escape: Callable[[Any], str]) -> str | None:
    """The comment's "Export health" section, only when something moved or some metrics could not be used."""
    lines = []
    moved = [c for c in _compared(cells) if c.health.regressions or c.health.improvements]
    for cell in moved[:SECTION_LINES]:
        for icon, items in (("⚠️", cell.health.regressions), ("📉", cell.health.improvements)):
            if items:
                lines.append(
                    f"- {icon} {escape(cell.model_class)} · {escape(cell.backend)}: {escape(', '.join(items))}"
                )
    if len(moved) > SECTION_LINES:
        lines.append(f"- and {len(moved) - SECTION_LINES} more (report.json: summary.health_regressions)")
    measured = [c for c in cells if c.status == "pass" and (c.metrics or c.base_metrics) is not None]
    unusable = [c for c in measured if not _both_usable(c)]
    if unusable:
        names = ", ".join(f"{c.model_class} · {c.backend}" for c in unusable[:5])
        more = f" and {len(unusable) - 5} more" if len(unusable) > 5 else ""
        lines.append(f"- metrics missing or invalid, shown without them: {escape(names)}{more}")
    if not lines:
        return None
    intro = "What this change does to the exported programs of passing cells (⚠️ grew, 📉 shrank), against base:"
    return "\n".join(["### Export health", "", intro, "", *lines])


def annotations(cells: list[Cell]) -> list[Annotation]:
    """One ``::warning`` per cell whose program grew, at the model class's line when it is known."""
    lines = []
    for cell in _compared(cells):
        if cell.health.regressions:
            source = cell.source
            file = source.file if source is not None else None
            line = source.line if source is not None and file else None
            title = f"{cell.model_class} · {cell.backend}: export health"
            lines.append(Annotation("warning", ", ".join(cell.health.regressions), title, file, line))
    return lines
