"""Program fixes (key ``"dynamo"``, stage 6): rewrites of the traced program every backend lowers."""

from __future__ import annotations

from typing import Any

import torch
from torch.export import ExportedProgram

from ....torch_compat import OpOverload
from ...registry import (
    register_fx_program_fix,
)


@register_fx_program_fix("dynamo")
def _fix_parameter_mutation_recomputed_each_call(program: ExportedProgram) -> bool:
    # rwkv (RwkvModel._rescale_layers): the first inference forward divides weights in place (div_); the program did
    # it on every call (torch.export's module divided its weights again each time; ExecuTorch returned each weight as
    # one more output). Out of place it divides the loaded weights each call: the weights eager's first call leaves.
    parameters = set(program.graph_signature.inputs_to_parameters)
    nodes, changed = list(program.graph.nodes), False
    for position, node in enumerate(nodes):
        parameter = node.args[0] if node.op == "call_function" and node.args else None
        functional = _out_of_place(node.target)
        if functional is None or getattr(parameter, "name", None) not in parameters:
            continue
        node.target = functional
        for later in nodes[position + 1 :]:
            later.replace_input_with(parameter, node)
        changed = True
    if changed:
        program.graph_module.recompile()
    return changed


def _out_of_place(op: Any) -> Any:
    """The out-of-place overload of an in-place aten op (``aten.div_.Tensor`` -> ``aten.div.Tensor``), else None."""
    if not isinstance(op, OpOverload) or not op.overloadpacket.__name__.endswith("_"):
        return None
    packet = getattr(torch.ops.aten, op.overloadpacket.__name__[:-1], None)
    return getattr(packet, op._overloadname, None)
