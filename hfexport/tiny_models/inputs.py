"""Sample inputs: deterministic forward kwargs that fit a model, put together by a registry of input builders.

Each builder makes one kind of input (token ids, images, flat patches, waveforms, forecast windows, ...). It is
registered with ``@_builds(stage, when=...)``: ``when`` is a predicate on the request (the model, its config, its
forward parameters, the inputs built so far), the function returns the inputs it adds, and its name, less the
leading underscore, is the kind it is registered under. ``sample_inputs`` walks the stages in the order of ``Stage``
and, within a stage, the builders in the order they are registered (the order of this file):

1. ``TEXT``: token ids, for every model whose main input is text or that reads text beside it.
2. ``MAIN``: the main non-text input; only the first builder that applies runs.
3. ``REQUIRED``: forward arguments still required after the main input.
4. ``AUXILIARY``: side inputs a model would otherwise draw at random or take from another model.
5. ``FINISH``: what reads the final token ids (rows ending with eos, the attention mask), then decoder ids.

Every random input is drawn from one generator seeded by ``seed``, in walk order: a new builder goes where its inputs
belong in that order, and moving one changes the values of every input drawn after it.
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from transformers import PretrainedConfig, PreTrainedModel

from .classes import class_names
from .configs import is_token_key
from .tables import CODEBOOK_STACKED_TYPES, FEATURE_SIZE_KEYS, IMAGE_SIZE, VOCAB


class Stage(enum.Enum):
    """The order ``sample_inputs`` walks the builders in (see the module docstring)."""

    TEXT = enum.auto()
    MAIN = enum.auto()
    REQUIRED = enum.auto()
    AUXILIARY = enum.auto()
    FINISH = enum.auto()


@dataclass(frozen=True)
class _Request:
    """What ``sample_inputs`` was asked for, and the inputs built so far."""

    model: PreTrainedModel
    config: PretrainedConfig
    parameters: set[str]
    required: set[str]
    main_input: str
    batch_size: int
    seq_length: int
    generator: torch.Generator
    inputs: dict[str, torch.Tensor] = field(default_factory=dict)

    @property
    def missing(self) -> set[str]:
        return self.required - self.inputs.keys()


_Build = Callable[[_Request], dict[str, torch.Tensor]]


@dataclass(frozen=True)
class _Builder:
    stage: Stage
    applies: Callable[[_Request], bool]
    build: _Build
    drops: tuple[str, ...]


# Input kind -> its builder, in registration order.
_BUILDERS: dict[str, _Builder] = {}


def _builds(stage: Stage, when: Callable[[_Request], bool], drops: tuple[str, ...] = ()) -> Callable[[_Build], _Build]:
    """Register a builder for ``stage`` that runs where ``when`` holds; ``drops``: inputs it replaces."""

    def register(build: _Build) -> _Build:
        kind = build.__name__.removeprefix("_")
        if kind in _BUILDERS:
            raise ValueError(f"Two sample input builders for {kind!r}")
        _BUILDERS[kind] = _Builder(stage, when, build, drops)
        return build

    return register


def sample_inputs(
    model: PreTrainedModel, batch_size: int = 2, seq_length: int = 7, seed: int = 0
) -> dict[str, torch.Tensor]:
    """Return deterministic forward kwargs that fit the model's modality (text, vision, audio, seq2seq)."""
    if batch_size < 2 or seq_length < 2:
        raise ValueError("batch_size and seq_length must be >= 2 so exported dimensions stay dynamic")
    parameters = inspect.signature(model.forward).parameters
    request = _Request(
        model=model,
        config=model.config,
        parameters=set(parameters),
        required={p.name for p in parameters.values() if p.default is p.empty and p.kind <= p.KEYWORD_ONLY},
        main_input=getattr(model, "main_input_name", "input_ids"),
        batch_size=batch_size,
        seq_length=seq_length,
        generator=torch.Generator().manual_seed(seed),
    )
    for stage in Stage:
        for builder in [b for b in _BUILDERS.values() if b.stage is stage]:
            if not builder.applies(request):
                continue
            for name in builder.drops:
                request.inputs.pop(name, None)
            request.inputs.update(builder.build(request))
            if stage is Stage.MAIN:
                break
    return request.inputs


# ── Drawing tensors ──


def _special_token_ids(config: PretrainedConfig) -> set[int]:
    ids: set[int] = set()
    for key, value in config.to_dict().items():
        if not is_token_key(key):
            continue
        for item in value if isinstance(value, list | tuple) else (value,):
            if isinstance(item, int) and not isinstance(item, bool):
                ids.add(item)
    return ids


def _text_vocab_size(config: PretrainedConfig) -> int:
    text_config = config.get_text_config(decoder=True)
    return int(getattr(text_config, "vocab_size", None) or getattr(config, "vocab_size", None) or VOCAB)


