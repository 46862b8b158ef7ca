"""Tiny sizes, the model-class mappings that pick a type's classes, and the config keys the sizes replace."""

from __future__ import annotations

# ── Tiny sizes ──
HIDDEN = 32
HEADS = 4
KV_HEADS = 2
HEAD_DIM = HIDDEN // HEADS
INTERMEDIATE = 64
LAYERS = 2
VOCAB = 128
MAX_POSITIONS = 512
IMAGE_SIZE = 32
PATCH_SIZE = 8
FRAMES = 4
EXPERTS = 4
EXPERTS_PER_TOKEN = 2

# ── Model classes ──
# Task heads in the order that picks a model type's default class; the base model comes last.
DEFAULT_HEAD_MAPPINGS = (
    "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
    "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES",
    "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
    "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
    "MODEL_FOR_CTC_MAPPING_NAMES",
    "MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES",
)
# Heads listed by model_classes_for_type: the default ones plus multimodal generation.
MAIN_HEAD_MAPPINGS = (
    "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
    "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
    "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES",
    "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES",
    "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
    "MODEL_FOR_CTC_MAPPING_NAMES",
    "MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES",
)

# ── Config keys and their tiny values ──
HIDDEN_KEYS = frozenset(
    {
        "hidden_size",
        # BLT's local models read the global transformer's width.
        "hidden_size_global",
        "d_model",
        "n_embd",
        "n_embed",
        "embed_dim",
        "emb_dim",
        "dim",
        "d_latents",
        "word_embed_proj_dim",
        "embedding_size",
        "embedding_dim",
        "projection_dim",
        "classifier_proj_size",
        "xvector_output_dim",
        "codevector_dim",
        "proj_codevector_dim",
    }
)
INTERMEDIATE_KEYS = frozenset({"ffn_dim", "d_ff", "n_inner", "hidden_dim"})
# "depth" as a number is a layer count (vision towers); as a list, per-stage block counts (DEPTH_LIST_KEYS).
LAYER_KEYS = frozenset({"num_layers", "n_layer", "n_layers", "encoder_layers", "decoder_layers", "depth"})
HEAD_KEYS = frozenset({"n_head", "n_heads", "num_heads", "encoder_attention_heads", "decoder_attention_heads"})
KV_HEAD_KEYS = frozenset(
    {"num_key_value_heads", "num_kv_heads", "n_kv_heads", "multi_query_group_num", "num_key_value_heads_per_layer"}
)
HEAD_DIM_KEYS = frozenset(
    {
        "head_dim",
        "d_kv",
        "kv_channels",
        "rotary_dim",
        "qk_rope_head_dim",
        "qk_nope_head_dim",
        "v_head_dim",
        "swa_head_dim",
    }
)
LORA_RANK_KEYS = frozenset({"kv_lora_rank", "q_lora_rank"})
EXPERT_KEYS = frozenset({"num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts"})
EXPERTS_PER_TOKEN_KEYS = frozenset({"num_experts_per_tok", "moe_top_k", "moe_topk", "moe_k", "num_selected_experts"})
# Grouped routing (DeepSeek-style) needs experts divisible by groups: one group keeps it trivially true.
ONE_KEYS = frozenset({"n_group", "topk_group", "n_shared_experts", "first_k_dense_replace", "zero_expert_num"})
EXACT_CAPS = (
    (HIDDEN_KEYS, HIDDEN),
    (INTERMEDIATE_KEYS, INTERMEDIATE),
    (LAYER_KEYS, LAYERS),
    (HEAD_KEYS, HEADS),
    # Grouped-query attention even where the full-size model is multi-head; multi-query stays as is.
    (KV_HEAD_KEYS, KV_HEADS),
    (HEAD_DIM_KEYS, HEAD_DIM),
    (LORA_RANK_KEYS, 2 * HEAD_DIM),
    (EXPERT_KEYS, EXPERTS),
    (EXPERTS_PER_TOKEN_KEYS, EXPERTS_PER_TOKEN),
    (ONE_KEYS, 1),
)
# Families of keys named by their ending ("vision_hidden_size", "shape_vocab_size", ...): (suffixes, cap).
SUFFIX_CAPS = (
    (("hidden_size", "_embed_dim", "_emb_dim", "_emb_size", "_embedding_dim", "_embedding_size"), HIDDEN),
    (("intermediate_size", "_ffn_dim", "_inner_dim"), INTERMEDIATE),
    (("num_hidden_layers", "_num_layers", "num_encoder_layers", "num_decoder_layers"), LAYERS),
    (("num_attention_heads", "_num_heads", "_attention_heads"), HEADS),
    (("_num_key_value_heads",), KV_HEADS),
    (("vocab_size",), VOCAB),
)
CAPS = {
    "max_position_embeddings": MAX_POSITIONS,
    "n_positions": MAX_POSITIONS,
    "max_source_positions": 32,
    "max_target_positions": 64,
    "num_mel_bins": 16,
    "num_conv_pos_embeddings": 16,
    "num_conv_pos_embedding_groups": 2,
    "num_codevectors_per_group": 8,
    "image_size": IMAGE_SIZE,
    "crop_size": IMAGE_SIZE,
    "patch_size": PATCH_SIZE,
    # Video encoders: frames as a multiple of the tubelet's 2 frames.
    "num_frames": FRAMES,
    "frames_per_clip": FRAMES,
    "window_size": 4,
    # DETR-like two-stage decoders pick their queries by top-k over the few encoder tokens of a tiny image.
    "num_queries": 8,
    # Spectrogram transformers (AST) take exactly max_length frames.
    "max_length": 64,
    "mamba_d_head": HEAD_DIM,
    "mamba_d_state": 16,
    "state_size": 16,
    "mamba_chunk_size": 32,
    "chunk_size": 32,
    # Qwen3-Omni's Code2Wav halves its waveform decoder's width at each of its 4 upsampling blocks.
    "decoder_dim": 64,
    # Depthwise upsampling convs (mimi, pocket_tts) have one group per hidden channel.
    "upsample_groups": HIDDEN,
}
# Channel widths of conv feature extractors (SAM-style towers' downsampling convs end at the width their vision
# encoder reads), and of resnet-like stages (which widen stage by stage).
CHANNEL_LIST_KEYS = frozenset({"conv_dim", "tdnn_dim", "downsample_channels"})
STAGE_WIDTH_LIST_KEYS = frozenset({"hidden_sizes", "embed_dim", "embedding_dims"})
DEPTH_LIST_KEYS = frozenset({"depths", "depth", "num_block_repeats"})
# Indices of the layers whose hidden states an outer model reads (depth_pro's fusion of its encoder's layers, CLIPSeg's
# decoder, Mllama's vision tower concatenating its intermediate layers' states).
LAYER_INDEX_LIST_KEYS = frozenset({"intermediate_hook_ids", "extract_layers", "intermediate_layers_indices"})
# Switches that would need optional dependencies or downloads (timm, pretrained backbones).
FORCED = {"use_timm_backbone": False, "use_pretrained_backbone": False}
# Config entries that are bookkeeping, not architecture: the constructor sets them itself.
SKIPPED_KEYS = frozenset({"transformers_version", "architectures", "_name_or_path", "dtype", "torch_dtype"})
