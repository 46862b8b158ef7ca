"""hfexport's staged exporters: torch.export ("dynamo"), ONNX and ExecuTorch.

Importing this package loads neither onnx nor executorch; each backend imports its heavy dependencies on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from .auto import AutoExportConfig, AutoHfExporter, register_backend
from .backends import available_formats
from .base import ExportConfigMixin, ExportedModel, HfExporter, ModelRunner
from .errors import ExportFailure, ExportStageError, SpecializedDimension
from .registry import (
    register_dim_multiples,
    register_fx_node_fix,
    register_fx_program_fix,
    register_ir_fix,
    register_lowering_swap,
    register_onnx_optimizer_skip,
    register_onnx_translation,
    register_patch,
    register_static_dims,
)

_LAZY = {
    "DynamoConfig": "hfexport.exporters.exporter_dynamo",
    "DynamoExporter": "hfexport.exporters.exporter_dynamo",
    "OnnxConfig": "hfexport.exporters.exporter_onnx",
    "OnnxExporter": "hfexport.exporters.exporter_onnx",
    "ExecutorchConfig": "hfexport.exporters.exporter_executorch",
    "ExecutorchExporter": "hfexport.exporters.exporter_executorch",
    "SharedTrace": "hfexport.exporters.shared_trace",
    "named_leaves": "hfexport.exporters.pytree",
}

__all__ = [
    "AutoExportConfig",
    "AutoHfExporter",
    "ExportConfigMixin",
    "ExportFailure",
    "ExportStageError",
    "ExportedModel",
    "HfExporter",
    "ModelRunner",
    "SpecializedDimension",
    "available_formats",
    "register_backend",
    "register_dim_multiples",
    "register_fx_node_fix",
    "register_fx_program_fix",
    "register_ir_fix",
    "register_lowering_swap",
    "register_onnx_optimizer_skip",
    "register_onnx_translation",
    "register_patch",
    "register_static_dims",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
