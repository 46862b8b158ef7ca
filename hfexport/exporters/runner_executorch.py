"""Runs ``executorch`` exports on the ExecuTorch runtime (its Python bindings, ``executorch.runtime``)."""

from __future__ import annotations

import functools
from typing import Any

from .dependencies import require

require("executorch", extra="executorch")

import torch  # noqa: E402
from executorch.runtime import Runtime, Verification  # noqa: E402

from .base import ModelRunner  # noqa: E402
from .exporter_executorch import program_bytes  # noqa: E402


class ExecutorchRunner(ModelRunner):
    """Feeds the flat inputs in traced order to the program's ``forward`` and rebuilds the model's outputs."""

    bound_hint = "raise ExecutorchConfig.dynamic_upper_bound (hfexport export --dynamic-upper-bound) to allow it"

    def run(self, component: str, inputs: dict[str, Any]) -> Any:
        flat = self.flatten_inputs(component, inputs)
        feed = [value.contiguous() if isinstance(value, torch.Tensor) else value for value in flat]
        outputs = self._program(component).load_method("forward").execute(feed)
        return self.rebuild_outputs(component, list(outputs))

    @functools.cache  # noqa: B019 - one runner per ExportedModel; each program is loaded once
    def _program(self, component: str) -> Any:
        # The Program is what is kept, not its Method: a Method points into the Program's .pte bytes, freed with it.
        # The verifier on (the default, said here on purpose): a .pte may come from someone else.
        data = program_bytes(self.exported.programs[component])
        return Runtime.get().load_program(data, verification=Verification.InternalConsistency)
