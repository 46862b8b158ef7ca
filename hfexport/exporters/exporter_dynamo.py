"""``DynamoExporter``: torch.export of a transformers model, the base every other backend converts from.

``DynamoExporter.export_program`` runs six stages, each marked below by a ``# ── Stage N: … ──`` banner:

1. forward-signature patch: ``model.forward`` gets a flat keyword signature while tracing;
2. model patches: the ``"dynamo"`` workarounds (the ``workarounds/dynamo/`` room), then the backend's own keys' patches;
3. pytree registration: every ``Cache`` and ``ModelOutput`` type (``pytree.py``);
4. dynamic shapes: ``Dim.AUTO`` on every input dimension with ``dynamic=True``, but those a static-dims declaration
   keeps static and those a dim-multiples declaration makes a multiple of a dynamic root;
5. state cleanup: attributes a forward caches on a module are cleared for the trace and restored;
6. program fixes: the ``"dynamo"`` program fixes rewrite the traced program, before any backend lowers it.

Between them torch.export traces the model (``TRACE``): not a stage of hfexport's but the model's own code running,
so a failure there is reported as "dynamo · torch.export trace".
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import sympy
import torch
from torch.export import Dim, ExportedProgram
from torch.export.graph_signature import InputKind, TensorArgument

from .. import compat
from ..torch_compat import ConstantSource, int_oo, pytree
from .base import ExportConfigMixin, HfExporter
from .errors import export_stage
from .pytree import _spec_types, leaf_names, register_cache_types
from .registry import (
    LOADING_SWAP,
    PatchReport,
    apply_patches,
    apply_program_fixes,
    dim_multiples,
    merged_records,
    static_dims,
    watch_patches,
)
from .shared_trace import SharedTrace
from .workarounds import dynamo as _workarounds  # noqa: F401 - registers the "dynamo" room (loading swaps included)


@dataclasses.dataclass
class DynamoConfig(ExportConfigMixin):
    """torch.export options. ``dynamic_shapes`` (torch.export's own structure) overrides ``dynamic``."""

    export_format: str = "dynamo"
    dynamic: bool = False
    dynamic_shapes: Any = None
    strict: bool = False


# The step between the stages where torch.export runs the model's code; reports name it apart from the stages.
TRACE = "torch.export trace"


class _WindowsOfFour(torch.nn.Module):
    """Pads its input's last dim to a multiple of 4 and views it as windows of 4: ``DynamoExporter.preload``'s model."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        padded = torch.nn.functional.pad(input, (0, -input.shape[-1] % 4))
        return padded.view(input.shape[0], -1, 4).relu()


class DynamoExporter(HfExporter):
    export_format = "dynamo"
    config_class = DynamoConfig
    program_suffix = ".pt2"
    # torch.export.load unpickles parts of a .pt2 (weights and constants marked use_pickle: torch.load with
    # weights_only=False, pickle.loads; sample inputs fall back to weights_only=False): a file can run any code.
    loads_code = True

    def workaround_keys(self, config: DynamoConfig) -> tuple[str, ...]:
        """``"dynamo"`` first: a backend converting from torch.export adds its own keys after it."""
        return tuple(dict.fromkeys(("dynamo", *super().workaround_keys(config))))

    def lowering_keys(self, config: DynamoConfig) -> tuple[str, ...]:
        """The keys a backend's lowering stages run (its patches installed again, its fixes): all but "dynamo"."""
        return tuple(key for key in self.workaround_keys(config) if key != "dynamo")

    @classmethod
    def preload(cls) -> None:
        """One dynamic export of a few ops, so what every export shares is imported and built once, ahead: what a
        first symbolic shape imports (sympy's tensor module, torch.export's tracer, functorch: 0.5 s in each gate job;
        sympy's physics units, which simplify imports at a first floor division of sizes: 0.07 s) and a backend's own
        (torch.onnx's registry of torchlib translations, 1.3 s, which stage 2 keeps per opset)."""
        cls().export_program(_WindowsOfFour(), {"input": torch.ones(2, 6)}, cls.config_class(dynamic=True))

    def export_program(
        self,
        model: torch.nn.Module,
        sample_inputs: dict[str, Any],
        config: DynamoConfig,
        trace: SharedTrace | None = None,
    ) -> tuple[ExportedProgram, dict[str, Any]]:
        """Run the six stages and return the ``ExportedProgram`` with what was recorded while tracing.

        ``trace``: a :class:`SharedTrace` of the model. An empty one is filled by this trace; a filled one is used
        instead of tracing again when it is the program this export would trace (``SharedTrace.refusal``).
        """
        if trace is not None and trace.program is not None:
            shared = trace.take(self, config, sample_inputs)
            if shared is not None:
                return shared
        keys = self.workaround_keys(config)
        watched = tuple(key for key in trace.watch if key not in keys) if trace is not None else ()
        patches, reached = PatchReport(), set()
        started = time.perf_counter()
        with (
            flat_forward_signature(model, list(sample_inputs)),
            export_stage("dynamo", 2, "model patches"),
            apply_patches(keys, patches),
            watch_patches(watched, reached),
        ):
            with export_stage("dynamo", 3, "pytree registration"):
                cache_types = register_cache_types()
            declared, declared_multiples = PatchReport(), PatchReport()
            static: dict[str, set[int]] = {}
            multiples: dict[str, dict[int, int]] = {}
            dynamic_shapes = config.dynamic_shapes
            if dynamic_shapes is None and config.dynamic:
                with export_stage("dynamo", 4, "dynamic shapes"):
                    tensors = {k: v for k, v in sample_inputs.items() if isinstance(v, torch.Tensor)}
                    static = static_dims(keys, model, tensors, declared)
                    multiples = dim_multiples(keys, model, tensors, declared_multiples)
                    bound = self.dynamic_upper_bound(config)
                    dynamic_shapes = auto_dynamic_shapes(sample_inputs, bound, static, multiples)
                    watched_declarations = PatchReport()
                    static_dims(watched, model, tensors, watched_declarations)
                    dim_multiples(watched, model, tensors, watched_declarations)
                    reached.update((record["key"], record["name"]) for record in watched_declarations.installed)
            # Tracing runs the model's own code: its failures are the model's, apart from the stages' own.
            with (
                export_stage("dynamo", None, TRACE),
                stateful_attributes_cleared(model),
                torch.no_grad(),
                multiples_of_their_roots(model, multiples),
            ):
                program = torch.export.export(
                    model, (), kwargs=dict(sample_inputs), dynamic_shapes=dynamic_shapes, strict=config.strict
                )
        metadata = program_metadata(program, sample_inputs)
        metadata["cache_types_registered"] = len(cache_types)
        # Dimensions a workaround keeps static: a runner names the declaration, not the model, when they differ.
        metadata["declared_static_dims"] = {name: sorted(dims) for name, dims in static.items() if dims}
        metadata["declared_dim_multiples"] = {
            name: {str(dim): m for dim, m in dims.items()} for name, dims in multiples.items()
        }
        metadata["workarounds"] = {
            "patches": patches.installed,
            "unresolved": merged_records(patches.unresolved, declared.unresolved + declared_multiples.unresolved),
            "static_dims": declared.installed,
            "dim_multiples": declared_multiples.installed,
            "fixes": [],
            "disabled": compat.disabled(),  # transformers internals this checkout lacks: what was off
        }
        with export_stage("dynamo", 6, "program fixes"):
            apply_program_fixes("dynamo", program, metadata["workarounds"]["fixes"])
        metadata["timings"] = {"torch.export": round(time.perf_counter() - started, 3)}
        if trace is not None and trace.program is None:
            trace.keep(self, config, sample_inputs, program, metadata, reached)
        return program, metadata

    def dynamic_upper_bound(self, config: DynamoConfig) -> int | None:
        """The bound of every automatic dynamic dimension: none here; a backend that plans memory has one."""
        return None

    @classmethod
    def save_program(cls, program: ExportedProgram, path: Path) -> None:
        torch.export.save(program, path)

    @classmethod
    def load_program(cls, path: Path) -> ExportedProgram:
        with apply_patches("dynamo", kind=LOADING_SWAP):
            return torch.export.load(path)


# ── Stage 1: Forward-signature patch ──
# torch.export binds inputs against ``inspect.signature(model.forward)``; a forward taking ``**kwargs`` would
# bundle every sample input into one var-keyword tuple. Internal, not an extension point.


@contextlib.contextmanager
def flat_forward_signature(model: torch.nn.Module, input_names: list[str]) -> Iterator[None]:
    """Give ``model.forward`` an explicit keyword signature made of exactly ``input_names`` while tracing."""
    own_forward = vars(model).get("forward")

    def forward(**kwargs: Any) -> Any:
        # Looked up per call, not on entry: a stage-2 patch of the model class's own forward is the one traced.
        return (own_forward or type(model).forward.__get__(model))(**kwargs)

    forward.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for name in input_names]
    )
    model.forward = forward
    try:
        yield
    finally:
        del model.forward