def _token_ids(config: PretrainedConfig, shape: tuple[int, int], generator: torch.Generator) -> torch.Tensor:
    # Special ids (pad, image placeholders...) change the model's behaviour: draw plain text tokens only.
    excluded = _special_token_ids(config) | _special_token_ids(config.get_text_config(decoder=True))
    allowed = torch.tensor([i for i in range(_text_vocab_size(config)) if i not in excluded])
    return allowed[torch.randint(len(allowed), shape, generator=generator)]


def _sequence_ids(r: _Request) -> torch.Tensor:
    return _token_ids(r.config, (r.batch_size, r.seq_length), r.generator)


def _image_config(config: PretrainedConfig) -> PretrainedConfig:
    return getattr(config, "vision_config", None) or config


def _pixel_values(r: _Request) -> torch.Tensor:
    """Images as (batch, channels, height, width); video encoders' clips as (batch, frames, channels, height, width)."""
    vision = _image_config(r.config)
    size = getattr(vision, "image_size", None) or getattr(vision, "crop_size", IMAGE_SIZE)
    height, width = (size, size) if isinstance(size, int) else tuple(size)[-2:]
    channels = getattr(vision, "num_channels", None) or getattr(vision, "in_chans", 3)
    frames = getattr(vision, "num_frames", None) or getattr(vision, "frames_per_clip", None)
    clip = (frames,) if isinstance(frames, int) else ()
    return torch.randn(r.batch_size, *clip, channels, height, width, generator=r.generator)


def _audio_config(config: PretrainedConfig) -> PretrainedConfig:
    # Speech LMs and CTC wrappers keep the feature sizes on their audio encoder's sub-config.
    for key in ("audio_config", "encoder_config", "speech_config"):
        sub_config = getattr(config, key, None)
        if isinstance(sub_config, PretrainedConfig):
            return sub_config
    return config


def _waveform_length(config: PretrainedConfig, seq_length: int) -> int:
    # The conv feature extractor downsamples by the product of its strides; keep >= seq_length frames.
    stride = 1
    for step in getattr(config, "conv_stride", ()) or ():
        stride *= step
    receptive_field = sum(getattr(config, "conv_kernel", ()) or ()) * stride
    return max(1600, stride * seq_length + receptive_field)


# ── Token ids ──


@_builds(
    Stage.TEXT,
    when=lambda r: "input_ids" in r.parameters and (r.main_input == "input_ids" or r.main_input not in r.parameters),
)
def _text_ids(r: _Request) -> dict[str, torch.Tensor]:
    # Audio LMs that stack their codebooks into the batch take (batch * num_codebooks, sequence) ids.
    stacked = r.config.model_type in CODEBOOK_STACKED_TYPES
    rows = r.batch_size * r.config.num_codebooks if stacked else r.batch_size
    return {"input_ids": _token_ids(r.config, (rows, r.seq_length), r.generator)}


# ── The main input: the first builder that applies ──


# These towers read no text: ids the text stage drew are dropped (not left undrawn, which would shift the patches).
@_builds(Stage.MAIN, when=lambda r: "grid_thw" in r.parameters, drops=("input_ids",))
def _flat_patches(r: _Request) -> dict[str, torch.Tensor]:
    """Qwen-VL-style vision towers: every image's patches as rows of one flat tensor, laid out by ``grid_thw``."""
    vision = _image_config(r.config)
    side = 2 * getattr(vision, "spatial_merge_size", 1)
    channels = getattr(vision, "in_channels", None) or getattr(vision, "num_channels", 3)
    width = channels * getattr(vision, "temporal_patch_size", 1) * vision.patch_size**2
    patches_name = "pixel_values" if "pixel_values" in r.parameters else "hidden_states"
    return {
        patches_name: torch.randn(r.batch_size * side * side, width, generator=r.generator),
        "grid_thw": torch.tensor([[1, side, side]] * r.batch_size),
    }


@_builds(Stage.MAIN, when=lambda r: "spatial_shapes" in r.parameters)
def _native_resolution_patches(r: _Request) -> dict[str, torch.Tensor]:
    """NaViT-style encoders (siglip2): flattened patches per image, their mask, and each image's patch grid."""
    vision = _image_config(r.config)
    side = 4
    width = vision.num_channels * vision.patch_size**2
    return {
        "pixel_values": torch.randn(r.batch_size, side * side, width, generator=r.generator),
        "pixel_attention_mask": torch.ones(r.batch_size, side * side, dtype=torch.long),
        "spatial_shapes": torch.tensor([[side, side]] * r.batch_size),
    }


def _is_dual_encoder(r: _Request) -> bool:
    # CLIP-like models embed text and image separately; VLMs instead splice images at placeholder tokens.
    has_placeholder = any(hasattr(r.config, k) for k in ("image_token_id", "image_token_index"))
    has_image_encoder = any(hasattr(r.config, k) for k in ("vision_config", "image_size"))
    return {"input_ids", "pixel_values"} <= r.parameters and has_image_encoder and not has_placeholder


