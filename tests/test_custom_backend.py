"""A backend added from outside hfexport with ``register_backend``, after SPEC.md's "adding a backend" example."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.utils._pytree as pytree

from hfexport.exporters import (
    AutoExportConfig,
    AutoHfExporter,
    DynamoConfig,
    DynamoExporter,
    ExportedModel,
    ModelRunner,
    backends,
    register_backend,
)
from hfexport.tiny_models import sample_inputs, tiny_model


@dataclasses.dataclass
class CoreAtenConfig(DynamoConfig):
    export_format: str = "core_aten"


class CoreAtenExporter(DynamoExporter):
    """Converts the traced program to the core ATen opset (what a compiler backend consumes)."""

    export_format = "core_aten"
    config_class = CoreAtenConfig
    program_suffix = ".bin"

    def export_program(self, model, sample_inputs, config):
        exported_program, metadata = super().export_program(model, sample_inputs, config)
        return exported_program.run_decompositions(), metadata

    @classmethod
    def save_program(cls, program, path: Path) -> None:
        torch.export.save(program, path)

    @classmethod
    def load_program(cls, path: Path):
        return torch.export.load(path)


class CoreAtenRunner(ModelRunner):
    """Runs the core ATen program on flat tensors and rebuilds the model's output with the recorded spec."""

    def run(self, component: str, inputs: dict[str, Any]) -> Any:
        self.flatten_inputs(component, inputs)  # the same input check as every runner
        graph_module = self.exported.programs[component].module()
        with torch.no_grad():
            outputs = graph_module(**inputs)
        return self.rebuild_outputs(component, pytree.tree_leaves(outputs))


@pytest.fixture
def registered():
    """Register the backend for one test; the table is restored afterwards."""
    saved = dict(backends._BACKENDS)
    yield
    backends._BACKENDS.clear()
    backends._BACKENDS.update(saved)


def test_custom_backend_exports_and_runs_through_auto_classes(registered, tmp_path):
    register_backend(CoreAtenExporter, CoreAtenRunner)
    model = tiny_model("bert")
    inputs = sample_inputs(model)
    config = AutoExportConfig.from_dict({"export_format": "core_aten", "dynamic": True})
    assert isinstance(config, CoreAtenConfig)
    exported = AutoHfExporter.from_config(config).export(model, inputs, config)
    directory = exported.save_pretrained(tmp_path / "bert-core_aten")
    assert {p.name for p in directory.iterdir()} == {"model.bin", "export.json", "config.json"}
    loaded = ExportedModel.from_pretrained(directory)
    other = sample_inputs(model, batch_size=3, seq_length=5, seed=1)
    outputs = loaded(**other)
    with torch.no_grad():
        expected = model(**other)
    assert type(outputs) is type(expected)
    torch.testing.assert_close(outputs.logits, expected.logits)
    ops = {str(node.target) for node in loaded.programs["model"].graph.nodes if node.op == "call_function"}
    assert "aten.linear.default" not in ops  # decomposed to core ATen (addmm/mm)


def test_backend_without_runner_exports_but_cannot_run(registered):
    register_backend(CoreAtenExporter)
    model = tiny_model("bert")
    inputs = sample_inputs(model)
    config = AutoExportConfig.from_dict({"export_format": "core_aten"})
    exported = AutoHfExporter.from_config(config).export(model, inputs, config)
    with pytest.raises(ValueError, match="without a runner"):
        exported(**inputs)
