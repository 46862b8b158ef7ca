"""Window-partition models export dynamic in about the time of a static export.

Declared ``Dim.AUTO``, a model's H and W reach its window partition as nested floor-division, Mod and Min expressions
whose symbolic reasoning took torch.export 30-300 s on tiny models (static: 1-5 s). Where the model's trace pins H
and W anyway (swin family, sam2, sam3) the image size is declared static and the batch stays dynamic; where H and W
really vary (swin2sr, in multiples of its window) they are declared multiples of the window, so the trace reasons over
products instead of floor divisions and Mods. Each removal test stops the trace at the first window partition instead
of waiting minutes for it.
"""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from support import max_abs_diff

from hfexport.exporters import (
    AutoExportConfig,
    AutoHfExporter,
    ExportStageError,
    exporter_dynamo,  # noqa: F401  (registers the workarounds taken out below)
    registry,
)
from hfexport.exporters.errors import ExportFailure, SpecializedDimension
from hfexport.tiny_models import sample_inputs, tiny_model

# (model class, the module whose window_partition it calls, the declaration, the module class it matches)
STATIC_IMAGE_SIZE = [
    (
        "SwinForImageClassification",
        "transformers.models.swin.modeling_swin",
        "_static_image_size_of_window_partition",
        "SwinLayer",
    ),
    (
        "Swinv2ForImageClassification",
        "transformers.models.swinv2.modeling_swinv2",
        "_static_image_size_of_window_partition",
        "Swinv2Layer",
    ),
    (
        "DonutSwinModel",
        "transformers.models.donut.modeling_donut_swin",
        "_static_image_size_of_window_partition",
        "DonutSwinLayer",
    ),
    (
        "MaskFormerSwinModel",
        "transformers.models.maskformer.modeling_maskformer_swin",
        "_static_image_size_of_window_partition",
        "MaskFormerSwinLayer",
    ),
    ("Sam2Model", "transformers.models.sam2.modeling_sam2", "_static_image_size_of_sam", "Sam2HieraDetModel"),
    ("Sam3Model", "transformers.models.sam3.modeling_sam3", "_static_image_size_of_sam", "Sam3Model"),
]
IDS = [case[0] for case in STATIC_IMAGE_SIZE]


class SymbolicImageSize(Exception):
    """Raised by a probe where a window partition gets (or makes) a height or width it should not."""


def _export(model: torch.nn.Module, inputs: dict, backend: str = "dynamo", dynamic: bool = True):
    config = AutoExportConfig.from_dict({"export_format": backend, "dynamic": dynamic})
    return AutoHfExporter.from_config(config).export(model, inputs, config)


