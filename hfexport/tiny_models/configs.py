"""Tiny configs: a default config shrunk to tiny sizes, or a transformers checkout's ModelTester config, completed.

Shrinking walks a config's entries (and those of nested sub-configs) and caps the ones ``tables`` names, so most
architectures of the installed transformers build without a per-model recipe; ``tables.OVERRIDES`` holds the rest.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib
import inspect
import logging
import re
import sys
import unittest
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from transformers import CONFIG_MAPPING, AutoConfig, PretrainedConfig, PreTrainedModel

from .classes import CONFIG_MAPPING_NAMES, resolve_model_class
from .tables import (
    CAPS,
    CHANNEL_LIST_KEYS,
    CLASS_OVERRIDES,
    DEPTH_LIST_KEYS,
    EXACT_CAPS,
    EXPERT_KEYS,
    EXPERTS_PER_TOKEN,
    FORCED,
    HEAD_DIM,
    HEADS,
    HIDDEN,
    KV_HEAD_KEYS,
    KV_HEADS,
    LAYER_INDEX_LIST_KEYS,
    LAYERS,
    OVERRIDES,
    PREFIXED_CONFIG_VIEWS,
    SKIPPED_KEYS,
    STAGE_WIDTH_LIST_KEYS,
    SUFFIX_CAPS,
    VOCAB,
)

logger = logging.getLogger(__name__)

# ── Shrinking configs ──


def _declared_keys(config_cls: type[PretrainedConfig]) -> set[str]:
    # Keys the constructor does not accept are derived by it: passing a shrunk copy would conflict.
    declared: set[str] = set()
    for cls in config_cls.__mro__:
        if isinstance(cls, type) and issubclass(cls, PretrainedConfig):
            declared.update(inspect.signature(cls.__init__).parameters)
    return declared - {"self", "kwargs", "args"}


def _declared_default(config_cls: type[PretrainedConfig], key: str) -> Any:
    parameter = inspect.signature(config_cls.__init__).parameters.get(key)
    return inspect.Parameter.empty if parameter is None else parameter.default


def _shrink_layer_list(values: list[Any], layers: int) -> list[Any]:
    # Keep one layer of every kind (e.g. sliding and full attention) before repeating kinds.
    first_of_kind: dict[Any, int] = {}
    for index, value in enumerate(values):
        first_of_kind.setdefault(repr(value), index)
    picked = sorted(first_of_kind.values())[:layers]
    picked += [i for i in range(len(values)) if i not in picked][: layers - len(picked)]
    return [values[i] for i in sorted(picked)]


class _TokenIds:
    """Maps special token ids beyond the tiny vocabulary onto its top end, consistently across sub-configs."""

    def __init__(self) -> None:
        self._remapped: dict[int, int] = {}

    def __call__(self, value: Any) -> Any:
        if isinstance(value, list | tuple):
            return type(value)(self(v) for v in value)
        if isinstance(value, bool) or not isinstance(value, int) or value < VOCAB:
            return value
        if value not in self._remapped:
            self._remapped[value] = VOCAB - 1 - len(self._remapped)
        return self._remapped[value]


def is_token_key(key: str) -> bool:
    """Whether a config entry holds special token ids (pad, eos, image placeholders, suppressed tokens)."""
    return key.endswith(("_token_id", "_token_ids", "_token_index", "_suppress_tokens")) or key == "suppress_tokens"


def _int_cap(key: str) -> int | None:
    """Return the tiny upper bound of an integer size entry, or None when ``key`` is not a size."""
    for keys, cap in EXACT_CAPS:
        if key in keys:
            return cap
    if key in CAPS:
        return CAPS[key]
    for suffixes, cap in SUFFIX_CAPS:
        if key.endswith(suffixes):
            return cap
    return None


def _shrink_list(key: str, values: list[int] | tuple[int, ...]) -> list[int] | tuple[int, ...]:
    if key in CHANNEL_LIST_KEYS:
        return type(values)(min(v, HIDDEN) for v in values)
    if key in STAGE_WIDTH_LIST_KEYS:
        return type(values)(min(v, 16 * 2**i, 64) for i, v in enumerate(values))
    if key in DEPTH_LIST_KEYS:
        return type(values)(1 for _ in values)
    if key in LAYER_INDEX_LIST_KEYS:
        return type(values)(min(v, LAYERS - 1) for v in values)
    if _int_cap(key) == HEADS:
        # Per-stage heads must divide per-stage widths, which double from stage to stage.
        return type(values)(min(v, 2**i) for i, v in enumerate(values))
    cap = _int_cap(key)
    return values if cap is None else type(values)(min(v, cap) for v in values)


def _shrink_value(key: str, value: Any, token_ids: _TokenIds) -> Any:
    """Return the tiny value of one config entry (unchanged when the key is not a size)."""
    if is_token_key(key):
        return token_ids(value)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        cap = _int_cap(key)
        return value if cap is None else min(value, cap)
    if isinstance(value, list | tuple) and value and all(isinstance(v, int) for v in value):
        return _shrink_list(key, value)
    return value


def _original_layers(values: dict[str, Any]) -> int | None:
    counts = [v for k, v in values.items() if isinstance(v, int) and not isinstance(v, bool) and _int_cap(k) == LAYERS]
    return max(counts) if counts else None


def _mrope_section(rope_parameters: dict[str, Any]) -> list[int]:
    # Multimodal rope splits the rotary half-dims into (temporal, height, width) sections.
    total = int(HEAD_DIM * rope_parameters.get("partial_rotary_factor", 1.0)) // 2
    sections = [total // 3] * 3
    for i in range(total % 3):
        sections[i] += 1
    return sections


def _make_consistent(config_cls: type[PretrainedConfig], kwargs: dict[str, Any], original: dict[str, Any]) -> None:
    """Fix size relations that capping each entry on its own breaks."""
    heads = next((kwargs[k] for k in kwargs if _int_cap(k) == HEADS and isinstance(kwargs[k], int)), None)
    hidden = kwargs.get("hidden_size", HIDDEN)
    if "kv_lora_rank" in kwargs and heads is not None:
        # Multi-head latent attention expands the latent to one key/value per query head.
        kwargs.update({k: heads for k in KV_HEAD_KEYS if k in kwargs})
    if {"qk_nope_head_dim", "qk_rope_head_dim", "qk_head_dim"} <= kwargs.keys():
        kwargs["qk_head_dim"] = kwargs["qk_nope_head_dim"] + kwargs["qk_rope_head_dim"]
    if "mamba_n_heads" in kwargs:
        kwargs["mamba_d_head"] = HEAD_DIM
        kwargs["mamba_n_heads"] = kwargs.get("mamba_expand", 2) * hidden // HEAD_DIM
    elif {"expand", "num_heads", "head_dim"} <= kwargs.keys():
        kwargs["num_heads"] = kwargs["expand"] * hidden // kwargs["head_dim"]
    if {"stage_in_channels", "stage_mid_channels", "stage_out_channels", "stem_channels"} <= kwargs.keys():
        # HGNet stages chain: each reads what the previous one wrote, the first reads the stem's output.
        out = _shrink_list("hidden_sizes", kwargs["stage_out_channels"])
        mids = zip(kwargs["stage_mid_channels"], out, strict=True)
        kwargs["stage_mid_channels"] = [min(mid, width) for mid, width in mids]
        kwargs["stage_in_channels"] = [kwargs["stem_channels"][-1], *out[:-1]]
        kwargs["stage_out_channels"] = kwargs["hidden_sizes"] = out
    if "out_indices" in kwargs:
        # Backbone levels an outer config asks for (RT-DETR reads three), among the stages the tiny backbone has.
        depths = kwargs.get("depths", original.get("depths"))
        stages = len(depths) if isinstance(depths, list | tuple) else kwargs.get("num_hidden_layers")
        if stages:
            kwargs["out_indices"] = sorted({min(index, stages) for index in kwargs["out_indices"]})
    if {"window_size", "spatial_merge_size", "patch_size"} <= kwargs.keys():
        # Qwen2.5-VL-like towers attend within windows of window_size pixels: at least two merged patches wide.
        kwargs["window_size"] = max(kwargs["window_size"], 2 * kwargs["spatial_merge_size"] * kwargs["patch_size"])
    if {"n_window", "max_source_positions"} <= kwargs.keys():
        # Chunked audio towers (Qwen2.5-Omni) add a position to each of a 2 * n_window-frame chunk's n_window frames
        # after their stride-2 conv: the table must hold them.
        kwargs["max_source_positions"] = max(kwargs["max_source_positions"], kwargs["n_window"])
    rope = kwargs.get("rope_parameters", original.get("rope_parameters"))
    # An empty rope dict (per-layer rope left to the layers, cohere_compass) has no section to split.
    if (
        isinstance(rope, dict)
        and rope
        and ("mrope_section" in rope or "mrope_section" in getattr(config_cls, "ignore_keys_at_rope_validation", ()))
    ):
        kwargs["rope_parameters"] = {**rope, "mrope_section": _mrope_section(rope)}


def _outer_widths(original: dict[str, Any]) -> dict[int, int]:
    """Full-size widths of a config's model (hidden_size, ...) -> their tiny values, for its sub-configs to follow."""
    widths = {}
    for key, value in original.items():
        if isinstance(value, int) and not isinstance(value, bool) and _int_cap(key) == HIDDEN and value > HIDDEN:
            widths.setdefault(value, HIDDEN)
    return widths


