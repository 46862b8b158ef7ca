"""Greedy generation on exported programs: what ``export_for_generation`` exports and the loop that runs it.

Components (each traced with ``exporter.export_program``, so every backend's own stages and workarounds apply):

- decoder-only models: ``prefill`` (the prompt, from an empty cache) and ``decode`` (one token on a filled cache);
- encoder-decoder models: ``encoder`` (run once) and ``decoder`` (one decoder token on a filled cache).

The KV cache is a **static slot cache passed in and out as plain tensors**: per layer one key and one value tensor
``[batch, kv_heads, max_cache_len, head_dim]``; the token at sequence index ``i`` lives in slot ``i``. Decode takes
the slot to write as a ``cache_position`` input and a ``[batch, max_cache_len]`` attention mask over the slots, so
one traced graph serves every cache length up to ``max_cache_len`` without any shape changing between steps. This
one layout is used on every backend: programs stay pure functions (no mutable state to reset between requests on
the ExecuTorch runtime, no ONNX in-place semantics), the loop stays backend-agnostic, and fixed cache shapes suit
ExecuTorch's memory planning. Sliding-window layers keep all ``max_cache_len`` slots: the window is applied by the
model's own mask, which compares absolute slot indices exactly as eager generation does.

The modules, in the order an export and then a generation request use them: ``cache`` (the slot cache and its
layout), ``components`` (the modules traced per component), ``export`` (``export_generation_components`` and the
``generation`` entry of export.json), ``greedy`` (``generate``, the loop on the exported programs). base.py calls in
here (``HfExporter.export_for_generation``, ``ExportedModel.generate``), so the exporter, its config and the exported
model it passes are typed Any: this package needs nothing from base.py.
"""

from __future__ import annotations

from .export import export_generation_components
from .greedy import GenerationLengthError, generate

__all__ = ["GenerationLengthError", "export_generation_components", "generate"]
