"""The workaround registry: every patch, fix, translation and lowering swap an exporter runs, keyed by who needs it,
and every model-keyed exception outside the exporters.

Kinds: a *patch* is a factory ``original -> replacement`` bound to dotted paths and installed only while one export
runs; a *lowering swap* is a patch installed only around ExecuTorch lowering with ``fast_lowering`` (a speed-up, not
a repair), a *loading swap* one installed only while ``torch.export.load`` reads a saved program (a speed-up too). A
*fix* rewrites the traced artifact: a node fix is ``(graph_module, node) -> changed``, a program fix
``(exported_program) -> changed``, an IR fix ``(onnx_ir.Model) -> changed``. An *ONNX translation* lowers one op
with onnxscript. An *optimizer skip* names model classes whose ONNX export skips onnxscript's optimizer. *Static dims*
name input dimensions kept static in models holding a module of the given classes, and *dim multiples* dimensions such
models take only in multiples of a number (declared as a dynamic root times it).

Every workaround kind lives in one registry: a dict from key to workarounds in registration order. A key is a backend
(``"dynamo"``, ``"onnx"``, ``"executorch"``) or one delegate of a backend (``"executorch.xnnpack"``); an export runs
the keys its exporter's ``workaround_keys`` names, in that order (the one rule, for every backend: ``HfExporter``).

The model-keyed kinds (``hfexport/model_keyed.py``, re-exported here) are tables their own readers keep: *export
skips*, *cache types* and *tiny-model entries*, each wrapped in ``declare`` so that ``hfexport registry`` lists them
and ``--check`` resolves their models too.

Modules by role: ``kinds`` (the kinds, ``Workaround``, the ``register_*`` decorators), ``installing`` (patches installed
around one export and undone after), ``applying`` (translations, per-model declarations, fixes), ``resolving`` (what
``--check`` resolves).
"""

from __future__ import annotations

from ...model_keyed import (
    CACHE_TYPE,
    EXPORT_SKIP,
    MODEL_KEYED_KINDS,
    TINY_MODEL_ENTRY,
    ModelException,
    declare,
    model_exceptions,
)
from .applying import (
    apply_ir_fixes,
    apply_node_fixes,
    apply_program_fixes,
    dim_multiples,
    onnx_translation_table,
    optimizer_skips,
    static_dims,
)
from .installing import PatchReport, TargetRecord, apply_patches, merged_records, watch_patches
from .kinds import (
    _REGISTRY,  # re-exported: tests leave one workaround out by filtering its key's list
    DIM_MULTIPLES,
    IR_FIX,
    LOADING_SWAP,
    LOWERING_SWAP,
    NODE_FIX,
    ONNX_TRANSLATION,
    OPTIMIZER_SKIP,
    PATCH,
    PROGRAM_FIX,
    STATIC_DIMS,
    WORKAROUND_KINDS,
    Keys,
    LoadedTargets,
    Workaround,
    all_workarounds,
    register_dim_multiples,
    register_fx_node_fix,
    register_fx_program_fix,
    register_ir_fix,
    register_loaded_patch,
    register_loading_swap,
    register_lowering_swap,
    register_onnx_optimizer_skip,
    register_onnx_translation,
    register_patch,
    register_static_dims,
    registered,
    workaround_reason,
)
from .resolving import ABSENT_FEATURE, ABSENT_MODEL, unresolved_models, unresolved_targets

__all__ = [
    "ABSENT_FEATURE",
    "ABSENT_MODEL",
    "CACHE_TYPE",
    "DIM_MULTIPLES",
    "EXPORT_SKIP",
    "IR_FIX",
    "LOADING_SWAP",
    "LOWERING_SWAP",
    "MODEL_KEYED_KINDS",
    "NODE_FIX",
    "ONNX_TRANSLATION",
    "OPTIMIZER_SKIP",
    "PATCH",
    "PROGRAM_FIX",
    "STATIC_DIMS",
    "TINY_MODEL_ENTRY",
    "WORKAROUND_KINDS",
    "_REGISTRY",
    "Keys",
    "LoadedTargets",
    "ModelException",
    "PatchReport",
    "TargetRecord",
    "Workaround",
    "all_workarounds",
    "apply_ir_fixes",
    "apply_node_fixes",
    "apply_patches",
    "apply_program_fixes",
    "declare",
    "dim_multiples",
    "merged_records",
    "model_exceptions",
    "onnx_translation_table",
    "optimizer_skips",
    "register_dim_multiples",
    "register_fx_node_fix",
    "register_fx_program_fix",
    "register_ir_fix",
    "register_loaded_patch",
    "register_loading_swap",
    "register_lowering_swap",
    "register_onnx_optimizer_skip",
    "register_onnx_translation",
    "register_patch",
    "register_static_dims",
    "registered",
    "static_dims",
    "unresolved_models",
    "unresolved_targets",
    "watch_patches",
    "workaround_reason",
]
