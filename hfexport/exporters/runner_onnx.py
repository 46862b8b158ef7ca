"""Runs ``onnx`` exports on onnxruntime: one ``InferenceSession`` per component, inputs fed by name."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from .base import ExportedModel, ModelRunner
from .dependencies import require

require("onnx", "onnxruntime", extra="onnx")

import numpy as np  # noqa: E402
import onnx_ir as ir  # noqa: E402
import onnxruntime as ort  # noqa: E402
import torch  # noqa: E402


class OnnxRunner(ModelRunner):
    """``providers`` and ``session_options`` go to every ``onnxruntime.InferenceSession`` (CPU by default; without
    options, onnxruntime gets torch's intra-op thread count, which the gate sets per parallel job)."""

    def __init__(
        self,
        exported: ExportedModel,
        providers: Sequence[Any] = ("CPUExecutionProvider",),
        session_options: ort.SessionOptions | None = None,
    ):
        super().__init__(exported)
        self.providers = list(providers)
        if session_options is None:
            session_options = ort.SessionOptions()
            session_options.intra_op_num_threads = torch.get_num_threads()
        self.session_options = session_options

    def run(self, component: str, inputs: dict[str, Any]) -> Any:
        flat = self.flatten_inputs(component, inputs)
        session = self.session(component)
        names = self.exported.components[component]["input_names"]
        fed = {input.name for input in session.get_inputs()}
        # torch.onnx drops inputs the graph never reads (and None leaves): feed only what the session declares.
        feed = {name: _to_numpy(value) for name, value in zip(names, flat, strict=True) if name in fed}
        values: list[Any] = [torch.from_numpy(np.asarray(value)) for value in session.run(None, feed)]
        component_metadata = self.exported.components[component]
        left_out = {position: None for position in component_metadata.get("none_outputs", [])}
        left_out.update(component_metadata.get("constant_outputs", []))
        for position in sorted(left_out):
            values.insert(position, left_out[position])  # in ascending order: each counts those put back before it
        return self.rebuild_outputs(component, values)

    @functools.cache  # noqa: B019 - one runner per ExportedModel; a session is built once per component
    def session(self, component: str) -> ort.InferenceSession:
        program: ir.Model = self.exported.programs[component]
        # A loaded program is read by onnxruntime from its file (external weights included); a fresh one is serialized.
        source = program.meta.get("path") or ir.serde.serialize_model(program).SerializeToString()
        return ort.InferenceSession(source, sess_options=self.session_options, providers=self.providers)


def _to_numpy(value: Any) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().contiguous().numpy()
    return np.asarray(value)
