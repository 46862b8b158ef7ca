"""Tiny seeded models: a model class built from its tiny config, and models saved with ``save_pretrained``."""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig, PretrainedConfig, PreTrainedModel

from ..torch_compat import _BatchNorm
from .classes import VARIANT_SEPARATOR, UnrunnableModelError, resolve_model_class
from .configs import tiny_config
from .tables import DEGENERATE_INIT, NEEDS_PACKAGES, UNRUNNABLE
from .variants import named_overrides


def tiny_model(
    name: str | type[PreTrainedModel],
    seed: int = 0,
    checkout: Path | None = None,
    overrides: dict[str, Any] | None = None,
) -> PreTrainedModel:
    """Build a seeded, random-weight, float32 tiny model in eval mode (``overrides``: see ``tiny_config``)."""
    # Before resolving: a class whose modeling module imports the package (HiggsAudioV2Tokenizer, torchaudio) does not
    # resolve without it.
    class_name = name.__name__ if isinstance(name, type) else name.partition(VARIANT_SEPARATOR)[0]
    missing = missing_packages(class_name)
    if missing:
        raise UnrunnableModelError(f"{class_name}: {missing}")
    model_class = resolve_model_class(name)
    if model_class.__name__ in UNRUNNABLE:
        raise UnrunnableModelError(f"{model_class.__name__}: {UNRUNNABLE[model_class.__name__]}")
    config = tiny_config(name, checkout=checkout, overrides={**named_overrides(name), **(overrides or {})})
    torch.manual_seed(seed)
    try:
        with _uninitialized_memory_as_nan():
            model = _construct(model_class, config)
    except ValueError as error:
        # A sub-model (a vision backbone, a codec) may lack SDPA even where the outer class supports it.
        if "attention implementation" not in str(error) or config._attn_implementation == "eager":
            raise
        config._attn_implementation = "eager"
        torch.manual_seed(seed)
        with _uninitialized_memory_as_nan():
            model = _construct(model_class, config)
    _draw_uninitialized(model, torch.Generator().manual_seed(seed))
    if config.model_type in DEGENERATE_INIT:
        _REDRAWS[DEGENERATE_INIT[config.model_type]](model, torch.Generator().manual_seed(seed))
    return model.to(torch.float32).eval()


@contextlib.contextmanager
def _uninitialized_memory_as_nan() -> Iterator[None]:
    """``torch.empty`` filled with NaN while the model is made, so a parameter its ``_init_weights`` never reaches is
    found (Qwen3-Omni's talker experts: whatever memory held, zeros in one process, NaN logits in the next)."""
    fill, deterministic = (
        torch.utils.deterministic.fill_uninitialized_memory,
        torch.are_deterministic_algorithms_enabled(),
    )
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)  # fill_uninitialized_memory acts in this mode only
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        yield
    finally:
        torch.utils.deterministic.fill_uninitialized_memory = fill
        torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)


def _draw_uninitialized(model: torch.nn.Module, generator: torch.Generator) -> None:
    # Seeded like the rest of the model, at the scale of transformers' default initializer_range.
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.is_floating_point() and parameter.isnan().any():
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.02)


def _construct(model_class: type[PreTrainedModel], config: PretrainedConfig) -> PreTrainedModel:
    return _built_by_parent(model_class, config) if _arguments_beside_config(model_class) else model_class(config)


def _arguments_beside_config(model_class: type[PreTrainedModel]) -> list[str]:
    """The constructor arguments a class requires beside its config (PatchTSTEncoder's num_patches)."""
    parameters = list(inspect.signature(model_class.__init__).parameters.values())[2:]  # self, config
    keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p.name for p in parameters if p.default is p.empty and p.kind in keyword]


def _built_by_parent(model_class: type[PreTrainedModel], config: PretrainedConfig) -> PreTrainedModel:
    """A sub-module class whose constructor takes more than its config (PatchTSTEncoder's num_patches, SwinEncoder's
    grid_size), as its parent model builds it: taken from the first model class of its modeling module that builds
    one from the same config."""
    for parent_class in vars(sys.modules[model_class.__module__]).values():
        if not _may_hold(parent_class, model_class, config):
            continue
        try:
            parent = parent_class(config)
        except (TypeError, ValueError, AttributeError, KeyError, IndexError):
            continue  # a head this config does not suit (another task's entries): not the parent
        child = next((module for module in parent.modules() if type(module) is model_class), None)
        if child is not None:
            return child
    arguments = ", ".join(_arguments_beside_config(model_class))
    raise TypeError(f"{model_class.__name__} takes {arguments} beside its config; no model of its module builds one")


