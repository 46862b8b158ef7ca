"""Comparing an export's outputs with eager's: every tensor or number leaf, by name, within a backend's tolerance."""

from __future__ import annotations

from typing import Any

import torch

from hfexport.exporters import ExportFailure, named_leaves

# Largest max-abs difference from eager that still passes, per backend.
TOLERANCES = {"dynamo": 1e-4, "onnx": 1e-4, "executorch": 1e-3}
DEFAULT_TOLERANCE = 1e-4


class OutputMismatch(ExportFailure):
    """The exported program's outputs (or generated tokens) differ from eager's."""


def flat_outputs(outputs: Any) -> list[tuple[str, Any]]:
    """(name, tensor) for every tensor or number leaf of a model output, caches included.

    Numbers (maskformer-swin's spatial sizes) count as 0-d tensors: a runtime that returns every output as a tensor
    (onnxruntime) still lines up with eager, and the values are compared too.
    """
    numbers = (int, float)
    return [
        (name, leaf if isinstance(leaf, torch.Tensor) else torch.tensor(leaf))
        for name, leaf in named_leaves(outputs)
        if isinstance(leaf, torch.Tensor) or (isinstance(leaf, numbers) and not isinstance(leaf, bool))
    ]


def compare(expected: Any, actual: Any, tolerance: float) -> tuple[float, float, str | None]:
    """(max abs diff, max rel diff, problem or None); rel diff is abs diff over the largest reference magnitude.

    An output matches when its abs diff or its rel diff is within ``tolerance``: float32 error grows with the values,
    so outputs of magnitude 10-30 (Clap's audio states, CpmAnt's keys) differ by 1.3e-4 on onnxruntime, 4e-6 of them.
    """
    reference, produced = flat_outputs(expected), flat_outputs(actual)
    if len(reference) != len(produced):
        names = [n for n, _ in reference]
        return float("nan"), float("nan"), f"{len(produced)} outputs, eager returns {len(reference)}: {names}"
    max_abs = max_rel = 0.0
    failing: list[tuple[float, str, float]] = []
    for (name, ref), (_, out) in zip(reference, produced, strict=True):
        if tuple(ref.shape) != tuple(out.shape):
            return float("nan"), float("nan"), f"{name}: shape {tuple(out.shape)}, eager {tuple(ref.shape)}"
        if ref.numel() == 0:
            continue
        ref64, out64 = ref.detach().to(torch.float64), out.detach().to(torch.float64)
        # NaN and inf pass only where eager has the same (NaN, or inf of the same sign); the rest is compared.
        finite = torch.isfinite(ref64)
        if not torch.equal(finite, torch.isfinite(out64)) or not torch.equal(
            ref64[~finite].isnan(), out64[~finite].isnan()
        ):
            return float("nan"), float("nan"), f"{name}: NaN or inf where eager has none (or the reverse)"
        if not torch.equal(ref64[~finite].nan_to_num(0.0), out64[~finite].nan_to_num(0.0)):
            return float("nan"), float("nan"), f"{name}: inf of the other sign than eager's"
        if not bool(finite.any()):
            continue
        ref64, out64 = ref64[finite], out64[finite]
        abs_diff = float((ref64 - out64).abs().max())
        rel_diff = abs_diff / max(float(ref64.abs().max()), 1e-12)
        max_abs, max_rel = max(max_abs, abs_diff), max(max_rel, rel_diff)
        if abs_diff > tolerance and rel_diff > tolerance:
            failing.append((abs_diff, name, rel_diff))
    if failing:
        abs_diff, name, rel_diff = max(failing)
        return max_abs, max_rel, f"{name}: max abs diff {abs_diff:.3g} > {tolerance:g} (relative {rel_diff:.3g})"
    return max_abs, max_rel, None


def shapes_text(shapes: dict[str, list[int]]) -> str:
    return ", ".join(f"{name} {tuple(shape)}" for name, shape in shapes.items())
