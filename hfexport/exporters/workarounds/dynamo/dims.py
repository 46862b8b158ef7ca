"""Dims declarations (key ``"dynamo"``, stage 4 of every backend): input dimensions a model's code takes one size
of per program are kept static; dimensions it takes in multiples only are declared multiples of a dynamic root.
"""

from __future__ import annotations

from typing import Any

import torch

from ...registry import (
    register_dim_multiples,
    register_static_dims,
)

_SWIN, _SWINV2 = "transformers.models.swin.modeling_swin", "transformers.models.swinv2.modeling_swinv2"


_DONUT, _MASKFORMER = (
    "transformers.models.donut.modeling_donut_swin",
    "transformers.models.maskformer.modeling_maskformer_swin",
)


@register_static_dims(
    "dynamo",
    f"{_SWIN}.SwinLayer",
    f"{_SWINV2}.Swinv2Layer",
    f"{_DONUT}.DonutSwinLayer",
    f"{_MASKFORMER}.MaskFormerSwinLayer",
)
def _static_image_size_of_window_partition(name: str, value: torch.Tensor) -> tuple[int, ...]:
    # swin family: a dynamic H/W turns padding to window multiples and window_partition's views into nested floor-div,
    # Mod and Min expressions (30-280 s of sympy in torch.export), and the pad/window-clamp branches pin H/W anyway.
    return _image_size(name, value)


@register_dim_multiples("dynamo", "transformers.models.swin2sr.modeling_swin2sr.Swin2SRModel")
def _multiples_of_swin2sr_window(name: str, value: torch.Tensor, model: Any) -> dict[int, int]:
    # swin2sr: patch_unembed views the features back at the unpadded H x W, so eager takes window multiples only; as
    # sizes of their own, the padding to the window and each window view cost torch.export Mod reasoning (98 s).
    window = model.config.window_size
    return {2: window, 3: window} if name == "pixel_values" and value.dim() == 4 else {}


@register_static_dims("dynamo", "transformers.models.hiera.modeling_hiera.HieraEncoder")
def _static_image_size_of_hiera_unroll(name: str, value: torch.Tensor) -> tuple[int, ...]:
    # hiera: the mask-unit unroll/reroll schedule is sized from config.image_size (HieraEncoder.__init__'s
    # stage_size), so eager runs at that size only; a dynamic H/W cost ExecuTorch 400 s of sympy and a program
    # planned too large to load (std::bad_alloc).
    return _image_size(name, value)


@register_static_dims(
    "dynamo",
    "transformers.models.sam2.modeling_sam2.Sam2HieraDetModel",
    "transformers.models.sam3.modeling_sam3.Sam3Model",
)
def _static_image_size_of_sam(name: str, value: torch.Tensor) -> tuple[int, ...]:
    # sam2, sam3: window partitions of a dynamic H/W cost sympy time (sam2 over 300 s, sam3 28 s, static 5 s), then the
    # trace pins H/W anyway (sam2 views its features at backbone_feature_sizes, sam3 guards (3 + W // 8) // 4 == 1);
    # sam2's Hiera backbone on its own pins them by an equation torch's solver cannot solve (NotImplementedError).
    return _image_size(name, value)


@register_static_dims(
    "dynamo",
    "transformers.models.xlstm.modeling_xlstm.xLSTMModel",
    "transformers.models.nemotron3_5_transcribe.modeling_nemotron3_5_transcribe.Nemotron3_5TranscribeAudioModel",
    "transformers.models.mamba.modeling_mamba.MambaMixer",
    "transformers.models.falcon_mamba.modeling_falcon_mamba.FalconMambaMixer",
    "transformers.models.jamba.modeling_jamba.JambaMambaMixer",
    "transformers.models.zamba.modeling_zamba.ZambaMambaMixer",
    "transformers.models.rwkv.modeling_rwkv.RwkvSelfAttention",
    "transformers.models.canine.modeling_canine.CanineAttention",
    "transformers.models.recurrent_gemma.modeling_recurrent_gemma.RecurrentGemmaRglru",
)
def _static_sequence_of_python_loops_over_time(name: str, value: torch.Tensor) -> tuple[int, ...]:
    # xlstm: inference unrolls the sequence in Python (mlstm_recurrent_sequence_native's `for t in range(S)`, chunk
    # sizes from `S // chunk_size`); nemotron3_5_transcribe's audio tower encodes chunk by chunk, `for start in
    # range(0, num_frames, chunk_length)` (_get_chunks, guard frames // 8 == 7); mamba, falcon_mamba, jamba and zamba
    # scan their state token by token without the CUDA kernels (mamba_selective_scan's `for index in range(seq_len)`;
    # the parallel scans are off while exporting), rwkv too (rwkv_linear_attention_cpu's `for current_index in
    # range(seq_length)`); canine's character encoders attend chunk by chunk (CanineAttention's `for chunk_start in
    # range(from_start, from_seq_length, ...)`); recurrent_gemma's RG-LRU too (_rnn_scan's `for t in
    # range(hidden_states.shape[1])`, guard Eq(seq, 7)): every length is its own program.
    return _sequence(name, value)


