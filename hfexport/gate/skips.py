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

# Cosmos3-Edge's tower resizes its position table per image to sizes read from grid_thw's values (F.interpolate with
# size=(height, width) in Cosmos3EdgeVisionEmbeddings.resize_positional_embeddings, modeling_cosmos3_edge.py:378):
# the output size is data-dependent (GuardOnDataDependentSymNode on every backend).
_SIZE_FROM_GRID_VALUES = (
    "the position table is resized per image to sizes read from grid_thw: precompute the resized table, or its "
    "interpolation taps, through a helper that pops it from kwargs (as vision_utils' "
    "get_vision_interpolation_indices_and_weights does)"
)

EXPORT_SKIPS: dict[str, str] = {
    "Cosmos3EdgeVisionModel": _SIZE_FROM_GRID_VALUES,
    "LongformerModel": _TENSOR_SIZED_CHUNKS,
    "LongformerForMaskedLM": _TENSOR_SIZED_CHUNKS,
    "LEDModel": _TENSOR_SIZED_CHUNKS,
    "LEDForConditionalGeneration": _TENSOR_SIZED_CHUNKS,
}


def skip_reason(model_class: str) -> str | None:
    return EXPORT_SKIPS.get(model_class)
