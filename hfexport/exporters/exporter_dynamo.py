"""``DynamoExporter``: torch.export of a transformers model, the base every other backend converts from.

``DynamoExporter.export_program`` runs five stages, each marked below by a ``# ── Stage N: … ──`` banner.
Model patches that make a model traceable for every backend live here; backend-specific ones live in that
backend's exporter.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import inspect
import statistics
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.export import Dim, ExportedProgram
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols
from torch.nn.attention import SDPBackend, sdpa_kernel

from .. import compat
from .base import ExportConfigMixin, HfExporter
from .utils import PatchReport, apply_patches, export_stage, register_patch

# ── Stage 1: Forward-signature patch ──
# torch.export binds inputs against ``inspect.signature(model.forward)``; a forward taking ``**kwargs`` would
# bundle every sample input into one var-keyword tuple. Internal, not an extension point.


@contextlib.contextmanager
def flat_forward_signature(model: torch.nn.Module, input_names: list[str]) -> Iterator[None]:
    """Give ``model.forward`` an explicit keyword signature made of exactly ``input_names`` while tracing."""
    bound_forward = model.forward

    def forward(**kwargs: Any) -> Any:
        return bound_forward(**kwargs)

    forward.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for name in input_names]
    )
    model.forward = forward
    try:
        yield
    finally:
        del model.forward


# ── Stage 2: Model patches ──
# Swap model methods torch.export cannot trace for export-safe equivalents, for the duration of one export.
# Extend with ``@register_patch("dynamo", "transformers.models.<name>.modeling_<name>.<Class>.<method>")``; the
# patches are installed by ``DynamoExporter.export_program`` around the trace.


@register_patch("dynamo", "torch.nn.functional.scaled_dot_product_attention")
def _patch_sdpa_math_kernel_on_cpu(original: Callable) -> Callable:
    # sam3 (dynamic image size): CPU SDPA's fused-kernel choice guards on data-dependent sizes, "Could not guard on
    # data-dependent expression Eq(u0*u1, 16)"; the math kernel has no such check (upstream: torch's CPU sdp choice).
    # Only then: the math kernel's output strides break later views when torch.onnx re-decomposes (t5 dynamic).
    def scaled_dot_product_attention(query: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        tensors = [value for value in (query, *args, *kwargs.values()) if isinstance(value, torch.Tensor)]
        if query.device.type != "cpu" or not any(free_unbacked_symbols(tensor.shape) for tensor in tensors):
            return original(query, *args, **kwargs)
        with sdpa_kernel(SDPBackend.MATH):
            return original(query, *args, **kwargs)

    return scaled_dot_product_attention


@register_patch("dynamo", "transformers.masking_utils._vmap_expansion_sdpa")
def _patch_mask_expansion_by_broadcast(_original: Callable) -> Callable:
    # unlimited_ocr, gemma3/gemma4 VLMs, t5gemma2 (custom or/and mask functions): the torch.vmap mask expansion fails
    # in torch.onnx's run_decompositions ("tensor may have escaped from inside a function being vmapped").
    # Mask functions only index tensors with the four index grids, so broadcasting the grids is equivalent.
    def expansion(mask_function: Callable) -> Callable:
        def expanded(batch: torch.Tensor, head: torch.Tensor, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
            grid = (batch[:, None, None, None], head[None, :, None, None], q[None, None, :, None], kv[None, None, None])
            return mask_function(*grid).expand(batch.shape[0], head.shape[0], q.shape[0], kv.shape[0])

        return expanded

    return expansion


@register_patch("dynamo", "transformers.masking_utils.TransformGetItemToIndex")
def _patch_mask_indexing_as_getitem(_original: Callable) -> Callable:
    # t5gemma2 (vmap masks): indexing inside the mask functions becomes a ModIndex higher-order op that
    # torch.export.save rejects ("Unsupported getattr attribute function_const_func_spec0"). Only vmap needs that
    # op, and the broadcast expansion above replaces vmap, so plain indexing is equivalent.
    return contextlib.nullcontext


@register_patch("dynamo", "transformers.models.gemma3n.modeling_gemma3n.Gemma3nTextMLP._gaussian_topk")
def _patch_gaussian_cutoff_as_constant(_original: Callable) -> Callable:
    # gemma3n (activation sparsity): Normal(0, 1).icdf of a constant traces to erfinv, which has no ONNX function
    # (prims.erf_inv) and no ExecuTorch kernel (aten::erfinv.out); the multiplier is a constant, computed here.
    def _gaussian_topk(self: torch.nn.Module, inputs: torch.Tensor) -> torch.Tensor:
        multiplier = statistics.NormalDist().inv_cdf(self.activation_sparsity)
        mean = inputs.mean(dim=-1, keepdim=True)
        deviation = inputs.std(dim=-1, keepdim=True, unbiased=False)
        return torch.nn.functional.relu(inputs - (mean + deviation * multiplier))

    return _gaussian_topk


@register_patch("dynamo", "transformers.models.longcat_flash.modeling_longcat_flash.LongcatFlashExperts.forward")
def _patch_longcat_experts_dense(_original: Callable) -> Callable:
    # longcat_flash: the experts loop over the experts the router picked (nonzero, then .item()), a loop of
    # data-dependent length ("Could not guard on data-dependent expression Eq(u0, 0)"); run every expert on every
    # token and weight each result by its routing weight, zero where not picked (identity experts included).
    def forward(
        self: Any, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor
    ) -> torch.Tensor:
        routed = 0 if self.gate_up_proj is None else self.num_routed_experts
        identities = hidden_states.expand(self.total_experts - routed, *hidden_states.shape)
        if not routed:
            return _weighted_by_routing(identities, top_k_index, top_k_weights)
        gate, up = torch.einsum("th,eoh->eto", hidden_states, self.gate_up_proj[:routed]).chunk(2, dim=-1)
        expert_outputs = torch.einsum("eti,ehi->eth", self.act_fn(gate) * up, self.down_proj)
        return _weighted_by_routing(torch.cat([expert_outputs, identities]), top_k_index, top_k_weights)

    return forward


@register_patch("dynamo", "transformers.integrations.moe.ExpertsInterface._global_mapping")
def _patch_eager_experts_as_batched_mm(original: dict[str, Callable]) -> dict[str, Callable]:
    # openai_privacy_filter (its experts default to "eager"): the eager loop over the experts the router picked has
    # a data-dependent length ("Could not guard on data-dependent expression Eq(u0, 0)"); batched_mm runs the same
    # experts as batched matmuls (the other MoEs export their default grouped_mm).
    return {**original, "eager": original["batched_mm"]}


@register_patch("dynamo", "transformers.models.dbrx.modeling_dbrx.DbrxExperts.forward")
def _patch_dbrx_experts_dense(_original: Callable) -> Callable:
    # dbrx: its experts loop over the experts the router picked, a data-dependent loop (as longcat_flash's), and
    # take no experts implementation to switch to: run every expert on every token, weighted by routing.
    def forward(
        self: Any, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor
    ) -> torch.Tensor:
        batch_size, tokens = hidden_states.shape[0], hidden_states.reshape(-1, self.hidden_size)
        shape = (self.num_experts, self.ffn_hidden_size, self.hidden_size)
        gate = torch.einsum("th,efh->etf", tokens, self.mlp.w1.view(shape))
        up = torch.einsum("th,efh->etf", tokens, self.mlp.v1.view(shape))
        expert_outputs = torch.einsum("etf,efh->eth", self.mlp.activation_fn(gate) * up, self.mlp.w2.view(shape))
        return _weighted_by_routing(expert_outputs, top_k_index, top_k_weights).view(batch_size, -1, self.hidden_size)

    return forward


def _weighted_by_routing(
    expert_outputs: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor
) -> torch.Tensor:
    """Each token's sum of (experts, tokens, hidden) outputs weighted by its routing weights (zero where not picked)."""
    weights = top_k_weights.new_zeros(top_k_index.shape[0], expert_outputs.shape[0])
    weights = weights.scatter_add(1, top_k_index, top_k_weights)
    return torch.einsum("te,eth->th", weights, expert_outputs.to(weights.dtype)).to(expert_outputs.dtype)