@register_static_dims("dynamo", "transformers.models.funnel.modeling_funnel.FunnelAttentionStructure")
def _static_sequence_of_funnel_position_lists(name: str, value: torch.Tensor) -> tuple[int, ...]:
    # funnel: relative positions are Python lists, `pos = list(range(seq_len))`, pooled by slicing (get_position_embeds,
    # written so the sizes stay static for export; guard Eq(seq, 7)): one program per length.
    return _sequence(name, value)


@register_static_dims(
    "dynamo",
    "transformers.models.deepseek_v4.modeling_deepseek_v4.DeepseekV4HCACompressor",
    "transformers.models.deepseek_v4.modeling_deepseek_v4.DeepseekV4CSACompressor",
)
def _static_sequence_of_deepseek_v4_compression_windows(name: str, value: torch.Tensor) -> tuple[int, ...]:
    # deepseek_v4: without a cache the compressors keep `(seq // compress_rate) * compress_rate` tokens, view them as
    # windows and branch on `chunk_kv.shape[1] > 0`; the trace pins the window count and the remainder (guards
    # Eq(seq // 4, 1), Ne(seq % 4, 0): "accepts only size 7" at the second shape): one program per length.
    return _sequence(name, value)


def _sequence(name: str, value: torch.Tensor) -> tuple[int, ...]:
    return (1,) if name in _SEQUENCE_INPUTS and value.dim() >= 2 else ()


_SEQUENCE_INPUTS = ("input_ids", "attention_mask", "inputs_embeds", "input_features", "input_features_mask")


@register_static_dims(
    "dynamo",
    "transformers.models.parakeet.modeling_parakeet.ParakeetRNNTDecoder",
    "transformers.models.nemotron_asr_streaming.modeling_nemotron_asr_streaming.NemotronAsrStreamingRNNTDecoder",
    "transformers.models.nemotron3_5_asr.modeling_nemotron3_5_asr.Nemotron3_5AsrRNNTDecoder",
)
def _static_tokens_of_lstm_prediction_networks(name: str, value: torch.Tensor) -> tuple[int, ...]:
    # parakeet (RNN-T, TDT), nemotron_asr_streaming, nemotron3_5_asr: the prediction network is an nn.LSTM over
    # decoder_input_ids, which the trace unrolls token by token (the second shape failed, "accepts only size 7");
    # decoding feeds one token at a time anyway: one program per token count.
    return (1,) if name == "decoder_input_ids" and value.dim() == 2 else ()


@register_static_dims("dynamo", "transformers.models.blt.modeling_blt.BltModel")
def _static_sequence_of_entropy_patching(name: str, value: torch.Tensor) -> tuple[int, ...]:
    # blt: byte patches are cut where the patcher's entropies pass a threshold and sized by .item() (BltPatcher,
    # process_patch_lengths); the trace pins the sequence ("accepts only size 7" at the second shape): one program
    # per length.
    return _sequence(name, value)


@register_static_dims("dynamo", "transformers.models.xcodec.modeling_xcodec.XcodecModel")
def _static_audio_length_of_frame_count_branch(name: str, value: torch.Tensor) -> tuple[int, ...]:
    # xcodec: encode pads the waveform or not by a Python comparison of the acoustic and semantic frame counts
    # (`_get_conv1d_output_lengths(...) != e_semantic.shape[2]`), an equation torch's dim solver cannot solve
    # (NotImplementedError on ((s2/40)//8)): one program per audio length.
    return (2,) if name == "input_values" and value.dim() == 3 else ()


@register_static_dims(
    "dynamo",
    "transformers.models.hunyuan_vl.modeling_hunyuan_vl.HunYuanVLVisionTransformer",
    "transformers.models.lfm3_vl.modeling_lfm3_vl.Lfm3VlVisionModel",
)
def _static_image_count_of_towers_looping_over_images(name: str, value: torch.Tensor) -> tuple[int, ...]:
    # hunyuan_vl, lfm3_vl vision towers: they walk grid_thw.tolist() image by image in Python (patch merging, windowed
    # blocks), so the trace unrolls one pass per image: one program per image count. The tower's own input only: the
    # VLMs around them (image_grid_thw) build one image per sample and kept passing at three.
    return (0,) if name == "grid_thw" else ()


@register_static_dims(
    "dynamo",
    "transformers.models.lfm2_vl.modeling_lfm2_vl.Lfm2VlModel",
    "transformers.models.siglip2.modeling_siglip2.Siglip2VisionEmbeddings",
    "transformers.models.pixtral.modeling_pixtral.PixtralVisionModel",
)
def _static_image_count_of_per_image_loops(name: str, value: torch.Tensor) -> tuple[int, ...]:
    # siglip2 (resize_positional_embeddings: `for i in range(batch_size)`, sizes from spatial_shapes[i].tolist()),
    # lfm2_vl (get_image_features unpads and projects image by image), pixtral (PixtralVisionModel.forward crops and
    # flattens `for embed, size in zip(patch_embeds, image_sizes)`): the trace unrolls one pass per image, so one
    # program per image count.
    return (0,) if name in ("pixel_values", "pixel_attention_mask", "spatial_shapes") else ()


def _image_size(name: str, value: torch.Tensor) -> tuple[int, ...]:
    """The height and width dims of a (batch, channels, height, width) ``pixel_values``."""
    return (2, 3) if name == "pixel_values" and value.dim() == 4 else ()
