"""What sample inputs read per model type or class, where no config key says it."""

from __future__ import annotations

from .sizes import FRAMES

# ── Sample inputs ──
# Audio LMs that stack their codebooks into the batch: (batch * num_codebooks, sequence) ids.
CODEBOOK_STACKED_TYPES = ("musicgen_decoder", "musicgen_melody_decoder")
# Where audio encoders keep their feature width per frame: the first one set wins.
FEATURE_SIZE_KEYS = (
    "feature_projection_input_dim",
    "num_mel_bins",
    "input_feat_per_channel",
    "feature_size",
    "input_feat_size",
)
# Model type -> forward arguments its signature leaves optional but its forward cannot run without.
NEEDED_INPUTS: dict[str, tuple[str, ...]] = {
    "bros": ("bbox",),
    "udop": ("bbox",),
    "audioflamingo3_encoder": ("input_features_mask",),
    "blip_2_qformer": ("encoder_hidden_states",),
    "instructblip": ("input_ids",),
    "instructblipvideo": ("input_ids",),
    "pi0": ("pixel_values", "pixel_attention_mask"),
    "clap": ("input_features",),
    "clvp": ("input_features",),
    "voxtral_realtime": ("input_features",),
}
# Model class -> the forward parameter its main waveform goes to, where that is not input_values.
WAVEFORM_INPUTS = {"VibeVoiceAcousticTokenizerEncoderModel": "hidden_states"}
# VLMs whose ids must hold a placeholder per image feature, where the features are spliced in.
SPLICED_IMAGE_TYPES = ("instructblip", "instructblipvideo", "kosmos-2", "lfm2_vl", "pi0")
# Model type -> images per sample of models whose pixel_values stack several (video frames, robot cameras, the two
# images a keypoint matcher pairs) though no config key says how many.
CLIP_TYPES = {"instructblipvideo": FRAMES, "pi0": 1, "lightglue": 2}
