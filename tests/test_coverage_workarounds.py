"""Workarounds added for the coverage sweep: each one is taken out and the real model it exists for fails.

One test per workaround: without it, the tiny model of the architecture that needed it fails at the stage the
workaround lives in; with it, the export round-trips and matches eager.
"""

from __future__ import annotations

import json

import pytest
import torch
import torch.utils._pytree as pytree
from support import export_dynamic, without_workaround
from transformers.cache_utils import Cache, CacheLayerMixin, DynamicLayer

from hfexport.exporters import (
    ExportedModel,
    ExportStageError,
    exporter_executorch,  # noqa: F401  (registers the ExecuTorch workarounds taken out below)
    exporter_onnx,
    registry,
)
from hfexport.exporters import pytree as export_pytree
from hfexport.gate.checks.second_shape import SECOND_SHAPE
from hfexport.gate.skips import EXPORT_SKIPS
from hfexport.tiny_models import resolve_model_class, sample_inputs, tiny_model
from hfexport.tiny_models.inputs.precomputed import recorded_layout


def _max_diff(actual, expected) -> float:
    actual_leaves, expected_leaves = pytree.tree_leaves(actual), pytree.tree_leaves(expected)
    assert len(actual_leaves) == len(expected_leaves)
    pairs = [(a, e) for a, e in zip(actual_leaves, expected_leaves, strict=True) if e.numel()]
    return max(float((a - e).abs().max()) for a, e in pairs)


def _assert_matches_eager(model: torch.nn.Module, exported, inputs: dict) -> None:
    with torch.no_grad():
        expected = model(**inputs)
    assert _max_diff(exported(**inputs), expected) < 1e-4


@pytest.mark.slow  # over 20 s
def test_linear_attention_cache_layers_are_walked(monkeypatch: pytest.MonkeyPatch) -> None:
    model = tiny_model("BailingHybridForCausalLM")
    inputs = sample_inputs(model)
    with monkeypatch.context() as patched:
        patched.setattr(export_pytree, "_is_walkable_object", lambda v: isinstance(v, (Cache, CacheLayerMixin)))
        with pytest.raises(ExportStageError, match="cannot flatten LinearAttentionLayer"):
            export_dynamic(model, inputs, "dynamo")
    exported = export_dynamic(model, inputs, "dynamo")
    outputs = exported(**inputs)
    with torch.no_grad():
        expected = model(**inputs)
    assert _max_diff(outputs, expected) < 1e-4
    # The rebuilt cache indexes its states by int, as the model's own cache does.
    layer = outputs.past_key_values.layers[0]
    assert set(layer.conv_states) == {0}


