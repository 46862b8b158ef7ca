"""Drawing tensors: token ids, images, audio features, shared by the builders of every stage."""

from __future__ import annotations

import torch
from transformers import PretrainedConfig

from ..configs import is_token_key
from ..tables import (
    CLIP_TYPES,
    FEATURE_SIZE_KEYS,
    FRAMES,
    FRAMES_IN_BATCH_TYPES,
    IMAGE_SIZE,
    IMAGE_SIZES,
    MEL_BINS_FIRST_TYPES,
    STACKED_FRAMES,
    VOCAB,
)
from .registry import Request


def _special_token_ids(config: PretrainedConfig) -> set[int]:
    ids: set[int] = set()
    for key, value in config.to_dict().items():
        if not is_token_key(key):
            continue
        for item in value if isinstance(value, list | tuple) else (value,):
            if isinstance(item, int) and not isinstance(item, bool):
                ids.add(item)
    return ids


def sub_config_with(config: PretrainedConfig, key: str) -> PretrainedConfig | None:
    """The first config with ``key`` set, breadth first over ``config`` and its nested sub-configs."""
    queue = [config]
    while queue:
        current = queue.pop(0)
        if getattr(current, key, None) is not None:
            return current
        queue += [value for value in vars(current).values() if isinstance(value, PretrainedConfig)]
    return None


def _text_vocab_size(config: PretrainedConfig) -> int:
    text_config = config.get_text_config(decoder=True)
    vocab_size = getattr(text_config, "vocab_size", None) or getattr(config, "vocab_size", None)
    if vocab_size is None:
        # Wrappers of a text model without a text config of their own (FastSpeech2 with its vocoder).
        vocab_size = getattr(sub_config_with(config, "vocab_size"), "vocab_size", None)
    return int(vocab_size or VOCAB)


def token_ids(config: PretrainedConfig, shape: tuple[int, int], generator: torch.Generator) -> torch.Tensor:
    # Special ids (pad, image placeholders...) change the model's behaviour: draw plain text tokens only.
    excluded = _special_token_ids(config) | _special_token_ids(config.get_text_config(decoder=True))
    allowed = torch.tensor([i for i in range(_text_vocab_size(config)) if i not in excluded])
    return allowed[torch.randint(len(allowed), shape, generator=generator)]


def sequence_ids(r: Request) -> torch.Tensor:
    return token_ids(r.config, (r.batch_size, r.seq_length), r.generator)


def image_config(config: PretrainedConfig) -> PretrainedConfig:
    return getattr(config, "vision_config", None) or config


def pixel_values(r: Request, video: bool = False) -> torch.Tensor:
    """Images as (batch, channels, height, width); video encoders' clips as (batch, frames, channels, height, width).

    ``video``: always clips, of ``FRAMES`` frames where no config says how many, from the vision tower wherever it is
    nested (PE Video's video encoder's).
    """
    vision = (sub_config_with(r.config, "image_size") or r.config) if video else image_config(r.config)
    size = getattr(vision, "image_size", None) or getattr(vision, "crop_size", IMAGE_SIZE)
    height, width = (size, size) if isinstance(size, int) else tuple(size)[-2:]
    height, width = IMAGE_SIZES.get(r.config.model_type, (height, width))
    # Models on a backbone (VitMatte: the image and its trimap) read the channels their backbone embeds.
    backbone = getattr(vision, "backbone_config", None)
    channels = getattr(vision, "num_channels", None) or getattr(backbone, "num_channels", None)
    channels = channels or getattr(vision, "in_chans", 3)
    frames = getattr(vision, "num_frames", None) or getattr(vision, "frames_per_clip", None)
    # Image-set classifiers (ViLT's NLVR2 head) stack num_images images per sample; -1 (unset) on their other classes.
    frames = frames or max(getattr(vision, "num_images", 0), 0) or None
    frames = CLIP_TYPES.get(r.config.model_type, frames if frames or not video else FRAMES)
    clip = (frames,) if isinstance(frames, int) else ()
    if clip and r.config.model_type in FRAMES_IN_BATCH_TYPES:
        return torch.randn(r.batch_size * frames, channels, height, width, generator=r.generator)
    return torch.randn(r.batch_size, *clip, channels, height, width, generator=r.generator)


