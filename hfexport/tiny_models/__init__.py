"""Tiny, seeded, random-weight transformers models and matching sample inputs.

Everything is built from config classes: nothing is downloaded. The package reads in this order:

- ``tables``: the tiny sizes, the config keys they replace, per-type overrides, alternate configs.
- ``classes``: model types and class names to model classes.
- ``configs``: tiny configs, default configs shrunk or a transformers checkout's ModelTester configs.
- ``models``: tiny models built from them, and models saved with ``save_pretrained``.
- ``inputs``: sample inputs, put together by a registry of input builders.
- ``variants``: the config variants a class supports (rope types, sliding windows, kv heads, ...), by name.
"""

from .classes import (
    VARIANT_SEPARATOR,
    UnknownModelError,
    UnrunnableModelError,
    all_model_types,
    model_classes_for_type,
    resolve_model_class,
)
from .configs import tester_config, tiny_config
from .inputs import sample_inputs
from .models import load_local_model, tiny_model
from .tables import ALTERNATE_CONFIGS, HIDDEN, NEEDS_PACKAGES, UNRUNNABLE
from .variants import Variant, config_variants

__all__ = [
    "ALTERNATE_CONFIGS",
    "HIDDEN",
    "NEEDS_PACKAGES",
    "UNRUNNABLE",
    "VARIANT_SEPARATOR",
    "UnknownModelError",
    "UnrunnableModelError",
    "Variant",
    "all_model_types",
    "config_variants",
    "load_local_model",
    "model_classes_for_type",
    "resolve_model_class",
    "sample_inputs",
    "tester_config",
    "tiny_config",
    "tiny_model",
]