def _without(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    kept = [w for w in registry._REGISTRY["dynamo"] if w.name not in names]
    assert len(kept) == len(registry._REGISTRY["dynamo"]) - len(names), names
    monkeypatch.setitem(registry._REGISTRY, "dynamo", kept)


def _probe(monkeypatch: pytest.MonkeyPatch, module_path: str, sizes: Any, bad: Any) -> list:
    """Wrap ``module_path.window_partition``: record ``sizes(input)``; a size ``bad`` holds for stops the trace there,
    before the slow views run."""
    module = importlib.import_module(module_path)
    original, seen = module.window_partition, []

    def window_partition(hidden_state: torch.Tensor, *args: Any) -> Any:
        seen.append(sizes(hidden_state))
        if any(bad(size) for size in seen[-1]):
            raise SymbolicImageSize(f"window_partition of sizes {seen[-1]}")
        return original(hidden_state, *args)

    monkeypatch.setattr(module, "window_partition", window_partition)
    return seen


def _batch_height_width(hidden_state: torch.Tensor) -> tuple:
    return tuple(hidden_state.shape[:3])


def _is_symbolic(size: Any) -> bool:
    return isinstance(size, torch.SymInt)


def _has_mod(size: Any) -> bool:
    return "Mod" in str(size)


@pytest.mark.parametrize(("model_class", "module_path", "declaration", "layer"), STATIC_IMAGE_SIZE, ids=IDS)
def test_static_image_size_is_needed(
    monkeypatch: pytest.MonkeyPatch, model_class: str, module_path: str, declaration: str, layer: str
) -> None:
    """Without the declaration H and W reach the window partition symbolic (then minutes of sympy)."""
    model = tiny_model(model_class, seed=0)
    inputs = sample_inputs(model)
    with monkeypatch.context() as patched:
        _without(patched, declaration)
        _probe(patched, module_path, lambda hidden_state: tuple(hidden_state.shape[1:3]), _is_symbolic)
        with pytest.raises(ExportStageError, match="SymbolicImageSize: window_partition of sizes"):
            _export(model, inputs)
    seen = _probe(monkeypatch, module_path, _batch_height_width, lambda _: False)
    exported = _export(model, inputs)
    assert seen and all(_is_symbolic(b) and isinstance(h, int) and isinstance(w, int) for b, h, w in seen)
    component = exported.components["model"]
    assert component["dynamic_dims"]["pixel_values"] == {"0": [2, None]}
    assert component["workarounds"]["static_dims"] == [
        {"name": declaration, "key": "dynamo", "target": f"{module_path}.{layer}"}
    ]


@pytest.mark.parametrize("backend", ["dynamo", "onnx", "executorch"])
def test_swin_batch_stays_dynamic_and_round_trips_at_batch_3(backend: str) -> None:
    pytest.importorskip({"dynamo": "torch", "onnx": "onnxruntime", "executorch": "executorch"}[backend])
    model = tiny_model("SwinForImageClassification", seed=0)
    inputs = sample_inputs(model)
    exported = _export(model, inputs, backend)
    assert list(exported.components["model"]["dynamic_dims"]) == ["pixel_values"]
    assert list(exported.components["model"]["dynamic_dims"]["pixel_values"]) == ["0"]
    for batch in (2, 3):
        second = sample_inputs(model, seed=1, batch_size=batch)
        with torch.no_grad():
            expected = model(**second)
        assert max_abs_diff(exported(**second).logits, expected.logits) < 1e-4
    height = inputs["pixel_values"].shape[2]
    with pytest.raises(SpecializedDimension, match=f"dimension 2 has size {2 * height}, but the program accepts only"):
        exported(pixel_values=torch.randn(2, 3, 2 * height, 2 * height))


def test_swin2sr_image_size_is_declared_in_window_multiples(monkeypatch: pytest.MonkeyPatch) -> None:
    """Swin2SR's H and W stay dynamic, in multiples of its window as eager takes them (patch_unembed views the features
    back at the unpadded size): declared so, no Mod reaches the window partition."""
    module_path = "transformers.models.swin2sr.modeling_swin2sr"
    model = tiny_model("Swin2SRForImageSuperResolution", seed=0)
    inputs = sample_inputs(model)
    with monkeypatch.context() as patched:
        _without(patched, "_multiples_of_swin2sr_window")
        _probe(patched, module_path, _batch_height_width, _has_mod)
        with pytest.raises(ExportStageError, match=r"SymbolicImageSize: window_partition of sizes .*Mod"):
            _export(model, inputs)
    seen = _probe(monkeypatch, module_path, _batch_height_width, _has_mod)
    exported = _export(model, inputs)
    assert [re.fullmatch(r"4\*s\d+", str(size)) is not None for size in seen[0]] == [False, True, True], seen[0]
    component = exported.components["model"]
    assert component["declared_dim_multiples"] == {"pixel_values": {"2": 4, "3": 4}}
    assert component["dynamic_dims"]["pixel_values"] == {"0": [2, None], "2": [8, None], "3": [8, None]}
    for height, width in [(32, 32), (36, 28), (64, 64)]:
        pixel_values = torch.randn(3, 3, height, width)
        with torch.no_grad():
            expected = model(pixel_values=pixel_values)
        assert max_abs_diff(exported(pixel_values=pixel_values), expected) < 1e-4
    pixel_values = torch.randn(1, 3, 32, 30)  # no multiple of the window: eager and the program both refuse it
    with pytest.raises(RuntimeError, match=r"shape '\[1, 32, 32, 30\]' is invalid"), torch.no_grad():
        model(pixel_values=pixel_values)
    with pytest.raises(ExportFailure, match=r"'pixel_values' dimension 3 is 30, not a multiple of 4: the model takes"):
        exported(pixel_values=pixel_values)


@pytest.mark.slow
@pytest.mark.parametrize(
    "model_class",
    [
        *IDS,
        "Swin2SRForImageSuperResolution",
    ],
)
def test_dynamic_export_within_3x_of_static(model_class: str) -> None:
    """Timed as the gate runs its jobs (scripts/bench_dynamic_vision.py): each export in a fresh fork of a process
    that ran the backend's preload, back to back (a loaded machine slows both alike)."""
    bench = Path(__file__).resolve().parents[1] / "scripts" / "bench_dynamic_vision.py"
    command = [sys.executable, str(bench), "--child", model_class, "dynamo", "--repeat", "1", "--without"]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    seconds = json.loads(done.stdout.splitlines()[-1])
    assert seconds["dynamic"] <= 3 * seconds["static"], seconds


@pytest.mark.parametrize(
    ("model_class", "declaration"),
    [
        ("xLSTMForCausalLM", "_static_sequence_of_python_loops_over_time"),
        pytest.param(
            "Nemotron3_5TranscribeAudioModel", "_static_sequence_of_python_loops_over_time", marks=pytest.mark.slow
        ),
        pytest.param("BltForCausalLM", "_static_sequence_of_entropy_patching", marks=pytest.mark.slow),
        ("MambaForCausalLM", "_static_sequence_of_python_loops_over_time"),
        # Mamba stands for the declaration's other models in CI.
        pytest.param("RwkvForCausalLM", "_static_sequence_of_python_loops_over_time", marks=pytest.mark.slow),
        pytest.param("CanineModel", "_static_sequence_of_python_loops_over_time", marks=pytest.mark.slow),
        ("ParakeetForTDT", "_static_tokens_of_lstm_prediction_networks"),
        pytest.param("Nemotron3_5AsrForRNNT", "_static_tokens_of_lstm_prediction_networks", marks=pytest.mark.slow),
        pytest.param("RecurrentGemmaForCausalLM", "_static_sequence_of_python_loops_over_time", marks=pytest.mark.slow),
        pytest.param("FunnelForMaskedLM", "_static_sequence_of_funnel_position_lists", marks=pytest.mark.slow),
        pytest.param(
            "DeepseekV4ForCausalLM", "_static_sequence_of_deepseek_v4_compression_windows", marks=pytest.mark.slow
        ),
        *(
            pytest.param(name, "_static_sequence_of_python_loops_over_time", marks=pytest.mark.slow)
            for name in ("FalconMambaForCausalLM", "JambaForCausalLM", "ZambaForCausalLM")
        ),
    ],
)
def test_sequences_unrolled_in_python_are_declared_static_and_the_gate_varies_only_the_batch(
    model_class: str, declaration: str
) -> None:
    # xlstm's kernels, the mamba family's, rwkv's and recurrent_gemma's scans, canine's local attention, parakeet's LSTM
    # prediction network and nemotron3.5's chunked audio encoder loop over time in Python, blt sizes its byte patches
    # by .item(), funnel keeps positions in Python lists, deepseek_v4 cuts compression windows by arithmetic on the
    # length: undeclared, the second shape failed ("specialized", or a guard on frames // 8).
    from hfexport.gate.checks.cell import run_cell

    job = {"model_type": "", "model_class": model_class, "module": None, "backend": "dynamo", "generation": False}
    cell = run_cell(job, None)
    assert cell["status"] == "pass", cell.get("error")
    assert cell["second_shape"]["status"] == "pass"
    assert {shape[0] for shape in cell["second_shape"]["inputs"].values()} == {3}
    assert declaration in cell["workarounds"]


def test_xcodec_declares_its_audio_length_static(monkeypatch: pytest.MonkeyPatch) -> None:
    # encode branches in Python on two frame counts: dynamic, torch's dim solver fails on ((s2/40)//8).
    model = tiny_model("XcodecModel", seed=0)
    exported = _export(model, sample_inputs(model))
    assert exported.components["model"]["declared_static_dims"] == {"input_values": [2]}
    batch_of_3 = sample_inputs(model, batch_size=3, seed=1)
    with torch.no_grad():
        assert max_abs_diff(exported(**batch_of_3), model(**batch_of_3)) <= 1e-4
    _without(monkeypatch, "_static_audio_length_of_frame_count_branch")
    with pytest.raises(ExportStageError, match=r"torch\.export trace"):
        _export(model, sample_inputs(model))


def test_a_runner_names_the_declaration_when_a_declared_static_dim_differs() -> None:
    model = tiny_model("xLSTMForCausalLM", seed=0)
    exported = _export(model, sample_inputs(model))
    assert exported.components["model"]["declared_static_dims"] == {"input_ids": [1]}
    with pytest.raises(SpecializedDimension, match="a static-dims workaround kept it static"):
        exported(input_ids=torch.ones(2, 11, dtype=torch.long))


@pytest.mark.parametrize(
    ("model_class", "declaration"),
    [
        # Siglip2 stands for the declaration's other models in CI.
        pytest.param("Lfm2VlModel", "_static_image_count_of_per_image_loops", marks=pytest.mark.slow),
        ("Siglip2VisionModel", "_static_image_count_of_per_image_loops"),
        pytest.param("PixtralVisionModel", "_static_image_count_of_per_image_loops", marks=pytest.mark.slow),
        ("HunYuanVLVisionTransformer", "_static_image_count_of_towers_looping_over_images"),
        pytest.param("Lfm3VlVisionModel", "_static_image_count_of_towers_looping_over_images", marks=pytest.mark.slow),
    ],
)
def test_models_looping_over_images_keep_the_image_count_static(model_class: str, declaration: str) -> None:
    # Undeclared, tracing unrolled the per-image loop and the second shape (3 images) failed as "specialized".
    from hfexport.gate.checks.cell import run_cell

    job = {"model_type": "", "model_class": model_class, "module": None, "backend": "dynamo", "generation": False}
    cell = run_cell(job, None)
    assert cell["status"] == "pass", cell.get("error")
    assert declaration in cell["workarounds"]
    assert cell["second_shape"] == {
        "status": "skipped",
        "detail": "a static-dims workaround keeps the batch static",
    }


def test_hiera_keeps_its_configured_image_size_static() -> None:
    # Its unroll schedule is sized from config.image_size: eager runs at that size only, and a dynamic H/W cost
    # ExecuTorch minutes of sympy and a program too large to load.
    model = tiny_model("HieraForImageClassification", seed=0)
    height = model.config.image_size[0]
    with pytest.raises(RuntimeError, match="must match the size"), torch.no_grad():
        model(pixel_values=torch.randn(2, 3, height + 16, height + 16))
    exported = _export(model, sample_inputs(model))
    component = exported.components["model"]
    assert component["dynamic_dims"]["pixel_values"] == {"0": [2, None]}
    assert component["declared_static_dims"] == {"pixel_values": [2, 3]}
    batch_of_3 = sample_inputs(model, batch_size=3, seed=1)
    with torch.no_grad():
        assert max_abs_diff(exported(**batch_of_3), model(**batch_of_3)) <= 1e-4
