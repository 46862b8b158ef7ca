"""transformers' own exportable modules, checked as ExecuTorch's LLM recipes run them (the "export module" part).

``transformers.integrations.executorch.TorchExportableModuleForDecoderOnlyLM`` wraps a decoder LM with a static cache
held in the module's buffers (``...WithStaticCache``, or ``...WithHybridCache`` for sliding-window configs) and
exports it with its own ``.export(...)``: torch.export's default strict mode, one token per call, the cache mutated
in place. The check exports a decoder LM that way with ``generation_config.cache_implementation = "static"`` (as the
recipes set it), runs the program token by token on the backend's runtime (the ``ExportedProgram`` on torch, or the
program lowered by hfexport's ExecuTorch stages on the ExecuTorch runtime) and compares the greedy tokens with eager
``generate`` under the same stopping rule (no EOS before ``tokens`` new tokens).

Runs in the gate's job process (it imports torch).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from hfexport import compat
from hfexport.exporters.generation.cache import LINEAR_ATTENTION_LAYERS
from hfexport.exporters.generation.static_cache import static_cache

# Cache slots of the wrapped module: the gate's prompt (7 tokens) and its new tokens fit.
MAX_CACHE_LEN = 16

Step = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


class ModuleDeclined(Exception):
    """transformers' exportable module refuses this model in its own checks (a config it does not support)."""


@contextmanager
def static_cache_implementation(model: Any) -> Iterator[None]:
    """``generation_config.cache_implementation = "static"`` while wrapping, as the recipes set it."""
    generation_config = model.generation_config
    before = generation_config.cache_implementation
    generation_config.cache_implementation = "static"
    try:
        yield
    finally:
        generation_config.cache_implementation = before


def export_module_program(model: Any, prompt: torch.Tensor) -> Any:
    """transformers' ``TorchExportableModuleForDecoderOnlyLM(model).export(...)`` on one token at cache position 0."""
    wrapper_class = compat.internal("transformers.integrations.executorch.TorchExportableModuleForDecoderOnlyLM")
    if wrapper_class is None:
        raise ModuleDeclined("this transformers has no integrations.executorch.TorchExportableModuleForDecoderOnlyLM")
    _decline_linear_attention(model)
    with static_cache_implementation(model):
        try:
            wrapper = wrapper_class(model, batch_size=1, max_cache_len=MAX_CACHE_LEN)
        except (ValueError, AssertionError) as refusal:  # its own sanity checks: the config is not one it supports
            raise ModuleDeclined(f"{type(refusal).__name__}: {refusal}") from refusal
        return wrapper.export(input_ids=prompt[:, :1], cache_position=torch.tensor([0]))


def _decline_linear_attention(model: Any) -> None:
    """transformers' module reads keys and values of every cache layer: a hybrid's linear-attention layers, which keep
    conv and recurrent states, raise there or lose their state between calls (Jamba, Qwen3Next, Inkling2, FalconH1)."""
    for index, layer in enumerate(static_cache(model, MAX_CACHE_LEN).layers):
        if isinstance(layer, LINEAR_ATTENTION_LAYERS):
            raise ModuleDeclined(
                f"transformers' exportable module carries attention keys and values only; {type(layer).__name__} "
                f"(layer {index}) also keeps conv and recurrent states (the static-cache part generates with them)"
            )


def runtime_step(program: Any, prompt: torch.Tensor, backend: str) -> Step:
    """A call of the exported program on ``backend``'s runtime: ``(input_ids, cache_position) -> logits``."""
    if backend == "dynamo":
        module = program.module()
        return lambda input_ids, cache_position: module(input_ids=input_ids, cache_position=cache_position)
    # Deliberately here: executorch is loaded only where the ExecuTorch backend runs.
    from executorch.runtime import Runtime, Verification

    from hfexport.exporters.exporter_executorch import ExecutorchConfig, ExecutorchExporter, program_bytes

    sample = {"input_ids": prompt[:, :1], "cache_position": torch.tensor([0])}
    lowered, _ = ExecutorchExporter().lower_program(program, sample, ExecutorchConfig(dynamic=False))
    loaded = Runtime.get().load_program(program_bytes(lowered), verification=Verification.InternalConsistency)
    # The step holds the Program, not only its Method: the Method points into the Program's .pte bytes, which are
    # freed with it (a step outliving its Program read freed memory: Gemma 4 crashed with SIGSEGV at its first call).
    return lambda input_ids, cache_position: loaded.load_method("forward").execute([input_ids, cache_position])[0]


def greedy_tokens(step: Step, prompt: torch.Tensor, new_tokens: int, eos_token_ids: list[int]) -> torch.Tensor:
    """The prompt, one token a call as the module takes it, then ``new_tokens`` greedy tokens with no EOS chosen."""
    tokens = prompt[0].tolist()
    for position in range(prompt.shape[1] + new_tokens - 1):
        logits = step(torch.tensor([[tokens[position]]]), torch.tensor([position]))[:, -1, :].clone()
        if position >= prompt.shape[1] - 1:
            logits[:, eos_token_ids] = -float("inf")
            tokens.append(int(logits.argmax(-1)))
    return torch.tensor([tokens])
