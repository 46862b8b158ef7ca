"""Greedy generation of a decoder LM's cell: hfexport's slot cache, transformers' StaticCache and transformers' own
exportable module, each compared token by token with eager ``generate``."""

from __future__ import annotations

import copy
import functools
import importlib.util
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from hfexport.exporters.generation.export import token_id_list

from ..cells import EXPORT_MODULE_BACKENDS, GENERATION_LABELS
from .comparing import OutputMismatch
from .export_module import ModuleDeclined, export_module_program, greedy_tokens, runtime_step
from .failures import CellFailure, first_line, step

GENERATION_TOKENS = 4


def generates(model_class: type, config: Any) -> bool:
    """Whether the gate runs greedy generation on a model of ``model_class`` with ``config``: a decoder-only model
    that can generate from ``input_ids`` (the coverage record counts its cells by this too)."""
    forward_inputs = inspect.signature(model_class.forward).parameters
    return bool(model_class.can_generate()) and not config.is_encoder_decoder and "input_ids" in forward_inputs


def generation_available(engine_name: str) -> bool:
    return engine_name == "hfexport" and importlib.util.find_spec("hfexport.exporters.generation") is not None


# The generation parts of a decoder LM's cell that hfexport exports, in the order they run, with the cache the
# exported components hold: hfexport's slot cache first (the default), then transformers' own StaticCache.
GENERATION_PARTS = (("generation", "slots"), ("generation_static", "static"))


def check_generation(
    model: Any, reference: Any, inputs: dict[str, Any], export: Callable, backend: str, cell: dict[str, Any], timings
) -> None:
    """A few greedy steps must pick eager's tokens: on exported prefill/decode programs holding hfexport's slot cache
    (``generation``) and transformers' StaticCache (``generation_static``), then through transformers' own exportable
    module (``export_module``) on the backends whose runtimes run it. A part that declines the model is not_checked."""
    input_ids = inputs["input_ids"]
    try:
        expected = eager_tokens(reference, input_ids)
    except Exception as error:  # eager itself has no greedy text generation (higgs_audio_v2 emits audio codebooks)
        detail = f"not compared: eager generate() fails: {type(error).__name__}: {error}"
        cell["generation"] = {"status": "skipped", "detail": detail.splitlines()[0][:300]}
        return
    unlike_tokens = _not_token_ids(expected)
    if unlike_tokens:
        cell["generation"] = {"status": "skipped", "detail": f"not compared: eager generate() {unlike_tokens}"}
        return
    for key, cache in GENERATION_PARTS:
        with _failing_part(cell, key), step(f"{backend} · {GENERATION_LABELS[key]}", timings, key):
            exported = _declined_or(
                cell, key, functools.partial(export, model, copy.deepcopy(inputs), backend, True, cache=cache)
            )
            if exported is not None:
                # The same stopping rule as eager's: no EOS before GENERATION_TOKENS new tokens.
                new_tokens = {"max_new_tokens": GENERATION_TOKENS, "min_new_tokens": GENERATION_TOKENS}
                _compare_tokens(exported.generate(input_ids, **new_tokens), expected, cell, key)
    if backend not in EXPORT_MODULE_BACKENDS:
        return
    if cell["generation_static"]["status"] == "not_checked":  # transformers' module holds the same StaticCache
        detail = "not checked: transformers' exportable module wraps a StaticCache, as the static-cache part does"
        cell["export_module"] = {"status": "not_checked", "detail": detail}
        return
    _check_export_module(model, reference, input_ids[:1], backend, cell, timings)


@contextmanager
def _failing_part(cell: dict[str, Any], key: str) -> Iterator[None]:
    """A model's failure inside a generation part ends the cell and marks that part failed, with its first line."""
    try:
        yield
    except CellFailure as failure:
        if failure.status == "fail" and cell.get(key) is None:
            cell[key] = {"status": "fail", "detail": failure.first_line[:300]}
        raise


def eager_tokens(reference: Any, input_ids: Any) -> Any:
    """Eager ``generate``'s greedy tokens after ``input_ids``: ``GENERATION_TOKENS`` new ones, no EOS before."""
    with torch.no_grad():
        return reference.generate(
            input_ids=input_ids,
            attention_mask=torch.ones_like(input_ids),
            max_new_tokens=GENERATION_TOKENS,
            min_new_tokens=GENERATION_TOKENS,
            do_sample=False,
        )


def _not_token_ids(generated: Any) -> str | None:
    """Why eager ``generate``'s result is no greedy token stream, if it is not: DiffusionGemma denoises blocks of
    tokens (an output object), Sesame CSM emits (batch, frames, codebooks) audio codes."""
    if not isinstance(generated, torch.Tensor):
        return f"returns a {type(generated).__name__}, not greedy token ids"
    if generated.dim() != 2:
        return f"emits {generated.dim()}-D audio codes, not token ids"
    return None


def _declined_or(cell: dict[str, Any], key: str, export: Callable[[], Any]) -> Any:
    """``export()``, or None with the part not_checked where the exporter declines the model (no Cache returned, a
    config StaticCache cannot lay out, a cache layer hfexport does not carry)."""
    try:
        return export()
    except NotImplementedError as declined:
        cell[key] = {"status": "not_checked", "detail": f"not checked: {first_line(declined)[:300]}"}
        return None


def _compare_tokens(produced: Any, expected: Any, cell: dict[str, Any], key: str) -> None:
    produced = produced if isinstance(produced, torch.Tensor) else torch.as_tensor(produced)
    same = produced.shape == expected.shape and bool((produced == expected).all())
    detail = f"{GENERATION_TOKENS} greedy tokens {'match' if same else 'differ from'} eager"
    cell[key] = {"status": "pass" if same else "fail", "detail": detail}
    if not same:
        raise OutputMismatch(f"{detail}: {produced.tolist()} != {expected.tolist()}")


def _check_export_module(
    model: Any, reference: Any, prompt: Any, backend: str, cell: dict[str, Any], timings: dict[str, float]
) -> None:
    """transformers' ``TorchExportableModuleForDecoderOnlyLM`` export, run token by token (see ``export_module``)."""
    expected = eager_tokens(reference, prompt)
    stage = f"{backend} · {GENERATION_LABELS['export_module']}"
    with _failing_part(cell, "export_module"), step(stage, timings, "export_module"):
        try:
            program = export_module_program(model, prompt)
        except ModuleDeclined as declined:
            cell["export_module"] = {"status": "not_checked", "detail": f"not checked: {first_line(declined)[:300]}"}
            return
        eos = token_id_list(reference.generation_config.eos_token_id)
        produced = greedy_tokens(runtime_step(program, prompt, backend), prompt, GENERATION_TOKENS, eos)
        _compare_tokens(produced, expected, cell, "export_module")
