"""The input-builder registry: a builder is a function registered for a stage with a predicate on the request."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from transformers import PretrainedConfig, PreTrainedModel


class Stage(enum.Enum):
    """The order ``sample_inputs`` walks the builders in (see the module docstring)."""

    TEXT = enum.auto()
    MAIN = enum.auto()
    REQUIRED = enum.auto()
    AUXILIARY = enum.auto()
    FINISH = enum.auto()
    PRECOMPUTED = enum.auto()


@dataclass(frozen=True)
class Request:
    """What ``sample_inputs`` was asked for, and the inputs built so far."""

    model: PreTrainedModel
    config: PretrainedConfig
    parameters: set[str]
    required: set[str]
    main_input: str
    batch_size: int
    seq_length: int
    generator: torch.Generator
    inputs: dict[str, torch.Tensor] = field(default_factory=dict)

    @property
    def missing(self) -> set[str]:
        return self.required - self.inputs.keys()


Build = Callable[[Request], dict[str, torch.Tensor]]


@dataclass(frozen=True)
class Builder:
    stage: Stage
    applies: Callable[[Request], bool]
    build: Build
    drops: tuple[str, ...]


# Input kind -> its builder, in registration order.
BUILDERS: dict[str, Builder] = {}


def builds(stage: Stage, when: Callable[[Request], bool], drops: tuple[str, ...] = ()) -> Callable[[Build], Build]:
    """Register a builder for ``stage`` that runs where ``when`` holds; ``drops``: inputs it replaces."""

    def register(build: Build) -> Build:
        kind = build.__name__.removeprefix("_")
        if kind in BUILDERS:
            raise ValueError(f"Two sample input builders for {kind!r}")
        BUILDERS[kind] = Builder(stage, when, build, drops)
        return build

    return register