def _follows_outer_width(key: str, value: Any, outer_widths: dict[int, int]) -> bool:
    # A sub-config entry no cap names but equal to the outer model's width is sized to it (a flow head's
    # condition_dim conditioned on the backbone's hidden states): it must shrink with it.
    return (
        isinstance(value, int)
        and not isinstance(value, bool)
        and value in outer_widths
        and _int_cap(key) is None
        and key.endswith(("_dim", "_size", "_channels"))
    )


@functools.cache
def _bare_defaults(config_cls: type[PretrainedConfig]) -> dict[str, Any] | None:
    """The entries of ``config_cls()``, or None when it cannot be built without arguments."""
    try:
        return config_cls().to_dict()
    except Exception:
        return None


def _derived_by_constructor(config_cls: type[PretrainedConfig], key: str, value: Any) -> bool:
    # Declared None and set by the constructor (head_dim, ...): derived, unless a bare config sets another value, i.e.
    # an outer config handed it down (the video patch size a vision tower shares with its model).
    if _declared_default(config_cls, key) is not None:
        return False
    bare = _bare_defaults(config_cls)
    return bare is None or bare.get(key) == value


def _without_timm(config_cls: type[PretrainedConfig], key: str, sub_config: PretrainedConfig) -> PretrainedConfig:
    """A timm sub-config (timm does not install here) replaced by the transformers default its parent declares."""
    spec = getattr(config_cls, "sub_configs_defaults", {}).get(key)
    model_type = getattr(spec, "model_type", None)
    if not sub_config.model_type.startswith("timm") or not model_type or model_type.startswith("timm"):
        return sub_config
    # A bare config would rebuild the timm backbone it falls back to for old checkpoints (DETR-like detectors).
    return AutoConfig.for_model(model_type, **spec.init_kwargs)