def mel_frames(r: Request) -> torch.Tensor:
    """Spectrogram frames a speech decoder's pre-net reads (SpeechT5): (batch, frames, mel bins)."""
    return torch.randn(r.batch_size, r.seq_length, r.config.num_mel_bins, generator=r.generator)


def audio_config(config: PretrainedConfig) -> PretrainedConfig:
    # Speech LMs and CTC wrappers keep the feature sizes on their audio encoder's sub-config.
    # Codecs with a semantic branch (X-Codec2) keep them on their semantic model's.
    for key in ("audio_config", "encoder_config", "speech_config", "semantic_model_config", "asr_config"):
        sub_config = getattr(config, key, None)
        if isinstance(sub_config, PretrainedConfig):
            return sub_config
    return config


def waveform_length(config: PretrainedConfig, seq_length: int) -> int:
    # The conv feature extractor downsamples by the product of its strides; keep >= seq_length frames.
    stride = 1
    for step in getattr(config, "conv_stride", ()) or ():
        stride *= step
    receptive_field = sum(getattr(config, "conv_kernel", ()) or ()) * stride
    return max(1600, stride * seq_length + receptive_field)


def codec_hop(config: PretrainedConfig) -> int:
    """Samples per frame of the DAC codec an audio encoder embeds its waveform with (PE Audio), else 1."""
    dac = getattr(sub_config_with(config, "dac_config"), "dac_config", None)
    return getattr(dac, "hop_length", 1)


def mel_bins_first(audio: PretrainedConfig) -> bool:
    # Whisper-like and chunked encoders take (batch, mel bins, frames); the others (batch, frames, features).
    if audio.model_type in MEL_BINS_FIRST_TYPES:
        return True
    return hasattr(audio, "num_mel_bins") and (hasattr(audio, "n_window") or hasattr(audio, "max_source_positions"))


def feature_frames(r: Request, audio: PretrainedConfig) -> torch.Tensor:
    if hasattr(audio, "spec_size"):
        # Spectrogram Swin encoders (CLAP) take (batch, 1, frames, mel bins) images, stretched to spec_size.
        shape = (r.batch_size, 1, 8 * r.seq_length, audio.num_mel_bins)
    elif not mel_bins_first(audio):
        features = next((getattr(audio, k) for k in FEATURE_SIZE_KEYS if getattr(audio, k, None)), 80)
        # Low-frame-rate encoders (FunASR) stack num_stacked_frames consecutive frames into one.
        channels = getattr(audio, "input_channels", 1) * getattr(audio, "num_stacked_frames", 1)
        channels *= STACKED_FRAMES.get(audio.model_type, 1)
        # Conv subsampling front ends shrink time by up to 8x: keep at least seq_length frames after it.
        shape = (r.batch_size, 8 * r.seq_length, features * channels)
    elif audio.model_type in MEL_BINS_FIRST_TYPES:
        # Whisper-like conv front ends with rotary positions take any number of frames (dots.note's feature_size bins).
        features = next(getattr(audio, k) for k in FEATURE_SIZE_KEYS if getattr(audio, k, None))
        shape = (r.batch_size, features, 8 * r.seq_length)
    elif hasattr(audio, "n_window"):
        # Chunked encoders (Qwen3-ASR) cut (batch, mel bins, frames) into windows of 2 * n_window frames.
        shape = (r.batch_size, audio.num_mel_bins, 4 * audio.n_window)
    else:
        # Whisper-like encoders require exactly 2 * max_source_positions frames (two conv strides).
        shape = (r.batch_size, audio.num_mel_bins, 2 * audio.max_source_positions)
    return torch.randn(shape, generator=r.generator)
