"""The coverage sweep (``scripts/coverage_sweep.py``) end to end, and its document.

CI runs the sweep on one cheap class on every backend through the gate's job runner, hfexport's engine only: every
cell must pass. The ``slow`` tests run one class of four families on every backend, and the sweep's representative
set with both engines, holding hfexport to at least the competitor's pass count on every backend. (The four
families' classes are also round-tripped on every backend, in process, by test_dynamo.py, test_onnx.py and
test_executorch.py.)
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch
import torch.utils._pytree as pytree
from support import load_script

from hfexport.gate import report, schema, views
from hfexport.gate.cells import Cell, Generation
from hfexport.tiny_models import sample_inputs, tiny_model

ROOT = Path(__file__).resolve().parent.parent
# One cheap class of four families; T5 runs on every backend in the backends' own tests, MoE (mixtral) in
# test_onnx.py and test_executorch.py.
FAMILY_SUBSET = {
    "decoder LM": "LlamaForCausalLM",
    "encoder": "BertForMaskedLM",
    "vision": "ViTForImageClassification",
    "audio": "Wav2Vec2ForCTC",
}


def _cells(paths: list[Path]) -> dict[tuple[str, str, str], dict]:
    cells = {}
    for path in paths:
        data = json.loads(path.read_text())
        assert schema.validate_report(data) == []
        for cell in data["cells"]:
            cells[(data["engine"], cell["model_class"], cell["backend"])] = cell
    return cells


def _sweep_passes_on_every_backend(classes: list[str], results: Path) -> None:
    sweep = load_script("coverage_sweep")
    paths = sweep.run_sweep(
        classes,
        list(sweep.BACKENDS),
        ["hfexport"],
        results,
        "ci",
        jobs=2,
        timeout=900,  # a hang guard, not a speed check: a cell takes 5-60 s on 2 idle cores, 10x that on a busy runner
        echo=lambda line: None,
    )
    cells = _cells(paths)
    assert len(cells) == len(classes) * len(sweep.BACKENDS)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    assert json.loads(paths[0].read_text())["sweep"]["commit"].rstrip("+") == head.stdout.strip()
    failures = [
        f"{c} · {b}: {report.cell_label(cell)}" for (_, c, b), cell in cells.items() if cell["status"] != "pass"
    ]
    assert failures == []


def test_sweep_of_one_class_passes_on_every_backend(tmp_path: Path) -> None:
    _sweep_passes_on_every_backend([FAMILY_SUBSET["vision"]], tmp_path / "results")


@pytest.mark.slow  # 12 cells: 120 CPU-s
def test_sweep_of_four_families_passes_on_every_backend(tmp_path: Path) -> None:
    _sweep_passes_on_every_backend(list(FAMILY_SUBSET.values()), tmp_path / "results")


def test_render_reports_both_engines_and_the_builder_list(tmp_path: Path) -> None:
    """The document from two engines' reports: totals, per-backend rows, and classes the builder could not make."""
    sweep = load_script("coverage_sweep")
    results = tmp_path / "results"
    results.mkdir()
    for stamp, engine, status in (("20260101T000000", "hfexport", "pass"), ("20260101T000001", "transformers", "fail")):
        data = report.new_report(engine, ["onnx"], {"mode": "models"}, {}, (1, 1), None)
        argv = ["run", "--models", "llama"]
        data.extra["sweep"] = {"set": "models", "seconds": 1.0, "argv": argv, "commit": "abc1234"}
        passed = Cell("llama", "LlamaForCausalLM", "onnx", status=status, timings={"export": 2.0})
        passed.max_abs_diff, passed.stage = (1e-6, None) if status == "pass" else (None, "onnx · x")
        broken = Cell("foo", "FooModel", "onnx", status="error", stage="build", error_type="ValueError", error="no")
        data.cells = [passed, broken]
        (results / f"{stamp}-{engine}.json").write_text(views.to_json(data.finalize()))
    text = sweep.render(results, tmp_path / "coverage.md")
    assert "| onnx | 1 | **1** | **0** | 0 | 1 | 0 |" in text
    assert "| llama | LlamaForCausalLM | pass | fail" in text
    assert "| foo | FooModel | `build: ValueError: no` |" in text
    assert "hfexport at `abc1234`: `coverage_sweep.py run --models llama`" in text
    assert (tmp_path / "coverage.md").read_text() == text