_NLLB_MOE = "transformers.models.nllb_moe.modeling_nllb_moe"


@register_patch("dynamo", f"{_NLLB_MOE}.NllbMoeTop2Router._cast_classifier")
def _patch_nllb_moe_router_cast_when_needed(original: Callable) -> Callable:
    # nllb_moe (sparse layers): the router's .to(router_dtype) in forward fails on traced weights ("Couldn't swap
    # Linear.weight": Module.to swaps fake parameters even when the dtype already matches); cast only when it differs.
    def _cast_classifier(self: Any) -> None:
        if self.classifier.weight.dtype != self.dtype:
            original(self)

    return _cast_classifier


@register_patch("dynamo", f"{_NLLB_MOE}.math")
def _patch_nllb_moe_ceil_as_sym_ite(original: types.ModuleType) -> Any:
    # nllb_moe (sparse layers): torch.export.save cannot serialize the expert capacity's math.ceil of the token count
    # ("Failed serializing node ceil"; nor floor, for -(-x // 1)): the same ceiling of a size from trunc and sym_ite.
    def ceil(value: Any) -> Any:
        if not isinstance(value, torch.SymFloat):
            return original.ceil(value)
        truncated = torch.sym_int(value)
        return torch.sym_ite(value > truncated, truncated + 1, truncated)

    return types.SimpleNamespace(**{**vars(original), "ceil": ceil})


