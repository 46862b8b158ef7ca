"""Helpers shared by the tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import torch.utils._pytree as pytree


def max_abs_diff(actual: Any, expected: Any) -> float:
    """Largest difference over every tensor leaf; both must be the same output type with the same number of leaves."""
    assert type(actual) is type(expected), (type(actual), type(expected))
    actual_leaves, expected_leaves = pytree.tree_leaves(actual), pytree.tree_leaves(expected)
    assert len(actual_leaves) == len(expected_leaves)
    return max(float((a.float() - e.float()).abs().max()) for a, e in zip(actual_leaves, expected_leaves, strict=True))


def load_script(name: str) -> ModuleType:
    """``scripts/<name>.py`` as a module (the scripts are not a package)."""
    path = Path(__file__).resolve().parent.parent / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