def test_a_class_the_builder_makes_since_leaves_the_builder_list_and_counts_for_hfexport(tmp_path: Path) -> None:
    """Both engines build with the same builder: the newest cell of any engine tells whether a class builds."""
    sweep = load_script("coverage_sweep")
    results = tmp_path / "results"
    results.mkdir()
    runs = (("transformers", "2026-01-01T00:00:00Z", "error"), ("hfexport", "2026-01-02T00:00:00Z", "pass"))
    for engine, stamp, status in runs:
        data = report.new_report(engine, ["onnx"], {"mode": "models"}, {}, (1, 1), None)
        data.created_at = stamp
        data.extra["sweep"] = {"set": "models", "seconds": 1.0, "argv": ["run", "--models", "foo"]}
        built = {} if status == "pass" else {"stage": "build", "error_type": "ValueError", "error": "no"}
        data.cells = [Cell("foo", "FooModel", "onnx", status=status, timings={"export": 1.0}, **built)]
        (results / f"{stamp.replace('-', '').replace(':', '')}-{engine}.json").write_text(views.to_json(data))
    text = sweep.render(results, tmp_path / "coverage.md")
    assert "0 swept classes could not be built" in text and "`build: ValueError: no`" not in text
    # hfexport alone; swept in January, before the gate ran a second shape: none of it counts as run at two shapes
    assert "| onnx | 1 | **1** | 100.0 % | 0 | **0** | — |" in text
    # not compared: only one engine's cell is built
    assert "| onnx | 0 |" not in text and "| onnx | 1 | **1** | **0** |" not in text


def test_cells_run_since_the_second_shape_are_counted_apart(tmp_path: Path) -> None:
    sweep = load_script("coverage_sweep")
    results = tmp_path / "results"
    results.mkdir()
    for stamp, status in (("2026-11-30T00:00:00Z", "pass"), ("2026-12-02T00:00:00Z", "fail")):
        data = report.new_report("hfexport", ["onnx"], {"mode": "models"}, {}, (1, 1), None)
        data.created_at = stamp
        data.extra["sweep"] = {"set": "models", "seconds": 1.0, "argv": ["run", "--models", "foo"]}
        model_class = "OldModel" if stamp < load_script("coverage_doc").SECOND_SHAPE_SINCE else "NewModel"
        data.cells = [Cell("foo", model_class, "onnx", status=status, timings={"export": 1.0})]
        (results / f"{stamp.replace('-', '').replace(':', '')}-hfexport.json").write_text(views.to_json(data))
    text = sweep.render(results, tmp_path / "coverage.md")
    assert "| onnx | 2 | **1** | 50.0 % | 1 | **0** | 0.0 % |" in text


def test_a_record_cell_without_a_date_still_lists_a_class_the_builder_cannot_make(tmp_path: Path) -> None:
    """The record's oldest cells carry no ``created_at``: their build errors still count."""
    sweep = load_script("coverage_sweep")
    store = tmp_path / "coverage.json"
    broken = Cell("foo", "FooModel", "onnx", status="error", stage="build", error_type="ValueError", error="no")
    store.write_text(json.dumps({"runs": [], "cells": [{**broken.as_dict(), "engine": "hfexport"}]}))
    text = sweep.render(tmp_path / "no-results", tmp_path / "coverage.md", store)
    assert "1 swept classes could not be built" in text and "| foo | FooModel | `build: ValueError: no` |" in text


def test_render_counts_a_shard_once_both_engines_ran_it(tmp_path: Path) -> None:
    sweep = load_script("coverage_sweep")
    results = tmp_path / "results"
    results.mkdir()
    runs = (("hfexport", 1), ("hfexport", 2), ("transformers", 1))
    for second, (engine, index) in enumerate(runs):
        data = report.new_report(engine, ["onnx"], {"mode": "heads"}, {}, (index, 2), None)
        argv = ["run", "--set", "heads", "--shard", f"{index}/2"]
        data.extra["sweep"] = {"set": "heads", "seconds": 1.0, "argv": argv}
        data.cells = [Cell("llama", "LlamaForCausalLM", "onnx", status="pass", timings={"export": 1.0})]
        (results / f"20260101T00000{second}-{engine}.json").write_text(views.to_json(data.finalize()))
    text = sweep.render(results, tmp_path / "coverage.md")
    assert "(set `heads`, shards 1/2)" in text
    # The shard only hfexport ran is listed under it, with how many of the set's classes have a cell.
    heads = len(load_script("coverage_selection").set_classes("heads"))
    assert f"  - hfexport alone: set `heads`, shards 2/2: 1 of its {heads} classes run." in text


def _onnx_report(results: Path, engine: str, stamp: str, status: str) -> None:
    data = report.new_report(engine, ["onnx"], {"mode": "models"}, {}, (1, 1), None)
    data.created_at = stamp
    data.extra["sweep"] = {"set": "models", "seconds": 60.0, "argv": ["run", "--models", "llama", "--backends", "onnx"]}
    data.cells = [Cell("llama", "LlamaForCausalLM", "onnx", status=status, timings={"export": 2.0})]
    (results / f"{stamp.replace('-', '').replace(':', '')}-{engine}.json").write_text(views.to_json(data))


