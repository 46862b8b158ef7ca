"""Walking an exported program's graphs, higher-order ops' bodies and delegates' calls included: what the ONNX and
ExecuTorch rooms' fixes and lowering swaps share."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch


def program_nodes(graph_module: Any) -> Iterator[Any]:
    """Every node of ``graph_module``'s graph and of its submodules' (higher-order ops' bodies, delegates' calls)."""
    for module in graph_module.modules():
        if isinstance(module, torch.fx.GraphModule):
            yield from module.graph.nodes