def _shrink_config(
    config: PretrainedConfig,
    token_ids: _TokenIds,
    outer_widths: dict[int, int] | None = None,
    backbone: bool = False,
) -> dict[str, Any]:
    """Return constructor kwargs for a tiny version of ``config`` (sub-configs as nested dicts).

    ``outer_widths``: the widths of the config this one is nested in (see ``_outer_widths``). A ``backbone`` keeps all
    its stages: the outer model reads several of its levels (Mask2Former three).
    """
    config_cls = type(config)
    declared = _declared_keys(config_cls)
    original = config.to_dict()
    depths = original.get("depths")
    stages = len(depths) if backbone and isinstance(depths, list | tuple) else None
    old_layers = _original_layers(original)
    new_layers = min(old_layers, LAYERS) if old_layers else None
    widths = _outer_widths(original)
    kwargs: dict[str, Any] = {}
    for key, value in original.items():
        # Read the stored value: per-layer configs (gemma4) refuse plain attribute access to per-layer fields.
        attribute = vars(config).get(key)
        if isinstance(attribute, PretrainedConfig):
            attribute = _without_timm(config_cls, key, attribute)
            sub_kwargs = _shrink_config(attribute, token_ids, widths, backbone=key == "backbone_config")
            kwargs[key] = {"model_type": attribute.model_type, **sub_kwargs}
            continue
        if key in declared and _follows_outer_width(key, value, outer_widths or {}):
            kwargs[key] = outer_widths[value]
            continue
        if key == "out_indices" and value:
            kwargs[key] = value  # derived by default, but set by outer configs: clamped in _make_consistent
            continue
        if key in SKIPPED_KEYS or key not in declared:
            continue
        per_layer = isinstance(value, list) and old_layers and new_layers and len(value) == old_layers > new_layers
        if per_layer and len(value) != stages:
            # One entry per layer (layer_types, ...): derived or not, it must match the new layer count. Per-stage
            # sizes (swin's depths and num_heads) are then shrunk like any list, or heads stop dividing widths.
            kwargs[key] = _shrink_value(key, _shrink_layer_list(value, new_layers), token_ids)
            continue
        if key == "vocab_size" and value is None:
            # CTC heads of speech encoders (wav2vec2-bert, wav2vec2-conformer) leave it unset by default.
            kwargs[key] = VOCAB
            continue
        shrunk = _shrink_value(key, value, token_ids)
        if shrunk is value and value is not None and _derived_by_constructor(config_cls, key, value):
            continue  # let the constructor derive it again from the tiny sizes
        kwargs[key] = shrunk
    kwargs.update({k: v for k, v in FORCED.items() if k in declared})
    _make_consistent(config_cls, kwargs, original)
    _apply_overrides(kwargs, OVERRIDES.get(config.model_type, {}))
    return kwargs


