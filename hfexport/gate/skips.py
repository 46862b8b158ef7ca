"""EXPORT_SKIPS: model classes left out of the gate because they are not exportable as they are.

Maps a model class name to the model-side change that would make it exportable; the gate shows such a class as
skipped with that reason instead of running it. An entry needs a confirmed failure and a named fix, and the list
is meant to shrink: remove an entry once the model is fixed.
"""

from __future__ import annotations

# Cosmos3-Edge's tower resizes its position table per image to sizes read from grid_thw's values (F.interpolate with
# size=(height, width) in Cosmos3EdgeVisionEmbeddings.resize_positional_embeddings, modeling_cosmos3_edge.py:378):
# the output size is data-dependent (GuardOnDataDependentSymNode on every backend).
_SIZE_FROM_GRID_VALUES = (
    "the position table is resized per image to sizes read from grid_thw: precompute the resized table, or its "
    "interpolation taps, through a helper that pops it from kwargs (as vision_utils' "
    "get_vision_interpolation_indices_and_weights does)"
)

# ViLT interpolates its position table per image to the patch rows and columns pixel_mask leaves (x_h, x_w: sums of
# the mask, in a loop over the batch; ViltEmbeddings.visual_embed, modeling_vilt.py:107 in 5.23): data-dependent sizes.
# It then draws the patches' order with torch.multinomial (even when all fit max_image_length), so eager's own image
# tokens come out shuffled (two seeds: last_hidden_state 4.4 apart) and no export can match eager.
_SIZES_FROM_PIXEL_MASK = (
    "the position table is interpolated per image to sizes summed from pixel_mask, and the patches are drawn in "
    "random order (torch.multinomial): interpolate once to the full patch grid, mask the padded patches and keep "
    "the valid ones in order in ViltEmbeddings.visual_embed"
)

# OmDet-Turbo keys a language cache on each prompt's token ids (`tuple(ids[mask != 0].tolist())`,
# _get_cache_key_at_index, modeling_omdet_turbo.py:1028 in 5.23) and regroups class embeddings in a loop over the
# values of classes_structure: both read tensor values in Python.
_CACHE_KEYED_ON_TOKENS = (
    "the language cache is keyed on token ids read with .tolist() and class embeddings are regrouped by the values "
    "of classes_structure: embed without the cache and regroup with a mask in get_language_embedding"
)

# VideoLLaMA3's tower unshuffles and interpolates each image to sizes read from grid_thw's values (`for ... (t, h, w)
# ... in zip(hidden_states_chunks, grid_thw, ...)`, F.interpolate(size=(h // merge_size, w // merge_size)),
# VideoLlama3VisionModel.pixel_unshuffle, modeling_video_llama_3.py:437 in 5.23): data-dependent sizes.
_UNSHUFFLE_FROM_GRID_VALUES = (
    "each image is unshuffled and interpolated to sizes read from grid_thw in a loop over its rows: pass the merged "
    "sizes as Python ints (or precomputed interpolation taps) to VideoLlama3VisionModel.pixel_unshuffle"
)

# LightGlue matches the keypoints SuperPoint keeps above its score threshold, a data-dependent count the matcher
# branches on (`if keypoints.shape[2] == 0`, LightGlueForKeypointMatching._match_image_pair, modeling_lightglue.py:698
# in 5.23), and prunes further per layer.
_KEYPOINTS_BY_THRESHOLD = (
    "the keypoints are those the detector keeps above a score threshold, a count branched on in Python: keep a fixed "
    "top-k of keypoints with a validity mask in the detector and match on masks in _match_image_pair"
)

EXPORT_SKIPS: dict[str, str] = {
    "ViltModel": _SIZES_FROM_PIXEL_MASK,
    "OmDetTurboForObjectDetection": _CACHE_KEYED_ON_TOKENS,
    "Cosmos3EdgeVisionModel": _SIZE_FROM_GRID_VALUES,
    "VideoLlama3VisionModel": _UNSHUFFLE_FROM_GRID_VALUES,
    "LightGlueForKeypointMatching": _KEYPOINTS_BY_THRESHOLD,
}


def skip_reason(model_class: str) -> str | None:
    return EXPORT_SKIPS.get(model_class)
