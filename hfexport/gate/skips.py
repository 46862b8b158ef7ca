"""EXPORT_SKIPS: model classes left out of the gate because they are not exportable as they are.

Maps a model class name to the model-side change that would make it exportable; the gate shows such a class as
skipped with that reason instead of running it. Each class is declared by its path (``_skips``): ``hfexport registry``
lists it and ``--check`` finds it renamed. An entry needs a confirmed failure and a named fix, and the list
is meant to shrink: remove an entry once the model is fixed.
"""

from __future__ import annotations

from ..model_keyed import EXPORT_SKIP, declare

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


def _skips(fix: str, *class_paths: str) -> dict[str, str]:
    """``{class name: fix}`` of the classes at ``class_paths``, declared as export skips (``hfexport registry``)."""
    declare(EXPORT_SKIP, "EXPORT_SKIPS", fix, class_paths)
    return dict.fromkeys((path.rpartition(".")[2] for path in class_paths), fix)


EXPORT_SKIPS: dict[str, str] = {
    **_skips(_SIZES_FROM_PIXEL_MASK, "transformers.models.vilt.modeling_vilt.ViltModel"),
    **_skips(
        _CACHE_KEYED_ON_TOKENS, "transformers.models.omdet_turbo.modeling_omdet_turbo.OmDetTurboForObjectDetection"
    ),
    **_skips(_SIZE_FROM_GRID_VALUES, "transformers.models.cosmos3_edge.modeling_cosmos3_edge.Cosmos3EdgeVisionModel"),
    **_skips(
        _UNSHUFFLE_FROM_GRID_VALUES, "transformers.models.video_llama_3.modeling_video_llama_3.VideoLlama3VisionModel"
    ),
    **_skips(_KEYPOINTS_BY_THRESHOLD, "transformers.models.lightglue.modeling_lightglue.LightGlueForKeypointMatching"),
}


def skip_reason(model_class: str) -> str | None:
    return EXPORT_SKIPS.get(model_class)