def _apply_overrides(kwargs: dict[str, Any], overrides: dict[str, Any]) -> None:
    for key, value in overrides.items():
        # An override of a sub-config names only the entries it changes (the rest stay shrunk), at any depth, unless
        # it swaps the sub-config for another model type.
        nested = isinstance(value, dict) and isinstance(kwargs.get(key), dict) and "model_type" in kwargs[key]
        if nested and "model_type" not in value:
            kwargs[key] = dict(kwargs[key])
            _apply_overrides(kwargs[key], value)
        else:
            kwargs[key] = _override_value(value)


def _override_value(value: Any) -> Any:
    # A sub-config swapped for another model type is built here: configs whose sub-config class is fixed (PE video's
    # timm wrapper) would read a dict as one of theirs.
    if isinstance(value, dict) and "model_type" in value:
        sub_config = dict(value)
        return CONFIG_MAPPING[sub_config.pop("model_type")](**sub_config)
    return value


# ── Completing configs ──


def _complete_config(config: PretrainedConfig) -> None:
    """Fill in what models and sample inputs rely on where a config, the builder's or a tester's, leaves it unset."""
    for value in vars(config).values():
        if isinstance(value, PretrainedConfig):
            _complete_config(value)
    _fill_sizes_left_to_checkpoints(config)
    _fill_pad_token_ids(config)


def _fill_pad_token_ids(config: PretrainedConfig) -> None:
    # Decoder sequence classifiers refuse batches > 1 without one ("no padding token is defined"). The eos id, as
    # eager generate pads with; sample inputs never draw special ids, so no row is all padding.
    stored = vars(config)
    vocab_size = stored.get("vocab_size")
    if "pad_token_id" not in stored or stored["pad_token_id"] is not None or not isinstance(vocab_size, int):
        return
    eos = stored.get("eos_token_id")
    eos = eos[0] if isinstance(eos, list | tuple) and eos else eos
    config.pad_token_id = eos if isinstance(eos, int) and 0 <= eos < vocab_size else 0