# ── Stage 2: Model patches ──
# Swap model methods torch.export cannot trace for export-safe equivalents, for the duration of one export; they live
# in ``workarounds/dynamo/``. Extend ``model_patches.py`` (``patches.py`` for code many models share) with
# ``@register_patch("dynamo", "transformers.models.<name>.…")``; ``export_program`` installs the keys of
# ``workaround_keys`` in order ("dynamo" first) around the trace.


# ── Stage 3: Pytree registration ──
# torch.export flattens inputs and outputs with pytree: every ``Cache`` and ``ModelOutput`` type must be registered.
# The stage's code lives in ``pytree.py`` (``register_cache_types`` runs in ``export_program``); a type the attribute
# walk cannot reach gets a branch in ``_flatten_to_context`` / ``_unflatten_from_context`` there.


# ── Stage 4: Dynamic shapes ──
# With ``dynamic=True`` every dimension of every tensor input, cache leaves included, gets ``Dim.AUTO``:
# torch.export keeps what can vary dynamic and specializes the rest. A model whose trace would pin a dimension only
# after costly symbolic reasoning declares it static instead: ``@register_static_dims("dynamo", "<module class>")``
# in ``workarounds/dynamo/dims.py``. A model that takes a dimension in multiples only (image sizes in windows) declares
# it so, ``@register_dim_multiples``: the dimension becomes the multiple times a dynamic root, and the trace reasons
# over that product instead of over floor divisions and Mods of the size. ``DynamoConfig.dynamic_shapes`` overrides all.


