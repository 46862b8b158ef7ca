"""Per model type, the config entries generic shrinking cannot derive (``OVERRIDES``)."""

from __future__ import annotations

from typing import Any

from ...model_keyed import TINY_MODEL_ENTRY, declare
from .sizes import (
    CAPS,
    EXPERTS,
    EXPERTS_PER_TOKEN,
    HEAD_DIM,
    HEADS,
    HIDDEN,
    IMAGE_SIZE,
    INTERMEDIATE,
    LAYERS,
    PATCH_SIZE,
    VOCAB,
)

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
# PP-OCR intra-class blocks: Conv2d (kernel, stride, padding) per branch, each keeping the feature map's size.
_INTRACLASS_BLOCK = {
    "reduce_channel": [1, 1, 0],
    "return_channel": [1, 1, 0],
    **{
        f"{branch}_{ratio}ratio": [kernel, 1, padding]
        for ratio, size in (("long", 7), ("mid", 5), ("short", 3))
        for branch, kernel, padding in (
            ("vertical_long_to_small_conv", [size, 1], [size // 2, 0]),
            ("horizontal_small_to_long_conv", [1, size], [0, size // 2]),
            ("symmetric_conv_long", [size, size], [size // 2, size // 2]),
        )
    },
}
# PP-OCR's large-kernel detectors (v5 server, v6 medium) leave their intra-class blocks' conv layouts, upsampling
# factors and head kernels to checkpoints (None by default, the head's documented [3, 2, 2] included). Each of the four
# neck levels is upsampled to the finest one's size before they are concatenated.
_LARGE_KERNEL_DETECTOR = {
    "neck_out_channels": HIDDEN,
    "intraclass_block_config": _INTRACLASS_BLOCK,
    "scale_factor_list": [1, 2, 4, 8],
    "kernel_list": [3, 2, 2],
}
# A four-level PP-LCNetV4 for detectors: stage widths 16 to 64, each stage after the first halving the map.
_LCNET_V4_DETECTOR = {
    "stem_channels": [3, 16, 16],
    "block_configs": [
        [[3, 16, 16, 1, False]],
        [[3, 16, 32, 2, False]],
        [[3, 32, 64, 2, True]],
        [[3, 64, 64, 2, False]],
    ],
    "out_features": ["stage1", "stage2", "stage3", "stage4"],
    "out_indices": [1, 2, 3, 4],
}
# ESMFold 2's atom encoders (sub-configs without a model type of their own): one rotary pair per axis and space id.
_ONE_ROPE_PAIR_EACH = {"num_spatial_rope_pairs_per_axis": 1, "num_uid_rope_pairs": 1}
# Per model type, what generic shrinking cannot derive (applies to sub-configs of that type too).
OVERRIDES: dict[str, dict[str, Any]] = {
    # Deformable-attention detectors normalise each input projection with GroupNorm(32, d_model): at the tiny width
    # every group is one channel, on the 1 x 1 deepest level one value, which normalises to float noise (torch 1e-6,
    # onnxruntime 0) that the encoder's layer norms blow up (ONNX and ExecuTorch 1.2-4.6 apart). Two channels a group.
    **{detector: {"d_model": 2 * HIDDEN} for detector in ("deformable_detr", "grounding-dino", "mm-grounding-dino")},
    # The relative position table holds 2 * max_source_positions - 1 offsets and the encoder branches on whether it
    # covers the frames (extend_pe): at the 32 cap the gate's second shape (11,840 samples, 36 frames) fell outside.
    "wav2vec2-conformer": {"max_source_positions": 64},
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
    # TimesFM 2.5 normalizes its context patch by patch in a Python loop: the default 16,384 steps (512 patches)
    # unrolled into the trace (235 s on torch.export, over 600 s on ONNX); 8 patches keep the loop and its code.
    **declare(
        TINY_MODEL_ENTRY,
        "OVERRIDES",
        "a context of 8 patches: the default 512 unroll a Python loop into the trace (235 s on torch.export)",
        {"timesfm2_5": {"context_length": 256}},
    ),
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
    # The query-sparse indexer is left to checkpoints, but its layers read its sizes. A block's score sums its heads'
    # relu'd logits: with 2 heads a quarter of the blocks scored exactly 0, and topk breaks ties in no set order.
    "qwen4_exp_text": {
        "indexer_n_heads": 8,
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
    # The talker's MoE blocks read their shared expert's width, which its config class does not declare (checkpoints
    # store it in config.json).
    "qwen3_omni_moe_talker_text": {"shared_expert_intermediate_size": INTERMEDIATE},
    # Built alone, Moshi's depth decoder keeps the main decoder's full 4096 width that its model sets to its own.
    "moshi_depth": {"input_size": HIDDEN},
    # Its conformer's conv widths equal the encoder's hidden size at full size (1024, which no cap names) and the
    # depth is num_blocks: shrunk with it.
    "phi4_multimodal_audio": {
        "ext_pw_out_channel": HIDDEN,
        "depthwise_separable_out_channel": HIDDEN,
        "nemo_conv_channels": HIDDEN,
        "num_blocks": LAYERS,
    },
    # The vision and audio tokenizers' codes are token ids from these offsets on, their two ranges back to back inside
    # the vocabulary: 16 codes each, below the special ids remapped to its top end.
    "apertus1p5": {
        "image_token_offset": VOCAB // 2,
        "audio_token_offset": VOCAB // 2 + 16,
        "vision_config": {"codebook_size": 16},
        "audio_config": {"codebook_size": 16},
    },
    # Full-attention blocks are named by layer index; windows are in pixels, at least one merged patch (2 x 8).
    "qwen2_5_vl_vision": {"fullatt_block_indexes": [1], "window_size": 16},
    "qwen2_5_omni_vision_encoder": {"fullatt_block_indexes": [1], "window_size": 16},
    # Full-attention layers at both ends, the rest windowed: one of each end in two layers. The task heads' upsampling
    # and refinement convs (and the pointmap head's scale branch) are left to checkpoints: one of each.
    "sapiens2": {
        "num_first_full_attention_layers": 1,
        "num_last_full_attention_layers": 1,
        "head_config": {
            "upsample_out_channels": [HIDDEN],
            "conv_out_channels": [HIDDEN],
            "scale_conv_out_channels": [HIDDEN],
            "scale_final_hidden_sizes": [HIDDEN, HIDDEN],
        },
    },
    # The last num_blocks layers read the mask queries (4 of 24 at full size): one of the two tiny layers, the first
    # layer runs without them.
    **{segmenter: {"num_blocks": 1} for segmenter in ("eomt", "eomt_dinov3")},
    # The image and prompt halves run apart until merge_index (2 of 24 at full size), and the decoder reads the layers
    # intermediate_hidden_state_indices names (5, 11, 17, 23), none of them before the merge: three tiny layers.
    "seggpt": {"num_hidden_layers": 3, "merge_index": 1, "intermediate_hidden_state_indices": [1, 2]},
    # The fusion blocks upsample the backbone's map by 2 onto the conv stream's stride-8 detail map: stride-16 patches.
    # Checkpoints read the image and its trimap stacked (4 channels, as the image processor makes them).
    "vitmatte": {"backbone_config": {"patch_size": 16, "num_channels": 4}},
    # The pre-training head's decoder is left to checkpoints (None by default; 512 wide, 8 layers at full size).
    "hiera": {"decoder_hidden_size": HIDDEN, "decoder_depth": 1, "decoder_num_heads": HEADS},
    # The FPN upscales the 4 x 4 patch grid of a 32-pixel image by 4, 2 and 1: the mask decoder reads these sizes.
    "sam3_vision_model": {"backbone_feature_sizes": [[16, 16], [8, 8], [4, 4]]},
    # The yes/no logits are read at full-size vocabulary ids: any two ids of the tiny vocabulary.
    "shieldgemma2": {"yes_token_index": 1, "no_token_index": 2},
    # The cache's state sizes round the query/key and value widths up to multiples of 64, the layers do not: widths
    # of exactly 64 agree.
    "xlstm": {"hidden_size": 2 * HIDDEN, "embedding_dim": 2 * HIDDEN, "qk_dim_factor": 1.0},
    # timm's own tiny test network (a 4-stage ResNet, 16-96 channels) instead of the default ResNet-50 (25 M weights).
    "timm_wrapper": {"architecture": "test_resnet"},
    "timm_backbone": {"backbone": "test_resnet"},
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
    # The detector's per-label score thresholds and reading-order categories are left to checkpoints (None): one each
    # for the default config's two labels.
    "pp_doclayout_v2": {"class_thresholds": [0.5, 0.5], "class_order": [0, 1]},
    # The pixel-shuffle projector reads the tower's states unshuffled into 1 / pixel_shuffle_ratio**2 (4) times the
    # width, as intermediate_size (5632 = 4 x 1408 at full size); it projects to vision_output_dim (checkpoints set
    # both projector widths to it; the default's 4096 x 4096 projection alone would hold 16M weights).
    "llama4_vision_model": {
        "intermediate_size": 4 * HIDDEN,
        "projector_input_dim": HIDDEN,
        "projector_output_dim": HIDDEN,
        "vision_output_dim": HIDDEN,
    },
    # The VQ-VAE decodes num_patches x num_patches image tokens, which its model sets to its vision tower's patch grid:
    # built alone, the grid its encoder leaves of a tiny image (five resolutions downsample it 16-fold).
    "janus_vqgan": {"num_patches": IMAGE_SIZE // 16},
    # The adapter reads the 25th and 19th vision layers; the tiny tower has two.
    "molmo2_adapter": {"vision_feature_layer": [-1, -2]},
    # The text model falls back to full-size M-RoPE sections when its rope parameters name none.
    "paddleocr_vl_text": {
        "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0, "mrope_section": [2, 1, 1]}
    },
    # Multi-head attention only: key/value heads must equal the query heads.
    "esmc": {"num_key_value_heads": HEADS},
    # The heads' neck reads one layer per neck width (four): the layers backbone_out_indices names must all exist.
    "dpt": {"num_hidden_layers": 4, "backbone_out_indices": [0, 1, 2, 3]},
    # So do the depth heads on a backbone (Depth Anything, ZoeDepth): four backbone layers, each one output.
    **{
        head: {"backbone_config": {"num_hidden_layers": 4, "out_indices": [1, 2, 3, 4]}}
        for head in ("depth_anything", "prompt_depth_anything", "tipsv2_dpt")
    },
    # CHMv2's head reassembles four backbone layers, each with its class token: return_class_token, which the DINOv3
    # config does not declare (the shrunk config drops it), is what the parent's default backbone sets.
    "chmv2": {"backbone_config": {"num_hidden_layers": 4, "out_indices": [1, 2, 3, 4], "return_class_token": True}},
    # The quantizer has no projections around it: its codebook vectors are hidden_size wide.
    **{codec: {"codebook_dim": HIDDEN} for codec in ("wavtokenizer", "wavtokenizer_encoder")},
    # ZoeDepth's metric head reads the neck's fused features: bottleneck_features is the fusion width.
    "zoedepth": {
        "backbone_config": {"num_hidden_layers": 4, "out_indices": [1, 2, 3, 4]},
        "bottleneck_features": HIDDEN,
    },
    # The last stage's width is the hidden size; the stages' widths and block counts are left to the constructor.
    # Its rotary table is hidden_size // 4 wide, computed from a quarter of a head with partial_rotary_factor 4: eight
    # heads, as at full size (256 / 8).
    "efficientloftr": {
        "out_features": [16, 16, 32, HIDDEN],
        "stage_num_blocks": [1, 1, 1, 1],
        "num_attention_heads": 8,
    },
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
    # Its keys and values are rounded to NVFP4 in blocks of 16: the config refuses a head_dim that is not a multiple;
    # its indexer has at most as many heads as the query heads sharing key head 0 (2 of the tiny 4 over 2).
    "kolibri1_1": {"head_dim": 16, "index_num_heads": 2},
    # Its atom encoders' 3D rotary packs three spatial axes and the atom's space id into half a head (3 * 2 + 10 pairs
    # by default): one pair each fits the tiny head of 8. Its single inputs are the atom encoder's output (the tiny
    # width), two one-hots of its 33 residue types and a profile scalar.
    "esmfold2": {
        "single_inputs_size": HIDDEN + 2 * 33 + 1,
        "atom_encoder": _ONE_ROPE_PAIR_EACH,
        "structure_head": {"diffusion_module": {"atom_encoder": _ONE_ROPE_PAIR_EACH}},
    },
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
    # Checkpoints set the image placeholder id, which the default config leaves unset.
    "blip-2": {"image_token_index": VOCAB - 1},
    # The encoder reads the tiny Swin's last three stages (widths doubling from 32: 64, 128, 256); the layer norms
    # after the backbone read timm's channels-last maps, and the transformers Swin standing in for it (see
    # _without_timm) returns them channels first.
    "omdet-turbo": {
        "encoder_in_channels": [2 * HIDDEN, 4 * HIDDEN, 8 * HIDDEN],
        "apply_layernorm_after_vision_backbone": False,
        # The class prompts' projection reads the text model's width and writes the class embeddings'.
        "text_projection_in_dim": HIDDEN,
        "text_projection_out_dim": HIDDEN,
    },
    # Sampling noise off: the VAE tokenizer adds vae_std-scaled Gaussian noise to its latents and VITS scales the
    # noise of its flow and duration predictor; drawn inside forward, no two runs (eager or exported) would agree.
    "vibevoice_acoustic_tokenizer": {"vae_std": 0.0},
    "vits": {
        "noise_scale": 0.0,
        "noise_scale_duration": 0.0,
        # The vocoder's first width, which the rule for *_channels misses: at 512, ExecuTorch's convolutions of the
        # second shape's 143 frames (36,608 samples) ran past 15 minutes.
        "upsample_initial_channel": HIDDEN,
    },
    # Multi-head attention only (the relative position bias has one row per query head).
    "granite_speech5_encoder": {"num_key_value_heads": HEADS},
    # Multi-head attention only: v_proj is as wide as the query heads, and the attention repeats it as it repeats the
    # key heads (eager attention and the traced SDPA fail on a grouped config; checkpoints leave them equal).
    "nemotron3_diarization_audio": {"num_key_value_heads": HEADS},
    "nemotron3_5_transcribe_asr_audio": {"num_key_value_heads": HEADS},
    "nemotron3_5_transcribe_word_timestamp": {"num_key_value_heads": HEADS},
    # The vocoder reads the spectrogram the acoustic model makes: as many mel bins as its tiny config has.
    "fastspeech2_conformer_with_hifigan": {"vocoder_config": {"model_in_dim": CAPS["num_mel_bins"]}},
    # Likewise the image-token mapping (see chameleon): the placeholder and end-of-line ids, for text-only forwards.
    "emu3": {"vocabulary_map": {"<image>": VOCAB - 1, "<|extra_200|>": VOCAB - 2}},
    # The adapters project the towers' width into the text model's: both ends follow the tiny widths.
    "dots3_note_vision_encoder": {"adapter_in_dim": HIDDEN, "adapter_out_dim": HIDDEN},
    "dots3_note_audio_encoder": {"adapter_input_size": HIDDEN, "adapter_out_dim": HIDDEN},
    # The default backbone of PP-OCRv6's detectors is the recognizer's (one output level, height-only strides): their
    # necks fuse four levels at strides 4 to 32, each twice the size of the next. The medium one's intra-class blocks
    # and head are the server detector's (_LARGE_KERNEL_DETECTOR); the small one's neck reads the widths its list says.
    "pp_ocrv6_medium_det": {"backbone_config": _LCNET_V4_DETECTOR, **_LARGE_KERNEL_DETECTOR},
    "pp_ocrv5_server_det": _LARGE_KERNEL_DETECTOR,
    "pp_ocrv6_small_det": {
        "backbone_config": _LCNET_V4_DETECTOR,
        "layer_list_out_channels": [16, 32, 64, 64],
        "neck_out_channels": HIDDEN,
    },
    # The head concatenates every bridge stage's features; the default backbone outputs the last one only. The bridge's
    # dilated convs reflect-pad by their dilation (up to 18), less than the stride-16 map of a tiny image allows: at
    # most 3, on the 4 x 4 map of a 64-pixel image (IMAGE_SIZES).
    "uvdoc": {
        "backbone_config": {
            "out_features": [f"stage{i}" for i in range(1, 7)],
            "out_indices": list(range(1, 7)),
            "stage_configs": [
                [[128, 1]],
                [[128, 2]],
                [[128, 3]],
                [[128, 3], [128, 3], [128, 2]],
                [[128, 3], [128, 3], [128, 3]],
                [[128, 3], [128, 3], [128, 3]],
            ],
        }
    },
}

# Model types whose own weight init leaves a tiny model degenerate, and which weights the builder redraws:
# "conv_scales": BatchNorm scales and convs drawn from N(0, initializer_range=0.01) shrink the RT-DETR family's encoder
#   memory to ~1e-10, so every detection score ties and top-k's pick depends on the runtime (ONNX 3.9 apart): unit
#   BatchNorm scales and fan-in scaled convs, as trained checkpoints have.
# "router_gates": afmoe zero-initialises its router, so every expert score ties (ONNX 0.11 apart): drawn as linears.
# "group_tokens": groupvit zero-initialises its group tokens, so every patch's hard assignment to a group is a tie that
#   rounding breaks (ONNX 2.9e-3 apart at the second shape): drawn tokens and fan-in scaled assignment projections.
DEGENERATE_INIT = declare(
    TINY_MODEL_ENTRY,
    "DEGENERATE_INIT",
    "weights redrawn: their own init ties every detection score or expert score, and runtimes break ties apart",
    {
        **dict.fromkeys(
            ("rt_detr", "rt_detr_v2", "d_fine", "deimv2", "pp_doclayout_v2", "pp_doclayout_v3", "pp_doclayout_v4"),
            "conv_scales",
        ),
        "afmoe": "router_gates",
        "groupvit": "group_tokens",
    },
)
