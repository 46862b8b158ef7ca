"""The ExecuTorch room: workarounds of key ``"executorch"`` (every delegate) and ``"executorch.xnnpack"``.

``patches`` (stage 2 torch patches, stage 3 ExecuTorch patches), ``fixes`` (stage 4 program fixes, stage 5 node
fixes), ops the portable runtime has no kernel for (``kernel_patches``: Python-level calls, ``kernel_node_fixes``: ops
of the traced graph), ``xnnpack`` (only when XNNPACK lowers) and ``fast_lowering`` (lowering swaps: speed, not
semantics). Model patches ONNX needs as well are in ``workarounds/onnx_and_executorch.py``. Importing the room
registers them all.
"""

# This order registers each kind's workarounds in the order they are installed or applied.
# isort: off
from . import patches, fixes, fast_lowering, kernel_patches, kernel_node_fixes, xnnpack  # noqa: F401 - registers them
# isort: on
