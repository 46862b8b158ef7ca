"""The data the tiny-model builder works from: tiny sizes, the config keys they replace, per-type fixes.

Making another model type build is usually an entry here (an override, a cap, a key in a set), not code elsewhere.
"""

from __future__ import annotations

from typing import Any

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
    # Depthwise upsampling convs (mimi, pocket_tts) have one group per hidden channel.
    "upsample_groups": HIDDEN,
}
# Channel widths of conv feature extractors, and of resnet-like stages (which widen stage by stage).
CHANNEL_LIST_KEYS = frozenset({"conv_dim", "tdnn_dim"})
STAGE_WIDTH_LIST_KEYS = frozenset({"hidden_sizes", "embed_dim", "embedding_dims"})
DEPTH_LIST_KEYS = frozenset({"depths", "depth", "num_block_repeats"})
# Indices of the layers whose hidden states an outer model reads (depth_pro's fusion of its encoder's layers).
LAYER_INDEX_LIST_KEYS = frozenset({"intermediate_hook_ids"})
# Switches that would need optional dependencies or downloads (timm, pretrained backbones).
FORCED = {"use_timm_backbone": False, "use_pretrained_backbone": False}
# Config entries that are bookkeeping, not architecture: the constructor sets them itself.
SKIPPED_KEYS = frozenset({"transformers_version", "architectures", "_name_or_path", "dtype", "torch_dtype"})
# A tiny transformers ViT standing in for vision towers that default to timm (which does not install here).
_TINY_VIT = {
    "model_type": "vit",
    "hidden_size": HIDDEN,
    "intermediate_size": INTERMEDIATE,
    "num_hidden_layers": LAYERS,
    "num_attention_heads": HEADS,
    "image_size": IMAGE_SIZE,
    "patch_size": PATCH_SIZE,
}
# Per model type, what generic shrinking cannot derive (applies to sub-configs of that type too).
OVERRIDES: dict[str, dict[str, Any]] = {
    # The attention pattern is expanded from (pattern, repeats) pairs to one entry per layer.
    "gpt_neo": {"attention_types": [[["global", "local"], 1]]},
    # Stage i reads the i-th drop-path rate of its own blocks: stage i needs at least i + 1 blocks.
    "cvt": {"depth": [1, 2, 3]},
    # The 2D layout embeddings are six slices of hidden_size // 6 that must add back up to hidden_size.
    "lilt": {"hidden_size": 48},
    # Likewise four coordinate and two shape embeddings.
    "layoutlmv3": {"hidden_size": 48, "coordinate_size": 8, "shape_size": 8},
    # The axial position embedding halves must add up to hidden_size.
    "reformer": {"axial_pos_embds_dim": [HIDDEN // 2, HIDDEN // 2]},
    # The block pattern repeats over the layers: two layers must still contain an attention block.
    "recurrent_gemma": {"block_types": ["recurrent", "attention"]},
    # Group norms over the narrowest tiny stage (16 channels).
    "bit": {"num_groups": 8},
    # Hybrid stacks: two layers must still hold an attention layer, where the cache measures its length.
    "bamba": {"attn_layer_indices": [1]},
    "jamba": {"attn_layer_period": 2, "attn_layer_offset": 1},
    "granitemoehybrid": {"layer_types": ["linear_attention", "full_attention"]},
    "kimi_linear": {"layer_types": ["linear_attention", "full_attention"]},
    "glm5_next_text": {"layer_types": ["linear_attention", "full_attention"]},
    "lfm2_moe": {"layer_types": ["conv", "full_attention"]},
    # Hybrid layers share one transformer block, tied from the first hybrid layer to the others: two of them. Its
    # attention reads the hidden states concatenated with the embeddings: twice the width.
    "zamba": {
        "num_hidden_layers": 3,
        "layers_block_type": ["linear_attention", "hybrid", "hybrid"],
        "attention_hidden_size": 2 * HIDDEN,
    },
    # Two layers cannot both produce and reuse the key/values of each attention kind; the per-layer embeddings
    # have their own vocabulary (262144 entries of 256 per layer: 134M parameters).
    "gemma3n_text": {"num_kv_shared_layers": 0, "vocab_size_per_layer_input": VOCAB},
    # Settings the default configs leave to checkpoints, without which the model does not build or run.
    "falcon_h1": {"mamba_d_ssm": 2 * HIDDEN},
    "nemotron_h": {"n_groups": 1},
    "dots1": {"n_routed_experts": EXPERTS, "n_shared_experts": 1},
    # One expert by default: routing degenerates (histc over a single bin whose min equals its max).
    "hunyuan_v1_moe": {"num_experts": EXPERTS, "moe_topk": EXPERTS_PER_TOKEN},
    "dbrx": {"attn_config": {"kv_n_heads": 1, "rope_theta": 10000.0, "clip_qkv": 8.0}},
    "esm": {"pad_token_id": 1},
    "xmod": {"default_language": "en_XX"},
    # Its layer count is stored as n_layers, which the constructor does not accept (the generic cap cannot reach it).
    "inkling_vision": {"num_hidden_layers": LAYERS},
    # The quantizer reads the acoustic and semantic states concatenated (1024 + 1024 at full size); the decoder's
    # rotary embedding is laid over the key heads as if there were as many as query heads (multi-head by default).
    "xcodec2": {"quantization_dim": 2 * HIDDEN, "num_key_value_heads": HEADS},
    "neucodec": {"quantization_dim": 2 * HIDDEN, "num_key_value_heads": HEADS},
    # The Swin stages double their width: the last of two must end at hidden_size, which the projection reads.
    "clap_audio_model": {"patch_embeds_hidden_size": HIDDEN // 2},
    # The rotary embedding spans at least 32 channels of a head: one head of hidden_size.
    "clvp_encoder": {"num_attention_heads": 1},
    # Checkpoints set the image placeholder id, which the default config leaves unset.
    "instructblip": {"image_token_index": VOCAB - 1},
    "instructblipvideo": {"video_token_index": VOCAB - 1},
    # The box embeddings split their sinusoid width over the 8 box coordinates, in sin/cos pairs.
    "bros": {"dim_bbox_sinusoid_emb_2d": 32, "dim_bbox_sinusoid_emb_1d": 4},
    # SAM's image embeddings meet the prompt embeddings (hidden_size wide, positions as sin/cos pairs).
    "sam_vision_model": {"output_channels": HIDDEN, "num_pos_feats": HIDDEN // 2},
    "sam_hq_vision_model": {"output_channels": HIDDEN, "num_pos_feats": HIDDEN // 2},
    "sam_hq_mask_decoder": {"vit_dim": HIDDEN},
    # SAM 2's Hiera stages double their width and the FPN lists them deepest first, with their feature map sizes (a
    # 32-pixel image at strides 4, 8, 16); a global-attention block must not open a pooled stage (its window // the
    # stride is 0); prompts are laid on the stride-16 image embeddings.
    "sam2_hiera_det_model": {
        "embed_dim_per_stage": [HIDDEN, 2 * HIDDEN, 4 * HIDDEN, 8 * HIDDEN],
        "num_attention_heads_per_stage": [1, 2, 4, 8],
        "blocks_per_stage": [1, 1, 2, 1],
        "global_attention_blocks": [3],
        "window_size_per_stage": [4, 4, 4, 2],
    },
    "sam2_vision_model": {
        "backbone_channel_list": [8 * HIDDEN, 4 * HIDDEN, 2 * HIDDEN, HIDDEN],
        "backbone_feature_sizes": [[8, 8], [4, 4], [2, 2]],
    },
    "sam2_prompt_encoder": {"patch_size": 16},
    # The first stage reads the stem's channels.
    "textnet": {"stem_out_channels": 16},
    # Four stride-2 convs embed the patches: 16 pixels whatever patch_size says, but attention biases use it.
    "levit": {"patch_size": 16},
    # The top conv widens to round_filters(1280) whatever the stage widths; its norm reads hidden_dim.
    "efficientnet": {"hidden_dim": 2560},
    # Five stride-2 stages leave 1x1 of a 32-pixel image, too small for the last stage's 2x2 patches.
    "mobilevitv2": {"image_size": 64},
    # Probabilistic forecasters have no default horizon; one time feature (e.g. age) per step; autoformer's
    # decoder starts from the last label_length steps of the context.
    "autoformer": {"prediction_length": 4, "num_time_features": 1, "label_length": 2},
    "informer": {"prediction_length": 4, "num_time_features": 1},
    "time_series_transformer": {"prediction_length": 4, "num_time_features": 1},
    # Queries are viewed with the key/value head count: the model only runs multi-head attention.
    "moonshine": {"encoder_num_key_value_heads": HEADS, "decoder_num_key_value_heads": HEADS},
    # M-RoPE takes rotary dims four at a time: a quarter of the tiny head_dim (2 dims) is too few.
    "neomme": {
        "rope_parameters": {
            "full_attention": {"rope_type": "default", "rope_theta": 1000000.0, "partial_rotary_factor": 0.5},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 1.0},
        }
    },
    # The decoder's attention reads a key/value head count only the encoder's config declares.
    "moonshine_streaming": {"num_key_value_heads": HEADS},
    # The query-sparse indexer is left to checkpoints, but its layers read its sizes.
    "qwen4_exp_text": {
        "indexer_n_heads": 2,
        "indexer_kv_heads": 1,
        "indexer_head_dim": HEAD_DIM,
        "indexer_budget": 4,
        "indexer_compress_ratio": 2,
    },
    # Sliding-attention layers with the window left to checkpoints.
    "step3p5": {"sliding_window": 4},
    # Only the encoder-decoder config hands its dropout rate down: the encoder on its own reads it from here.
    "t5gemma2_text": {"dropout_rate": 0.0},
    # The thinker's M-RoPE indexing reads the vision start token, which only the talker's config declares (an id
    # above the remapped special tokens at the top of the tiny vocabulary).
    "qwen2_5_omni_thinker": {"vision_start_token_id": VOCAB - 16},
    "qwen3_omni_moe_thinker": {"vision_start_token_id": VOCAB - 16},
    # Full-attention blocks are named by layer index; windows are in pixels, at least one merged patch (2 x 8).
    "qwen2_5_vl_vision": {"fullatt_block_indexes": [1], "window_size": 16},
    "qwen2_5_omni_vision_encoder": {"fullatt_block_indexes": [1], "window_size": 16},
    # Full-attention layers at both ends, the rest windowed: one of each end in two layers.
    "sapiens2": {"num_first_full_attention_layers": 1, "num_last_full_attention_layers": 1},
    # The FPN upscales the 4 x 4 patch grid of a 32-pixel image by 4, 2 and 1: the mask decoder reads these sizes.
    "sam3_vision_model": {"backbone_feature_sizes": [[16, 16], [8, 8], [4, 4]]},
    # The yes/no logits are read at full-size vocabulary ids: any two ids of the tiny vocabulary.
    "shieldgemma2": {"yes_token_index": 1, "no_token_index": 2},
    # The cache's state sizes round the query/key and value widths up to multiples of 64, the layers do not: widths
    # of exactly 64 agree.
    "xlstm": {"hidden_size": 2 * HIDDEN, "embedding_dim": 2 * HIDDEN, "qk_dim_factor": 1.0},
    # timm vision towers: the video encoder reads an image classifier's logits, PerceptionLM a vision model's
    # hidden states (its projector reads timm's model_args for their width).
    "pe_video_encoder": {"vision_config": _TINY_VIT},
    "perception_lm": {"vision_config": {**_TINY_VIT, "model_args": {"embed_dim": HIDDEN}}},
    # The hybrid encoder reads the tiny HGNetV2 stages' widths (16, 32, 64, 64: the last three, and the first for the
    # mask features); the decoder reads the encoder's width.
    "pp_doclayout_v3": {
        "encoder_in_channels": [HIDDEN, 2 * HIDDEN, 2 * HIDDEN],
        "encoder_hidden_dim": HIDDEN,
        "decoder_in_channels": [HIDDEN] * 3,
        "x4_feat_dim": HIDDEN // 2,
        "mask_feature_channels": [HIDDEN, HIDDEN],
        "global_pointer_head_size": HIDDEN // 2,
    },
    # The adapter reads the 25th and 19th vision layers; the tiny tower has two.
    "molmo2_adapter": {"vision_feature_layer": [-1, -2]},
    # The text model falls back to full-size M-RoPE sections when its rope parameters name none.
    "paddleocr_vl_text": {
        "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0, "mrope_section": [2, 1, 1]}
    },
    # Multi-head attention only: key/value heads must equal the query heads.
    "esmc": {"num_key_value_heads": HEADS},
    # The last stage's width is the hidden size; the stages' widths and block counts are left to the constructor.
    "efficientloftr": {"out_features": [16, 16, 32, HIDDEN], "stage_num_blocks": [1, 1, 1, 1]},
    # The adaptor's feed-forward is a quarter of the language model's width.
    "fun_asr_nano": {"adaptor_config": {"intermediate_size": HIDDEN // 4}},
    # The flow head is conditioned on the backbone's hidden states.
    "gradium_phonon_tts": {"flow_head_config": {"condition_dim": HIDDEN}},
    # Windows tile the image: a perfect square whose side divides the patch grid of a tiny image.
    "lw_detr_vit": {"num_windows": 4},
    # The feature levels the projector makes are left to checkpoints (none by default, which leaves nothing to decode).
    "lw_detr": {"projector_scale_factors": [1.0]},
    # The default leaves the dense/sparse pattern to checkpoints: one layer of each.
    "deepseek_ocr2_text": {"mlp_layer_types": ["dense", "sparse"]},
    # Likewise the expert counts and sizes (every layer routes).
    "diffusion_gemma_text": {
        "num_experts": EXPERTS,
        "top_k_experts": EXPERTS_PER_TOKEN,
        "moe_intermediate_size": INTERMEDIATE,
    },
    # Two EfficientNet stages of unscaled widths and depths, the last as wide as the projection (the image embeddings
    # are the tower's pooled channels, compared with projected text as they are); seven stages of tiny random blocks
    # shrink the activations below what the embeddings' float32 norm can square.
    "align_vision_model": {
        "width_coefficient": 1.0,
        "depth_coefficient": 1.0,
        "kernel_sizes": [3, 3],
        "in_channels": [HIDDEN, 16],
        "out_channels": [16, HIDDEN],
        "strides": [1, 2],
        "num_block_repeats": [1, 1],
        "expand_ratios": [1, 6],
    },
    # The image-token mapping is left to checkpoints: only the placeholder id, for text-only forwards.
    "chameleon": {"vocabulary_map": {"<image>": VOCAB - 1}},
    # Which vision layer feeds which language layer is left to checkpoints: one pair, within the tiny depths.
    # The projector's layout is left to checkpoints: one vision-to-language layer pair, the four spatial offset
    # groups within the tiny language model, windows of 2x2 patches; its Q-Former has vision_config.hidden_size // 64
    # heads: one needs a 64-wide vision tower.
    "granite4_vision": {
        "deepstack_layer_map": [[1, 0]],
        "spatial_target_layers": [0, 1, 0, 1],
        "downsample_rate": "1/2",
        "vision_config": {"hidden_size": 2 * HIDDEN},
    },
    # Likewise the vision tower's attention has hidden_size // 64 heads.
    "bridgetower_vision_model": {"hidden_size": 2 * HIDDEN},
    # Its cache is sized from the outer config, which has no layer count (only its sub-configs do): no cache.
    "blt": {"use_cache": False},
    # Its rotary sections pair height with width (the modeling code's default, [22, 22, 20]): equal first two.
    "ernie4_5_vl_moe_text": {
        "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0, "mrope_section": [1, 1, 2]}
    },
    # Its projection assumes as many mel bins as the first conv has channels (128 and 128): sample inputs' 80.
    "gemma4_audio": {"subsampling_conv_channels": [80, HIDDEN]},
    # Rope is per layer type and left to checkpoints (the default is empty); multimodal sections of HEAD_DIM // 2.
    "cohere_compass_text": {
        "rope_parameters": {
            "full_attention": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 1, 1]}
        }
    },
}

# ── Classes no tiny model stands in for ──
# Model class -> why no small config runs it eagerly here (a package the project cannot install, an input only a
# runtime session makes). ``tiny_model`` raises ``UnrunnableModelError`` with the reason; the gate reports the class's
# cells as not checked, with it.
_TIMM = "a timm model: timm needs torchvision, which does not install beside the project's torch"
UNRUNNABLE: dict[str, str] = {
    "TimmBackbone": _TIMM,
    "TimmWrapperModel": _TIMM,
    "TimmWrapperForImageClassification": _TIMM,
    "Gemma4AssistantForCausalLM": "drafting head: reads the target model's shared_kv_states, and every layer reusing"
    " them (what the assistant config enforces) fails Gemma4TextConfig.kv_sharing_modes (no producing layer)",
    "Gemma4UnifiedAssistantForCausalLM": "drafting head: reads the target model's shared_kv_states, and every layer"
    " reusing them fails Gemma4UnifiedTextConfig.kv_sharing_modes (no producing layer)",
    "DinatForImageClassification": "its neighborhood attention needs natten, which this project does not install",
    "LayoutLMv2Model": "its visual backbone is a detectron2 model, which this project does not install",
    "EdgeTamModel": "its vision backbone is a timm_wrapper (RepViT) whose feature list only timm produces",
    "EdgeTamVisionModel": "its backbone is a timm_wrapper (RepViT) whose feature list only timm produces",
    "Gemma3nForConditionalGeneration": "its vision tower is a timm_wrapper (MobileNetV5) called with timm-only"
    " arguments (do_pooling); timm needs torchvision, which breaks beside this torch",
    "FastVlmModel": "its vision tower is a timm_wrapper (FastViT), whose hybrid feature map only timm produces",
    # No forward of their own: they only generate (Bark chains three sub-models) or encode/decode (a VQ-VAE).
    "BarkModel": "no forward: generation chains its semantic, coarse and fine sub-models (generate only)",
    "GlmImageVQVAE": "no forward: a VQ-VAE used through encode and decode only",
    # Video trackers read their frames, prompts and memory bank from a mutable session object, not from tensors.
    "Sam2VideoModel": "forward takes an inference_session (frames, prompts, memory bank), not tensors",
    "Sam3TrackerVideoModel": "forward takes an inference_session (frames, prompts, memory bank), not tensors",
    "Sam3VideoModel": "forward takes an inference_session (frames, text prompts, tracker state), not tensors",
    "EdgeTamVideoModel": "forward takes an inference_session (frames, prompts, memory bank), not tensors",
    # Sample inputs have a batch of at least 2 (it stays a dynamic dimension).
    "TvpModel": "runs with batch size 1 only: its column position embeddings are viewed with the batch size",
}

# ── Alternate configs ──
# A second tiny config for a representative class of each family: constructor arguments applied on top of the shrunk
# config (``tiny_model(name, overrides=ALTERNATE_CONFIGS[name])``) that take other code paths of the same model.
# Sliding windows stay shorter than sample_inputs' 7 tokens, so the window masks something.
ALTERNATE_CONFIGS: dict[str, dict[str, Any]] = {
    "LlamaForCausalLM": {"tie_word_embeddings": True, "num_hidden_layers": 3},
    "MistralForCausalLM": {"sliding_window": 4},
    "Gemma3ForCausalLM": {
        "num_hidden_layers": 3,
        "sliding_window": 4,
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
    },
    # BERT as a decoder: causal mask and a key/value cache.
    "BertModel": {"is_decoder": True, "type_vocab_size": 4},
    "ViTModel": {"image_size": 48, "patch_size": 16, "num_channels": 1},
    # Untied T5 (mT5, Flan-T5) skips the decoder output scaling; gated-gelu doubles the feed-forward input projection.
    "T5ForConditionalGeneration": {"feed_forward_proj": "gated-gelu", "tie_word_embeddings": False},
    # Every second layer sparse (the default, every fourth, leaves two layers without a router or experts).
    "NllbMoeForConditionalGeneration": {"encoder_sparse_step": 2, "decoder_sparse_step": 2, "expert_capacity": 16},
}

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
