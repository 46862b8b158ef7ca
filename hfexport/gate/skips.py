"""EXPORT_SKIPS: model classes left out of the gate because they are not exportable as they are.

Maps a model class name to the model-side change that would make it exportable; the gate shows such a class as
skipped with that reason instead of running it. An entry needs a confirmed failure and a named fix, and the list
is meant to shrink: remove an entry once the model is fixed.
"""

from __future__ import annotations

# Longformer's sliding-window attention (LED reuses it) computes chunk counts as tensors with
# torch.div(size, window, rounding_mode="trunc") and feeds them to view(): under torch.export the view size becomes
# data-dependent (GuardOnDataDependentSymNode on every backend).
_TENSOR_SIZED_CHUNKS = (
    "chunk counts are tensors (torch.div on sizes) fed to view(): compute them with Python integer division on "
    "sizes (size // window) in LongformerSelfAttention._chunk and _sliding_chunks_*"
)

EXPORT_SKIPS: dict[str, str] = {
    "LongformerModel": _TENSOR_SIZED_CHUNKS,
    "LongformerForMaskedLM": _TENSOR_SIZED_CHUNKS,
    "LEDModel": _TENSOR_SIZED_CHUNKS,
    "LEDForConditionalGeneration": _TENSOR_SIZED_CHUNKS,
}


def skip_reason(model_class: str) -> str | None:
    return EXPORT_SKIPS.get(model_class)
