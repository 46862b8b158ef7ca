"""Helpers shared by the tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
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


class PhraseMasks(torch.nn.Module):
    """GroundingDino's phrase masks: which tokens are delimiters (isin), each token's previous one (cummax) and next
    one (cummin), with the indices the two return."""

    def forward(self, input_ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
        special = torch.isin(input_ids, torch.tensor([3, 5]))
        positions = torch.arange(input_ids.shape[1]).expand_as(input_ids)
        previous = torch.cummax(torch.where(special, positions, -1), dim=1)
        following = torch.cummin(torch.where(special, positions, input_ids.shape[1]).flip(1), dim=1)
        return special, previous.values, previous.indices, following.values.flip(1), following.indices


# Delimiters (3 and 5) at the traced shape, and a larger batch and length with ties and delimiter-free rows.
PHRASE_IDS = (
    torch.tensor([[1, 3, 2, 2, 5, 4, 3], [5, 1, 1, 3, 2, 2, 2]]),
    torch.randint(0, 7, (3, 11), generator=torch.Generator().manual_seed(0)),
)


class StudentTLoss(torch.nn.Module):
    """The time-series ``*ForPrediction`` loss (autoformer, informer): a Student-T negative log-likelihood, whose
    log_prob takes lgamma of its degrees of freedom; and lgamma of any real input, its reflection below 1/2 too."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        df, loc, scale = self.linear(x).unbind(-1)
        softplus = torch.nn.functional.softplus
        distribution = torch.distributions.StudentT(2 + softplus(df), loc, softplus(scale) + 1e-3)
        return -distribution.log_prob(target), (x * 3).lgamma()


def student_t_inputs(batch: int, length: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(batch * length)
    return {
        "x": torch.randn(batch, length, 4, generator=generator),
        "target": torch.randn(batch, length, generator=generator),
    }


def export_dynamic(model: torch.nn.Module, inputs: dict, backend: str) -> Any:
    """Export ``model`` to ``backend`` with dynamic shapes, as the gate does."""
    from hfexport.exporters import AutoExportConfig, AutoHfExporter

    config = AutoExportConfig.from_dict({"export_format": backend, "dynamic": True})
    return AutoHfExporter.from_config(config).export(model, inputs, config)


def without_workaround(monkeypatch: Any, key: str, name: str) -> None:
    """Take the workaround ``name`` out of the registry's ``key`` for the rest of the test."""
    from hfexport.exporters import registry

    kept = [w for w in registry._REGISTRY[key] if w.name != name]
    assert len(kept) == len(registry._REGISTRY[key]) - 1, name
    monkeypatch.setitem(registry._REGISTRY, key, kept)
