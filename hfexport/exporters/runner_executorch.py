"""Runs ``executorch`` exports on the ExecuTorch runtime (its Python bindings, ``executorch.runtime``)."""

from __future__ import annotations

import functools
from typing import Any

from .utils import ExportFailure, require

require("executorch", extra="executorch")

import torch  # noqa: E402
from executorch.runtime import Runtime  # noqa: E402

from .base import ModelRunner  # noqa: E402
from .exporter_executorch import program_bytes  # noqa: E402


class ExecutorchRunner(ModelRunner):
    """Feeds the flat inputs in traced order to the program's ``forward`` and rebuilds the model's outputs."""

    def run(self, component: str, inputs: dict[str, Any]) -> Any:
        flat = self.flatten_inputs(component, inputs)
        self.check_shapes(component, flat)
        feed = [value.contiguous() if isinstance(value, torch.Tensor) else value for value in flat]
        outputs = self._method(component).execute(feed)
        return self.rebuild_outputs(component, list(outputs))

    def check_shapes(self, component: str, flat: list[Any]) -> None:
        """Reject inputs the program was not built for, naming the input and the bound, before the runtime sees them.

        A dynamic dimension must lie within the bounds recorded at export time; any other dimension must equal the
        traced size. The runtime would otherwise fail with an opaque error or resize past its planned memory.
        """
        metadata = self.exported.components[component]
        bounds = metadata.get("dynamic_dims", {})
        for name, value, traced in zip(metadata["input_names"], flat, metadata["input_shapes"], strict=True):
            if not isinstance(value, torch.Tensor) or traced is None:
                continue
            if value.dim() != len(traced):
                raise ExportFailure(
                    f"{component}: input {name!r} has {value.dim()} dimensions, exported with {len(traced)}"
                )
            for dim, size in enumerate(value.shape):
                low_high = bounds.get(name, {}).get(str(dim))
                if low_high is None and size != traced[dim]:
                    raise ExportFailure(
                        f"{component}: input {name!r} dimension {dim} is {size}, but it was exported static "
                        f"with size {traced[dim]} (export with dynamic=True to vary it)"
                    )
                if low_high is not None and not low_high[0] <= size <= low_high[1]:
                    raise ExportFailure(
                        f"{component}: input {name!r} dimension {dim} is {size}, outside the exported bounds "
                        f"[{low_high[0]}, {low_high[1]}] (raise ExecutorchConfig.dynamic_upper_bound to allow it)"
                    )

    @functools.cache  # noqa: B019 - one runner per ExportedModel; each program is loaded once
    def _method(self, component: str) -> Any:
        program = Runtime.get().load_program(program_bytes(self.exported.programs[component]))
        return program.load_method("forward")
