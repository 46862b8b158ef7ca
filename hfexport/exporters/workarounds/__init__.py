"""Every workaround, in one room (package) per backend, one file per theme inside it.

``dynamo/`` (key ``"dynamo"``: what torch.export needs, installed around every backend's trace, with its tracing and
loading speed-ups), ``onnx/`` (key ``"onnx"``), ``executorch/`` (key ``"executorch"`` and its delegate
``"executorch.xnnpack"``: patches, fixes, ops without a runtime kernel, XNNPACK, lowering swaps), plus
``onnx_and_executorch.py`` (model patches both of those backends need) and ``graph.py`` (walking a program's graphs).

Each backend's exporter module imports its room, so a workaround is registered when its backend loads (this package
imports nothing itself). ``grep -rnE "^def (_patch_|_fix_|_aten_|_skip_|_static_|_multiples_)"
hfexport/exporters/workarounds`` lists them all; ``hfexport registry`` lists them with their key, stage and reason.
"""