def _fill_sizes_left_to_checkpoints(config: PretrainedConfig) -> None:
    # Some default configs leave these None for checkpoints to fill in (ministral, hunyuan, nemotron, deepseek_v2,
    # dots1): the model then fails to build or route. Derive them as the constructors of the other models do.
    stored = vars(config)
    heads = stored.get("num_attention_heads")
    if isinstance(heads, int) and stored.get("head_dim", 0) is None:
        config.head_dim = config.hidden_size // heads
    if isinstance(heads, int) and stored.get("num_key_value_heads", 0) is None:
        config.num_key_value_heads = min(KV_HEADS, heads)
    if any(stored.get(key) for key in EXPERT_KEYS) and stored.get("num_experts_per_tok", 0) is None:
        config.num_experts_per_tok = EXPERTS_PER_TOKEN


# ── Configs from a transformers checkout's model testers ──


# The files of the checkout's `tests` modules tiny configs were read from (a ModelTester and what it imports), for
# this process: they are dropped from sys.modules again, and the gate's result cache keys a cell on them.
checkout_test_files: set[str] = set()


@contextlib.contextmanager
def _checkout_tests_importable(checkout: Path) -> Iterator[None]:
    # The checkout's `tests` package would clash with any other `tests` package already imported.
    saved = {name: mod for name, mod in sys.modules.items() if name == "tests" or name.startswith("tests.")}
    for name in saved:
        del sys.modules[name]
    sys.path.insert(0, str(checkout))
    try:
        yield
    finally:
        sys.path.remove(str(checkout))
        for name in [n for n in sys.modules if n == "tests" or n.startswith("tests.")]:
            file = getattr(sys.modules.pop(name), "__file__", None)
            if file:
                checkout_test_files.add(file)
        sys.modules.update(saved)


def _model_tester_class(module: Any, model_type: str) -> type | None:
    # Only testers the file defines: the common bases it imports (CausalLMModelTester) need a subclass's attributes.
    wanted = model_type.replace("_", "").replace("-", "").lower() + "modeltester"
    testers = [
        obj
        for name, obj in vars(module).items()
        if name.endswith("ModelTester") and inspect.isclass(obj) and obj.__module__ == module.__name__
    ]
    exact = [cls for cls in testers if cls.__name__.lower() == wanted]
    return (exact or testers or [None])[0]


def _tests_package_name(model_type: str) -> str:
    # Tests live in the model's package, which sub-model types share (gemma3_text: tests/models/gemma3).
    try:
        return CONFIG_MAPPING[model_type].__module__.split(".")[-2]
    except (KeyError, IndexError):
        return model_type.replace("-", "_")


def tester_config(model_type: str, checkout: Path) -> PretrainedConfig | None:
    """Return the config of ``<Name>ModelTester`` from a transformers checkout, or None if unavailable."""
    package = _tests_package_name(model_type)
    test_file = Path(checkout) / "tests" / "models" / package / f"test_modeling_{package}.py"
    if not test_file.is_file():
        logger.debug("No model tester file %s", test_file)
        return None
    try:
        with _checkout_tests_importable(Path(checkout)):
            module = importlib.import_module(f"tests.models.{package}.test_modeling_{package}")
            tester_cls = _model_tester_class(module, model_type)
            if tester_cls is None:
                logger.debug("No ModelTester class in %s", test_file)
                return None
            # Positionally, as transformers' own test cases pass themselves to their testers.
            config = tester_cls(unittest.TestCase()).get_config()
    except Exception as error:
        # Test files track the checkout, not the installed transformers: any failure means "shrink instead".
        logger.debug("Model tester config for %s failed: %s", model_type, error)
        return None
    if getattr(config, "model_type", None) != model_type:
        logger.debug("%s's config is a %s, not a %s", tester_cls.__name__, type(config).__name__, model_type)
        return None
    return config


# ── Tiny configs ──


def _attn_implementation(model_class: type[PreTrainedModel]) -> str:
    return "sdpa" if getattr(model_class, "_supports_sdpa", False) else "eager"


def _config_class(model_class: type[PreTrainedModel]) -> type[PretrainedConfig]:
    """The config class a model is built from: where a sub-model declares the generic one (PI05ActionExpertModel, handed
    its model's dit_config), its family's, which its model's config nests its sub-config in (``handed_sub_config``)."""
    if model_class.config_class is not PretrainedConfig:
        # A config class of its own without a model type (Qwen3-Omni's talker and Code2Wav) is still the one it reads.
        return model_class.config_class
    for cls in model_class.__mro__:
        config_cls = getattr(cls, "config_class", None)
        if isinstance(config_cls, type) and getattr(config_cls, "model_type", ""):
            return config_cls
    return model_class.config_class