def test_the_committed_record_rebuilds_the_document_and_later_runs_replace_its_cells(tmp_path: Path) -> None:
    """A sweep on a fresh checkout adds to the published cells: the record alone renders the same document."""
    sweep = load_script("coverage_sweep")
    results, store, doc = tmp_path / "results", tmp_path / "coverage.json", tmp_path / "coverage.md"
    results.mkdir()
    _onnx_report(results, "hfexport", "2026-01-01T00:00:00Z", "fail")
    _onnx_report(results, "transformers", "2026-01-01T00:00:00Z", "pass")
    published = sweep.render(results, doc, store)
    assert "| onnx | 1 | **0** | **1** |" in published

    fresh_checkout = tmp_path / "fresh"
    fresh_checkout.mkdir()
    assert sweep.render(fresh_checkout, doc, store) == published
    _onnx_report(fresh_checkout, "hfexport", "2026-01-02T00:00:00Z", "pass")
    _onnx_report(fresh_checkout, "transformers", "2025-12-31T00:00:00Z", "fail")  # older than the record's cell
    text = sweep.render(fresh_checkout, doc, store)
    assert "| onnx | 1 | **1** | **1** |" in text
    assert "4 gate runs" in text and "summed wall time hfexport 2 min, transformers.exporters 2 min" in text
    assert sweep.render(tmp_path / "fresh", doc, store) == text  # the reports are in the record now: no change


def _generation_report(results: Path, engine: str, stamp: str, generation: bool, cells: list[Cell]) -> None:
    data = report.new_report(engine, sorted({cell.backend for cell in cells}), {"mode": "models"}, {}, (1, 1), None)
    data.created_at = stamp
    argv = ["run", "--models", ",".join(cell.model_class for cell in cells), *(["--generation"] * generation)]
    data.extra["sweep"] = {"set": "models", "seconds": 1.0, "argv": argv, "generation": generation}
    data.cells = cells
    (results / f"{stamp.replace('-', '').replace(':', '')}-{engine}.json").write_text(views.to_json(data))


def test_render_counts_generation_where_the_gate_runs_it_and_decoder_lms_swept_without_it_as_not_run(
    tmp_path: Path,
) -> None:
    """Decoder-LM cells of a ``--generation`` sweep count as swept with it (a pass with a declined part, and a
    failure before generation, included); one swept without it is ``not run``; an encoder counts nowhere."""
    sweep = load_script("coverage_sweep")
    results, store, doc = tmp_path / "results", tmp_path / "coverage.json", tmp_path / "coverage.md"
    results.mkdir()
    match = Generation("pass", "4 greedy tokens match eager")
    declined = Generation("not_checked", "not checked: hfexport's slot cache holds attention keys and values only")
    timed = {"timings": {"export": 1.0}}
    swept_with_generation = [
        Cell("llama", "LlamaForCausalLM", "onnx", "pass", generation=match, generation_static=match, **timed),
        Cell("mistral", "MistralForCausalLM", "onnx", "pass", generation=declined, generation_static=match, **timed),
        Cell(
            "phi3", "Phi3ForCausalLM", "onnx", "fail", stage="onnx · x", error_type="RuntimeError", error="no", **timed
        ),
        Cell("bert", "BertForMaskedLM", "onnx", "pass", **timed),
    ]
    _generation_report(results, "hfexport", "2026-12-05T00:00:00Z", True, swept_with_generation)
    swept_without = [Cell("qwen2", "Qwen2ForCausalLM", "onnx", "pass", **timed)]
    _generation_report(results, "hfexport", "2026-12-05T00:00:01Z", False, swept_without)
    competitor = [
        Cell(cell.model_type, cell.model_class, "onnx", "pass", **timed)
        for cell in swept_with_generation + swept_without
    ]
    _generation_report(results, "transformers", "2026-12-05T00:00:02Z", False, competitor)

    text = sweep.render(results, doc, store)
    assert "| onnx | 4 | 3 | **2** | 66.7 % | 1 | 1 | — |" in text
    # The onnx table's last column, by class.
    rows = [line.strip("| ").split(" | ") for line in text.splitlines() if line.startswith("| ")]
    generation = {columns[1]: columns[-1] for columns in rows}
    slot_cache = "generation not checked: hfexport's slot cache holds attention keys and values only"
    assert generation["LlamaForCausalLM"] == "pass" and generation["MistralForCausalLM"] == slot_cache
    assert generation["Phi3ForCausalLM"] == "not reached" and generation["Qwen2ForCausalLM"] == "not run"
    assert generation["BertForMaskedLM"] == "—"
    # The record keeps every generation part: it alone renders the same document.
    assert sweep.render(tmp_path / "fresh", doc, store) == text


