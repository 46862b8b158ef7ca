"""The KV cache as plain tensors: a static slot cache, one key and one value tensor per layer, updated out of place."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from transformers import Cache, DynamicCache, StaticCache

from ... import compat

# Without it (a transformers older or newer than the names here) generation is off, not the export.
CacheLayerMixin = compat.internal("transformers.cache_utils.CacheLayerMixin") or object
LINEAR_ATTENTION_LAYERS = compat.internal_types("transformers.cache_utils.LinearAttentionCacheLayerMixin")
DynamicLayer = compat.internal("transformers.cache_utils.DynamicLayer") or object
DynamicSlidingWindowLayer = compat.internal("transformers.cache_utils.DynamicSlidingWindowLayer") or object


class SlotCacheLayer(CacheLayerMixin):
    """One layer of a static slot cache whose update is out of place, so a traced graph returns the new tensors."""

    is_compileable = True
    is_sliding = False

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, positions: torch.Tensor, seen: int | None = None):
        super().__init__()
        self.keys, self.values, self.positions = keys, values, positions
        self.seen = seen  # the tokens already cached as an int, as DynamicCache counts them; None: a tensor
        self.is_initialized = True

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        raise RuntimeError("a slot cache is allocated by the caller")

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        self.keys = self.keys.index_copy(2, self.positions, key_states.to(self.keys.dtype))
        self.values = self.values.index_copy(2, self.positions, value_states.to(self.values.dtype))
        return self.keys, self.values

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.keys.shape[-2], 0

    def get_seq_length(self) -> torch.Tensor | int:
        # A tensor, as StaticLayer returns: masks and relative position biases offset the queries by it.
        return self.positions[0] if self.seen is None else self.seen

    def get_max_length(self) -> int:
        return self.keys.shape[-2]


def slot_cache(
    keys: list[torch.Tensor], values: list[torch.Tensor], positions: torch.Tensor, seen: int | None = None
) -> Cache:
    return Cache(layers=[SlotCacheLayer(k, v, positions, seen) for k, v in zip(keys, values, strict=True)])


@dataclasses.dataclass(frozen=True)
class CacheLayout:
    """Shapes of the slot cache (without the batch dimension), read from one eager forward of the model."""

    key_shapes: list[list[int]]
    value_shapes: list[list[int]]
    dtype: torch.dtype

    def zeros(self, batch_size: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        keys = [torch.zeros(batch_size, *shape, dtype=self.dtype) for shape in self.key_shapes]
        values = [torch.zeros(batch_size, *shape, dtype=self.dtype) for shape in self.value_shapes]
        return keys, values

    def to_dict(self) -> dict[str, Any]:
        return {
            "layout": "static-slots",
            "num_layers": len(self.key_shapes),
            "key_shapes": self.key_shapes,
            "value_shapes": self.value_shapes,
            "dtype": str(self.dtype).removeprefix("torch."),
            "inputs": ["past_keys.<layer>", "past_values.<layer>"],
            "outputs": ["present_keys.<layer>", "present_values.<layer>"],
        }

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> CacheLayout:
        return cls(values["key_shapes"], values["value_shapes"], getattr(torch, values["dtype"]))


def _methods_beyond(holder: type, *plain: type) -> list[str]:
    """The public methods ``holder`` has beyond the ``plain`` classes': state of its own that its model updates through
    them, which a slot cache would not carry. Of a cache layer beyond the dynamic layers (a sparse-attention indexer's
    keys, DeepSeek V4's compressor states: "has no attribute 'update_indexer'", "'store_compression_weights'"); of a
    Cache beyond transformers' caches (MiniMaxCache's linear-attention states; its model refuses any other cache)."""
    known = set().union(*(dir(cls) for cls in plain))
    return sorted(name for name in set(dir(holder)) - known if not name.startswith("_"))


def layout_from_cache(cache: Cache, max_cache_len: int, dtype: torch.dtype) -> CacheLayout:
    kept_on_the_cache = _methods_beyond(type(cache), DynamicCache, StaticCache)
    if kept_on_the_cache:
        raise NotImplementedError(
            f"hfexport's slot cache holds attention keys and values only; {type(cache).__name__} also keeps state "
            f"its model updates through {', '.join(kept_on_the_cache)}"
        )
    key_shapes, value_shapes = [], []
    for index, layer in enumerate(cache.layers):
        if isinstance(layer, LINEAR_ATTENTION_LAYERS):
            raise NotImplementedError(
                f"hfexport's slot cache holds attention keys and values only; {type(layer).__name__} (layer {index}) "
                "also keeps conv and recurrent states (the static-cache part generates with them)"
            )
        kept_apart = _methods_beyond(type(layer), DynamicLayer, DynamicSlidingWindowLayer)
        if kept_apart:
            raise NotImplementedError(
                f"hfexport's slot cache holds attention keys and values only; {type(layer).__name__} (layer {index}) "
                f"also keeps state its model updates through {', '.join(kept_apart)}"
            )
        if not isinstance(layer, CacheLayerMixin) or layer.keys is None:
            raise NotImplementedError(
                f"export_for_generation supports attention KV caches only, got a {type(layer).__name__} layer"
            )
        key_shapes.append([layer.keys.shape[1], max_cache_len, layer.keys.shape[3]])
        value_shapes.append([layer.values.shape[1], max_cache_len, layer.values.shape[3]])
    return CacheLayout(key_shapes, value_shapes, dtype)
