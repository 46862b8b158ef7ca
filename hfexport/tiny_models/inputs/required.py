"""Builders of the ``REQUIRED`` stage: forward arguments still required after the main input."""

from __future__ import annotations

import inspect

import torch
from transformers import PretrainedConfig

from ..tables import FEATURE_SIZE_KEYS, SPLICED_IMAGE_TYPES
from .draw import (
    audio_config,
    codec_hop,
    feature_frames,
    image_config,
    mel_bins_first,
    mel_frames,
    pixel_values,
    sequence_ids,
    token_ids,
    waveform_length,
)
from .registry import Request, Stage, builds

# ── Forward arguments still required ──


@builds(Stage.REQUIRED, when=lambda r: "input_ids" in r.missing)
def _required_token_ids(r: Request) -> dict[str, torch.Tensor]:
    # Vision-first models whose forward still requires text (Blip2Model, GroundingDino).
    return {"input_ids": sequence_ids(r)}


@builds(Stage.REQUIRED, when=lambda r: "pixel_values" in r.missing)
def _required_pixel_values(r: Request) -> dict[str, torch.Tensor]:
    # VLM vision towers built on their own keep the VLM's main input name (Idefics3, SmolVLM).
    return {"pixel_values": pixel_values(r)}


@builds(Stage.REQUIRED, when=lambda r: "pixel_values_videos" in r.missing)
def _required_video_clips(r: Request) -> dict[str, torch.Tensor]:
    # Video-text and audio-video models (PE Video, PE Audio-Video) whose main input is another modality's.
    return {"pixel_values_videos": pixel_values(r, video=True)}


@builds(Stage.REQUIRED, when=lambda r: "input_features_mask" in r.missing)
def _input_features_mask(r: Request) -> dict[str, torch.Tensor]:
    frames = r.inputs["input_features"].shape[-1 if mel_bins_first(audio_config(r.config)) else 1]
    return {"input_features_mask": torch.ones(r.batch_size, frames, dtype=torch.long)}


_LATENT_NAMES = ("latents", "hidden_states")


def _is_codec(config: PretrainedConfig) -> bool:
    return any(hasattr(config, key) for key in ("codebook_size", "audio_channels", "downsampling_ratios"))


@builds(Stage.REQUIRED, when=lambda r: "latents" in r.missing or ("hidden_states" in r.missing and _is_codec(r.config)))
def _codec_latents(r: Request) -> dict[str, torch.Tensor]:
    # Audio codec decoders built on their own (Mimi, VibeVoice) take the encoder's (batch, channels, frames).
    shape = (r.batch_size, r.config.hidden_size, 2 * r.seq_length)
    return {name: torch.randn(shape, generator=r.generator) for name in _LATENT_NAMES if name in r.missing}


