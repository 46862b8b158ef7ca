"""torch.export.load swaps (key ``"dynamo"``): installed only while ``DynamoExporter.load_program`` loads a ``.pt2``.

Measured on a tiny Llama (2.4 s a load, 0.3 s a save): more than half of a load is torch's deserializer asking typing
for the same schema classes' hints and sympy for the same shape expressions, thousands of times each. Both answers
are memoized for the one load (llama: 2.4 -> 1.2 s, gemma3's multimodal model: 3.9 -> 1.5 s); the program loaded
is the same (``tests/test_dynamo.py``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from ...registry import register_loading_swap

_NAME = re.compile(r"[A-Za-z_]\w*")


@register_loading_swap("dynamo", "typing.get_type_hints")
def _patch_type_hints_once_per_class(original: Callable) -> Callable:
    # torch's serde _dict_to_dataclass evaluates a schema class's hints for every serialized object (5,607 on llama).
    hints: dict[tuple, Any] = {}

    def get_type_hints(obj: Any, globalns: Any = None, localns: Any = None, include_extras: bool = False) -> Any:
        if not isinstance(obj, type):
            return original(obj, globalns, localns, include_extras)
        key = (obj, id(globalns), id(localns), include_extras)
        if key not in hints:
            hints[key] = original(obj, globalns, localns, include_extras)
        return dict(hints[key])

    return get_type_hints


@register_loading_swap("dynamo", "sympy.sympify")
def _patch_shape_expressions_parsed_once(original: Callable) -> Callable:
    # torch's serde parses every symbolic size with sympy's parser, most of them parsed before (949 calls on llama).
    parsed: dict[tuple, Any] = {}

    def sympify(a: Any, *args: Any, **kwargs: Any) -> Any:
        names = kwargs.get("locals")
        if args or set(kwargs) - {"locals"} or not isinstance(a, str) or not isinstance(names, dict):
            return original(a, *args, **kwargs)
        # The parse depends on the string and on what its names are bound to (a sympy expression is immutable).
        key = (a, tuple((name, id(names.get(name))) for name in _NAME.findall(a)))
        if key not in parsed:
            parsed[key] = original(a, locals=names)
        return parsed[key]

    return sympify