def test_a_cell_where_only_transformers_exportable_module_fails_is_an_hfexport_pass_and_the_module_s_failure(
    tmp_path: Path,
) -> None:
    """transformers' own module runs after every check of hfexport's exporters: its failure alone counts for
    hfexport's exporters as a pass, and in the generation table's own column as the module's failure."""
    sweep = load_script("coverage_sweep")
    results, store, doc = tmp_path / "results", tmp_path / "coverage.json", tmp_path / "coverage.md"
    results.mkdir()
    match = Generation("pass", "4 greedy tokens match eager")
    failed = Generation("fail", "Could not guard on data-dependent expression u2 > 1")
    timed = {"timings": {"export": 1.0}}
    parts = {"generation": match, "generation_static": match}
    module_fails = {"stage": "dynamo · export module", "error_type": "GuardOnDataDependentSymNode", "error": "u2 > 1"}
    ours = [
        Cell("llama", "LlamaForCausalLM", "dynamo", "pass", export_module=match, **parts, **timed),
        Cell("opt", "OPTForCausalLM", "dynamo", "fail", export_module=failed, **parts, **module_fails, **timed),
    ]
    _generation_report(results, "hfexport", "2026-12-05T00:00:00Z", True, ours)
    competitor = [Cell(cell.model_type, cell.model_class, "dynamo", "pass", **timed) for cell in ours]
    _generation_report(results, "transformers", "2026-12-05T00:00:01Z", False, competitor)

    text = sweep.render(results, doc, store)
    assert "| dynamo | 2 | 2 | **2** | 100.0 % | 0 | 0 | 1 of 2 (50.0 %) |" in text
    assert "| dynamo | 2 | **2** | **2** | 2 | 0 | 0 |" in text  # the totals, side by side with the competitor
    (row,) = [line for line in text.splitlines() if line.startswith("| opt | OPTForCausalLM |")]
    assert "| pass · transformers export module fails |" in row
    assert "| transformers export module fail: Could not guard on data-dependent expression u2 > 1 |" in row


@pytest.mark.slow
def test_representative_set_hfexport_at_least_transformers_exporters(tmp_path: Path) -> None:
    sweep = load_script("coverage_sweep")
    classes = load_script("coverage_selection").representative_classes()
    paths = sweep.run_sweep(classes, list(sweep.BACKENDS), list(sweep.ENGINES), tmp_path, "representative", jobs=2)
    cells = _cells(paths)
    for backend in sweep.BACKENDS:
        ours = sum(c["status"] == "pass" for (e, _, b), c in cells.items() if e == "hfexport" and b == backend)
        theirs = sum(c["status"] == "pass" for (e, _, b), c in cells.items() if e == "transformers" and b == backend)
        assert ours >= theirs, backend


# Classes the sweep found the tiny-model builder could not build or run eagerly, fixed since (the reason beside).
BUILDER_GAINS = [
    "SwinForImageClassification",  # per-stage depths and heads kept their full-size values
    "CvtForImageClassification",  # stage i needs at least i + 1 blocks
    "LiltModel",  # 2D layout embeddings are six slices of hidden_size // 6
    "MimiModel",  # depthwise upsampling conv groups; codecs take (batch, channels, time)
    "EncodecModel",  # (batch, channels, time) waveform
    "Wav2Vec2ConformerForCTC",  # vocab_size unset by default
    "Wav2Vec2BertForCTC",  # vocab_size unset; features sized by feature_projection_input_dim
    "ReformerForMaskedLM",  # axial position embedding halves add up to hidden_size
    "TableTransformerModel",  # timm backbone by default: the declared ResNet default instead
    "PerceptionLMModel",  # timm vision tower: a tiny ViT instead
    "PocketTTSModel",  # flow head's condition_dim sized to the backbone's width
    "NemotronH_Omni_Reasoning_V3",  # video patch size handed down to the vision tower kept
    "Qwen2_5_VisionTransformerPretrainedModel",  # numeric depth uncapped; windows in pixels
    "DetrModel",  # timm backbone by default: the declared ResNet default instead
    "Mask2FormerModel",  # its Swin backbone keeps the four stages whose levels the pixel decoder reads
    "AlignModel",  # EfficientNet tower's last stage as wide as the text projection
    "BltForCausalLM",  # hidden_size_global is a width; no cache (sized from the layerless outer config)
    "DepthProModel",  # fusion hooks within the tiny encoder's layers
    "CohereCompassForCausalLM",  # per-layer-type rope left to checkpoints
]


@pytest.mark.parametrize("name", BUILDER_GAINS)
def test_builder_gains_build_and_run_eagerly(name: str) -> None:
    model = tiny_model(name)
    with torch.no_grad():
        outputs = model(**sample_inputs(model))
    leaves = [
        leaf for leaf in pytree.tree_leaves(outputs) if isinstance(leaf, torch.Tensor) and leaf.is_floating_point()
    ]
    assert leaves and all(bool(leaf.isfinite().all()) for leaf in leaves)
