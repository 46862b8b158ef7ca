"""The core model types every backend's own tests sweep, as pytest params.

CI runs each modeling code path once: a core type that only varies one CI already runs (other sizes, norms, biases or
attention windows over the same decoder or encoder) is marked ``slow`` and runs with ``-m slow``.
"""

from __future__ import annotations

import pytest

# variant -> the type CI runs for its code path
VARIANTS = {"mistral": "llama", "qwen2": "llama", "gemma": "llama", "roberta": "bert"}


def core_params(names: list[str]) -> list:
    """``names`` as parametrize values, the variants among them marked ``slow``."""
    return [pytest.param(name, id=name, marks=pytest.mark.slow) if name in VARIANTS else name for name in names]
