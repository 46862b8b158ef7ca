"""Runs ``dynamo`` exports: the ``ExportedProgram`` itself, as a module."""

from __future__ import annotations

import functools
from typing import Any

import torch

from .base import ModelRunner


class DynamoRunner(ModelRunner):
    def run(self, component: str, inputs: dict[str, Any]) -> Any:
        self.flatten_inputs(component, inputs)  # same input check as every other runner
        with torch.no_grad():
            return self._module(component)(**inputs)

    @functools.cache  # noqa: B019 - one runner per ExportedModel; unlifting the program is done once
    def _module(self, component: str) -> torch.nn.Module:
        return self.exported.programs[component].module()