@_builds(Stage.MAIN, when=_is_dual_encoder)
def _image_text_pairs(r: _Request) -> dict[str, torch.Tensor]:
    # Ids drawn anew even where the text stage drew some: skipping the draw would shift the images' seeded values.
    return {"input_ids": _sequence_ids(r), **_images_or_clips(r)}


@_builds(Stage.MAIN, when=lambda r: r.main_input in ("pixel_values", "pixel_values_videos"))
def _images_or_clips(r: _Request) -> dict[str, torch.Tensor]:
    pixels_name = "pixel_values_videos" if r.main_input == "pixel_values_videos" else "pixel_values"
    return {pixels_name: _pixel_values(r)}


@_builds(
    Stage.MAIN,
    when=lambda r: (
        r.main_input == "input_values" and hasattr(r.config, "num_mel_bins") and hasattr(r.config, "max_length")
    ),
)
def _spectrograms(r: _Request) -> dict[str, torch.Tensor]:
    # Spectrogram transformers (AST) take fixed-length (batch, frames, mel bins) spectrograms.
    shape = (r.batch_size, r.config.max_length, r.config.num_mel_bins)
    return {"input_values": torch.randn(shape, generator=r.generator)}


@_builds(Stage.MAIN, when=lambda r: r.main_input == "input_values")
def _waveforms(r: _Request) -> dict[str, torch.Tensor]:
    length = _waveform_length(r.config, r.seq_length)
    # Neural audio codecs (encodec, dac, mimi, xcodec, pocket_tts) take (batch, channels, time); speech encoders
    # (batch, time).
    is_codec = hasattr(r.config, "codebook_size") or hasattr(r.config, "audio_channels")
    shape = (r.batch_size, getattr(r.config, "audio_channels", 1), length) if is_codec else (r.batch_size, length)
    return {"input_values": torch.randn(shape, generator=r.generator)}


@_builds(Stage.MAIN, when=lambda r: r.main_input == "past_values" and "past_time_features" in r.parameters)
def _forecast_windows(r: _Request) -> dict[str, torch.Tensor]:
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


@_builds(Stage.MAIN, when=lambda r: r.main_input == "past_values")
def _time_series_windows(r: _Request) -> dict[str, torch.Tensor]:
    # Time-series transformers: (batch, context, channels) windows, or (batch, context) for univariate ones.
    channels = getattr(r.config, "num_input_channels", None)
    shape = (r.batch_size, r.config.context_length, *((channels,) if channels else ()))
    inputs = {"past_values": torch.randn(shape, generator=r.generator)}
    if "past_values_padding" in r.required:
        # TimesFM: no padded steps, and frequency class 0 (high frequency).
        inputs["past_values_padding"] = torch.zeros(shape[:2])
        inputs["freq"] = torch.zeros(r.batch_size, 1, dtype=torch.long)
    return inputs


@_builds(Stage.MAIN, when=lambda r: r.main_input == "flattened_patches")
def _row_column_patches(r: _Request) -> dict[str, torch.Tensor]:
    """Pix2Struct: every patch as (row id, column id, pixels); ids count from 1, 0 marks padding."""
    side = 4
    rows, columns = torch.meshgrid(torch.arange(1, side + 1), torch.arange(1, side + 1), indexing="ij")
    ids = torch.stack([rows.flatten(), columns.flatten()], dim=-1).float().expand(r.batch_size, -1, -1)
    width = _image_config(r.config).patch_embed_hidden_size
    pixels = torch.randn(r.batch_size, side * side, width, generator=r.generator)
    return {"flattened_patches": torch.cat([ids, pixels], dim=-1)}


@_builds(Stage.MAIN, when=lambda r: r.main_input == "input_features")
def _audio_features(r: _Request) -> dict[str, torch.Tensor]:
    audio = _audio_config(r.config)
    if hasattr(audio, "num_mel_bins") and hasattr(audio, "n_window"):
        # Chunked encoders (Qwen3-ASR) cut (batch, mel bins, frames) into windows of 2 * n_window frames.
        shape = (r.batch_size, audio.num_mel_bins, 4 * audio.n_window)
    elif hasattr(audio, "num_mel_bins") and hasattr(audio, "max_source_positions"):
        # Whisper-like encoders require exactly 2 * max_source_positions frames (two conv strides).
        shape = (r.batch_size, audio.num_mel_bins, 2 * audio.max_source_positions)
    else:
        features = next((getattr(audio, k) for k in FEATURE_SIZE_KEYS if getattr(audio, k, None)), 80)
        channels = getattr(audio, "input_channels", 1)
        # Conv subsampling front ends shrink time by up to 8x: keep at least seq_length frames after it.
        shape = (r.batch_size, 8 * r.seq_length, features * channels)
    return {"input_features": torch.randn(shape, generator=r.generator)}