@builds(Stage.REQUIRED, when=lambda r: {"hidden_states", "conditional_embeddings"} <= r.missing)
def _tower_layers_and_prompt(r: Request) -> dict[str, torch.Tensor | tuple[torch.Tensor, ...]]:
    """CLIPSeg's decoder: the vision tower's states at each of its extract_layers (the class token, then a square
    grid of patches) and the prompt's projected embedding."""
    vision = r.config.vision_config
    shape = (r.batch_size, 1 + (vision.image_size // vision.patch_size) ** 2, vision.hidden_size)
    return {
        "hidden_states": tuple(torch.randn(shape, generator=r.generator) for _ in r.config.extract_layers),
        "conditional_embeddings": torch.randn(r.batch_size, r.config.projection_dim, generator=r.generator),
    }


def _grid(size: int | list[int] | tuple[int, int]) -> tuple[int, int]:
    return (size, size) if isinstance(size, int) else tuple(size)


@builds(Stage.REQUIRED, when=lambda r: {"hidden_states", "position_embeddings"} <= r.missing)
def _patch_tokens_and_rotary_angles(r: Request) -> dict[str, torch.Tensor | tuple[torch.Tensor, torch.Tensor]]:
    """ViT encoders whose model rotates the patch tokens (DINOv3ViTEncoder, Sapiens2Encoder): the embeddings' class
    and register tokens then the patch grid, and the cos and sin of each patch's angles, (patches, head_dim)."""
    (height, width), (patch_height, patch_width) = _grid(r.config.image_size), _grid(r.config.patch_size)
    patches = (height // patch_height) * (width // patch_width)
    tokens = 1 + getattr(r.config, "num_register_tokens", 0) + patches
    angles = torch.rand(patches, r.config.hidden_size // r.config.num_attention_heads, generator=r.generator)
    return {
        "hidden_states": torch.randn(r.batch_size, tokens, r.config.hidden_size, generator=r.generator),
        "position_embeddings": ((2 * torch.pi * angles).cos(), (2 * torch.pi * angles).sin()),
    }


def _token_to_mel_config(config: PretrainedConfig) -> PretrainedConfig | None:
    # Qwen2.5-Omni's code-to-mel DiT: its own config, or the Token2Wav config that nests it.
    dit = getattr(config, "dit_config", config)
    return dit if hasattr(dit, "enc_emb_dim") and hasattr(dit, "num_embeds") else None


@builds(
    Stage.REQUIRED,
    when=lambda r: _token_to_mel_config(r.config) is not None and bool({"code", "time_step"} & r.missing),
)
def _speech_codes_and_speaker(r: Request) -> dict[str, torch.Tensor]:
    """Qwen2.5-Omni's Token2Wav: the talker's codec codes, the speaker's vector and a reference mel (batch, frames,
    mel bins), repeats mel frames per code; its DiT built alone reads them as one ODE step does (the noisy mel, the
    speaker vector repeated per frame, the step's time)."""
    dit = _token_to_mel_config(r.config)
    frames = r.seq_length * dit.repeats
    codes = torch.randint(dit.num_embeds, (r.batch_size, r.seq_length), generator=r.generator)
    speaker = torch.randn(r.batch_size, dit.enc_emb_dim, generator=r.generator)
    reference = torch.randn(r.batch_size, frames, dit.mel_dim, generator=r.generator)
    if "code" in r.missing:
        return {"code": codes, "conditioning": speaker, "reference_mel": reference}
    return {
        "hidden_states": torch.randn(r.batch_size, frames, dit.mel_dim, generator=r.generator),
        "condition_vector": reference,
        "speaker_embedding": speaker[:, None].expand(-1, frames, -1).clone(),
        "quantized_code": codes,
        "time_step": torch.rand(r.batch_size, generator=r.generator),
    }


@builds(Stage.REQUIRED, when=lambda r: "hidden" in r.missing)
def _conv_block_features(r: Request) -> dict[str, torch.Tensor]:
    # Upsampling blocks of code-to-waveform decoders built alone (Qwen3-Omni's Code2WavDecoderBlock, the first of its
    # model's): what the previous block wrote, (batch, channels its first conv reads, frames).
    conv = next(m for m in r.model.modules() if isinstance(m, torch.nn.Conv1d | torch.nn.ConvTranspose1d))
    return {"hidden": torch.randn(r.batch_size, conv.in_channels, r.seq_length, generator=r.generator)}


@builds(Stage.REQUIRED, when=lambda r: "codes" in r.missing and hasattr(r.config, "num_quantizers"))
def _quantizer_codes(r: Request) -> dict[str, torch.Tensor]:
    # Code-to-waveform decoders (Qwen3-Omni's Code2Wav) read every quantizer's codes: (batch, quantizers, frames).
    shape = (r.batch_size, r.config.num_quantizers, r.seq_length)
    return {"codes": torch.randint(r.config.codebook_size, shape, generator=r.generator)}


@builds(Stage.REQUIRED, when=lambda r: {"hidden_states", "mask"} <= r.missing and hasattr(r.config, "time_reduction"))
def _subsampled_features_and_mask(r: Request) -> dict[str, torch.Tensor]:
    # Phi-4-multimodal's audio encoder: (batch, frames, input_size) features, time_reduction frames per encoder step,
    # and which frames hold audio (all: its model passes the processor's mask, or none).
    frames = r.config.time_reduction * r.seq_length
    return {
        "hidden_states": torch.randn(r.batch_size, frames, r.config.input_size, generator=r.generator),
        "mask": torch.ones(r.batch_size, frames, dtype=torch.bool),
    }


@builds(Stage.REQUIRED, when=lambda r: {"hidden_states", "input_dimensions"} <= r.missing)
def _patch_grid_states(r: Request) -> dict[str, torch.Tensor | tuple[int, int]]:
    # Swin encoders built alone read their model's patch embeddings, (batch, patches, embed_dim), and the patch grid's
    # (height, width) as Python ints, which their model passes from the embeddings' output.
    (height, width), (patch_height, patch_width) = _grid(r.config.image_size), _grid(r.config.patch_size)
    grid = (height // patch_height, width // patch_width)
    shape = (r.batch_size, grid[0] * grid[1], r.config.embed_dim)
    return {"hidden_states": torch.randn(shape, generator=r.generator), "input_dimensions": grid}


@builds(Stage.REQUIRED, when=lambda r: "hidden_states" in r.missing and hasattr(r.config, "num_windows_side"))
def _windowed_patches(r: Request) -> dict[str, torch.Tensor]:
    # Windowed ViT encoders built alone (LwDetrViTEncoder) read their model's patch grid cut into num_windows_side**2
    # windows, stacked in the batch: (batch * windows, patches per window, hidden_size).
    side = r.config.image_size // r.config.patch_size // r.config.num_windows_side
    shape = (r.batch_size * r.config.num_windows_side**2, side * side, r.config.hidden_size)
    return {"hidden_states": torch.randn(shape, generator=r.generator)}


@builds(Stage.REQUIRED, when=lambda r: "hidden_states" in r.missing and hasattr(r.config, "hidden_sizes"))
def _stem_feature_map(r: Request) -> dict[str, torch.Tensor]:
    # Conv encoders built alone read what their first conv reads: ConvNextEncoder its stem's (batch, first stage
    # width, height / 4, width / 4) map, DINOv3ConvNextEncoder (whose first stage is the stem) the images.
    channels = next(m for m in r.model.modules() if isinstance(m, torch.nn.Conv2d)).in_channels
    side = r.config.image_size if channels == r.config.num_channels else r.config.image_size // 4
    shape = (r.batch_size, channels, side, side)
    return {"hidden_states": torch.randn(shape, generator=r.generator)}


def _first_layer(model: torch.nn.Module) -> torch.nn.Module | None:
    # The first layer with weights the model registers: what a stack built alone applies first to its input.
    return next(
        (m for m in model.modules() if isinstance(m, torch.nn.Conv2d | torch.nn.Linear | torch.nn.LayerNorm)), None
    )


def _embeds_images(r: Request) -> bool:
    first = _first_layer(r.model)
    vision = image_config(r.config)
    channels = getattr(vision, "num_channels", None) or getattr(vision, "in_channels", None)
    return isinstance(first, torch.nn.Conv2d) and first.in_channels == channels


@builds(Stage.REQUIRED, when=lambda r: "hidden_states" in r.missing and _embeds_images(r))
def _images_as_states(r: Request) -> dict[str, torch.Tensor]:
    # Vision backbones whose first conv embeds the image (Florence2VisionBackbone, called with its model's
    # pixel_values) read the images.
    return {"hidden_states": pixel_values(r)}


@builds(
    Stage.REQUIRED, when=lambda r: "hidden_states" in r.missing and isinstance(_first_layer(r.model), torch.nn.Conv2d)
)
def _pooled_feature_map(r: Request) -> dict[str, torch.Tensor]:
    # Text-line encoders built alone (PP-OCR's EncoderWithSVTR) read their model's last feature map, pooled to one row
    # (avg_pool2d over 3 x 2 cells): (batch, their first conv's channels, 1, width).
    shape = (r.batch_size, _first_layer(r.model).in_channels, 1, r.seq_length)
    return {"hidden_states": torch.randn(shape, generator=r.generator)}


def _read_width(r: Request) -> int:
    # Heads built alone whose first layer reads another width than hidden_size say so by it: SLANet's table head
    # attends over its backbone's flattened (batch, positions, post_conv_out_channels) features.
    first = _first_layer(r.model)
    return first.in_features if isinstance(first, torch.nn.Linear) else r.config.hidden_size


@builds(Stage.REQUIRED, when=lambda r: "hidden_states" in r.missing and hasattr(r.config, "hidden_size"))
def _embedded_sequence(r: Request) -> dict[str, torch.Tensor]:
    # Encoders of transformers built on their own (Dinov2Encoder, SpeechT5Encoder) read the embeddings' output:
    # (batch, sequence, hidden_size), or the width their first layer reads.
    shape = (r.batch_size, r.seq_length, _read_width(r))
    return {"hidden_states": torch.randn(shape, generator=r.generator)}


@builds(Stage.REQUIRED, when=lambda r: "attention_mask" in r.missing and "hidden_states" in r.inputs)
def _states_mask(r: Request) -> dict[str, torch.Tensor]:
    # Stacks whose model always hands them a mask (Kosmos-2.5's vision encoder: the non-empty patches): none padded.
    return {"attention_mask": torch.ones(r.inputs["hidden_states"].shape[:2], dtype=torch.long)}


def _image_feature_count(r: Request) -> int:
    """How many features a VLM splices into the text per image (per clip), hence how many placeholders it needs."""
    if hasattr(r.config, "latent_query_num"):
        # Kosmos-2's resampler: latent_query_num latents.
        return r.config.latent_query_num
    if hasattr(r.config, "num_query_tokens"):
        # BLIP-style Q-Formers: num_query_tokens queries, per frame of a clip.
        pixels = r.inputs["pixel_values"]
        return r.config.num_query_tokens * (pixels.shape[1] if pixels.dim() == 5 else 1)
    if "spatial_shapes" in r.inputs:
        # LFM2-VL unshuffles downsample_factor x downsample_factor patches into one feature.
        return int(r.inputs["spatial_shapes"][0].prod()) // r.config.downsample_factor**2
    # PaliGemma-style towers (PI0's VLM): one feature per patch.
    vision = image_config(getattr(r.config, "vlm_config", r.config))
    return (vision.image_size // vision.patch_size) ** 2


def _splices_images(r: Request) -> bool:
    # Not the text towers of those VLMs built alone (Blip2TextModelWithProjection), which take no images.
    return r.config.model_type in SPLICED_IMAGE_TYPES and "input_ids" in r.inputs and "pixel_values" in r.parameters


@builds(Stage.REQUIRED, when=_splices_images)
def _image_placeholders(r: Request) -> dict[str, torch.Tensor]:
    """Every row opens with one placeholder per image feature, where the VLM splices the image in."""
    count = _image_feature_count(r)
    if "image_embeds_position_mask" in r.parameters:
        # Kosmos-2 marks the image positions with a mask instead: the ids there (bos) are replaced.
        mask = torch.zeros(r.batch_size, count + r.seq_length, dtype=torch.long)
        mask[:, :count] = 1
        placeholders = torch.full((r.batch_size, count), r.config.text_config.bos_token_id)
        return {
            "input_ids": torch.cat([placeholders, r.inputs["input_ids"]], dim=-1),
            "image_embeds_position_mask": mask,
        }
    config = getattr(r.config, "vlm_config", r.config)
    token_keys = ("image_token_id", "image_token_index", "video_token_index")
    token_id = next(getattr(config, k) for k in token_keys if getattr(config, k, None) is not None)
    placeholders = torch.full((r.batch_size, count), token_id)
    return {"input_ids": torch.cat([placeholders, r.inputs["input_ids"]], dim=-1)}


def _stacks_images(r: Request) -> bool:
    return "pixel_values" in r.inputs and r.inputs["pixel_values"].dim() == 5


@builds(Stage.REQUIRED, when=lambda r: "pixel_attention_mask" in r.missing and _stacks_images(r))
def _camera_mask(r: Request) -> dict[str, torch.Tensor]:
    # PI0 stacks its cameras' images in one sample and says which of them are there: all are.
    return {"pixel_attention_mask": torch.ones(r.inputs["pixel_values"].shape[:2], dtype=torch.bool)}


@builds(Stage.REQUIRED, when=lambda r: "image_attention_mask" in r.missing and _stacks_images(r))
def _image_attention_mask(r: Request) -> dict[str, torch.Tensor]:
    # Idefics' text tokens attend to the images of their sample through a (batch, text, images) mask: all to all.
    images = r.inputs["pixel_values"].shape[1]
    return {"image_attention_mask": torch.ones(r.batch_size, r.inputs["input_ids"].shape[1], images, dtype=torch.long)}


@builds(Stage.REQUIRED, when=lambda r: "input_values" in r.missing)
def _required_waveforms(r: Request) -> dict[str, torch.Tensor]:
    # Waveforms beside another main input (PE Audio's text) feed codec-style encoders: (batch, channels, time), a
    # whole number of codec frames (PE Audio's DAC: hop_length samples each).
    hop = codec_hop(r.config)
    length = -(-waveform_length(audio_config(r.config), r.seq_length) // hop) * hop
    return {"input_values": torch.randn(r.batch_size, 1, length, generator=r.generator)}


@builds(Stage.REQUIRED, when=lambda r: "input_features" in r.missing)
def _required_audio_features(r: Request) -> dict[str, torch.Tensor]:
    decoder = getattr(r.config, "decoder_config", None)
    if hasattr(decoder, "feature_size"):
        # CLVP conditions its speech decoder on (batch, feature_size mel bins, frames) spectrograms.
        shape = (r.batch_size, decoder.feature_size, 8 * r.seq_length)
        return {"input_features": torch.randn(shape, generator=r.generator)}
    audio = audio_config(r.config)
    if hasattr(r.config, "semantic_model_config"):
        # Codecs with a semantic branch (X-Codec2) pair one semantic feature frame with every codec frame.
        width = next(getattr(audio, k) for k in FEATURE_SIZE_KEYS if getattr(audio, k, None))
        return {"input_features": torch.randn(r.batch_size, r.seq_length, width, generator=r.generator)}
    if hasattr(r.config, "audio_length_per_tok"):
        # Streaming speech LMs (Voxtral Realtime) add audio_length_per_tok mel frames to every text token.
        shape = (r.batch_size, audio.num_mel_bins, r.config.audio_length_per_tok * r.seq_length)
        return {"input_features": torch.randn(shape, generator=r.generator)}
    return {"input_features": feature_frames(r, audio)}


@builds(Stage.REQUIRED, when=lambda r: "chunk_sample_lengths" in r.missing and hasattr(r.config, "hop_length"))
def _chunk_sample_lengths(r: Request) -> dict[str, torch.Tensor]:
    # dots.note's audio tower masks each chunk's frames past its waveform's length (hop_length samples a frame): every
    # sample one whole chunk.
    frames = r.inputs["input_features"].shape[-1]
    return {"chunk_sample_lengths": torch.full((r.batch_size,), frames * r.config.hop_length)}


@builds(Stage.REQUIRED, when=lambda r: "audio_input_ids" in r.missing and hasattr(r.config, "num_codebooks"))
def _mel_bin_tokens(r: Request) -> dict[str, torch.Tensor]:
    # Inkling's audio tower embeds discretized mel frames, one token per mel bin: its model hands it every audio's
    # frames flattened, (frames, num_codebooks) ids below codebook_size.
    shape = (r.batch_size * r.seq_length, r.config.num_codebooks)
    return {"audio_input_ids": torch.randint(r.config.codebook_size, shape, generator=r.generator)}


@builds(Stage.REQUIRED, when=lambda r: {"moshi_audio_codes", "user_audio_codes"} <= r.parameters)
def _both_speakers_audio_codes(r: Request) -> dict[str, torch.Tensor]:
    # Moshi reads its own and the user's audio streams beside the text, each (batch, num_codebooks, sequence) codes,
    # as its generation's prompt does (without them it concatenates None).
    shape = (r.batch_size, r.config.num_codebooks, r.seq_length)
    return {
        name: torch.randint(r.config.audio_vocab_size, shape, generator=r.generator)
        for name in ("moshi_audio_codes", "user_audio_codes")
    }


@builds(Stage.REQUIRED, when=lambda r: "last_hidden_state" in r.parameters and hasattr(r.config, "input_size"))
def _main_decoder_state(r: Request) -> dict[str, torch.Tensor]:
    # Moshi's depth decoder predicts one time step's codebooks from the main decoder's state at that step: (rows, 1,
    # input_size), a row per step of the ids it reads (its model flattens batch and time into rows).
    rows = r.inputs["input_ids"].shape[0]
    return {"last_hidden_state": torch.randn(rows, 1, r.config.input_size, generator=r.generator)}


@builds(Stage.REQUIRED, when=lambda r: "audio_mel_mask" in r.missing)
def _mel_padding_mask(r: Request) -> dict[str, torch.Tensor]:
    # Gemma 3n's mel mask marks the padded frames (True = padding): none are.
    frames = r.inputs["audio_mel"].shape[1]
    return {"audio_mel_mask": torch.zeros(r.batch_size, frames, dtype=torch.bool)}


@builds(Stage.REQUIRED, when=lambda r: "bbox" in r.missing)
def _bounding_boxes(r: Request) -> dict[str, torch.Tensor]:
    """Document models that cannot run without layout (Bros, UDOP): one box per token, normalized to [0, 1]."""
    corners = torch.rand(r.batch_size, r.seq_length, 2, 2, generator=r.generator)
    # Sorting each axis' two draws gives x0 <= x1 and y0 <= y1: boxes as (x0, y0, x1, y1).
    low, high = corners.sort(dim=-1).values.unbind(-1)
    return {"bbox": torch.cat([low, high], dim=-1)}


@builds(Stage.REQUIRED, when=lambda r: "bbox_pos_emb" in r.missing)
def _relative_box_embeddings(r: Request) -> dict[str, torch.Tensor]:
    # BrosEncoder built alone: what its model's BrosBboxEmbeddings project from every token pair's relative box,
    # (sequence, sequence, batch, head width), the layout its attention reads.
    shape = (r.seq_length, r.seq_length, r.batch_size, r.config.dim_bbox_projection)
    return {"bbox_pos_emb": torch.randn(shape, generator=r.generator)}


def _sub_model_ids(r: Request) -> set[str]:
    # Ids for a sub-model's own tokenizer (InstructBLIP's Q-Former): "<prefix>_input_ids" beside a "<prefix>_config".
    return {n for n in r.missing if n.endswith("_input_ids") and hasattr(r.config, n.replace("_input_ids", "_config"))}


@builds(Stage.REQUIRED, when=lambda r: bool(_sub_model_ids(r)))
def _required_sub_model_ids(r: Request) -> dict[str, torch.Tensor]:
    inputs = {}
    for name in sorted(_sub_model_ids(r)):
        sub_config = getattr(r.config, name.replace("_input_ids", "_config"))
        inputs[name] = token_ids(sub_config, (r.batch_size, r.seq_length), r.generator)
    return inputs


# The side of the feature map a tower reads from the encoder before it (Unlimited-OCR's SAM: 1 x 1 of a tiny image).
_FEATURE_MAP_SIDE = 2


@builds(Stage.REQUIRED, when=lambda r: "patch_embeds" in r.missing)
def _encoder_feature_map(r: Request) -> dict[str, torch.Tensor]:
    # Towers fed another encoder's feature map as their patch embeddings (Unlimited-OCR's CLIP encoder reads its SAM
    # encoder's, and interpolates its positions to the grid): (batch, hidden_size, side, side).
    shape = (r.batch_size, r.config.hidden_size, _FEATURE_MAP_SIDE, _FEATURE_MAP_SIDE)
    return {"patch_embeds": torch.randn(shape, generator=r.generator)}


def _embedding_names(r: Request) -> list[str]:
    return sorted(n for n in r.missing if n.endswith(("_embeds", "_hidden_states")))


def _embedding_width(config: PretrainedConfig, name: str) -> int:
    # A cross-attending model (the Q-Former) says how wide its encoder's states are: encoder_hidden_size.
    if name.endswith("_hidden_states") and hasattr(config, name.replace("_hidden_states", "_hidden_size")):
        return getattr(config, name.replace("_hidden_states", "_hidden_size"))
    if name == "encoder_hidden_states" and isinstance(getattr(config, "encoder_config", None), PretrainedConfig):
        # Speech decoders built alone (MoonshineStreamingDecoder) project their encoder's states to their own width.
        return config.encoder_config.hidden_size
    if name == "context_hidden_states" and hasattr(config, "target_layer_ids"):
        # Drafters (DFlash) read the target model's hidden states of several layers, concatenated.
        return len(config.target_layer_ids) * config.hidden_size
    if name == "action_embeds" and hasattr(config, "dit_config"):
        # Action experts (PI0) embed noisy actions at their own width.
        return config.dit_config.hidden_size
    return config.hidden_size


@builds(Stage.REQUIRED, when=lambda r: {"marks", "num_options", "question_type_ids"} <= r.missing)
def _decision_questions(r: Request) -> dict[str, torch.Tensor]:
    """Decision heads (JevForDecision) score each question's options at the token before its mark, as ``decide``
    passes them: one question of every type its config gives an offset for, two options each, marks (1-based token
    positions) every second token back from the row's end. Only the first prompt of the batch is read."""
    questions = len(r.config.offsets)
    marks = r.seq_length - 2 * torch.arange(questions).flip(0)
    return {
        "marks": marks.expand(r.batch_size, -1).clone(),
        "num_options": torch.full((r.batch_size, questions), 2),
        "question_type_ids": torch.arange(questions).expand(r.batch_size, -1).clone(),
    }


# Reference-conformer atoms per token of the protein ESMFold 2 folds built alone.
_ATOMS_PER_TOKEN = 2


@builds(Stage.REQUIRED, when=lambda r: "atom_inputs" in r.missing and "res_type" in r.missing)
def _featurized_protein(r: Request) -> dict[str, torch.Tensor | object]:
    """ESMFold 2 reads its featurizer's output: one protein chain of seq_length residues (token and residue indices
    counting up, one chain, entity and copy, no bonds, all valid) and its atoms, _ATOMS_PER_TOKEN per residue, bundled
    in the model's atom-inputs dataclass (random reference positions, atomic numbers and name characters)."""
    shape, config = (r.batch_size, r.seq_length), r.config
    atoms = r.seq_length * _ATOMS_PER_TOKEN
    atom_to_token = torch.arange(r.seq_length).repeat_interleave(_ATOMS_PER_TOKEN).expand(r.batch_size, -1).clone()
    bundle = inspect.signature(r.model.forward).parameters["atom_inputs"].annotation  # EsmFold2AtomInputs
    atom_inputs = bundle(
        ref_pos=torch.randn(r.batch_size, atoms, 3, generator=r.generator),
        ref_charge=torch.zeros(r.batch_size, atoms),
        atom_attention_mask=torch.ones(r.batch_size, atoms, dtype=torch.bool),
        ref_element=torch.randint(1, config.max_atomic_number, (r.batch_size, atoms), generator=r.generator),
        ref_atom_name_chars=torch.randint(
            config.char_vocab_size, (r.batch_size, atoms, config.max_chars), generator=r.generator
        ),
        ref_space_uid=atom_to_token.clone(),
        atom_to_token=atom_to_token,
    )
    positions = torch.arange(r.seq_length).expand(*shape).clone()
    chain = torch.zeros(shape, dtype=torch.long)
    return {
        "token_index": positions,
        "residue_index": positions.clone(),
        **{name: chain.clone() for name in ("asym_id", "sym_id", "entity_id", "mol_type")},  # one protein chain
        "res_type": torch.randint(20, shape, generator=r.generator),  # the 20 amino acids
        "token_bonds": torch.zeros(*shape, r.seq_length, 1),
        "attention_mask": torch.ones(shape, dtype=torch.long),
        "atom_inputs": atom_inputs,
        "input_ids": token_ids(config.esmc_config, shape, r.generator),  # for its ESMC backbone
    }


def _reads_time_embedding(r: Request) -> bool:
    # PI05Model hands it to its action expert through **kwargs, which its own signature does not name.
    expert = getattr(r.model, "dit", r.model)
    return "timestep_embeds" in inspect.signature(expert.forward).parameters and "timestep_embeds" not in r.inputs


@builds(Stage.REQUIRED, when=_reads_time_embedding)
def _denoising_time_embedding(r: Request) -> dict[str, torch.Tensor]:
    # PI0.5's action expert modulates its norms by the denoising time's embedding, which its policy computes
    # (PI05ActionTimeEmbedding): (batch, the expert's width), one per sample.
    width = getattr(r.config, "dit_config", r.config).hidden_size
    return {"timestep_embeds": torch.randn(r.batch_size, width, generator=r.generator)}


@builds(Stage.REQUIRED, when=lambda r: bool(_embedding_names(r)))
def _required_embeddings(r: Request) -> dict[str, torch.Tensor]:
    """Models fed by another model's embeddings (Q-Former queries, drafters, upsamplers): (batch, sequence, width)."""
    return {
        name: torch.randn(
            r.batch_size, _embedding_length(r, name), _embedding_width(r.config, name), generator=r.generator
        )
        for name in _embedding_names(r)
    }


def _embedding_length(r: Request, name: str) -> int:
    # Action experts (PI0) embed one whole action chunk: the prefix block is what precedes the last chunk_size tokens.
    return r.config.chunk_size if name == "action_embeds" and hasattr(r.config, "chunk_size") else r.seq_length


@builds(Stage.REQUIRED, when=lambda r: {"prompt_pixel_values", "prompt_masks"} <= r.missing)
def _prompt_image_and_mask(r: Request) -> dict[str, torch.Tensor]:
    # In-context segmenters (SegGPT) stack the image over its prompt into one image_size picture: the image, the
    # prompt and its mask are each half as high (the image drawn anew at that height).
    height, width = r.config.image_size
    shape = (r.batch_size, r.config.num_channels, height // 2, width)
    names = ("pixel_values", "prompt_pixel_values", "prompt_masks")
    return {name: torch.randn(shape, generator=r.generator) for name in names}


# Class prompts per sample of open-vocabulary detectors (OmDet-Turbo): this many, flattened into one batch of prompts.
_CLASSES_PER_SAMPLE = 2


@builds(Stage.REQUIRED, when=lambda r: {"classes_input_ids", "classes_structure"} <= r.missing)
def _class_prompts(r: Request) -> dict[str, torch.Tensor]:
    """Open-vocabulary detectors: every sample's class names as (batch * classes, sequence) prompts, how many classes
    each sample has, and one task prompt per sample."""
    classes = r.batch_size * _CLASSES_PER_SAMPLE
    return {
        "classes_input_ids": token_ids(r.config, (classes, r.seq_length), r.generator),
        "classes_attention_mask": torch.ones(classes, r.seq_length, dtype=torch.long),
        "classes_structure": torch.full((r.batch_size,), _CLASSES_PER_SAMPLE),
        "tasks_input_ids": sequence_ids(r),
        "tasks_attention_mask": torch.ones(r.batch_size, r.seq_length, dtype=torch.long),
    }


@builds(Stage.REQUIRED, when=lambda r: {"vision_features", "class_features", "task_features"} <= r.missing)
def _prompted_decoder_inputs(r: Request) -> dict[str, torch.Tensor | list[torch.Tensor]]:
    """OmDet-Turbo's decoder built alone: its encoder's feature levels (vision_features_channels wide, each half the
    side of the one before), and sequence-first embeddings of every sample's class prompts and of its task prompt
    (class_embed_dim wide), with the task's mask (no token padded)."""
    channels = r.config.vision_features_channels
    sides = [2 ** (len(channels) - 1 - level) for level in range(len(channels))]
    maps = [
        torch.randn(r.batch_size, width, side, side, generator=r.generator)
        for width, side in zip(channels, sides, strict=True)
    ]
    width = r.config.class_embed_dim
    return {
        "vision_features": maps,
        "class_features": torch.randn(_CLASSES_PER_SAMPLE, r.batch_size, width, generator=r.generator),
        "task_features": torch.randn(r.seq_length, r.batch_size, width, generator=r.generator),
        "task_mask": torch.ones(r.batch_size, r.seq_length, dtype=torch.long),
    }


@builds(Stage.REQUIRED, when=lambda r: "task_inputs" in r.missing and hasattr(r.config, "task_seq_len"))
def _task_token_ids(r: Request) -> dict[str, torch.Tensor]:
    # OneFormer conditions on its task ("the task is semantic") as task_seq_len token ids of its text encoder.
    shape = (r.batch_size, r.config.task_seq_len)
    vocab = r.config.text_encoder_vocab_size
    return {"task_inputs": torch.randint(vocab, shape, generator=r.generator)}


@builds(Stage.REQUIRED, when=lambda r: "state" in r.missing and hasattr(r.config, "max_state_dim"))
def _robot_state(r: Request) -> dict[str, torch.Tensor]:
    # Vision-language-action policies (PI0) act from the robot's state, beside the prompt and camera images.
    return {"state": torch.randn(r.batch_size, r.config.max_state_dim, generator=r.generator)}


@builds(Stage.REQUIRED, when=lambda r: "spectrogram" in r.missing and hasattr(r.config, "model_in_dim"))
def _vocoder_spectrogram(r: Request) -> dict[str, torch.Tensor]:
    # HiFi-GAN vocoders built alone (SpeechT5HifiGan, FastSpeech2ConformerHifiGan) read (batch, frames, mel bins).
    shape = (r.batch_size, r.seq_length, r.config.model_in_dim)
    return {"spectrogram": torch.randn(shape, generator=r.generator)}


@builds(Stage.REQUIRED, when=lambda r: "lang_id" in r.missing and hasattr(r.config, "vocoder_num_langs"))
def _vocoder_speaker_and_language(r: Request) -> dict[str, torch.Tensor]:
    # SeamlessM4T's unit vocoders built alone: beside the unit ids, one speaker and one target language per sample,
    # (batch, 1) as the model passes them (spkr_id in v1, speaker_id in v2).
    speaker = "spkr_id" if "spkr_id" in r.missing else "speaker_id"
    return {
        speaker: torch.randint(r.config.vocoder_num_spkrs, (r.batch_size, 1), generator=r.generator),
        "lang_id": torch.randint(r.config.vocoder_num_langs, (r.batch_size, 1), generator=r.generator),
    }


# Characters per text token that SeamlessM4T v2's text-to-unit head reads (the processor's spelling of each token).
_CHARACTERS_PER_TOKEN = 2


@builds(Stage.REQUIRED, when=lambda r: "char_count_per_id" in r.parameters)
def _token_characters(r: Request) -> dict[str, torch.Tensor]:
    """SeamlessM4T v2's non-autoregressive text-to-unit head: the characters of every text token and their count per
    token, beside the text decoder's states (its decoder built alone: as encoder_hidden_states)."""
    inputs = {}
    if "inputs_embeds" not in r.inputs:
        shape = (r.batch_size, r.seq_length, r.config.hidden_size)
        inputs["encoder_hidden_states"] = torch.randn(shape, generator=r.generator)
    characters = (r.batch_size, _CHARACTERS_PER_TOKEN * r.seq_length)
    inputs["char_input_ids"] = torch.randint(r.config.char_vocab_size, characters, generator=r.generator)
    inputs["char_count_per_id"] = torch.full((r.batch_size, r.seq_length), _CHARACTERS_PER_TOKEN)
    return inputs


@builds(Stage.REQUIRED, when=lambda r: "mel_spectrogram" in r.missing and hasattr(r.config, "mel_dim"))
def _vocoder_log_mel(r: Request) -> dict[str, torch.Tensor]:
    # BigVGAN vocoders (Qwen2.5-Omni's Token2Wav) read log-mel (batch, mel bins, frames): channels first.
    shape = (r.batch_size, r.config.mel_dim, r.seq_length)
    return {"mel_spectrogram": torch.randn(shape, generator=r.generator)}


@builds(Stage.REQUIRED, when=lambda r: "decoder_input_values" in r.missing and hasattr(r.config, "num_mel_bins"))
def _decoder_mel_frames(r: Request) -> dict[str, torch.Tensor]:
    # SpeechT5's speech heads decode mel frames (teacher-forced, as in training).
    return {"decoder_input_values": mel_frames(r)}


@builds(Stage.REQUIRED, when=lambda r: "context_input_ids" in r.missing and hasattr(r.config, "n_docs"))
def _retrieved_passages(r: Request) -> dict[str, torch.Tensor]:
    """RAG without a retriever: n_docs passages per question, as the generator's (batch * n_docs, sequence) ids, and
    each passage's retrieval score."""
    passages = r.batch_size * r.config.n_docs
    return {
        "context_input_ids": token_ids(r.config.generator, (passages, r.seq_length), r.generator),
        "context_attention_mask": torch.ones(passages, r.seq_length, dtype=torch.long),
        "doc_scores": torch.randn(r.batch_size, r.config.n_docs, generator=r.generator),
    }


@builds(Stage.REQUIRED, when=lambda r: "bool_masked_pos" in r.missing and hasattr(r.config, "tubelet_size"))
def _masked_tubelets(r: Request) -> dict[str, torch.Tensor]:
    # VideoMAE's pre-training head reconstructs the masked tubelets: half of them, the same ones in every sample (it
    # gathers an equal number per sample).
    side = r.config.image_size // r.config.patch_size
    tubelets = r.config.num_frames // r.config.tubelet_size * side * side
    masked = torch.zeros(tubelets, dtype=torch.bool)
    masked[torch.randperm(tubelets, generator=r.generator)[: tubelets // 2]] = True
    return {"bool_masked_pos": masked.repeat(r.batch_size, 1)}


@builds(Stage.REQUIRED, when=lambda r: {"context", "attention_mask"} <= r.missing)
def _resampled_features(r: Request) -> dict[str, torch.Tensor]:
    # Perceiver resamplers built alone (Idefics2PerceiverResampler) read the projected image features and their mask.
    shape = (r.batch_size, r.seq_length, r.config.hidden_size)
    return {
        "context": torch.randn(shape, generator=r.generator),
        "attention_mask": torch.ones(r.batch_size, r.seq_length, dtype=torch.long),
    }
