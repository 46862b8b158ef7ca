"""The ONNX room: workarounds of key ``"onnx"``, one module per stage of ``OnnxExporter``.

``patches`` (stage 1 torch patches, stage 2 torch.onnx and onnxscript patches), ``node_fixes`` (stage 3),
``translations`` (stage 4), ``ir_fixes`` (stage 5: optimizer skips, then IR fixes). Model patches ExecuTorch needs as
well are in ``workarounds/onnx_and_executorch.py``. Importing the room registers them all.
"""

from . import ir_fixes, node_fixes, patches, translations  # noqa: F401 - registers them
