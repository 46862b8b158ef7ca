"""Per model class: configs one class of a type needs, classes no tiny model runs here, alternate configs."""

from __future__ import annotations

from typing import Any

from .sizes import HEADS, HIDDEN, IMAGE_SIZE, INTERMEDIATE

# ESM-2's tokens, in id order: ESMFold finds its special tokens and residues in them by name.
_ESM2_VOCABULARY = [
    *("<cls>", "<pad>", "<eos>", "<unk>"),
    *"LAGVSERTIDPKQNFYMHWCXBUZO.-",
    *("<null_1>", "<mask>"),
]

# ── Per-class configs ──
# Model class -> constructor arguments of its tiny config, where its model type's other classes need others.
CLASS_OVERRIDES: dict[str, dict[str, Any]] = {
    # The LM head runs the model as a decoder only (the masked LM head refuses one).
    "ReformerModelWithLMHead": {"is_decoder": True},
    # Their image preprocessors append 258 Fourier features to the pixels (3 + 258, or a conv's 64 + 258 channels),
    # which the cross-attention reads as its query/key width: one head divides any width.
    "PerceiverForImageClassificationFourier": {"num_cross_attention_heads": 1},
    "PerceiverForImageClassificationConvProcessing": {"num_cross_attention_heads": 1},
    # Likewise the optical-flow patches with their Fourier features (322 wide); its decoder outputs a flow field of
    # train_size (368 x 496 at full size), which its inputs match.
    "PerceiverForOpticalFlow": {"num_cross_attention_heads": 1, "train_size": [16, 16]},
    # They run the Q-Former over text, whose layers have a text feed-forward only where the checkpoints (blip2-itm)
    # switch it on (was "'Blip2QFormerLayer' object has no attribute 'intermediate'").
    **{
        head: {"qformer_config": {"use_qformer_text_input": True}}
        for head in ("Blip2ForImageTextRetrieval", "Blip2TextModelWithProjection")
    },
    # Their mask head reads the encoder's states and one attention map per head as channels, in groups of 8 (d_model +
    # encoder_attention_heads: 256 + 8 at full size), and fuses the backbone's first three stages, which the timm
    # backbone of checkpoints outputs (out_indices [1, 2, 3, 4]) and the transformers ResNet standing in for it not.
    **{
        segmenter: {
            "encoder_attention_heads": 8,
            "backbone_config": {"out_features": [f"stage{i}" for i in range(1, 5)], "out_indices": [1, 2, 3, 4]},
        }
        for segmenter in ("DetrForSegmentation", "ConditionalDetrForSegmentation")
    },
    # Its contrastive heads' width and logit scale, which BridgeTowerConfig does not declare: the itc checkpoints
    # store them (512, CLIP's 2.6592). The heads add the model's token types to the vision tower's states and read
    # text and image at the model's width: all three as wide, as in the checkpoints (the tower's 64, see OVERRIDES).
    "BridgeTowerForContrastiveLearning": {
        "contrastive_hidden_size": 32,
        "logit_scale_init_value": 2.6592,
        "hidden_size": 2 * HIDDEN,
        "text_config": {"hidden_size": 2 * HIDDEN},
    },
    # The UperNet head reads four distinct layers' states (out_indices [3, 5, 7, 11] at full size): four layers.
    **{
        segmenter: {"num_hidden_layers": 4, "out_indices": [1, 2, 3, 4]}
        for segmenter in ("BeitForSemanticSegmentation", "Data2VecVisionForSemanticSegmentation")
    },
    # ESMFold: the language model folds only with a folding config (EsmConfig leaves it None), in float32, and maps
    # AlphaFold residue indices to its tokens by name (ESM-2's 33-token vocabulary). A tiny trunk and structure module.
    "EsmForProteinFolding": {
        "is_folding_model": True,
        "vocab_size": len(_ESM2_VOCABULARY),
        "vocab_list": _ESM2_VOCABULARY,
        "esmfold_config": {
            "fp16_esm": False,
            "lddt_head_hid_dim": 16,
            "trunk": {
                "num_blocks": 2,
                "sequence_state_dim": 2 * HIDDEN,
                "pairwise_state_dim": 16,
                "sequence_head_width": 4,
                "pairwise_head_width": 4,
                "position_bins": 4,
                "chunk_size": 16,
                "max_recycles": 1,
                "structure_module": {
                    "sequence_dim": HIDDEN,
                    "pairwise_dim": 16,
                    "ipa_dim": 16,
                    "resnet_dim": 16,
                    "num_heads_ipa": 4,
                    "num_blocks": 2,
                },
            },
        },
    },
    # Built alone, its text config lacks the initializer range that Pix2StructConfig sets on it (its default, 0.02).
    "Pix2StructTextModel": {"initializer_range": 0.02},
    # The encoder-only model refuses the encoder-decoder config its type defaults to (encoder-only checkpoints say so).
    "T5GemmaEncoderModel": {"is_encoder_decoder": False},
    # Images per sample are left to checkpoints (-1 by default): NLVR2's two, each its own modality type after text's.
    "ViltForImagesAndTextClassification": {"num_images": 2, "modality_type_vocab_size": 3},
    # DEIMv2's DINOv3 variants (S to X) fuse three levels of a DINOv3 ViT (the default backbone is an HGNetV2).
    "Deimv2DINOv3ConvEncoder": {
        "backbone_config": {
            "model_type": "dinov3_vit",
            "hidden_size": HIDDEN,
            "intermediate_size": INTERMEDIATE,
            "num_hidden_layers": 3,
            "num_attention_heads": HEADS,
            "image_size": IMAGE_SIZE,
            "out_indices": [1, 2, 3],
        }
    },
    # DEIMv2's small variants (Atto to Pico) fuse two backbone levels in a lite encoder that projects them itself.
    "Deimv2LiteEncoder": {"encoder_type": "lite", "encoder_in_channels": [32, 64], "feat_strides": [16, 32]},
    # Built alone, its decoder config lacks the dropout rate that T5Gemma2Config sets on its sub-configs.
    "T5Gemma2Decoder": {"dropout_rate": 0.0},
    # Its 3D rope reads the vision tower's merge size, which its config (no model type, so no OVERRIDES entry) does
    # not declare: checkpoints store it.
    "Qwen3OmniMoeTalkerForConditionalGeneration": {"spatial_merge_size": 2},
    # T5-like stacks built alone are encoders, which refuse the use_cache their configs default to (decoders get it).
    **{
        stack: {"use_cache": False}
        for stack in ("T5Stack", "MT5Stack", "UMT5Stack", "SwitchTransformersStack", "Pop2PianoStack", "UdopStack")
    },
}

