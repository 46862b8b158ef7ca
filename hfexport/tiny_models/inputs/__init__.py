"""Sample inputs: deterministic forward kwargs that fit a model, put together by a registry of input builders.

Each builder makes one kind of input (token ids, images, flat patches, waveforms, forecast windows, ...). It is
registered with ``@builds(stage, when=...)``: ``when`` is a predicate on the request (the model, its config, its
forward parameters, the inputs built so far), the function returns the inputs it adds, and its name, less the
leading underscore, is the kind it is registered under. ``sample_inputs`` walks the stages in the order of ``Stage``
and, within a stage, the builders in the order they are registered (the order of their module: ``main_input`` holds the
first two stages, ``required`` the third, ``finish`` the next two, ``precomputed`` the last):

1. ``TEXT``: token ids, for every model whose main input is text or that reads text beside it.
2. ``MAIN``: the main non-text input; only the first builder that applies runs.
3. ``REQUIRED``: forward arguments still required after the main input (by the signature, or by
   ``tables.NEEDED_INPUTS`` where the forward fails without an argument its signature leaves optional).
4. ``AUXILIARY``: side inputs a model would otherwise draw at random or take from another model.
5. ``FINISH``: what reads the final token ids (rows ending with eos, the attention mask), then decoder ids.
6. ``PRECOMPUTED``: what the model would derive from the values of its inputs (a packed tower's sequence layout),
   recorded from one eager run and passed precomputed, as transformers' ``vision_utils`` lets export callers do.

Every random input is drawn from one generator seeded by ``seed``, in walk order: a new builder goes where its inputs
belong in that order, and moving one changes the values of every input drawn after it.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping

import torch
from transformers import PreTrainedModel

from ..tables import NEEDED_INPUTS

# Importing the builder modules registers their builders.
from . import finish, main_input, precomputed, required  # noqa: F401
from .registry import BUILDERS, Request, Stage


def sample_inputs(
    model: PreTrainedModel, batch_size: int = 2, seq_length: int = 7, seed: int = 0
) -> dict[str, torch.Tensor]:
    """Return deterministic forward kwargs that fit the model's modality (text, vision, audio, seq2seq)."""
    if batch_size < 2 or seq_length < 2:
        raise ValueError("batch_size and seq_length must be >= 2 so exported dimensions stay dynamic")
    parameters = _forward_parameters(model)
    signature_required = {p.name for p in parameters.values() if p.default is p.empty and p.kind <= p.KEYWORD_ONLY}
    request = Request(
        model=model,
        config=model.config,
        parameters=set(parameters),
        required=signature_required | (set(NEEDED_INPUTS.get(model.config.model_type, ())) & set(parameters)),
        main_input=_main_input(model, set(parameters)),
        batch_size=batch_size,
        seq_length=seq_length,
        generator=torch.Generator().manual_seed(seed),
    )
    for stage in Stage:
        for builder in [b for b in BUILDERS.values() if b.stage is stage]:
            if not builder.applies(request):
                continue
            for name in builder.drops:
                request.inputs.pop(name, None)
            request.inputs.update(builder.build(request))
            if stage is Stage.MAIN:
                break
    return request.inputs


def _forward_parameters(model: PreTrainedModel) -> Mapping[str, inspect.Parameter]:
    parameters = inspect.signature(model.forward).parameters
    # Its sub-models: a wrapper may also hold the embeddings it shares (ProphetNetDecoderWrapper's word_embeddings).
    children = [child for child in model.children() if isinstance(child, PreTrainedModel)]
    if len(children) == 1 and all(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in parameters.values()):
        # A wrapper passing all its arguments on to its one sub-model (BartDecoderWrapper: self.decoder(*args,
        # **kwargs)) takes that sub-model's inputs.
        return inspect.signature(children[0].forward).parameters
    return parameters


def _main_input(model: PreTrainedModel, parameters: set[str]) -> str:
    name = getattr(model, "main_input_name", "input_ids")
    images = next((n for n in ("pixel_values", "flattened_patches") if n in parameters), None)
    if isinstance(name, str) and name not in parameters and name != "inputs" and images:
        # Vision towers that inherit their model's text main input name (GotOcr2VisionEncoder) read images
        # (Kosmos2_5VisionModel as Pix2Struct's flattened patches).
        return images
    if name == "inputs_embeds" and name not in parameters and "input_ids" in parameters:
        # SeamlessM4T's unit vocoders name inputs_embeds their main input but read unit ids.
        return "input_ids"
    embeds_only = "inputs_embeds" in parameters and "input_ids" not in parameters
    if isinstance(name, str) and name not in parameters and embeds_only:
        # Stacks whose model embeds the main input for them (DetrEncoder, TimeSeriesTransformerDecoder) read the
        # embeddings.
        return "inputs_embeds"
    if name != "inputs":
        return name
    # "inputs" stands for whatever the encoder reads: encoder-decoder wrappers (SpeechEncoderDecoder) also take it
    # under their encoder's own name, Perceiver's masked LM as input_ids, its image classifiers as pixel_values.
    encoder = model.get_encoder() if hasattr(model, "get_encoder") else model
    encoder_input = getattr(encoder, "main_input_name", None)
    if encoder is not model and encoder_input in parameters:
        return encoder_input
    if "input_ids" in parameters:
        return "input_ids"
    # Perceiver's image classifiers also take their images as pixel_values.
    return "pixel_values" if "pixel_values" in parameters else name
