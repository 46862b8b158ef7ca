"""What ``hfexport merge`` checks before joining shard reports: one run, and every shard of it exactly once.

A matrix merges with ``if: always()``, so a shard that died before uploading its report must not drop out of the
verdict silently, a re-run's second upload must not count twice, and shards of another PR, commit or version must
not mix in. A merge that is allowed to lack shards (``--allow-partial``) says so in the report (``incomplete``) and
never passes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .report import Report, merge_reports

# What every shard of one run shares, named as a refusal names it: the set of backends, not their order.
SAME_IN_EVERY_SHARD: tuple[tuple[str, Callable[[Report], Any]], ...] = (
    ("PR", lambda r: (r.pr or {}).get("number")),
    ("PR head", lambda r: (r.pr or {}).get("head_sha")),
    ("base commit", lambda r: r.repository.get("base")),
    ("head commit", lambda r: r.repository.get("head")),
    ("engine", lambda r: r.engine),
    ("backends", lambda r: sorted(r.backends)),
    ("hfexport version", lambda r: r.hfexport_version),
    ("schema version", lambda r: r.schema_version),
)


class MergeError(ValueError):
    """Why shard reports cannot be merged, in one line (the CLI exits with code 2)."""


def _name(report: Report) -> str:
    return f"shard {report.shard['index']}/{report.shard['count']}"


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "…"


def check_one_run(reports: Sequence[Report]) -> None:
    """Every shard names the PR, commits, engine, backends and versions the first one names."""
    first = reports[0]
    for what, read in SAME_IN_EVERY_SHARD:
        expected = read(first)
        other = next((r for r in reports if read(r) != expected), None)
        if other is not None:
            raise MergeError(
                f"the {what} differs: {_name(first)} has {_shown(expected)}, {_name(other)} has "
                f"{_shown(read(other))}: merge the shards of one run only"
            )


def missing_shards(reports: Sequence[Report]) -> tuple[int, list[int]]:
    """N and the indices of ``1..N`` no report is; MergeError when the reports' N differ or one K comes twice."""
    counts = sorted({r.shard["count"] for r in reports})
    if len(counts) > 1:
        raise MergeError(f"shards of {' and of '.join(map(str, counts))}: every shard of one run has the same N in K/N")
    seen: set[int] = set()
    for report in reports:
        if report.shard["index"] in seen:
            raise MergeError(f"{_name(report)} given twice: its cells would count twice")
        seen.add(report.shard["index"])
    return counts[0], sorted(set(range(1, counts[0] + 1)) - seen)


def ranges(indices: Sequence[int]) -> str:
    """``[2, 3, 4, 7]`` -> ``"shards 2\u20134, 7"`` (an en dash); ``[2]`` -> ``"shard 2"``."""
    runs: list[list[int]] = []
    for index in sorted(set(indices)):
        if runs and index == runs[-1][1] + 1:
            runs[-1][1] = index
        else:
            runs.append([index, index])
    text = ", ".join(str(low) if low == high else f"{low}\u2013{high}" for low, high in runs)
    return f"shard{'s' if len(indices) > 1 else ''} {text}"


def check_shards(reports: Sequence[Report], allow_partial: bool) -> dict[str, Any] | None:
    """The report's ``incomplete`` record (``{"shards": N, "missing": [...]}``) when shards are missing and
    ``allow_partial``, None when every one is there; MergeError otherwise."""
    if not reports:
        raise MergeError("nothing to merge")
    check_one_run(reports)
    count, missing = missing_shards(reports)
    if not missing:
        return None
    if not allow_partial:
        raise MergeError(
            f"{ranges(missing)} missing (of {count}): a shard that ended before uploading its report would drop its "
            "cells from the verdict; pass --allow-partial to merge the others as incomplete"
        )
    return {"shards": count, "missing": missing}


def incomplete_note(report: Report) -> str | None:
    """``"incomplete: shards 2\u201316 missing (of 16)"`` for a merge that lacked shards, else None."""
    incomplete = report.extra.get("incomplete")
    if not incomplete:
        return None
    return f"incomplete: {ranges(incomplete['missing'])} missing (of {incomplete['shards']})"


def merge(reports: Sequence[Report], allow_partial: bool = False) -> Report:
    """The shards' reports joined (``report.merge_reports``) once they are one run's ``1..N``, each once; with
    ``allow_partial`` missing shards are recorded as ``incomplete`` and the exit code is 2, never a pass."""
    incomplete = check_shards(reports, allow_partial)
    merged = merge_reports(list(reports))
    if incomplete:
        merged.extra = {**merged.extra, "incomplete": incomplete}  # a copy: the first shard's stays as it was
        merged.exit_code = 2  # the missing shards' cells are unknown: neither a pass nor a regression
    return merged