@register_patch("dynamo", f"{_NLLB_MOE}.NllbMoeExperts.forward")
def _patch_nllb_moe_experts_dense(_original: Callable) -> Callable:
    # nllb_moe (sparse layers): the experts loop over the experts hit (nonzero), a data-dependent loop as dbrx's: run
    # every expert on every token, each weighted by the router probabilities of the pairs its mask selects.
    def forward(self: Any, hidden_states: torch.Tensor, router_mask: torch.Tensor, router_probs: torch.Tensor) -> Any:
        expert_mask = torch.nn.functional.one_hot(router_mask, num_classes=self.num_experts).permute(2, 1, 0)
        weights = torch.einsum("ejt,tj->te", expert_mask.to(router_probs.dtype), router_probs)
        outputs = torch.stack([self[f"expert_{index}"](hidden_states) for index in range(self.num_experts)])
        if self.moe_token_dropout > 0:
            outputs = self.token_dropout(outputs) if self.training else outputs * (1 - self.moe_token_dropout)
        return torch.einsum("te,eth->th", weights, outputs.to(weights.dtype)).to(hidden_states.dtype)

    return forward


_MIMI, _ENCODEC = "transformers.models.mimi.modeling_mimi", "transformers.models.encodec.modeling_encodec"
_POCKET_TTS = "transformers.models.pocket_tts_audio_tokenizer.modeling_pocket_tts_audio_tokenizer"