def auto_dynamic_shapes(
    sample_inputs: dict[str, Any],
    upper_bound: int | None = None,
    static: dict[str, set[int]] | None = None,
    multiples: dict[str, dict[int, int]] | None = None,
) -> dict[str, Any]:
    """``Dim.AUTO`` on every dimension; a pytree-registered object (a cache) gets a list per flattened leaf.

    With ``upper_bound`` every dimension is capped at ``max(upper_bound, 2 x traced size)``: a bound always admits
    twice the traced batch and length (an audio length of 10,000 samples too), the second shape the gate runs at.
    ``static``: the dimensions of top-level input tensors left out (static), by input name. ``multiples``: those of
    top-level input tensors declared ``multiple * Dim(root)``, by input name (roots named by ``_root_name``).
    """

    def for_value(value: Any, name: str | None = None) -> Any:
        if isinstance(value, torch.Tensor):
            kept_static, declared = (static or {}).get(name, ()), (multiples or {}).get(name, {})
            shapes = {}
            for dim in range(value.dim()):
                if dim in kept_static:
                    continue
                cap = None if upper_bound is None else max(upper_bound, 2 * value.shape[dim])
                if dim in declared:
                    root = _root_name(name, dim, declared[dim])
                    shapes[dim] = declared[dim] * Dim(root, min=2, max=int_oo if cap is None else cap // declared[dim])
                else:
                    shapes[dim] = Dim.AUTO if cap is None else Dim.AUTO(max=cap)
            return shapes
        if isinstance(value, (list, tuple)):
            return type(value)(for_value(v) for v in value)
        if isinstance(value, dict):
            return {k: for_value(v) for k, v in value.items()}
        if type(value) in pytree.SUPPORTED_NODES:
            return [for_value(leaf) for leaf in pytree.tree_leaves(value)]
        return None

    return {name: for_value(value, name) for name, value in sample_inputs.items()}


@contextlib.contextmanager
def multiples_of_their_roots(model: torch.nn.Module, multiples: dict[str, dict[int, int]]) -> Iterator[None]:
    """While tracing, each dimension declared a multiple is rewritten as that multiple times its root.

    torch.export checks a derived dimension against its root only after the trace; until then the trace reasons over
    a size of its own, whose floor divisions by the multiple no simplification removes. Told the equality first,
    torch's shape environment replaces the size by the product everywhere.
    """
    if not multiples:
        yield
        return
    traced_forward = model.forward

    def forward(**kwargs: Any) -> Any:
        for name, declared in multiples.items():
            for dim, multiple in declared.items():
                _as_multiple_of_root(kwargs[name].shape[dim], multiple, _root_name(name, dim, multiple))
        return traced_forward(**kwargs)

    forward.__signature__ = inspect.signature(traced_forward)  # type: ignore[attr-defined]
    model.forward = forward
    try:
        yield
    finally:
        model.forward = traced_forward


def _root_name(input_name: str, dim: int, multiple: int) -> str:
    return f"{input_name}_{dim}_in_{multiple}s"


def _as_multiple_of_root(size: Any, multiple: int, root_name: str) -> None:
    """Record ``size == multiple * root`` in the trace's shape environment, which then replaces ``size`` by it."""
    if not isinstance(size, torch.SymInt):
        return
    shape_env = size.node.shape_env
    source = ConstantSource(root_name)  # the source torch.export gives a derived dimension's root
    root = next(symbol for symbol, sources in shape_env.var_to_sources.items() if source in sources)
    shape_env.evaluate_expr(sympy.Eq(size.node.expr, multiple * root))


# ── Stage 5: State cleanup ──
# Some models store tensors on a submodule inside ``forward``; after tracing those are fake tensors that would
# poison the next eager call or the next trace. Each listed attribute (or one prefixed by a layer type:
# ``full_attention_long_inv_freq``) is saved, cleared for the trace and restored afterwards; one the trace created
# is removed. Extend by adding the attribute name to ``_STATEFUL_CACHE_ATTRS``.

_STATEFUL_CACHE_ATTRS = (
    "cached_rotary_positional_embedding",  # wav2vec2_bert, seamless_m4t: rotary table cached on first forward
    "cached_sequence_length",  # same models: the length that table was built for
    # longrope rotaries (Phi-3, rope_type "longrope" variants): the long-context frequencies, computed on the first
    # sequence past the original context and kept as a plain attribute ("fake mode ... doesn't match mode" in the
    # next trace, a generation component's)
    "long_inv_freq",
)


def _stateful(name: str) -> bool:
    return any(name == attribute or name.endswith(f"_{attribute}") for attribute in _STATEFUL_CACHE_ATTRS)


@contextlib.contextmanager
def stateful_attributes_cleared(model: torch.nn.Module) -> Iterator[None]:
    saved = [
        (module, name, value) for module in model.modules() for name, value in vars(module).items() if _stateful(name)
    ]
    for module, name, _ in saved:
        setattr(module, name, None)
    try:
        yield
    finally:
        for module in model.modules():
            for name in [name for name in vars(module) if _stateful(name)]:
                delattr(module, name)
        for module, name, value in saved:
            setattr(module, name, value)


# ── Stage 6: Program fixes ──
# Rewrites of the traced program that every backend needs, run once on it before any backend lowers it (and before
# the gate hands the trace on to ONNX). Extend ``workarounds/dynamo/program_fixes.py`` with
# ``@register_fx_program_fix("dynamo")``; a backend's own program fixes run in its lowering stages.


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
        "dynamic_dims": dynamic_dim_bounds(program, leaf_names(in_spec.child(1))),
        "specialized_at": specialized_dim_lines(program),
    }


