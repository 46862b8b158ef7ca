"""Helpers shared by the backend round-trip tests."""

from __future__ import annotations

from typing import Any

import torch.utils._pytree as pytree


def max_abs_diff(actual: Any, expected: Any) -> float:
    """Largest difference over every tensor leaf; both must be the same output type with the same number of leaves."""
    assert type(actual) is type(expected), (type(actual), type(expected))
    actual_leaves, expected_leaves = pytree.tree_leaves(actual), pytree.tree_leaves(expected)
    assert len(actual_leaves) == len(expected_leaves)
    return max(float((a.float() - e.float()).abs().max()) for a, e in zip(actual_leaves, expected_leaves, strict=True))