def _may_hold(parent_class: Any, model_class: type[PreTrainedModel], config: PretrainedConfig) -> bool:
    return (
        isinstance(parent_class, type)
        and issubclass(parent_class, PreTrainedModel)
        and parent_class is not model_class
        and isinstance(parent_class.config_class, type)  # None on some base classes
        and isinstance(config, parent_class.config_class)
        and not _arguments_beside_config(parent_class)
    )


def missing_packages(model_class: str) -> str | None:
    """Why a class of ``NEEDS_PACKAGES`` cannot be built here ("needs timm and torchvision (...)"), or None."""
    needed = NEEDS_PACKAGES.get(model_class, ())
    failures = [failure for failure in map(_import_failure, needed) if failure]
    return f"needs {' and '.join(needed)} ({'; '.join(failures)})" if failures else None


@functools.cache
def _import_failure(package: str) -> str | None:
    """The one line ``import package`` fails with (a torchvision built for another torch fails on import), or None."""
    try:
        importlib.import_module(package)
    except Exception as error:
        return f"{package}: {type(error).__name__}: {' '.join(str(error).split())[:120]}"
    return None


def _trained_like_conv_scales(model: torch.nn.Module, generator: torch.Generator) -> None:
    """Unit BatchNorm scales and conv weights of std 1/sqrt(fan-in): activations keep their size layer to layer."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, _BatchNorm) and module.weight is not None:
                module.weight.fill_(1.0)
            elif isinstance(module, torch.nn.Conv2d):
                fan_in = module.weight[0].numel()
                module.weight.copy_(torch.randn(module.weight.shape, generator=generator) / fan_in**0.5)


def _random_router_gates(model: torch.nn.Module, generator: torch.Generator) -> None:
    """Router gate weights drawn like the model's other linears (std ``initializer_range``), not all zero."""
    # The decoder's: get_text_config() refuses a model with two text configs (Musicgen's text encoder and decoder).
    std = model.config.get_text_config(decoder=True).initializer_range
    with torch.no_grad():
        for module in model.modules():
            if type(module).__name__.endswith("Router") and isinstance(getattr(module, "gate", None), torch.nn.Linear):
                module.gate.weight.copy_(torch.randn(module.gate.weight.shape, generator=generator) * std)


def _distinct_group_tokens(model: torch.nn.Module, generator: torch.Generator) -> None:
    """Group tokens drawn (std ``initializer_range``) and assignment queries and keys of std 1/sqrt(fan-in): each patch
    goes to its group by a margin, as in trained checkpoints, not by the rounding of a tie."""
    std = model.config.vision_config.initializer_range
    with torch.no_grad():
        for module in model.modules():
            if isinstance(getattr(module, "group_token", None), torch.nn.Parameter):
                module.group_token.copy_(torch.randn(module.group_token.shape, generator=generator) * std)
            if type(module).__name__ == "GroupViTAssignAttention":
                for linear in (module.q_proj, module.k_proj):
                    linear.weight.copy_(torch.randn(linear.weight.shape, generator=generator) / linear.in_features**0.5)


_REDRAWS = {
    "conv_scales": _trained_like_conv_scales,
    "router_gates": _random_router_gates,
    "group_tokens": _distinct_group_tokens,
}


def load_local_model(directory: Path) -> PreTrainedModel:
    """A model saved with ``save_pretrained``: the class its config names under ``architectures``, in eval mode."""
    if not (directory / "config.json").is_file():
        raise FileNotFoundError(f"{directory} has no config.json: not a save_pretrained model directory")
    config = AutoConfig.from_pretrained(directory)
    architectures = getattr(config, "architectures", None) or []
    model_class = resolve_model_class(architectures[0] if architectures else config.model_type)
    return model_class.from_pretrained(directory).to(torch.float32).eval()
