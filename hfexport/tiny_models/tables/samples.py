"""What sample inputs read per model type or class, where no config key says it."""

from __future__ import annotations

from ...model_keyed import TINY_MODEL_ENTRY, declare
from .sizes import FRAMES

# ── Sample inputs ──
# Audio LMs that stack their codebooks into the batch: (batch * num_codebooks, sequence) ids.
CODEBOOK_STACKED_TYPES = ("musicgen_decoder", "musicgen_melody_decoder")
# Audio stacks built alone whose input ids are every codebook's codes, (batch, sequence, codebooks): model class -> the
# config's codebook count (their models embed text ids into those states, or pass their decoder ids on as they are).
CODEBOOK_IDS = {"CsmBackboneModel": "num_codebooks", "DiaDecoder": "num_channels"}
# Encoder-decoder audio LMs whose decoder ids have a codebook dimension: model type -> the decoder config's codebook
# count.
DECODER_CODEBOOKS = {"dia": "num_channels"}
# Where audio encoders keep their feature width per frame: the first one set wins.
FEATURE_SIZE_KEYS = (
    "feature_projection_input_dim",
    "num_mel_bins",
    "input_feat_per_channel",
    "feature_size",
    "input_feat_size",
)
# Audio encoders whose conv front end reads (batch, mel bins, frames) though no Whisper-like key says so.
MEL_BINS_FIRST_TYPES = ("glmasr_encoder", "voxtral_realtime_encoder", "dots3_note_audio_encoder")
# Audio encoder type -> consecutive feature frames its input projection reads stacked into one, where no config key
# says how many (Granite Speech 5's projection reads 4 * num_mel_bins).
STACKED_FRAMES = {"granite_speech5_encoder": 4}
# Text towers whose eager attention skips the causal mask when no token is padded (Aimv2Attention.is_causal is False
# and sdpa's mask is dropped for an all-ones attention_mask), while a trace always builds it: an unpadded sample
# compares bidirectional eager attention with the exported causal one (2.5 apart). Their sample rows are padded.
PADDED_MASK_TYPES = declare(
    TINY_MODEL_ENTRY,
    "PADDED_MASK_TYPES",
    "sample rows padded: an unpadded mask lets eager skip the causal mask a trace always builds (2.5 apart)",
    ("aimv2", "aimv2_text_model"),
)
# Towers that read each patch as a (temporal_patch_size, patch, patch, channels) cube, channels last, and fold it into
# one token layer by layer (Inkling's).
PATCH_CUBE_TYPES = ("inkling_vision",)
# Qwen-VL-style towers whose flat patches are (patches, channels, patch, patch) images their patch conv embeds.
PATCH_IMAGE_TYPES = ("kimi_k25_vision", "paddleocr_vl_vision")
# Of those, the towers that read them with a leading batch of one (PaddleOCR-VL's model unsqueezes its flat patches).
BATCHED_PATCH_TYPES = ("paddleocr_vl_vision",)
# Model type -> forward arguments its signature leaves optional but its forward cannot run without.
NEEDED_INPUTS: dict[str, tuple[str, ...]] = {
    "bros": ("bbox",),
    "udop": ("bbox",),
    "audioflamingo3_encoder": ("input_features_mask",),
    "blip_2_qformer": ("encoder_hidden_states",),
    "instructblip": ("input_ids",),
    "instructblipvideo": ("input_ids",),
    # The policy's main input is the robot state; its prefix still embeds the prompt.
    **dict.fromkeys(("pi0", "pi05"), ("pixel_values", "pixel_attention_mask", "input_ids")),
    "clap": ("input_features",),
    "clvp": ("input_features",),
    "voxtral_realtime": ("input_features",),
    # Any two of text, video and audio: all three, which take the path through the audio-video encoder.
    "pe_audio_video": ("pixel_values_videos", "input_values"),
    # Its encoder built alone expands the mask its model derives from the patches, with none raising.
    "kosmos_2_5_vision_model": ("attention_mask",),
    # Which images each text token attends to: without it the cross-attention has no mask to expand.
    "idefics": ("image_attention_mask",),
    # Either waveforms or clips may be left out, but the encoder cannot run without its video.
    "pe_audio_video_encoder": ("pixel_values_videos",),
    # Decoders of encoder-decoder models, built alone (sub-module classes the gate selects): they cross-attend.
    "t5_gemma_module": ("encoder_hidden_states",),
    "t5gemma2_decoder": ("encoder_hidden_states",),
    "dia_decoder": ("encoder_hidden_states",),
    "pix2struct_text_model": ("encoder_hidden_states",),
    **dict.fromkeys(("moonshine_streaming", "cohere_asr"), ("encoder_hidden_states",)),
    # The question-answering head decodes its answer: without decoder ids (or labels) it raises.
    "blip": ("decoder_input_ids",),
    # Without a retriever (a dataset index), RAG reads the retrieved passages and their scores.
    "rag": ("context_input_ids",),
    # SpeechT5's decoders cross-attend; its speech heads decode mel frames (teacher-forced, no generate here).
    "speecht5": ("encoder_hidden_states", "decoder_input_values"),
    # ViT encoders built alone rotate their patch tokens by the angles their model computes from the image.
    **dict.fromkeys(("dinov3_vit", "sapiens2"), ("position_embeddings",)),
}
# Model class -> inputs it reads as (batch, sequence, width) states, having no pre-net to embed them.
EMBEDDED_INPUTS = {
    "SpeechT5Model": ("input_values", "decoder_input_values"),
    "SpeechT5Decoder": ("hidden_states",),
    "SpeechT5EncoderWithoutPrenet": ("input_values",),
    "SpeechT5DecoderWithoutPrenet": ("input_values",),
    "PerceiverModel": ("inputs",),
    # Qwen3-Omni's code predictor and code-to-wave transformer read their model's summed codebook embeddings only.
    "Qwen3OmniMoeTalkerCodePredictorModel": ("inputs_embeds",),
    "Qwen3OmniMoeTalkerCodePredictorModelForConditionalGeneration": ("inputs_embeds",),
    "Qwen3OmniMoeCode2WavTransformerModel": ("inputs_embeds",),
    # Qwen3-Omni's talker reads the thinker's projected states (its model has a codec embedding, no embed_tokens).
    **dict.fromkeys(("Qwen3OmniMoeTalkerModel", "Qwen3OmniMoeTalkerForConditionalGeneration"), ("inputs_embeds",)),
    # So does Qwen2.5-Omni's at its prefill (its ids are codec ids, added to the thinker's reply part when decoding).
    "Qwen2_5OmniTalkerForConditionalGeneration": ("inputs_embeds",),
    # SeamlessM4T's text-to-unit encoder-decoders read the text decoder's states (they refuse input_ids).
    **dict.fromkeys(
        (
            "SeamlessM4TTextToUnitModel",
            "SeamlessM4TTextToUnitForConditionalGeneration",
            "SeamlessM4Tv2TextToUnitModel",
            "SeamlessM4Tv2TextToUnitForConditionalGeneration",
        ),
        ("inputs_embeds",),
    ),
}
# Model class -> what its pre-net reads as input_values: "token_ids" (text) or "mel_frames" (batch, frames, mel bins).
PRENET_INPUTS = {
    "SpeechT5EncoderWithTextPrenet": "token_ids",
    "SpeechT5DecoderWithTextPrenet": "token_ids",
    "SpeechT5DecoderWithSpeechPrenet": "mel_frames",
}
# Deformable-attention decoders that read exactly num_queries queries: PP-DocLayoutV4's reading-order heads mask each
# query's score against itself with an eye(num_queries) table.
FIXED_QUERY_TYPES = ("pp_doclayout_v4",)
# Patch encoders built alone -> the forward parameter taking what their model's patchifier cuts from the window.
PATCHED_WINDOW_INPUTS = {"PatchTSTEncoder": "patch_input", "PatchTSMixerEncoder": "past_values"}
# Speech encoders whose conv front end reads (batch, 1, samples) waveforms without adding the channel itself (their CTC
# and LLM wrappers pass them so): the audio config's model type.
MONO_CHANNEL_WAVEFORM_TYPES = ("omniasr_audio",)
# Text stacks built alone whose layers read their model's time condition through **kwargs (t_cond: Voxtral Realtime's
# embedding of the transcription delay, which scales every layer's ada-norm).
TIME_CONDITIONED_STACKS = ("VoxtralRealtimeTextModel",)
# Model class -> the forward parameter its main waveform goes to, where that is not input_values.
WAVEFORM_INPUTS = {"VibeVoiceAcousticTokenizerEncoderModel": "hidden_states"}
# Model types whose question-answering and multiple-choice heads find the question by its separators: Longformer puts
# global attention on the question, which must end with two of the row's exactly three sep tokens.
SEPARATED_QUESTION_TYPES = ("longformer",)
# VLMs whose ids must hold a placeholder per image feature, where the features are spliced in.
SPLICED_IMAGE_TYPES = ("blip-2", "instructblip", "instructblipvideo", "kosmos-2", "lfm2_vl", "pi0", "pi05")
# Model type -> images per sample of models whose pixel_values stack several (video frames, robot cameras, the two
# images a keypoint matcher pairs) though no config key says how many.
# None: single images, where the config's frame count is for another class (Perceiver's multimodal autoencoder).
CLIP_TYPES = {
    "instructblipvideo": FRAMES,
    "pi0": 1,
    "pi05": 1,
    "lightglue": 2,
    "superglue": 2,
    "efficientloftr": 2,
    "idefics": 1,
    "perceiver": None,
}
# Video towers whose model flattens the frames of each clip into the batch before them (X-CLIP's vision model, whose
# message tokens regroup them by num_frames): (batch * frames, channels, height, width).
FRAMES_IN_BATCH_TYPES = ("xclip_vision_model",)
# Model type -> (height, width) of sample images, where a tiny image is too small for the model's downsampling: text
# line recognizers pool the last feature map over 3 x 2 cells (the mobile one at stride 32, the others at a height
# stride of 16).
IMAGE_SIZES = {
    "pp_ocrv5_mobile_rec": (96, 64),
    "pp_ocrv5_server_rec": (48, 64),
    "pp_ocrv6_small_rec": (48, 64),
    "pp_ocrv6_tiny_rec": (48, 64),
    # UVDoc's dilated bridge (see its OVERRIDES entry).
    "uvdoc": (64, 64),
}
