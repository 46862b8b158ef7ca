"""Every workaround, one module per registry key (``dynamo``, ``onnx``, ``executorch`` and its delegate ``xnnpack``),
plus ``kernels`` (ExecuTorch: decompositions of ops its runtime has no kernel for), ``lowered`` (model patches ONNX and
ExecuTorch share), ``fast_tracing`` (speed-ups of every trace), ``fast_lowering`` (ExecuTorch's lowering swaps) and
``fast_loading`` (torch.export.load's loading swaps).

Each backend's exporter module imports its workaround modules, so a workaround is registered when its backend loads
(this package imports nothing itself). ``grep -nE "^def (_patch_|_fix_|_aten_|_skip_|_static_|_multiples_)"
hfexport/exporters/workarounds/*.py`` lists them all; ``hfexport registry`` lists them with their key, stage and reason.
"""