# ── Configs a parent rewrites before building a class ──
# Model class -> the prefix of the config entries its parent copies onto their plain names before building it
# (SeamlessM4T's text-to-unit head copies every t2u_ entry, t2u_decoder_layers onto decoder_layers, for the
# encoder-decoder and decoder it builds).
PREFIXED_CONFIG_VIEWS: dict[str, str] = dict.fromkeys(
    ("SeamlessM4TTextToUnitModel", "SeamlessM4Tv2TextToUnitModel", "SeamlessM4Tv2TextToUnitDecoder"), "t2u_"
)

# ── Classes no tiny model stands in for ──
# Model class -> why no small config runs it eagerly here (a package the project cannot install, an input only a
# runtime session makes). ``tiny_model`` raises ``UnrunnableModelError`` with the reason; the gate reports the class's
# cells as not checked, with it.
UNRUNNABLE: dict[str, str] = {
    # Checked on 5.23 and 5.25: its default config already fails its own checks (its text config's per-layer inputs
    # must be off); built valid, 5.23's kv_sharing_modes refuses all-reusing layers (5.25's accepts them).
    "Gemma4AssistantForCausalLM": "drafting head: reads the target model's shared_kv_states (each attention type's"
    " last keys and values), which only the target computes; every layer reusing them fails"
    " Gemma4TextConfig.kv_sharing_modes before transformers 5.25 (no producing layer)",
    "Gemma4UnifiedAssistantForCausalLM": "drafting head: reads the target model's shared_kv_states, and every layer"
    " reusing them fails Gemma4UnifiedTextConfig.kv_sharing_modes (no producing layer)",
    "DinatForImageClassification": "its neighborhood attention needs natten, which this project does not install",
    "DinatModel": "its neighborhood attention needs natten, which this project does not install",
    "LayoutLMv2Model": "its visual backbone is a detectron2 model, which this project does not install",
    "EdgeTamModel": "its vision backbone is a timm_wrapper (RepViT) whose feature list only timm produces",
    "EdgeTamVisionModel": "its backbone is a timm_wrapper (RepViT) whose feature list only timm produces",
    "Gemma3nForConditionalGeneration": "its vision tower is a timm_wrapper (MobileNetV5) called with timm-only"
    " arguments (do_pooling); timm needs torchvision, which breaks beside this torch",
    "Gemma3nModel": "its vision tower is a timm_wrapper (MobileNetV5) called with timm-only arguments (do_pooling);"
    " timm needs torchvision, which breaks beside this torch",
    "FastVlmModel": "its vision tower is a timm_wrapper (FastViT), whose hybrid feature map only timm produces",
    "FastVlmForConditionalGeneration": "its vision tower is a timm_wrapper (FastViT), whose hybrid feature map only"
    " timm produces",
    # No forward of their own: they only generate (Bark chains three sub-models) or encode/decode (a VQ-VAE).
    "BarkModel": "no forward: generation chains its semantic, coarse and fine sub-models (generate only)",
    **dict.fromkeys(
        ("Qwen2_5OmniForConditionalGeneration", "Qwen3OmniMoeForConditionalGeneration"),
        "no forward: generation chains its thinker, talker and code-to-wave models (generate only)",
    ),
    # BltModel passes its patch count (patch_lengths.shape[1]) to its local encoder as a Python int.
    "BltLocalEncoder": "forward takes num_patches, a Python int sizing its pooled patches, which an exported program"
    " holds as a constant, not an input",
    "DeepseekOcr2VisionEncoder": "forward takes num_patches, a Python int counting the image patches before its"
    " learned queries (DeepseekOcr2VisionModel passes the SAM grid's), which an exported program holds as a constant,"
    " not an input",
    "BarkFineModel": "forward takes codebook_idx, a Python int choosing the codebook it predicts (its generate loop"
    " passes each in turn), which an exported program holds as a constant, not an input",
    "GlmImageVQVAE": "no forward: a VQ-VAE used through encode and decode only",
    # Video trackers read their frames, prompts and memory bank from a mutable session object, not from tensors.
    "Sam2VideoModel": "forward takes an inference_session (frames, prompts, memory bank), not tensors",
    "Sam3TrackerVideoModel": "forward takes an inference_session (frames, prompts, memory bank), not tensors",
    "Sam3VideoModel": "forward takes an inference_session (frames, text prompts, tracker state), not tensors",
    "EdgeTamVideoModel": "forward takes an inference_session (frames, prompts, memory bank), not tensors",
    # Its forward takes its model's heads as arguments (order_head, global_pointer, mask_query_head, norm).
    "PPDocLayoutV3Decoder": "forward calls the heads its model passes in as arguments (order_head, global_pointer,"
    " mask_query_head, norm): modules, not tensors",
    # Sample inputs have a batch of at least 2 (it stays a dynamic dimension).
    "TvpModel": "runs with batch size 1 only: its column position embeddings are viewed with the batch size",
    "TvpForVideoGrounding": "runs TvpModel, which runs with batch size 1 only (its column position embeddings are"
    " viewed with the batch size)",
}

# ── Classes that need an optional package ──
# Model class -> the packages it builds with, imported where it is built; where one does not import (timm needs a
# torchvision matching the torch: none for the project's 2.13.0+cpu on the local index), its cells are not checked
# with "needs timm and torchvision".
_TIMM = ("timm", "torchvision")
NEEDS_PACKAGES: dict[str, tuple[str, ...]] = {
    "TimmBackbone": _TIMM,
    "TimmWrapperModel": _TIMM,
    "TimmWrapperForImageClassification": _TIMM,
    # Its semantic branch resamples the waveform with torchaudio, which PyPI has for torch 2.11 at the latest (none
    # for the pinned 2.13.0+cpu).
    "HiggsAudioV2TokenizerModel": ("torchaudio",),
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
