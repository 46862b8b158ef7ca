"""Builders of the ``TEXT`` stage (token ids) and the ``MAIN`` stage (the main non-text input: the first that
applies)."""

from __future__ import annotations

import inspect
import itertools
import math

import torch

from ..tables import (
    BATCHED_PATCH_TYPES,
    CODEBOOK_IDS,
    CODEBOOK_STACKED_TYPES,
    EMBEDDED_INPUTS,
    FIXED_QUERY_TYPES,
    MONO_CHANNEL_WAVEFORM_TYPES,
    PATCH_CUBE_TYPES,
    PATCH_IMAGE_TYPES,
    PATCHED_WINDOW_INPUTS,
    PRENET_INPUTS,
    WAVEFORM_INPUTS,
)
from .draw import (
    audio_config,
    codec_hop,
    feature_frames,
    image_config,
    mel_frames,
    pixel_values,
    sequence_ids,
    token_ids,
    waveform_length,
)
from .registry import Request, Stage, builds

# ── Token ids ──


@builds(
    Stage.TEXT,
    when=lambda r: "input_ids" in r.parameters and (r.main_input == "input_ids" or r.main_input not in r.parameters),
)
def _text_ids(r: Request) -> dict[str, torch.Tensor]:
    # Audio LMs that stack their codebooks into the batch take (batch * num_codebooks, sequence) ids.
    stacked = r.config.model_type in CODEBOOK_STACKED_TYPES
    rows = r.batch_size * r.config.num_codebooks if stacked else r.batch_size
    codebooks = CODEBOOK_IDS.get(type(r.model).__name__)
    if codebooks:
        shape = (rows, r.seq_length, getattr(r.config, codebooks))
        return {"input_ids": token_ids(r.config, shape, r.generator)}
    return {"input_ids": token_ids(r.config, (rows, r.seq_length), r.generator)}


@builds(Stage.TEXT, when=lambda r: "input_ids" in r.inputs and hasattr(r.config, "codebook_vocab_size"))
def _text_and_codebook_ids(r: Request) -> dict[str, torch.Tensor]:
    """Speech LMs reading a text stream beside num_codebooks audio code streams (Kyutai STT): (batch, sequence,
    1 + num_codebooks) ids, the text ids first, then each codebook's codes (offset by the model itself)."""
    shape = (r.batch_size, r.seq_length, r.config.num_codebooks)
    codes = torch.randint(r.config.codebook_vocab_size, shape, generator=r.generator)
    return {"input_ids": torch.cat([r.inputs["input_ids"].unsqueeze(-1), codes], dim=-1)}


# ── The main input: the first builder that applies ──