@pytest.mark.slow  # over 20 s
def test_t5gemma2_cache_class_and_mask_indexing(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The cross-attention cache holds the class of the layers it makes: the context names it. The vmap-style mask
    # indexing must not reach the saved program.
    model = tiny_model("T5Gemma2ForConditionalGeneration")
    inputs = sample_inputs(model)
    leaves: list[torch.Tensor] = []
    with torch.no_grad():
        expected = model(**inputs)
    context = export_pytree._flatten_to_context(expected.past_key_values, leaves)
    assert json.loads(json.dumps(context))["attributes"]["cross_attention_cache"]["attributes"][
        "layer_class_to_replicate"
    ] == {"class": "transformers.cache_utils.DynamicLayer"}
    with monkeypatch.context() as patched:
        without_workaround(patched, "dynamo", "_patch_mask_indexing_as_getitem")
        with pytest.raises(Exception, match="Unsupported getattr attribute"):
            export_dynamic(model, inputs, "dynamo").save_pretrained(tmp_path / "without")
    directory = export_dynamic(model, inputs, "dynamo").save_pretrained(tmp_path / "t5gemma2")
    loaded = ExportedModel.from_pretrained(directory)
    outputs = loaded(**inputs)
    assert outputs.past_key_values.cross_attention_cache.layer_class_to_replicate is DynamicLayer
    assert _max_diff(outputs, expected) < 1e-4


# (model class, backend exported to, registry key of the workarounds taken out, their names, error without them)
NEEDED = [
    # Plain indexing in mask functions is only valid without vmap: the indexing patch goes with the expansion.
    (
        "UnlimitedOcrModel",
        "onnx",
        "dynamo",
        ("_patch_mask_expansion_by_broadcast", "_patch_mask_indexing_as_getitem"),
        "vmapped",
    ),
    (
        "Sam3Model",
        "dynamo",
        "dynamo",
        ("_patch_sdpa_math_kernel_on_cpu",),
        "data-dependent expression",
    ),
    (
        "ProphetNetForCausalLM",
        "onnx",
        "onnx",
        ("_fix_rsub_of_integer_tensor",),
        r"compatible OpOverload for aten\.sub",
    ),
    ("ParakeetForTDT", "onnx", "onnx", ("_fix_squeeze_of_non_unit_dim",), "Squeeze"),
    ("Sam3Model", "onnx", "onnx", ("_fix_contiguous_as_clone",), "Cannot view a tensor"),
    (
        "ParakeetForCTC",
        "executorch",
        "executorch.xnnpack",
        ("_patch_batch_norm_1d_one_dynamic_dim",),
        "XNNPACK reshape only supports 1 dynamic dimension",
    ),
    (
        "DeepseekV2ForCausalLM",
        "onnx",
        "onnx",
        ("_patch_rotary_frequencies_as_cos_sin", "_patch_rotary_product_as_real"),
        "stage 4 ONNX translations",
    ),
    (
        "Llama4ForCausalLM",
        "onnx",
        "onnx",
        ("_patch_rotary_frequencies_as_cos_sin", "_patch_llama4_rotary_product_as_real"),
        "stage 4 ONNX translations",
    ),
    (
        "LongcatFlashForCausalLM",
        "dynamo",
        "dynamo",
        ("_patch_longcat_experts_dense",),
        "Could not guard on data-dependent expression",
    ),
    (
        "DbrxForCausalLM",
        "dynamo",
        "dynamo",
        ("_patch_dbrx_experts_dense",),
        "Could not guard on data-dependent expression",
    ),
    (
        "Step3p7Model",
        "dynamo",
        "dynamo",
        ("_patch_step3p7_experts_dense",),
        "Could not guard on data-dependent expression",
    ),
    (
        "OpenAIPrivacyFilterModel",
        "dynamo",
        "dynamo",
        ("_patch_eager_experts_as_batched_mm",),
        "Could not guard on data-dependent expression",
    ),
    (
        "MimiEncoderModel",
        "dynamo",
        "dynamo",
        ("_patch_conv1d_padding_from_sizes",),
        "Could not guard on data-dependent expression",
    ),
    (
        "EncodecModel",
        "dynamo",
        "dynamo",
        ("_patch_conv1d_padding_from_sizes",),
        "Could not guard on data-dependent expression",
    ),
    (
        "Qwen3VLVisionModel",
        "dynamo",
        "dynamo",
        ("_patch_packed_attention_as_masked_sdpa",),
        "Could not guard on data-dependent expression",
    ),
    (
        "PeAudioVideoEncoder",
        "dynamo",
        "dynamo",
        ("_patch_pe_audio_video_alignment_as_gather",),
        "Could not guard on data-dependent expression",
    ),
    (
        "UdopModel",
        "dynamo",
        "dynamo",
        ("_patch_udop_uncovered_patches_by_scatter",),
        "data is not allocated yet",
    ),
    # The translation fails on prims.erf_inv (the first line of the error names the stage only).
    ("Gemma3nForCausalLM", "onnx", "onnx", ("_patch_gaussian_cutoff_as_constant",), "stage 4"),
    (
        "Qwen4ExpTextModel",
        "dynamo",
        "dynamo",
        ("_patch_qwen4_exp_block_selection_by_masks",),
        "Could not guard on data-dependent expression",
    ),
    (
        "FastSpeech2ConformerModel",
        "dynamo",
        "dynamo",
        ("_patch_fastspeech2_length_regulator_as_gather",),
        "Could not guard on data-dependent expression",
    ),
    # With the durations expanded, the decoder's table rebuild is the next test of the frame count.
    (
        "FastSpeech2ConformerModel",
        "dynamo",
        "dynamo",
        ("_patch_fastspeech2_relative_positions_built_to_size",),
        r"data-dependent expression 2\*u0 - 1 <= 9999",
    ),
]


# Cases whose model takes over 20 s to export twice on 2 cores run in the slow sweep (-m slow); CI keeps the rest
# (the dynamo and onnx keys; the executorch ones have their own small removal tests in test_executorch.py).
SLOW_MODELS = {
    "Sam3Model",
    "PeAudioVideoEncoder",
    "ParakeetForCTC",
    "ParakeetForTDT",
    "ProphetNetForCausalLM",
    "Gemma3nForCausalLM",
    "DeepseekV2ForCausalLM",
    "Qwen4ExpTextModel",
    "FastSpeech2ConformerModel",
}


@pytest.mark.parametrize(
    ("model_class", "backend", "key", "names", "error"),
    [pytest.param(*case, id=case[3][0], marks=[pytest.mark.slow] if case[0] in SLOW_MODELS else []) for case in NEEDED],
)
def test_workaround_is_needed(
    monkeypatch: pytest.MonkeyPatch,
    model_class: str,
    backend: str,
    key: str,
    names: tuple[str, ...],
    error: str,
) -> None:
    """Without the workaround the model fails with ``error``; with it, the export round-trips and matches eager."""
    model = tiny_model(model_class)
    inputs = sample_inputs(model)
    with monkeypatch.context() as patched:
        for name in names:
            without_workaround(patched, key, name)
        with pytest.raises(ExportStageError, match=error):
            export_dynamic(model, inputs, backend)
    exported = export_dynamic(model, inputs, backend)
    _assert_matches_eager(model, exported, inputs)


@pytest.mark.parametrize(
    ("model_class", "patch", "name", "dim", "other_shape"),
    [
        # `batch_size = len(source_flatten)` pinned the batch: the program took batch 2 only, without an export error.
        ("RTDetrModel", "_patch_len_keeps_batch_symbolic", "pixel_values", "0", {"batch_size": 3}),
        # The left-padding mask built from a Python list as long as the text pinned the sequence to the traced 7.
        (
            "CpmAntForCausalLM",
            "_patch_cpmant_padding_mask_from_arange",
            "input_ids",
            "1",
            {"batch_size": 3, "seq_length": 11},
        ),
        # Each row's positions selected in a loop over the batch pinned it to the traced 2.
        (
            "ReformerForMaskedLM",
            "_patch_reformer_axial_positions_gathered_at_once",
            "input_ids",
            "0",
            {"batch_size": 3},
        ),
    ],
)
def test_dim_stays_dynamic_only_with_its_patch(
    monkeypatch: pytest.MonkeyPatch, model_class: str, patch: str, name: str, dim: str, other_shape: dict
) -> None:
    model = tiny_model(model_class)
    inputs = sample_inputs(model)
    with monkeypatch.context() as patched:
        without_workaround(patched, "dynamo", patch)
        assert dim not in export_dynamic(model, inputs, "dynamo").components["model"]["dynamic_dims"][name]
    exported = export_dynamic(model, inputs, "dynamo")
    assert exported.components["model"]["dynamic_dims"][name][dim][1] is None
    _assert_matches_eager(model, exported, sample_inputs(model, seed=1, **other_shape))


def test_packed_attention_keeps_each_image_to_its_own_rows() -> None:
    # Traced at two images of one size, run at three of three sizes: each attends only to its own rows, as eager.
    model = tiny_model("Qwen3VLVisionModel")
    traced = sample_inputs(model)
    exported = export_dynamic(model, traced, "dynamo")
    side = 2 * model.config.spatial_merge_size
    grid_thw = torch.tensor([[1, 2 * side, side], [1, side, side], [1, side, 3 * side]])
    patches = torch.randn(int(grid_thw.prod(-1).sum()), traced["hidden_states"].shape[1])
    inputs = {"hidden_states": patches, "grid_thw": grid_thw}
    inputs |= recorded_layout(model, inputs)
    _assert_matches_eager(model, exported, inputs)


def test_packed_attention_patch_leaves_unpacked_batches_as_they_were() -> None:
    # Radio's attention is patched for its packed calls; a batch without cu_seqlens is attended as before.
    model = tiny_model("RadioModel")
    inputs = sample_inputs(model)
    exported = export_dynamic(model, inputs, "dynamo")
    assert "_patch_packed_attention_as_masked_sdpa" in {
        record["name"] for record in exported.components["model"]["workarounds"]["patches"]
    }
    _assert_matches_eager(model, exported, inputs)


def test_packed_attention_with_grouped_heads_exports_to_onnx() -> None:
    # exaone4_5's vision tower attends with fewer key/value heads than query heads: torchlib's SDPA translation of
    # enable_gqa compared the head counts as symbolic dims and failed; the patch repeats the grouped heads itself.
    model = tiny_model("Exaone4_5_VisionModel")
    assert model.config.num_key_value_heads < model.config.num_heads
    inputs = sample_inputs(model)
    _assert_matches_eager(model, export_dynamic(model, inputs, "onnx"), inputs)


@pytest.mark.parametrize("model_class", ["DeepseekV2ForCausalLM", "Llama4ForCausalLM", "Gemma3nForCausalLM"])
def test_dynamo_keeps_complex_rotary_and_erfinv(tmp_path, model_class: str) -> None:
    # The rotary and gaussian patches are ONNX's and ExecuTorch's (workarounds/onnx_and_executorch.py): torch.export
    # traces and saves these models as they are.
    model = tiny_model(model_class)
    inputs = sample_inputs(model)
    exported = export_dynamic(model, inputs, "dynamo")
    patched = {record["name"] for record in exported.components["model"]["workarounds"]["patches"]}
    assert not patched & {w.name for w in registry._REGISTRY["onnx"]}
    loaded = ExportedModel.from_pretrained(exported.save_pretrained(tmp_path / "export"))
    with torch.no_grad():
        expected = model(**inputs)
    assert _max_diff(loaded(**inputs), expected) < 1e-4


@pytest.mark.slow  # over 20 s
def test_onnx_optimizer_skip_of_prophetnet_is_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    model = tiny_model("ProphetNetForCausalLM")
    inputs = sample_inputs(model)
    path = f"{type(model).__module__}.{type(model).__qualname__}"
    (skip,) = registry.optimizer_skips("onnx", path)
    assert "SplitToSequence" in skip.reason
    with monkeypatch.context() as patched:
        without_workaround(patched, "onnx", skip.name)
        with pytest.raises(ExportStageError, match="stage 5") as raised:
            export_dynamic(model, inputs, "onnx")
    causes, error = [], raised.value
    while error is not None:
        causes.append(str(error))
        error = error.__cause__ or error.__context__
    assert any("SplitToSequence" in cause for cause in causes)


def _skips_by_code_path() -> list:
    """Every EXPORT_SKIPS class; beyond the first of each reason and modeling module (siblings running the same code),
    in the slow sweep."""
    firsts: set[tuple[str, str]] = set()
    params = []
    for name in sorted(EXPORT_SKIPS):
        path = (EXPORT_SKIPS[name], resolve_model_class(name).__module__)
        params.append(pytest.param(name, marks=[pytest.mark.slow] if path in firsts else []))
        firsts.add(path)
    return params


@pytest.mark.parametrize("model_class", _skips_by_code_path())
def test_export_skips_still_fail_to_export(model_class: str) -> None:
    """An EXPORT_SKIPS entry stays only while its model still fails torch.export: remove it once this fails."""
    model = tiny_model(model_class)
    with pytest.raises(ExportStageError, match="data-dependent"):
        export_dynamic(model, sample_inputs(model), "dynamo")


@pytest.mark.slow  # over 20 s
def test_view_larger_than_its_base_stays_a_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    # RF-DETR's backbone splits its patch grid into windows and back (window_partition, window_unpartition): with the
    # strides torch's dim walk gives those views, each claims more memory than its base was planned, and the runtime
    # refuses to load the program (error 0x21). The trace's view shortcut gives them contiguous strides, which plan
    # within the base: either one is enough. (Falcon-H1's chunked Mamba scan, where it was first found, loads now.)
    pytest.importorskip("executorch")
    model = tiny_model("RfDetrForObjectDetection")
    inputs = sample_inputs(model)
    with torch.no_grad():
        expected = model(**inputs)
    assert _max_diff(export_dynamic(model, inputs, "executorch")(**inputs), expected) < 1e-4
    without_workaround(monkeypatch, "executorch", "_patch_view_within_its_base")
    assert _max_diff(export_dynamic(model, inputs, "executorch")(**inputs), expected) < 1e-4
    without_workaround(monkeypatch, "dynamo", "_patch_view_of_contiguous_as_strided")
    without_workaround(monkeypatch, "executorch", "_patch_view_of_contiguous_as_strided")
    with pytest.raises(RuntimeError, match="Failed to load method forward, error: 0x:21"):
        export_dynamic(model, inputs, "executorch")(**inputs)


@pytest.mark.parametrize("masked", [False, True])
def test_pe_audio_video_alignment_as_gather_is_the_models_interpolation(masked: bool) -> None:
    from transformers.models.pe_audio_video import modeling_pe_audio_video as pe

    from hfexport.exporters.workarounds.dynamo import model_patches

    original = pe.PeAudioVideoEncoderEmbedder._align_video_hidden_state
    patched = model_patches._patch_pe_audio_video_alignment_as_gather(original)
    generator = torch.Generator().manual_seed(0)
    video, audio = torch.randn(3, 5, 4, generator=generator), torch.randn(3, 13, 4, generator=generator)
    masks = {}
    if masked:  # per-sample lengths, one sample without any video frame
        masks["padding_mask_videos"] = torch.arange(5)[None] < torch.tensor([[5], [2], [0]])
        masks["padding_mask"] = torch.arange(13)[None] < torch.tensor([[13], [7], [9]])
    expected = original(None, video_hidden_state=video, audio_hidden_state=audio, **masks)
    assert torch.equal(patched(None, video_hidden_state=video, audio_hidden_state=audio, **masks), expected)


@pytest.mark.parametrize("max_len", [0, 19, 40])
def test_udop_uncovered_patches_by_scatter_are_the_models_selection(max_len: int) -> None:
    # Every row keeps another number of patches; blank boxes (all 0, all 1) add no patch embedding; max_len 19 cuts
    # the 16 patches after the 9 tokens to 10, 40 pads them to 31.
    from transformers.models.udop import modeling_udop as udop

    from hfexport.exporters.workarounds.dynamo import model_patches

    patched = model_patches._patch_udop_uncovered_patches_by_scatter(udop.combine_image_text_embeddings)
    generator = torch.Generator().manual_seed(0)
    image, text = torch.randn(3, 16, 8, generator=generator), torch.randn(3, 9, 8, generator=generator)
    bbox = torch.rand(3, 9, 4, generator=generator)
    bbox[0, 0], bbox[1, 2] = 0.0, 1.0
    arguments = (image, bbox, None, torch.ones(3, 9, dtype=torch.long), 4, max_len, 64, 16)
    expected = udop.combine_image_text_embeddings(image, text.clone(), *arguments[1:])
    for got, want in zip(patched(image, text.clone(), *arguments[1:]), expected, strict=True):
        assert got.dtype == want.dtype and torch.equal(got, want)


@pytest.mark.parametrize("window", [None, 8])
@pytest.mark.parametrize("dtype", [torch.bool, torch.float32])
def test_qwen4_exp_block_selection_by_masks_is_the_indexers(window: int | None, dtype: torch.dtype) -> None:
    # Rows left-padded by 0, 3 and 6 tokens, causal or within a sliding window: each query sees its own number of
    # visible tokens, whole blocks and tail (none at all before the padding ends); a bool (sdpa) or float mask.
    from transformers.models.qwen4_exp import modeling_qwen4_exp as qwen4_exp

    from hfexport.exporters.workarounds.dynamo import model_patches

    model = tiny_model("Qwen4ExpTextModel")
    indexer = next(module for module in model.modules() if isinstance(module, qwen4_exp.Qwen4ExpTextQSAIndexer))
    captured: list[tuple] = []
    indexer.register_forward_pre_hook(lambda _module, args: captured.append(args))
    with torch.no_grad():
        input_ids = torch.randint(0, model.config.vocab_size, (3, 13), generator=torch.Generator().manual_seed(0))
        model(input_ids=input_ids, use_cache=False)
    hidden_states, position_embeddings = captured[0][:2]
    positions = torch.arange(13)
    seen = positions[None] <= positions[:, None]
    if window is not None:
        seen &= positions[:, None] - positions[None] < window
    seen = (seen[None] & (positions >= torch.tensor([0, 3, 6])[:, None, None]))[:, None]
    mask = seen if dtype is torch.bool else torch.where(seen, 0.0, torch.finfo(dtype).min)
    original = qwen4_exp.Qwen4ExpTextQSAIndexer.forward
    patched = model_patches._patch_qwen4_exp_block_selection_by_masks(original)
    with torch.no_grad():
        expected = original(indexer, hidden_states, position_embeddings, mask, None)
        assert torch.equal(patched(indexer, hidden_states, position_embeddings, mask, None), expected)
    assert not torch.equal(expected, seen)  # the budget left blocks out


@pytest.mark.parametrize("speaking_speed", [1.0, 1.6])
def test_fastspeech2_length_regulator_as_gather_is_the_models(speaking_speed: float) -> None:
    # Phonemes of no frame, a row of no frame at all; when every duration is 0, eager makes each 1 in place.
    from transformers.models.fastspeech2_conformer import modeling_fastspeech2_conformer as fastspeech2

    from hfexport.exporters.workarounds.dynamo import model_patches

    original = fastspeech2.length_regulator
    patched = model_patches._patch_fastspeech2_length_regulator_as_gather(original)
    embeddings = torch.randn(3, 5, 4, generator=torch.Generator().manual_seed(0))
    for durations in (torch.tensor([[2, 0, 3, 1, 0], [0, 0, 0, 0, 0], [1, 4, 0, 0, 2]]), torch.zeros(3, 5)):
        durations, expected_durations = durations.long(), durations.long().clone()
        expected = original(embeddings, expected_durations, speaking_speed)
        assert torch.equal(patched(embeddings, durations, speaking_speed), expected)
        assert torch.equal(durations, expected_durations)


@pytest.mark.parametrize(
    "model_class", [pytest.param("Qwen4ExpTextModel", marks=pytest.mark.slow), "FastSpeech2ConformerModel"]
)
def test_data_dependent_selections_run_at_the_gates_second_shape(model_class: str) -> None:
    # Qwen4-Exp's queries see other block counts there; FastSpeech2's spectrogram, 1 frame long at the traced
    # inputs, is 11 frames long (its length is the program's own data-dependent size).
    model = tiny_model(model_class)
    exported = export_dynamic(model, sample_inputs(model), "dynamo")
    second = sample_inputs(model, seed=1, **SECOND_SHAPE)
    _assert_matches_eager(model, exported, second)


class _SmallEpsilonNorm(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-8)


def test_onnx_optimizer_keeps_an_epsilon_of_1e_8(monkeypatch: pytest.MonkeyPatch) -> None:
    # MuseSpark's expert RMSNorm: onnxscript's no-op rules took `+ 1e-8` for `+ 0`; on values of 1e-5 the eps decides.
    import onnx_ir as ir
    import onnxruntime

    x = torch.randn(2, 3, 8, generator=torch.Generator().manual_seed(0)) * 1e-5
    expected = _SmallEpsilonNorm()(x).numpy()

    def onnxruntime_diff() -> float:
        exporter, config = exporter_onnx.OnnxExporter(), exporter_onnx.OnnxConfig()
        program, _ = exporter.export_program(_SmallEpsilonNorm(), {"x": x}, config)
        session = onnxruntime.InferenceSession(ir.serde.serialize_model(program).SerializeToString())
        return float(abs(session.run(None, {"x": x.numpy()})[0] - expected).max())

    with monkeypatch.context() as patched:
        without_workaround(patched, "onnx", "_patch_optimizer_keeps_small_constants")
        assert onnxruntime_diff() > 0.1
    assert onnxruntime_diff() < 1e-5


def test_a_builtin_shadowed_in_one_module_is_removed_after_the_export() -> None:
    from transformers.models.neucodec import modeling_neucodec

    with registry.apply_patches("dynamo") as report:
        assert modeling_neucodec.int("101", 2) == 5 and modeling_neucodec.int(3.7) == 3
        assert "_patch_int_of_a_size_keeps_it_symbolic" in [entry["name"] for entry in report.installed]
    assert "int" not in vars(modeling_neucodec)


@pytest.mark.slow  # over 20 s
def test_neucodec_audio_length_stays_dynamic_only_with_int_patched(monkeypatch: pytest.MonkeyPatch) -> None:
    # `int(input_length * 1.5)` pinned the audio length by a guard: the program failed at any other length.
    model = tiny_model("NeuCodecModel")
    inputs = sample_inputs(model)
    other_length = sample_inputs(model, seed=1, batch_size=3, seq_length=11)
    with monkeypatch.context() as patched:
        without_workaround(patched, "dynamo", "_patch_int_of_a_size_keeps_it_symbolic")
        with pytest.raises(Exception, match="Guard failed"):
            export_dynamic(model, inputs, "dynamo")(**other_length)
    _assert_matches_eager(model, export_dynamic(model, inputs, "dynamo"), other_length)