_SIZE_SOURCE = re.compile(r"\['(?P<name>[^'\]]+)'\]\.size\(\)\[(?P<dim>\d+)\]$")


def specialized_dim_lines(program: ExportedProgram) -> dict[str, dict[str, dict[str, Any]]]:
    """``{input name: {dim: {"file", "line", "function"}}}``: the code line at which tracing fixed a dimension to its
    traced size, as torch's shape environment recorded it (the replacement's location), so that a size the program
    then refuses names the model line that fixed it. Only the inputs' own dimensions, by the names they trace with.
    """
    placeholders = [n for n in program.graph.nodes if n.op == "placeholder"]
    fake_mode = next((getattr(n.meta.get("val"), "fake_mode", None) for n in placeholders), None)
    shape_env = getattr(fake_mode, "shape_env", None)
    if shape_env is None:
        return {}
    lines: dict[str, dict[str, dict[str, Any]]] = {}
    for symbol, sources in shape_env.var_to_sources.items():
        location = shape_env.replacements_slocs.get(symbol)
        frame = getattr(location, "framework_loc", None)
        if not shape_env.replacements.get(symbol, symbol).is_number or not hasattr(frame, "lineno"):
            continue
        for source in sources:
            if match := _SIZE_SOURCE.search(source.name):
                where = {"file": frame.filename, "line": frame.lineno, "function": frame.name}
                lines.setdefault(match["name"], {})[match["dim"]] = where
    return lines


def dynamic_dim_bounds(program: ExportedProgram, input_names: list[str]) -> dict[str, dict[str, list[int | None]]]:
    """``{input name: {dim: [min, max]}}`` for every dynamic dimension of the user inputs (max None: unbounded).

    A dimension missing here was specialized to its traced size: the program accepts no other.
    """
    # One user-input spec per input, in order: a Python int or bool input (BLT's num_patches) is a constant argument,
    # whose value (not its placeholder's name) graph_signature.user_inputs lists.
    user_inputs = [s.arg for s in program.graph_signature.input_specs if s.kind == InputKind.USER_INPUT]
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    bounds: dict[str, dict[str, list[int | None]]] = {}
    for name, argument in zip(input_names, user_inputs, strict=True):
        node = placeholders.get(argument.name) if isinstance(argument, TensorArgument) else None
        value = node.meta.get("val") if node is not None else None
        if not isinstance(value, torch.Tensor):
            continue
        for dim, size in enumerate(value.shape):
            ranges = program.range_constraints.get(size.node.expr) if isinstance(size, torch.SymInt) else None
            if ranges is not None:
                upper = None if ranges.upper == int_oo else int(ranges.upper)
                bounds.setdefault(name, {})[str(dim)] = [int(ranges.lower), upper]
    return bounds
