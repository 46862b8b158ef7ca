"""Generation on transformers' own ``StaticCache``, as ``generate(cache_implementation="static")`` runs it.

The slot cache (``cache.py``) is hfexport's layout; users export with transformers' ``StaticCache`` and its layers
(``StaticLayer``, ``StaticSlidingWindowLayer``, linear-attention layers with conv and recurrent states). Here each
traced component builds a real ``StaticCache`` from the model's config and runs the layers' own ``update`` code:

- ``prefill``: an empty cache, filled by the model's forward (each layer initializes itself on its first update);
- ``decode``: the cache as it was after the previous step, loaded into a fresh ``StaticCache`` through the layers'
  own ``lazy_initialization`` (as ``Cache.early_initialization`` does), then one token.

The cache's tensors go in and out as plain tensors (``past_states`` / ``present_states``, in the order of
``StaticLayout.entries``): the layers update copies in place, which a traced program turns into new outputs.
The decode step takes the attention mask over the tokens seen so far (``[batch, seen + 1]``, as eager ``generate``
passes it), and its length is a dynamic dimension: ``StaticSlidingWindowLayer`` counts its length in a Python int,
which must be a symbol of the program (not the traced step's number) for one decode program to serve every step.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import torch
from transformers import StaticCache

from .cache import LINEAR_ATTENTION_LAYERS
from .components import GeneratingDecoder

if TYPE_CHECKING:
    from transformers import Cache, PreTrainedModel

STATIC_LAYOUT = "transformers-static"
ATTENTION_STATES = ("keys", "values")
# A sparse-attention indexer's keys (StaticIndexedLayer: DeepSeek V3.2, GLM-MoE-DSA, AXK2), beside the layer's keys.
INDEXER_STATES = ("indexer_keys",)
LINEAR_STATES = ("conv_states", "recurrent_states")
# Bookkeeping the loader sets from the step's inputs, not state carried between steps.
_POSITION_STATES = ("cumulative_length", "indexer_cumulative_length")


@dataclasses.dataclass(frozen=True)
class StaticLayout:
    """Which tensors of the ``StaticCache`` carry state between steps: ``(layer, attribute, state index or None)``."""

    entries: list[tuple[int, str, int | None]]
    max_cache_len: int

    def read(self, cache: Cache) -> list[torch.Tensor]:
        return [_state(cache.layers[layer], name, index) for layer, name, index in self.entries]

    def load(self, cache: Cache, states: list[torch.Tensor], cache_position: torch.Tensor, seen: Any) -> None:
        """Put ``states`` into a fresh ``cache`` as the layers' own initialization lays them out; ``seen`` (a symbol
        of the traced program) is the number of tokens already in the cache."""
        by_layer: dict[int, dict[tuple[str, int | None], torch.Tensor]] = {}
        for (layer, name, index), state in zip(self.entries, states, strict=True):
            by_layer.setdefault(layer, {})[name, index] = state
        for layer_index, layer_states in by_layer.items():
            layer = cache.layers[layer_index]
            if ("keys", None) in layer_states:
                _load_attention(layer, layer_states["keys", None], layer_states["values", None], cache_position, seen)
            if ("indexer_keys", None) in layer_states:
                _load_indexer(layer, layer_states["indexer_keys", None], cache_position)
            for (name, index), state in layer_states.items():
                if name in LINEAR_STATES:
                    _load_linear(layer, name, index, state)

    def to_dict(self) -> dict[str, Any]:
        return {
            "layout": STATIC_LAYOUT,
            "entries": [list(entry) for entry in self.entries],
            "max_cache_len": self.max_cache_len,
            "inputs": ["past_states.<entry>"],
            "outputs": ["present_states.<entry>"],
        }


def _state(layer: Any, name: str, index: int | None) -> torch.Tensor:
    value = getattr(layer, name)
    return value if index is None else value[index]


def _load_attention(layer: Any, keys: torch.Tensor, values: torch.Tensor, position: torch.Tensor, seen: Any) -> None:
    layer.lazy_initialization(keys[:, :, :0], values[:, :, :0])
    layer.keys.copy_(keys)
    layer.values.copy_(values)
    layer.cumulative_length.copy_(position[0])
    if hasattr(layer, "cumulative_length_int"):  # StaticSlidingWindowLayer's Python count of the tokens seen
        layer.cumulative_length_int = seen


def _load_indexer(layer: Any, indexer_keys: torch.Tensor, position: torch.Tensor) -> None:
    layer.lazy_initialization_indexer(indexer_keys[:, :0])
    layer.indexer_keys.copy_(indexer_keys)
    layer.indexer_cumulative_length.copy_(position[0])


def _load_linear(layer: Any, name: str, index: int, state: torch.Tensor) -> None:
    layer.lazy_initialization(**{name: state, "state_idx": index})
    getattr(layer, name)[index].copy_(state)
    layer.has_previous_state[index] = True


def static_cache(model: PreTrainedModel, max_cache_len: int) -> Cache:
    return StaticCache(config=model.config, max_cache_len=max_cache_len)


def static_layout(cache: Cache, max_cache_len: int) -> StaticLayout:
    """The state entries of a ``StaticCache`` after an eager prefill; a layer holding a tensor this layout does not
    carry (an indexer's keys) is declined, since a decode without it would silently differ from eager."""
    entries: list[tuple[int, str, int | None]] = []
    for layer_index, layer in enumerate(cache.layers):
        known = set(_POSITION_STATES)
        if isinstance(layer, LINEAR_ATTENTION_LAYERS):
            for name in LINEAR_STATES:
                flags = getattr(layer, f"is_{name}_initialized")
                entries += [(layer_index, name, index) for index, ready in flags.items() if ready]
            known.update(LINEAR_STATES)
        if isinstance(getattr(layer, "keys", None), torch.Tensor):
            entries += [(layer_index, name, None) for name in ATTENTION_STATES]
            known.update(ATTENTION_STATES)
        if isinstance(getattr(layer, "indexer_keys", None), torch.Tensor):
            entries += [(layer_index, name, None) for name in INDEXER_STATES]
            known.update(INDEXER_STATES)
        unknown = [name for name, value in vars(layer).items() if isinstance(value, torch.Tensor) and name not in known]
        if unknown:
            raise NotImplementedError(
                f"{type(layer).__name__} (layer {layer_index}) holds {', '.join(unknown)}, which the static-cache "
                "export does not carry between steps"
            )
    if not entries:  # xLSTM keeps its state in cache_params: the forward never wrote to the cache
        raise NotImplementedError("the model's forward left the StaticCache empty: its state is kept elsewhere")
    return StaticLayout(entries, max_cache_len)


def mask_over_slots(cache: Cache, attention_mask: torch.Tensor, max_cache_len: int) -> torch.Tensor:
    """The 2D mask over every slot of ``cache``, as generate's on a StaticCache (Bloom builds its alibi bias from it,
    one entry per key); a hybrid's linear-attention mixers read it per token, so theirs stays the tokens seen."""
    if any(isinstance(layer, LINEAR_ATTENTION_LAYERS) for layer in cache.layers):
        return attention_mask
    return torch.nn.functional.pad(attention_mask, (0, max_cache_len - attention_mask.shape[1]))


def sliding_windows(cache: Cache) -> list[int]:
    """The sizes of the cache's sliding-window layers (their ``max_cache_len`` is the window, capped)."""
    return [layer.max_cache_len for layer in cache.layers if getattr(layer, "is_sliding", False)]


class _OnStaticCache(GeneratingDecoder):
    """A model run on a fresh ``StaticCache``, returning the last position's logits and the cache's states."""

    def __init__(self, model: PreTrainedModel, layout: StaticLayout):
        super().__init__(model)
        self.layout = layout

    def _logits_and_states(
        self, cache: Cache, attention_mask: torch.Tensor, position_ids: torch.Tensor, input_ids: torch.Tensor
    ) -> dict[str, Any]:
        mask = mask_over_slots(cache, attention_mask, self.layout.max_cache_len)
        logits = self.last_logits(cache, position_ids, input_ids=input_ids, attention_mask=mask)
        return {"logits": logits, "present_states": self.layout.read(cache)}


class StaticCachePrefill(_OnStaticCache):
    """The prompt on an empty ``StaticCache``: the last position's logits and the cache's states."""

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor
    ) -> dict[str, Any]:
        cache = static_cache(self.model, self.layout.max_cache_len)
        return self._logits_and_states(cache, attention_mask, position_ids, input_ids)


class StaticCacheStep(_OnStaticCache):
    """One new token on a ``StaticCache`` holding ``past_states``; ``attention_mask`` covers the tokens seen and it."""

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        cache_position: torch.Tensor,
        past_states: list[torch.Tensor],
    ) -> dict[str, Any]:
        cache = static_cache(self.model, self.layout.max_cache_len)
        self.layout.load(cache, past_states, cache_position, attention_mask.shape[1] - input_ids.shape[1])
        return self._logits_and_states(cache, attention_mask, position_ids, input_ids)
