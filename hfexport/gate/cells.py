"""The vocabulary of a report's cells, defined once: backends, statuses, shards, and facts several views show.

Imported by the gate's parent process, the report views and ``hfexport comment``, so it imports nothing heavy.
"""

from __future__ import annotations

import zlib
from typing import Any

# The built-in backends, in the order reports show them.
BACKENDS = ("dynamo", "onnx", "executorch")

# "tool_error": hfexport itself failed (exit code 2); "not_checked": no tiny model could be built or run eagerly.
# Neither is a model's failure. "error" is schema 1's build/eager/job error, read but no longer written.
STATUSES = ("pass", "fail", "crash", "timeout", "oom", "skipped", "error", "tool_error", "not_checked")
FAILURE_STATUSES = frozenset({"fail", "crash", "timeout", "oom", "error"})
NOT_A_RESULT = frozenset({"tool_error", "not_checked"})


def is_failure(cell: dict[str, Any]) -> bool:
    """A model's failure (export, runtime or comparison), pre-existing or not."""
    return cell.get("status") in FAILURE_STATUSES


def parse_shard(value: str) -> tuple[int, int]:
    """``"K/N"`` -> ``(K, N)``; ``ValueError`` unless 1 <= K <= N."""
    index, _, count = value.partition("/")
    if not (index.isdigit() and count.isdigit() and 1 <= int(index) <= int(count)):
        raise ValueError(f"expected K/N with 1 <= K <= N, got {value!r}")
    return int(index), int(count)


def shard_of(cells: list[dict[str, Any]], shard: tuple[int, int]) -> list[dict[str, Any]]:
    """A deterministic share of the cells: stable hash of (class, backend) modulo the shard count."""
    index, count = shard
    return [c for c in cells if zlib.crc32(f"{c['model_class']}|{c['backend']}".encode()) % count == index - 1]


def disabled_features(report: dict[str, Any]) -> dict[str, str]:
    """The transformers internals the checkout lacks, over every cell, with the feature each one turned off."""
    found: dict[str, str] = {}
    for cell in report.get("cells") or []:
        if isinstance(cell.get("disabled"), dict):
            found.update({str(name): str(feature) for name, feature in cell["disabled"].items()})
    return found