@register_patch(
    "dynamo",
    f"{_MIMI}.MimiConv1d.forward",
    f"{_ENCODEC}.EncodecConv1d.forward",
    f"{_POCKET_TTS}.PocketTTSAudioTokenizerConv1d.forward",
)
def _patch_conv1d_padding_from_sizes(original: Callable) -> Callable:
    # mimi, encodec, pocket_tts codecs: the padding comes from int64 buffers and torch.ceil, so every pad size is
    # read from a tensor ("Could not guard on data-dependent expression Eq(u26 + u27, ...)"); the same sizes in
    # integer arithmetic on the conv's own kernel, stride and dilation.
    def forward(self: Any, hidden_states: torch.Tensor, padding_cache: Any = None) -> torch.Tensor:
        if padding_cache is not None:
            return original(self, hidden_states, padding_cache)
        conv = self.conv
        kernel = (conv.kernel_size[0] - 1) * conv.dilation[0] + 1
        stride, length = conv.stride[0], hidden_states.shape[-1]
        total = kernel - stride
        extra = -((kernel - total - length) // stride) * stride + kernel - total - length  # to a whole last frame
        left, right = (total, extra) if self.causal else (total - total // 2, total // 2 + extra)
        hidden_states = conv(self._pad1d(hidden_states, (left, right), mode=self.pad_mode))
        return self.norm(hidden_states) if getattr(self, "norm_type", None) == "time_group_norm" else hidden_states

    return forward


_DEEPSEEK_V2 = "transformers.models.deepseek_v2.modeling_deepseek_v2"
_LLAMA4 = "transformers.models.llama4.modeling_llama4"


@register_patch(
    "dynamo", f"{_DEEPSEEK_V2}.DeepseekV2RotaryEmbedding.forward", f"{_LLAMA4}.Llama4TextRotaryEmbedding.forward"
)
def _patch_rotary_frequencies_as_cos_sin(original: Callable) -> Callable:
    # deepseek_v2, llama4 rotate by complex products (torch.polar, view_as_complex), which neither ONNX ("No
    # decompositions registered for the complex-valued input") nor ExecuTorch's edge dialect ("view_as_complex_copy
    # does not support automatic differentiation") expresses: carry each frequency as a real (cos, sin) pair.
    dynamic_rope_update = compat.internal("transformers.modeling_rope_utils.dynamic_rope_update")
    if dynamic_rope_update is None:
        return original

    @torch.no_grad()
    @dynamic_rope_update
    def forward(self: Any, x: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        freqs = position_ids[..., None].float() * self.inv_freq.to(device=x.device, dtype=torch.float)
        return torch.stack((freqs.cos(), freqs.sin()), dim=-1) * self.attention_scaling

    return forward


@register_patch("dynamo", f"{_DEEPSEEK_V2}.apply_rotary_emb")
def _patch_rotary_product_as_real(original: Callable) -> Callable:
    # deepseek_v2 (queries as batch, heads, positions): the complex product of the (cos, sin) pairs, in real numbers.
    return _real_rotary_product(heads_dim=1)


@register_patch("dynamo", f"{_LLAMA4}.apply_rotary_emb")
def _patch_llama4_rotary_product_as_real(original: Callable) -> Callable:
    # llama4 (queries as batch, positions, heads): the same product, broadcast over the heads at dim 2.
    return _real_rotary_product(heads_dim=2)


def _real_rotary_product(heads_dim: int) -> Callable:
    def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        pairs = x.float().reshape(*x.shape[:-1], -1, 2)
        real, imag = pairs[..., 0], pairs[..., 1]
        return torch.stack((real * cos - imag * sin, real * sin + imag * cos), dim=-1).flatten(3).type_as(x)

    def apply_rotary_emb(xq: torch.Tensor, xk: torch.Tensor, freqs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        cos, sin = freqs[..., 0].unsqueeze(heads_dim), freqs[..., 1].unsqueeze(heads_dim)
        return rotate(xq, cos, sin), rotate(xk, cos, sin)

    return apply_rotary_emb


# ── Stage 3: Pytree registration ──
# torch.export flattens inputs and outputs with pytree: every ``Cache`` and ``ModelOutput`` type must be
# registered. Caches are walked attribute by attribute: tensors become leaves, everything else the context.
# A type the attribute walk cannot reach gets a branch in ``_flatten_to_context`` / ``_unflatten_from_context``.

_TENSOR = "__tensor__"


def _class_path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _class_from_path(path: str) -> type:
    module_name, _, qualname = path.rpartition(".")
    return getattr(importlib.import_module(module_name), qualname)


def _is_walkable_object(value: Any) -> bool:
    # Hybrid models (qwen3_next, bailing_hybrid, jamba, ...) keep conv/recurrent states in linear-attention layers,
    # which do not derive from CacheLayerMixin; an older transformers may lack some of these layer kinds.
    from transformers import Cache

    return isinstance(value, (Cache, *compat.internal_types(*_CACHE_LAYER_TYPES)))


_CACHE_LAYER_TYPES = (
    "transformers.cache_utils.CacheLayerMixin",
    "transformers.cache_utils.LinearAttentionCacheLayerMixin",
    "transformers.cache_utils.DummyLayer",
)


def _flatten_to_context(value: Any, leaves: list[torch.Tensor]) -> Any:
    """Append the tensors of ``value`` to ``leaves``; return a JSON-able context that rebuilds everything else."""
    if isinstance(value, torch.Tensor):
        leaves.append(value)
        return _TENSOR
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        # A symbolic scalar left on a cache layer (e.g. a sliding window's cumulative length) has no tensor slot.
        return {"symbolic": str(value)}
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).removeprefix("torch.")}
    if isinstance(value, torch.device):
        return {"device": str(value)}
    if isinstance(value, type):
        # Caches that grow layers lazily keep the layer class to make (t5gemma2's cross-attention cache).
        return {"class": _class_path(value)}
    if isinstance(value, (list, tuple)):
        return {"list" if isinstance(value, list) else "tuple": [_flatten_to_context(v, leaves) for v in value]}
    if isinstance(value, dict):
        context = {"dict": {str(k): _flatten_to_context(v, leaves) for k, v in value.items()}}
        # Linear-attention layers index their states by int: keep the key type through the JSON context.
        return {**context, "int_keys": True} if value and all(type(k) is int for k in value) else context
    if _is_walkable_object(value):
        attributes = {name: _flatten_to_context(v, leaves) for name, v in vars(value).items()}
        return {"object": _class_path(type(value)), "attributes": attributes}
    raise TypeError(f"cannot flatten {type(value).__name__} inside a cache: add a branch to _flatten_to_context")


def _unflatten_from_context(context: Any, leaves: Iterator[Any]) -> Any:
    if context == _TENSOR:
        return next(leaves)
    if not isinstance(context, dict):
        return context
    if "dtype" in context:
        return getattr(torch, context["dtype"])
    if "device" in context:
        return torch.device(context["device"])
    if "class" in context:
        return _class_from_path(context["class"])
    if "symbolic" in context:
        return None
    if "list" in context or "tuple" in context:
        items = [_unflatten_from_context(c, leaves) for c in context.get("list", context.get("tuple"))]
        return items if "list" in context else tuple(items)
    if "dict" in context:
        key = int if context.get("int_keys") else str
        return {key(k): _unflatten_from_context(c, leaves) for k, c in context["dict"].items()}
    instance = object.__new__(_class_from_path(context["object"]))
    for name, attribute_context in context["attributes"].items():
        setattr(instance, name, _unflatten_from_context(attribute_context, leaves))
    return instance


def _leaf_paths(context: Any, prefix: str = "") -> list[str]:
    """Readable dotted names of the leaves a context describes: ``layers.0.keys`` reads as ``0.key``."""
    if context == _TENSOR:
        return [prefix]
    if not isinstance(context, dict):
        return []
    join = (lambda name: f"{prefix}.{name}") if prefix else (lambda name: str(name))
    if "list" in context or "tuple" in context:
        items = context.get("list", context.get("tuple"))
        return [p for i, c in enumerate(items) for p in _leaf_paths(c, join(i))]
    if "dict" in context:
        return [p for k, c in context["dict"].items() for p in _leaf_paths(c, join(k))]
    if "attributes" in context:
        paths = []
        for name, attribute_context in context["attributes"].items():
            if name == "layers":
                paths += _leaf_paths(attribute_context, prefix)
            else:
                paths += _leaf_paths(attribute_context, join({"keys": "key", "values": "value"}.get(name, name)))
        return paths
    return []


def _cache_flatten(cache: Any) -> tuple[list[torch.Tensor], Any]:
    leaves: list[torch.Tensor] = []
    context = _flatten_to_context(vars(cache), leaves)
    return leaves, context


def _cache_unflatten(values: Any, context: Any, cls: type) -> Any:
    instance = object.__new__(cls)
    for name, value in _unflatten_from_context(context, iter(values)).items():
        setattr(instance, name, value)
    return instance


def _cache_flatten_with_keys(cache: Any) -> tuple[list[tuple[Any, torch.Tensor]], Any]:
    leaves, context = _cache_flatten(cache)
    names = _leaf_paths({"attributes": context["dict"]})
    return [(pytree.GetAttrKey(name), leaf) for name, leaf in zip(names, leaves, strict=True)], context


def register_pytree_type(cls: type) -> None:
    """Register one cache type with pytree (idempotent); its context serializes as JSON for saved programs."""
    if cls in pytree.SUPPORTED_NODES:
        return
    pytree.register_pytree_node(
        cls,
        _cache_flatten,
        lambda values, context: _cache_unflatten(values, context, cls),
        serialized_type_name=_class_path(cls),
        to_dumpable_context=lambda context: context,
        from_dumpable_context=lambda dumped: dumped,
        flatten_with_keys_fn=_cache_flatten_with_keys,
    )


def _subclasses(cls: type) -> Iterator[type]:
    for subclass in cls.__subclasses__():
        yield subclass
        yield from _subclasses(subclass)


def register_cache_types() -> list[str]:
    """Register every ``Cache`` subclass loaded so far (model-specific ones too, once their module is imported)."""
    from transformers import Cache

    classes = [Cache, *_subclasses(Cache)]
    for cls in classes:
        register_pytree_type(cls)
    return [_class_path(cls) for cls in classes]


def ensure_pytree_types(type_paths: list[str]) -> None:
    """Before loading a saved program: import and register every type its input/output specs name."""
    from transformers import Cache

    for path in type_paths:
        # ModelOutput subclasses register themselves with pytree when their class is created: importing is enough
        # (instantiating one would fail on outputs with required fields, DPRQuestionEncoderOutput).
        cls = _class_from_path(path)
        if issubclass(cls, Cache):
            register_pytree_type(cls)


def _spec_types(spec: pytree.TreeSpec) -> set[str]:
    found = set()
    if spec.type not in (None, list, tuple, dict) and spec.type in pytree.SUPPORTED_NODES:
        found.add(_class_path(spec.type))
    for child in spec.children():
        found |= _spec_types(child)
    return found


def leaf_names(spec: pytree.TreeSpec) -> list[str]:
    """A readable name per leaf of a spec: ``input_ids``, ``logits``, ``past_key_values.0.key``."""
    # Tensors as placeholders: the cache walk only turns tensors into leaves.
    placeholder = pytree.tree_unflatten([torch.empty(0) for _ in range(spec.num_leaves)], spec)
    names = []
    for path, _ in pytree.tree_flatten_with_path(placeholder)[0]:
        parts = []
        for entry in path:
            if isinstance(entry, pytree.MappingKey):
                parts.append(str(entry.key))
            elif isinstance(entry, pytree.SequenceKey):
                parts.append(str(entry.idx))
            elif isinstance(entry, pytree.GetAttrKey):
                parts.append(entry.name)
            else:
                parts.append(str(entry).strip(".[]"))
        names.append(".".join(parts))
    return names


# ── Stage 4: Dynamic shapes ──
# With ``dynamic=True`` every dimension of every tensor input, cache leaves included, gets ``Dim.AUTO``:
# torch.export keeps what can vary dynamic and specializes the rest. ``DynamoConfig.dynamic_shapes`` overrides it.


def auto_dynamic_shapes(sample_inputs: dict[str, Any], upper_bound: int | None = None) -> dict[str, Any]:
    """``Dim.AUTO`` on every dimension; a pytree-registered object (a cache) gets a list per flattened leaf.

    With ``upper_bound`` every dimension is capped at ``max(upper_bound, traced size)``.
    """

    def for_value(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            if upper_bound is None:
                return dict.fromkeys(range(value.dim()), Dim.AUTO)
            return {dim: Dim.AUTO(max=max(upper_bound, size)) for dim, size in enumerate(value.shape)}
        if isinstance(value, (list, tuple)):
            return type(value)(for_value(v) for v in value)
        if isinstance(value, dict):
            return {k: for_value(v) for k, v in value.items()}
        if type(value) in pytree.SUPPORTED_NODES:
            return [for_value(leaf) for leaf in pytree.tree_leaves(value)]
        return None

    return {name: for_value(value) for name, value in sample_inputs.items()}


# ── Stage 5: State cleanup ──
# Some models store tensors on a submodule inside ``forward``; after tracing those are fake tensors that would
# poison the next eager call. Each listed attribute is saved, cleared for the trace and restored afterwards.
# Extend by adding the attribute name to ``_STATEFUL_CACHE_ATTRS``.

_STATEFUL_CACHE_ATTRS = (
    "cached_rotary_positional_embedding",  # wav2vec2_bert, seamless_m4t: rotary table cached on first forward
    "cached_sequence_length",  # same models: the length that table was built for
)


@contextlib.contextmanager
def stateful_attributes_cleared(model: torch.nn.Module) -> Iterator[None]:
    saved = [
        (module, name, getattr(module, name))
        for module in model.modules()
        for name in _STATEFUL_CACHE_ATTRS
        if name in vars(module)
    ]
    for module, name, _ in saved:
        setattr(module, name, None)
    try:
        yield
    finally:
        for module, name, value in saved:
            setattr(module, name, value)


@dataclasses.dataclass
class DynamoConfig(ExportConfigMixin):
    """torch.export options. ``dynamic_shapes`` (torch.export's own structure) overrides ``dynamic``."""

    export_format: str = "dynamo"
    dynamic: bool = False
    dynamic_shapes: Any = None
    strict: bool = False


class DynamoExporter(HfExporter):
    export_format = "dynamo"
    config_class = DynamoConfig
    program_suffix = ".pt2"

    def export_program(
        self, model: torch.nn.Module, sample_inputs: dict[str, Any], config: DynamoConfig
    ) -> tuple[ExportedProgram, dict[str, Any]]:
        """Run the five stages and return the ``ExportedProgram`` with what was recorded while tracing."""
        patches = PatchReport()
        started = time.perf_counter()
        with (
            flat_forward_signature(model, list(sample_inputs)),
            export_stage("dynamo", 2, "model patches"),
            apply_patches("dynamo", patches),
            apply_patches(self.export_format, patches),
        ):
            cache_types = register_cache_types()
            dynamic_shapes = config.dynamic_shapes
            if dynamic_shapes is None and config.dynamic:
                dynamic_shapes = auto_dynamic_shapes(sample_inputs)
            with stateful_attributes_cleared(model), torch.no_grad():
                program = torch.export.export(
                    model, (), kwargs=dict(sample_inputs), dynamic_shapes=dynamic_shapes, strict=config.strict
                )
        metadata = program_metadata(program, sample_inputs)
        metadata["cache_types_registered"] = len(cache_types)
        metadata["workarounds"] = {
            "patches": patches.installed,
            "unresolved": patches.unresolved,
            "fixes": [],
            "disabled": compat.disabled(),  # transformers internals this checkout lacks: what was off
        }
        metadata["timings"] = {"torch.export": round(time.perf_counter() - started, 3)}
        return program, metadata

    @classmethod
    def save_program(cls, program: ExportedProgram, path: Path) -> None:
        torch.export.save(program, path)

    @classmethod
    def load_program(cls, path: Path) -> ExportedProgram:
        return torch.export.load(path)


def program_metadata(program: ExportedProgram, sample_inputs: dict[str, Any]) -> dict[str, Any]:
    """Input/output names, specs and shapes of a traced program: what every runner needs to feed and rebuild it."""
    in_spec, out_spec = program.call_spec.in_spec, program.call_spec.out_spec
    flat_inputs = pytree.tree_leaves(((), dict(sample_inputs)))
    return {
        "input_names": leaf_names(in_spec.child(1)),  # in_spec is ((), kwargs)
        "output_names": leaf_names(out_spec),
        "in_spec": pytree.treespec_dumps(in_spec),
        "out_spec": pytree.treespec_dumps(out_spec),
        "pytree_types": sorted(_spec_types(in_spec) | _spec_types(out_spec)),
        "input_shapes": [list(t.shape) if isinstance(t, torch.Tensor) else None for t in flat_inputs],
        "input_dtypes": [
            str(t.dtype).removeprefix("torch.") if isinstance(t, torch.Tensor) else None for t in flat_inputs
        ],
    }
