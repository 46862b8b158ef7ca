"""Drawing tensors: token ids, images, audio features, shared by the builders of every stage."""

from __future__ import annotations

import torch
from transformers import PretrainedConfig

from ..configs import is_token_key
from ..tables import CLIP_TYPES, FEATURE_SIZE_KEYS, IMAGE_SIZE, VOCAB
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


def _text_vocab_size(config: PretrainedConfig) -> int:
    text_config = config.get_text_config(decoder=True)
    return int(getattr(text_config, "vocab_size", None) or getattr(config, "vocab_size", None) or VOCAB)


def token_ids(config: PretrainedConfig, shape: tuple[int, int], generator: torch.Generator) -> torch.Tensor:
    # Special ids (pad, image placeholders...) change the model's behaviour: draw plain text tokens only.
    excluded = _special_token_ids(config) | _special_token_ids(config.get_text_config(decoder=True))
    allowed = torch.tensor([i for i in range(_text_vocab_size(config)) if i not in excluded])
    return allowed[torch.randint(len(allowed), shape, generator=generator)]


def sequence_ids(r: Request) -> torch.Tensor:
    return token_ids(r.config, (r.batch_size, r.seq_length), r.generator)


def image_config(config: PretrainedConfig) -> PretrainedConfig:
    return getattr(config, "vision_config", None) or config


def pixel_values(r: Request) -> torch.Tensor:
    """Images as (batch, channels, height, width); video encoders' clips as (batch, frames, channels, height, width)."""
    vision = image_config(r.config)
    size = getattr(vision, "image_size", None) or getattr(vision, "crop_size", IMAGE_SIZE)
    height, width = (size, size) if isinstance(size, int) else tuple(size)[-2:]
    channels = getattr(vision, "num_channels", None) or getattr(vision, "in_chans", 3)
    frames = getattr(vision, "num_frames", None) or getattr(vision, "frames_per_clip", None)
    frames = CLIP_TYPES.get(r.config.model_type, frames)
    clip = (frames,) if isinstance(frames, int) else ()
    return torch.randn(r.batch_size, *clip, channels, height, width, generator=r.generator)


def audio_config(config: PretrainedConfig) -> PretrainedConfig:
    # Speech LMs and CTC wrappers keep the feature sizes on their audio encoder's sub-config.
    # Codecs with a semantic branch (X-Codec2) keep them on their semantic model's.
    for key in ("audio_config", "encoder_config", "speech_config", "semantic_model_config"):
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


def mel_bins_first(audio: PretrainedConfig) -> bool:
    # Whisper-like and chunked encoders take (batch, mel bins, frames); the others (batch, frames, features).
    return hasattr(audio, "num_mel_bins") and (hasattr(audio, "n_window") or hasattr(audio, "max_source_positions"))


def feature_frames(r: Request, audio: PretrainedConfig) -> torch.Tensor:
    if hasattr(audio, "spec_size"):
        # Spectrogram Swin encoders (CLAP) take (batch, 1, frames, mel bins) images, stretched to spec_size.
        shape = (r.batch_size, 1, 8 * r.seq_length, audio.num_mel_bins)
    elif not mel_bins_first(audio):
        features = next((getattr(audio, k) for k in FEATURE_SIZE_KEYS if getattr(audio, k, None)), 80)
        # Low-frame-rate encoders (FunASR) stack num_stacked_frames consecutive frames into one.
        channels = getattr(audio, "input_channels", 1) * getattr(audio, "num_stacked_frames", 1)
        # Conv subsampling front ends shrink time by up to 8x: keep at least seq_length frames after it.
        shape = (r.batch_size, 8 * r.seq_length, features * channels)
    elif hasattr(audio, "n_window"):
        # Chunked encoders (Qwen3-ASR) cut (batch, mel bins, frames) into windows of 2 * n_window frames.
        shape = (r.batch_size, audio.num_mel_bins, 4 * audio.n_window)
    else:
        # Whisper-like encoders require exactly 2 * max_source_positions frames (two conv strides).
        shape = (r.batch_size, audio.num_mel_bins, 2 * audio.max_source_positions)
    return torch.randn(shape, generator=r.generator)