# These towers read no text: ids the text stage drew are dropped (not left undrawn, which would shift the patches).
@builds(Stage.MAIN, when=lambda r: "grid_thw" in r.parameters, drops=("input_ids",))
def _flat_patches(r: Request) -> dict[str, torch.Tensor]:
    """Qwen-VL-style vision towers: every image's patches as rows of one flat tensor, laid out by ``grid_thw``."""
    vision = image_config(r.config)
    side = 2 * getattr(vision, "spatial_merge_size", 1)
    channels = getattr(vision, "in_channels", None) or getattr(vision, "num_channels", 3)
    # Muse Spark's towers name the temporal patch size patch_temporal.
    temporal = getattr(vision, "temporal_patch_size", None) or getattr(vision, "patch_temporal", 1)
    patch = (channels * temporal * vision.patch_size**2,)
    if vision.model_type in PATCH_IMAGE_TYPES:
        patch = (channels, vision.patch_size, vision.patch_size)
    patches_name = "pixel_values" if "pixel_values" in r.parameters else "hidden_states"
    patches = torch.randn(r.batch_size * side * side, *patch, generator=r.generator)
    inputs = {
        patches_name: patches.unsqueeze(0) if vision.model_type in BATCHED_PATCH_TYPES else patches,
        "grid_thw": torch.tensor([[1, side, side]] * r.batch_size),
    }
    if "merge_sizes" in r.required:
        # VideoLLaMA3 takes each image's merge size beside its grid.
        inputs["merge_sizes"] = torch.tensor([side // 2] * r.batch_size)
    return inputs


@builds(Stage.MAIN, when=lambda r: "image_grid_thw" in r.required and "grid_thw" not in r.parameters)
def _merged_patch_tiles(r: Request) -> dict[str, torch.Tensor]:
    """Inkling2's tower: one (patch * merge)-pixel square tile per language-model token, the grid counted in tokens."""
    vision = image_config(r.config)
    tile = vision.patch_size * vision.spatial_merge_size
    side = 2
    tiles = torch.rand(r.batch_size * side * side, tile, tile, vision.num_channels, generator=r.generator)
    return {
        "pixel_values": 2 * tiles - 1,
        "image_grid_thw": torch.tensor([[1, side, side]] * r.batch_size),
    }


@builds(Stage.MAIN, when=lambda r: "pixel_position_ids" in r.required)
def _positioned_patches(r: Request) -> dict[str, torch.Tensor]:
    """Gemma 4's tower: (batch, patches, pixels) in [0, 1] and each patch's (x, y); the pooler merges 3x3 patches."""
    vision = image_config(r.config)
    side = 2 * vision.pooling_kernel_size
    columns, rows = torch.meshgrid(torch.arange(side), torch.arange(side), indexing="xy")
    positions = torch.stack([columns.flatten(), rows.flatten()], dim=-1).expand(r.batch_size, -1, -1)
    return {
        "pixel_values": torch.rand(r.batch_size, side * side, 3 * vision.patch_size**2, generator=r.generator),
        "pixel_position_ids": positions,
    }


@builds(Stage.MAIN, when=lambda r: "level_start_index" in r.parameters)
def _multi_scale_features(r: Request) -> dict[str, torch.Tensor | list[tuple[int, int]]]:
    """Deformable-attention stacks built alone (DeformableDetrEncoder, RTDetrDecoder): their model's flattened
    feature levels (num_feature_levels maps, each a side smaller than the last) with the levels' shapes and offsets,
    all valid (no masks: a mask means padding to DETR's stacks, denoising groups to RT-DETR's); a decoder's object
    queries and reference boxes in (0, 1) (and a grounding decoder's text states)."""
    levels = getattr(r.config, "num_feature_levels", 3)
    sides = [levels + 1 - level for level in range(levels)]
    memory = sum(side * side for side in sides)
    width = r.config.d_model
    decoder = bool({"encoder_hidden_states", "vision_encoder_hidden_states"} & r.parameters)
    queries = r.seq_length if decoder else memory
    if decoder and r.config.model_type in FIXED_QUERY_TYPES:
        queries = r.config.num_queries
    inputs: dict[str, torch.Tensor | list[tuple[int, int]]] = {
        "inputs_embeds": torch.randn(r.batch_size, queries, width, generator=r.generator),
        "spatial_shapes": torch.tensor([[side, side] for side in sides]),
        "spatial_shapes_list": [(side, side) for side in sides],
        "level_start_index": torch.tensor([0, *itertools.accumulate(side * side for side in sides[:-1])]),
        "valid_ratios": torch.ones(r.batch_size, levels, 2),
    }
    sized = {
        "encoder_hidden_states": (memory, width),
        "vision_encoder_hidden_states": (memory, width),
        "spatial_position_embeddings": (memory, width),
        "object_queries_position_embeddings": (queries, width),
        # PP-DocLayoutV4's are quads: num_coords coordinates.
        "reference_points": (queries, getattr(r.config, "num_coords", 4)),
        "text_encoder_hidden_states": (r.seq_length, width),
    }
    for name, shape in sized.items():
        if name in r.parameters:
            inputs[name] = torch.rand(r.batch_size, *shape, generator=r.generator)
    if "vision_features" in r.parameters:
        inputs.update(_grounding_encoder_inputs(r, inputs.pop("inputs_embeds")))
    return inputs


def _grounding_encoder_inputs(r: Request, features: torch.Tensor) -> dict[str, torch.Tensor]:
    """Grounding DINO's encoders built alone fuse the image features with the text's (both d_model wide), with their
    position embeddings; its masks are inverted (True: padding), and nothing is padded."""
    memory, width, text = features.shape[1], r.config.d_model, r.seq_length
    return {
        "vision_features": features,
        "vision_attention_mask": torch.zeros(r.batch_size, memory, dtype=torch.bool),
        "vision_position_embedding": torch.randn(r.batch_size, memory, width, generator=r.generator),
        "text_features": torch.randn(r.batch_size, text, width, generator=r.generator),
        "text_attention_mask": torch.zeros(r.batch_size, text, dtype=torch.bool),
        "text_self_attention_masks": torch.zeros(r.batch_size, text, text, dtype=torch.bool),
        "text_position_ids": torch.arange(text).expand(r.batch_size, -1),
    }


# The side of the image feature map prompt-conditioned detector stacks read (its deepest FPN level).
_FEATURE_SIDE = 4


@builds(Stage.MAIN, when=lambda r: {"vision_features", "text_features"} <= r.parameters)
def _prompted_image_features(r: Request) -> dict[str, torch.Tensor | list[torch.Tensor]]:
    """SAM 3's DETR stacks built alone: the deepest FPN level and its position encoding (a list of (batch, hidden,
    side, side) maps for the encoder, flattened to (batch, side * side, hidden) for the decoder), the prompt's
    (batch, sequence, hidden) features and their mask."""
    hidden = r.config.hidden_size
    if "vision_pos_encoding" in r.parameters:
        flat = (r.batch_size, _FEATURE_SIDE**2, hidden)
        inputs: dict[str, torch.Tensor | list[torch.Tensor]] = {
            "vision_features": torch.randn(flat, generator=r.generator),
            "vision_pos_encoding": torch.randn(flat, generator=r.generator),
            "spatial_shapes": torch.tensor([[_FEATURE_SIDE, _FEATURE_SIDE]]),
        }
    else:
        level = (r.batch_size, hidden, _FEATURE_SIDE, _FEATURE_SIDE)
        inputs = {
            "vision_features": [torch.randn(level, generator=r.generator)],
            "vision_pos_embeds": [torch.randn(level, generator=r.generator)],
        }
    inputs["text_features"] = torch.randn(r.batch_size, r.seq_length, hidden, generator=r.generator)
    inputs["text_mask"] = torch.ones(r.batch_size, r.seq_length, dtype=torch.bool)
    return inputs


@builds(Stage.MAIN, when=lambda r: {"decoder_queries", "backbone_features"} <= r.parameters)
def _queries_and_feature_pyramid(r: Request) -> dict[str, torch.Tensor | list[torch.Tensor]]:
    """SAM 3's mask decoder built alone: the DETR decoder's queries, the FPN levels (each twice the size of the next,
    the deepest _FEATURE_SIDE wide), the encoder's states over the deepest level and the prompt's features."""
    hidden = r.config.hidden_size
    sides = [_FEATURE_SIDE * 4, _FEATURE_SIDE * 2, _FEATURE_SIDE]
    return {
        "decoder_queries": torch.randn(r.batch_size, r.seq_length, hidden, generator=r.generator),
        "backbone_features": [torch.randn(r.batch_size, hidden, side, side, generator=r.generator) for side in sides],
        "encoder_hidden_states": torch.randn(r.batch_size, _FEATURE_SIDE**2, hidden, generator=r.generator),
        "prompt_features": torch.randn(r.batch_size, r.seq_length, hidden, generator=r.generator),
        "prompt_mask": torch.ones(r.batch_size, r.seq_length, dtype=torch.bool),
    }


@builds(Stage.MAIN, when=lambda r: "spatial_shapes" in r.parameters)
def _native_resolution_patches(r: Request) -> dict[str, torch.Tensor]:
    """NaViT-style encoders (siglip2): flattened patches per image, their mask, and each image's patch grid."""
    vision = image_config(r.config)
    side = 4
    width = vision.num_channels * vision.patch_size**2
    return {
        "pixel_values": torch.randn(r.batch_size, side * side, width, generator=r.generator),
        "pixel_attention_mask": torch.ones(r.batch_size, side * side, dtype=torch.long),
        "spatial_shapes": torch.tensor([[side, side]] * r.batch_size),
    }


def _is_dual_encoder(r: Request) -> bool:
    # CLIP-like models embed text and image separately; VLMs instead splice images at placeholder tokens.
    has_placeholder = any(hasattr(r.config, k) for k in ("image_token_id", "image_token_index"))
    has_image_encoder = any(hasattr(r.config, k) for k in ("vision_config", "image_size"))
    return {"input_ids", "pixel_values"} <= r.parameters and has_image_encoder and not has_placeholder


@builds(Stage.MAIN, when=_is_dual_encoder)
def _image_text_pairs(r: Request) -> dict[str, torch.Tensor]:
    # Ids drawn anew even where the text stage drew some: skipping the draw would shift the images' seeded values.
    return {"input_ids": sequence_ids(r), **_images_or_clips(r)}


@builds(Stage.MAIN, when=lambda r: r.main_input == "pixel_values" and "target_sizes" in r.parameters)
def _packed_patch_rows(r: Request) -> dict[str, torch.Tensor]:
    """MiniCPM-V's tower: every image's patches side by side in one patch-high strip, each image's grid beside it."""
    vision = image_config(r.config)
    side = 4
    width = vision.patch_size * side * side * r.batch_size
    strip = torch.randn(1, vision.num_channels, vision.patch_size, width, generator=r.generator)
    return {"pixel_values": strip, "target_sizes": torch.tensor([[side, side]] * r.batch_size)}


@builds(Stage.MAIN, when=lambda r: "aspect_ratio_ids" in r.required and hasattr(r.config, "max_num_tiles"))
def _tiled_images(r: Request) -> dict[str, torch.Tensor]:
    """Mllama's tower: one image per sample cut into max_num_tiles tiles, (batch, images, tiles, channels, height,
    width), with the id of the first supported aspect ratio that fills them (ids count from 1: 0 is padding)."""
    tiles = r.config.max_num_tiles
    ratio_id = 1 + next(i for i, (h, w) in enumerate(r.config.supported_aspect_ratios) if h * w == tiles)
    size = r.config.image_size
    shape = (r.batch_size, 1, tiles, r.config.num_channels, size, size)
    return {
        "pixel_values": torch.randn(shape, generator=r.generator),
        "aspect_ratio_ids": torch.full((r.batch_size, 1), ratio_id),
        "aspect_ratio_mask": torch.ones(r.batch_size, 1, tiles, dtype=torch.long),
    }


@builds(Stage.MAIN, when=lambda r: "boxes" in r.required and hasattr(r.config, "num_classes"))
def _detected_layout_elements(r: Request) -> dict[str, torch.Tensor]:
    """Reading-order heads built alone (PPDocLayoutV2ReadingOrder) read their detector's boxes, as (x0, y0, x1, y1) on
    a 0-1000 scale, each box's category and which boxes are detections: all of them."""
    corners = torch.randint(1001, (r.batch_size, r.seq_length, 2, 2), generator=r.generator)
    low, high = corners.sort(dim=-1).values.unbind(-1)
    return {
        "boxes": torch.cat([low, high], dim=-1).float(),
        "labels": torch.randint(r.config.num_classes, (r.batch_size, r.seq_length), generator=r.generator),
        "mask": torch.ones(r.batch_size, r.seq_length, dtype=torch.bool),
    }


def _image_reader_input(r: Request) -> str | None:
    """The forward parameter a model hands on to its first sub-model as that sub-model's pixel_values, where the model
    takes no pixel_values itself (SLANetBackbone's ``self.vision_backbone(hidden_states)``), else None."""
    if "pixel_values" in r.parameters or not r.required:
        return None
    first = next(iter(r.model.children()), None)
    reads = list(inspect.signature(first.forward).parameters) if first is not None else []
    handed = next(iter(inspect.signature(r.model.forward).parameters))
    return handed if reads[:1] == ["pixel_values"] and handed in r.required else None


@builds(Stage.MAIN, when=lambda r: r.main_input == "pixel_values" and r.config.model_type in PATCH_CUBE_TYPES)
def _patch_cubes(r: Request) -> dict[str, torch.Tensor]:
    # Inkling's tower: (patches, temporal_patch_size, patch, patch, channels), four patches per sample, one token each.
    cube = (r.config.temporal_patch_size, r.config.patch_size, r.config.patch_size, r.config.num_channels)
    return {"pixel_values": torch.randn(4 * r.batch_size, *cube, generator=r.generator)}


# Patches each pooled image token gathers (Molmo2's 2 x 2 pooling window).
_POOLED_PATCHES = 4


@builds(Stage.MAIN, when=lambda r: {"image_features", "pooled_patches_idx"} <= r.required)
def _patches_to_pool(r: Request) -> dict[str, torch.Tensor]:
    """Molmo2's adapter: every crop's patch features from the vision layers it reads, concatenated (crops, patches,
    hidden_size * layers), and which _POOLED_PATCHES patches of the flattened crops each of seq_length image tokens
    pools (-1 pads a window at the image's edge: the first token's last slot). The tokens' windows stride over the
    crops, so that no dimension is a product of two sample sizes (the gate's second shape stays within its bounds)."""
    patches = _POOLED_PATCHES * r.seq_length
    width = r.config.hidden_size * len(r.config.vision_feature_layer)
    pooled = r.batch_size * torch.arange(patches).view(r.seq_length, _POOLED_PATCHES)
    pooled[0, -1] = -1
    return {
        "image_features": torch.randn(r.batch_size, patches, width, generator=r.generator),
        "pooled_patches_idx": pooled,
    }


def _patch_preprocessor(r: Request) -> torch.nn.Module | None:
    # A Perceiver whose image preprocessor cuts the frames into patches itself (PerceiverForOpticalFlow's).
    preprocessor = getattr(getattr(r.model, "perceiver", None), "input_preprocessor", None)
    return preprocessor if r.main_input == "inputs" and getattr(preprocessor, "prep_type", None) == "patches" else None


@builds(Stage.MAIN, when=lambda r: _patch_preprocessor(r) is not None)
def _patched_frames(r: Request) -> dict[str, torch.Tensor]:
    # Perceiver's optical flow reads temporal_downsample frames, each as 3 x 3 patches of RGB pixels stacked in the
    # channels (27: its projection after patching reads the frames concatenated), at the train_size its decoder outputs.
    preprocessor = _patch_preprocessor(r)
    channels = preprocessor.conv_after_patches.in_features // preprocessor.temporal_downsample
    shape = (r.batch_size, preprocessor.temporal_downsample, channels, *r.config.train_size)
    return {"inputs": torch.randn(shape, generator=r.generator)}


def _embeds_cut_patches(r: Request) -> bool:
    # A tower whose first layer is a linear patch embedding of one patch's pixels, its positions fixed in number.
    first = next((m for m in r.model.modules() if isinstance(m, torch.nn.Linear | torch.nn.Conv2d)), None)
    vision = image_config(r.config)
    patch = getattr(vision, "patch_size", 0)  # per stage in hierarchical towers (Florence-2's DaViT): not one patch
    pixels = getattr(vision, "num_channels", 3) * patch**2 if isinstance(patch, int) else None
    linear = isinstance(first, torch.nn.Linear) and first.in_features == pixels
    return r.main_input == "pixel_values" and linear and getattr(vision, "num_position_embeddings", None) is not None


@builds(Stage.MAIN, when=_embeds_cut_patches)
def _cut_patches(r: Request) -> dict[str, torch.Tensor]:
    # Molmo2's tower reads the crops its processor cut into patches: (crops, num_position_embeddings, pixels per patch).
    vision = image_config(r.config)
    shape = (r.batch_size, vision.num_position_embeddings, vision.num_channels * vision.patch_size**2)
    return {"pixel_values": torch.randn(shape, generator=r.generator)}


@builds(Stage.MAIN, when=lambda r: _image_reader_input(r) is not None)
def _images_handed_on(r: Request) -> dict[str, torch.Tensor]:
    # Their parent calls them with its images (SLANetForTableRecognition: self.backbone(pixel_values)).
    return {_image_reader_input(r): pixel_values(r)}


@builds(Stage.MAIN, when=lambda r: r.main_input in ("pixel_values", "pixel_values_videos"))
def _images_or_clips(r: Request) -> dict[str, torch.Tensor]:
    video = r.main_input == "pixel_values_videos"
    return {"pixel_values_videos" if video else "pixel_values": pixel_values(r, video=video)}


@builds(Stage.MAIN, when=lambda r: type(r.model).__name__ in EMBEDDED_INPUTS, drops=("input_ids",))
def _prenet_free_states(r: Request) -> dict[str, torch.Tensor]:
    # A bare model without its pre-nets (SpeechT5Model, PerceiverModel) reads what they would make: (batch, sequence,
    # width) states, for its encoder (and its decoder); a head whose width is its text config's (Qwen3-Omni's talker)
    # reads them at that width.
    width = getattr(r.config, "d_model", None) or getattr(r.config, "hidden_size", None)
    width = width or r.config.get_text_config(decoder=True).hidden_size
    shape = (r.batch_size, r.seq_length, width)
    return {name: torch.randn(shape, generator=r.generator) for name in EMBEDDED_INPUTS[type(r.model).__name__]}


@builds(Stage.MAIN, when=lambda r: type(r.model).__name__ in PRENET_INPUTS)
def _prenet_inputs(r: Request) -> dict[str, torch.Tensor]:
    # A stack built with one pre-net (SpeechT5EncoderWithTextPrenet) reads what that pre-net embeds, as input_values.
    kind = PRENET_INPUTS[type(r.model).__name__]
    return {"input_values": sequence_ids(r) if kind == "token_ids" else mel_frames(r)}


@builds(
    Stage.MAIN,
    when=lambda r: (
        r.main_input == "input_values" and hasattr(r.config, "num_mel_bins") and hasattr(r.config, "max_length")
    ),
)
def _spectrograms(r: Request) -> dict[str, torch.Tensor]:
    # Spectrogram transformers (AST) take fixed-length (batch, frames, mel bins) spectrograms.
    shape = (r.batch_size, r.config.max_length, r.config.num_mel_bins)
    return {"input_values": torch.randn(shape, generator=r.generator)}


@builds(Stage.MAIN, when=lambda r: r.main_input == "input_values")
def _waveforms(r: Request) -> dict[str, torch.Tensor]:
    length = waveform_length(r.config, r.seq_length)
    patch = math.prod(getattr(r.config, "patch_sizes", None) or (1,))
    if patch > 1:
        # Waveform patch encoders (Muse Spark) cut the audio into patches of the product of their patch sizes.
        length = -(-length // patch) * patch
    name = WAVEFORM_INPUTS.get(type(r.model).__name__, "input_values")
    audio = audio_config(r.config)
    if audio.model_type in MONO_CHANNEL_WAVEFORM_TYPES:
        # Their conv strides are the audio encoder's, also where a CTC head wraps it.
        return {name: torch.randn(r.batch_size, 1, waveform_length(audio, r.seq_length), generator=r.generator)}
    # Neural audio codecs (encodec, dac, mimi, xcodec, pocket_tts) take (batch, channels, time); speech encoders
    # (batch, time).
    is_codec = hasattr(r.config, "codebook_size") or hasattr(r.config, "audio_channels")
    hop = codec_hop(r.config)
    if hop > 1:
        # So do encoders that embed the waveform with a DAC codec (PE Audio): a whole number of its frames.
        is_codec = True
        length = -(-length // hop) * hop
    if not is_codec and hasattr(r.config, "downsampling_ratios") and name in r.parameters:
        # So do codecs that only say how they downsample (X-Codec2, VibeVoice's tokenizer), which do not pad: a
        # whole seq_length codec frames. (VibeVoice's decoder, whose forward never reads the waveform, keeps the
        # (batch, time) it always had.)
        is_codec = True
        length = math.prod(r.config.downsampling_ratios) * r.seq_length
    shape = (r.batch_size, getattr(r.config, "audio_channels", 1), length) if is_codec else (r.batch_size, length)
    return {name: torch.randn(shape, generator=r.generator)}


@builds(Stage.MAIN, when=lambda r: r.main_input == "past_values" and "past_time_features" in r.parameters)
def _forecast_windows(r: Request) -> dict[str, torch.Tensor]:
    # Probabilistic forecasters (autoformer, informer): the past window also holds the max(lags) older steps the lag
    # features read; the future window is the teacher-forced horizon.
    past = r.config.context_length + max(r.config.lags_sequence)
    future = r.config.prediction_length
    features = r.config.num_time_features
    return {
        "past_values": torch.randn(r.batch_size, past, generator=r.generator),
        "past_time_features": torch.randn(r.batch_size, past, features, generator=r.generator),
        "past_observed_mask": torch.ones(r.batch_size, past),
        "future_values": torch.randn(r.batch_size, future, generator=r.generator),
        "future_time_features": torch.randn(r.batch_size, future, features, generator=r.generator),
    }


@builds(Stage.MAIN, when=lambda r: type(r.model).__name__ in PATCHED_WINDOW_INPUTS)
def _patched_windows(r: Request) -> dict[str, torch.Tensor]:
    # Patch encoders built alone read what their model's patchifier cuts from the window, patch_stride apart:
    # (batch, channels, patches, patch_length).
    config = r.config
    patches = (max(config.context_length, config.patch_length) - config.patch_length) // config.patch_stride + 1
    shape = (r.batch_size, config.num_input_channels, patches, config.patch_length)
    return {PATCHED_WINDOW_INPUTS[type(r.model).__name__]: torch.randn(shape, generator=r.generator)}


@builds(Stage.MAIN, when=lambda r: r.main_input == "past_values")
def _time_series_windows(r: Request) -> dict[str, torch.Tensor]:
    # Time-series transformers: (batch, context, channels) windows, or (batch, context) for univariate ones.
    channels = getattr(r.config, "num_input_channels", None)
    shape = (r.batch_size, r.config.context_length, *((channels,) if channels else ()))
    inputs = {"past_values": torch.randn(shape, generator=r.generator)}
    if "past_values_padding" in r.required:
        # TimesFM: no padded steps, and frequency class 0 (high frequency).
        inputs["past_values_padding"] = torch.zeros(shape[:2])
        inputs["freq"] = torch.zeros(r.batch_size, 1, dtype=torch.long)
    return inputs


@builds(Stage.MAIN, when=lambda r: r.main_input == "flattened_patches")
def _row_column_patches(r: Request) -> dict[str, torch.Tensor]:
    """Pix2Struct: every patch as (row id, column id, pixels); ids count from 1, 0 marks padding."""
    side = 4
    rows, columns = torch.meshgrid(torch.arange(1, side + 1), torch.arange(1, side + 1), indexing="ij")
    ids = torch.stack([rows.flatten(), columns.flatten()], dim=-1).float().expand(r.batch_size, -1, -1)
    width = image_config(r.config).patch_embed_hidden_size
    pixels = torch.randn(r.batch_size, side * side, width, generator=r.generator)
    return {"flattened_patches": torch.cat([ids, pixels], dim=-1)}


@builds(Stage.MAIN, when=lambda r: r.main_input == "input_features" and "feature_lens" in r.parameters)
def _packed_audio_features(r: Request) -> dict[str, torch.Tensor]:
    """Qwen-Omni audio towers: every sample's (mel bins, frames) features side by side in one (mel bins, frames)
    tensor and each sample's frame count, as their model packs them (the padded frames of its mask dropped)."""
    features = feature_frames(r, audio_config(r.config))
    frames = torch.full((r.batch_size,), features.shape[-1])
    return {"input_features": torch.cat(features.unbind(0), dim=-1), "feature_lens": frames}


# Gemma 3n's audio encoder names its (batch, frames, mel bins) features audio_mel.
@builds(Stage.MAIN, when=lambda r: r.main_input in ("input_features", "audio_mel"))
def _audio_features(r: Request) -> dict[str, torch.Tensor]:
    return {r.main_input: feature_frames(r, audio_config(r.config))}


@builds(Stage.MAIN, when=lambda r: r.main_input == "states" and "returns_to_go" in r.parameters)
def _trajectories(r: Request) -> dict[str, torch.Tensor]:
    """Offline RL (Decision Transformer): per step a state, an action, a reward, the return to go and the timestep."""
    steps = (r.batch_size, r.seq_length)
    return {
        "states": torch.randn(*steps, r.config.state_dim, generator=r.generator),
        "actions": torch.randn(*steps, r.config.act_dim, generator=r.generator),
        "rewards": torch.randn(*steps, 1, generator=r.generator),
        "returns_to_go": torch.randn(*steps, 1, generator=r.generator),
        "timesteps": torch.arange(r.seq_length).expand(steps),
        "attention_mask": torch.ones(steps, dtype=torch.long),
    }


@builds(Stage.MAIN, when=lambda r: r.main_input == "inputs_embeds" and hasattr(r.config, "encode_proj_layers"))
def _projected_feature_pyramid(r: Request) -> dict[str, list[torch.Tensor] | tuple[torch.Tensor, torch.Tensor]]:
    # RT-DETR-style hybrid encoders built alone read the backbone's levels projected to encoder_hidden_dim, each half
    # the size of the one before (the FPN upsamples by 2 and concatenates).
    levels = len(r.config.encoder_in_channels)
    widths = [r.config.encoder_hidden_dim] * levels
    first = next(m for m in r.model.modules() if isinstance(m, torch.nn.Conv2d))
    if first.in_channels == r.config.encoder_in_channels[0] != r.config.encoder_hidden_dim:
        # An encoder that projects the levels itself (Deimv2LiteEncoder) reads them at the backbone's widths (told apart
        # where the two differ: PP-DocLayoutV3's tiny first level is as wide as its encoder, which reads it projected).
        widths = r.config.encoder_in_channels
    shapes = [(r.batch_size, widths[level], 2 ** (levels - level), 2 ** (levels - level)) for level in range(levels)]
    inputs: dict[str, list[torch.Tensor] | tuple[torch.Tensor, torch.Tensor]] = {
        "inputs_embeds": [torch.randn(shape, generator=r.generator) for shape in shapes]
    }
    if "x4_feat" in r.parameters:
        # PP-DocLayoutV3's mask branch adds the backbone's unprojected stride-4 level (twice the finest one's side) and
        # its padding mask, as the (map, mask) pair its conv encoder returns.
        side = 2 ** (levels + 1)
        shape = (r.batch_size, r.config.x4_feat_dim, side, side)
        inputs["x4_feat"] = (
            torch.randn(shape, generator=r.generator),
            torch.ones(r.batch_size, side, side, dtype=torch.bool),
        )
    return inputs


@builds(Stage.MAIN, when=lambda r: r.main_input == "inputs_embeds")
def _stack_embeddings(r: Request) -> dict[str, torch.Tensor]:
    """Encoder and decoder stacks built alone (DETR's, time-series transformers'): their model's embeddings as
    (batch, sequence, width), the value features before a time-series stack's own value embedding; decoders also
    cross-attend to (batch, sequence, hidden_size) encoder states."""
    width = getattr(r.config, "feature_size", None) or r.config.hidden_size
    # A time-series decoder's positions follow the context window: it reads at most the prediction horizon.
    decoded = "encoder_hidden_states" in r.parameters and getattr(r.config, "prediction_length", None)
    length = min(r.seq_length, decoded) if decoded else r.seq_length
    inputs = {"inputs_embeds": torch.randn(r.batch_size, length, width, generator=r.generator)}
    if "trend" in r.parameters:
        # Autoformer's decoder adds each layer's trend to the series' initial trend, in the value features.
        inputs["trend"] = torch.randn(r.batch_size, length, width, generator=r.generator)
    states = (r.batch_size, r.seq_length, r.config.hidden_size)
    if "encoder_hidden_states" in r.parameters:
        inputs["encoder_hidden_states"] = torch.randn(states, generator=r.generator)
    for name in sorted(_POSITION_EMBEDDINGS & r.parameters):
        # DETR-family stacks add their model's position embeddings (of the image's features, of the object queries).
        inputs[name] = torch.randn(states, generator=r.generator)
    if "query_position_embeddings" in inputs and hasattr(r.config, "query_dim"):
        # DAB-DETR's decoder reads its queries' anchor boxes (query_dim logits each) instead.
        inputs["query_position_embeddings"] = torch.randn(
            r.batch_size, length, r.config.query_dim, generator=r.generator
        )
    for name in sorted(_PADDING_MASKS & r.required):
        # Stacks that require their model's padding mask of the image features (DAB-DETR's): no pixel is padding.
        inputs[name] = torch.ones(r.batch_size, r.seq_length, dtype=torch.long)
    return inputs


_PADDING_MASKS = {"attention_mask", "memory_key_padding_mask"}


_POSITION_EMBEDDINGS = {
    "object_queries",
    "object_queries_position_embeddings",
    "query_position_embeddings",
    "spatial_position_embeddings",
}