# ── Forward arguments still required ──


@_builds(Stage.REQUIRED, when=lambda r: "input_ids" in r.missing)
def _required_token_ids(r: _Request) -> dict[str, torch.Tensor]:
    # Vision-first models whose forward still requires text (Blip2Model, GroundingDino).
    return {"input_ids": _sequence_ids(r)}


@_builds(Stage.REQUIRED, when=lambda r: "pixel_values" in r.missing)
def _required_pixel_values(r: _Request) -> dict[str, torch.Tensor]:
    # VLM vision towers built on their own keep the VLM's main input name (Idefics3, SmolVLM).
    return {"pixel_values": _pixel_values(r)}


@_builds(Stage.REQUIRED, when=lambda r: "input_features_mask" in r.missing)
def _input_features_mask(r: _Request) -> dict[str, torch.Tensor]:
    frames = r.inputs["input_features"].shape[-1]
    return {"input_features_mask": torch.ones(r.batch_size, frames, dtype=torch.long)}


_LATENT_NAMES = ("latents", "hidden_states")


@_builds(Stage.REQUIRED, when=lambda r: not r.missing.isdisjoint(_LATENT_NAMES))
def _codec_latents(r: _Request) -> dict[str, torch.Tensor]:
    # Audio codec decoders built on their own (Mimi, VibeVoice) take the encoder's (batch, channels, frames).
    shape = (r.batch_size, r.config.hidden_size, 2 * r.seq_length)
    return {name: torch.randn(shape, generator=r.generator) for name in _LATENT_NAMES if name in r.missing}


# ── Auxiliary inputs ──


@_builds(Stage.AUXILIARY, when=lambda r: "visual_feats" in r.parameters)
def _detector_regions(r: _Request) -> dict[str, torch.Tensor]:
    # LXMERT reads region features and their boxes from an object detector.
    regions = 5
    return {
        "visual_feats": torch.randn(r.batch_size, regions, r.config.visual_feat_dim, generator=r.generator),
        "visual_pos": torch.rand(r.batch_size, regions, r.config.visual_pos_dim, generator=r.generator),
    }


@_builds(
    Stage.AUXILIARY,
    when=lambda r: "pixel_values" in r.inputs and "noise" in r.parameters and hasattr(r.config, "mask_ratio"),
)
def _patch_mask_noise(r: _Request) -> dict[str, torch.Tensor]:
    # Masked autoencoders draw their patch mask from torch.rand: pass the noise, or no two runs agree.
    patches = (r.inputs["pixel_values"].shape[-1] // r.config.patch_size) ** 2
    return {"noise": torch.rand(r.batch_size, patches, generator=r.generator)}


@_builds(
    Stage.AUXILIARY,
    when=lambda r: (
        "input_features" in r.inputs and "noise_sequence" in r.parameters and hasattr(r.config, "model_in_channels")
    ),
)
def _vocoder_noise(r: _Request) -> dict[str, torch.Tensor]:
    # Vocoders (UnivNet) draw their noise from torch.randn when none is given: pass it, as for the autoencoders.
    frames = r.inputs["input_features"].shape[1]
    return {"noise_sequence": torch.randn(r.batch_size, frames, r.config.model_in_channels, generator=r.generator)}


# ── Finishing: what reads the final token ids, then decoder ids ──


def _classifies_at_eos(r: _Request) -> bool:
    heads = class_names("MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES", r.config.model_type)
    eos = getattr(r.config, "eos_token_id", None)
    return getattr(r.config, "is_encoder_decoder", False) and type(r.model).__name__ in heads and isinstance(eos, int)


@_builds(Stage.FINISH, when=lambda r: "input_ids" in r.inputs and _classifies_at_eos(r))
def _eos_ended_rows(r: _Request) -> dict[str, torch.Tensor]:
    # Encoder-decoder sequence classifiers (bart, t5) read each row's last <eos>: every row must end with one.
    input_ids = r.inputs["input_ids"].clone()
    input_ids[:, -1] = r.config.eos_token_id
    return {"input_ids": input_ids}


@_builds(Stage.FINISH, when=lambda r: "input_ids" in r.inputs and "attention_mask" in r.parameters)
def _attention_mask(r: _Request) -> dict[str, torch.Tensor]:
    return {"attention_mask": torch.ones(r.batch_size, r.seq_length, dtype=torch.long)}


@_builds(
    Stage.FINISH, when=lambda r: getattr(r.config, "is_encoder_decoder", False) and "decoder_input_ids" in r.parameters
)
def _decoder_input_ids(r: _Request) -> dict[str, torch.Tensor]:
    return {"decoder_input_ids": _sequence_ids(r)}