def _build_tiny_config(model_class: type[PreTrainedModel], overrides: dict[str, Any]) -> PretrainedConfig:
    config_cls = _config_class(model_class)
    model_type = getattr(config_cls, "model_type", "")
    default = AutoConfig.for_model(model_type) if model_type in CONFIG_MAPPING_NAMES else config_cls()
    kwargs = _shrink_config(default, _TokenIds())
    _apply_overrides(kwargs, CLASS_OVERRIDES.get(model_class.__name__, {}))
    return type(default)(**{**kwargs, **overrides})


def _with_overrides(config: PretrainedConfig, overrides: dict[str, Any]) -> PretrainedConfig:
    # Rebuilt from the declared entries only: derived ones (T5's dense_act_fn) would pin the old values.
    declared = _declared_keys(type(config))
    kwargs = {k: v for k, v in config.to_dict().items() if k in declared and k not in SKIPPED_KEYS}
    return type(config)(**{**kwargs, **overrides})


def tiny_config(
    name: str | type[PreTrainedModel], checkout: Path | None = None, overrides: dict[str, Any] | None = None
) -> PretrainedConfig:
    """Return a tiny config for a model type or class (a name, or the class itself: one no auto mapping lists); a
    transformers checkout's model tester wins if usable.

    ``overrides`` are constructor arguments applied on top of the tiny config (see ``ALTERNATE_CONFIGS``); a variant's
    (a name ``"Class@variant"``) are ``variants.named_overrides``, which ``tiny_model`` applies.
    """
    model_class = resolve_model_class(name)
    config = None
    if checkout is not None:
        config = tester_config(_config_class(model_class).model_type, checkout)
    if config is None:
        config = _build_tiny_config(model_class, overrides or {})
    elif overrides:
        config = _with_overrides(config, overrides)
    config = handed_sub_config(model_class, config)
    if model_class.__name__ in PREFIXED_CONFIG_VIEWS:
        config = _prefixed_view(config, PREFIXED_CONFIG_VIEWS[model_class.__name__])
    _complete_config(config)
    config._attn_implementation = _attn_implementation(model_class)
    return config


def _prefixed_view(config: PretrainedConfig, prefix: str) -> PretrainedConfig:
    # A copy, as the parent makes one: the prefixed entries stay, their plain names take their values.
    view = copy.deepcopy(config)
    for key, value in config.to_dict().items():
        if key.startswith(prefix):
            setattr(view, key.removeprefix(prefix), value)
    return view


def handed_sub_config(model_class: type[PreTrainedModel], config: PretrainedConfig) -> PretrainedConfig:
    """The sub-config the parent model hands a sub-module class (``T5GemmaDecoder(config.decoder)`` in its modeling
    file), whose ``config_class`` names the parent's composite config; else ``config`` itself."""
    try:
        source = inspect.getsource(sys.modules[model_class.__module__])
    except (KeyError, OSError, TypeError):
        return config
    handed = re.search(rf"\b{model_class.__name__}\(\s*config\.(\w+)", source)
    sub_config = getattr(config, handed.group(1), None) if handed else _parents_config(model_class, config, source)
    return sub_config if isinstance(sub_config, PretrainedConfig) and type(sub_config) is not type(config) else config


def _parents_config(model_class: type[PreTrainedModel], config: PretrainedConfig, source: str) -> Any:
    """The sub-config of ``config`` whose model hands all of it on (``UVDocBridge(config)`` in UVDocBackbone, built
    on UVDocConfig's backbone_config), or None."""
    handed = re.search(rf"\b{model_class.__name__}\(\s*config\s*\)", source)
    parents = re.findall(r"^class (\w+)", source[: handed.start()], re.MULTILINE) if handed else []
    parent_config = getattr(sys.modules[model_class.__module__], parents[-1], None) if parents else None
    parent_config = getattr(parent_config, "config_class", None)
    return next((value for value in vars(config).values() if type(value) is parent_config), None)
