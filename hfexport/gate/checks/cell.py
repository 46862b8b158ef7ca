"""One cell of the gate: tiny model -> export -> save -> reload -> run on the runtime -> compare with eager.

Runs inside a forked job process (see ``worker.py``); returns the cell's fields of the report as a plain dict.
Every step is timed, and a failure names the step it happened in: an exporter's own ``ExportStageError`` names
its stage ("onnx · stage 4 ONNX translations"), the other steps are "build", "eager", "save", "load",
"run on <runtime>", "compare" and "generation".
"""

from __future__ import annotations

import collections
import copy
import functools
import importlib
import importlib.util
import linecache
import re
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import hfexport

from .. import compat
from ..exporters.utils import ExportFailure, SpecializedDimension
from . import metrics
from .blame import Frame, blame, traced_model_frame
from .cells import EXPORT_MODULE_BACKENDS, GENERATION_LABELS

# Largest max-abs difference from eager that still passes, per backend.
TOLERANCES = {"dynamo": 1e-4, "onnx": 1e-4, "executorch": 1e-3}
DEFAULT_TOLERANCE = 1e-4
RUNTIMES = {"dynamo": "torch", "onnx": "onnxruntime", "executorch": "executorch runtime"}
GENERATION_TOKENS = 4
# Every export also runs at a second shape, a larger batch and another length than the traced (2, 7): a dynamic export
# whose tracing fixed a size to the traced one fails there.
SECOND_SHAPE = {"batch_size": 3, "seq_length": 11}
# Export options the gate sets on top of a backend's defaults. ExecuTorch plans memory for the largest shape a program
# accepts: the gate runs two shapes, so each dynamic dimension gets the smallest automatic bound (16, and never under
# twice its traced size: SECOND_SHAPE fits). At the default 256 a tiny decoder plans ~0.9 GiB, which every load of the
# program allocates (0.5-2.5 s), and large models were traced again at smaller bounds until they fit (PegasusX: 3x).
GATE_OPTIONS: dict[str, dict[str, Any]] = {"executorch": {"dynamic_upper_bound": 16}}


class CellFailure(Exception):
    """Ends a cell: ``stage`` is where it failed; the status says whose failure it is (see ``blame.py``).

    "tool_error": hfexport's own code failed; "not_checked": the tiny model could not be built or run eagerly;
    "oom": out of memory; "fail": the export, its runtime or the comparison failed for this model.
    """

    def __init__(self, stage: str, error: BaseException, building: bool = False):
        super().__init__(str(error))
        self.step = stage
        cause = root_cause(error)
        found = blame(error)
        if isinstance(cause, MemoryError) or _out_of_memory(cause):
            self.status = "oom"
        elif building and _listed_unrunnable(cause):
            self.status = "not_checked"
        elif found.owner == "hfexport":
            self.status = "tool_error"
        else:
            self.status = "not_checked" if building else "fail"
        # Torch, onnx or executorch failed on a node after tracing: the model line that produced the node.
        traced = traced_model_frame(error) if found.owner == "toolchain" else None
        self.frame = traced or _where_specialized(cause) or found.frame
        self.workaround = found.workaround
        self.error_type = type(cause).__name__
        self.first_line = first_line(cause)


def _where_specialized(error: BaseException) -> Frame | None:
    # A size the program refuses is the model's line that fixed it while tracing (torch's shape environment recorded
    # it), not the runner's check that found it.
    where = error.where if isinstance(error, SpecializedDimension) else None
    return Frame(where["file"], where["line"], where["function"], "transformers") if where else None


def _listed_unrunnable(error: BaseException) -> bool:
    # The builder refuses a class of tiny_models.UNRUNNABLE on purpose: not hfexport's failure, the model's limit here.
    from hfexport.tiny_models import UnrunnableModelError

    return isinstance(error, UnrunnableModelError)


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def first_line(error: BaseException) -> str:
    return _ANSI.sub("", (str(error).strip().splitlines() or [""])[0])[:500]


def root_cause(error: BaseException) -> BaseException:
    """The innermost cause that still says something: wrappers like torch.onnx's ConversionError say little."""
    seen = {id(error)}
    while True:
        cause = error.__cause__ or (None if error.__suppress_context__ else error.__context__)
        if cause is None or id(cause) in seen or not first_line(cause):
            return error
        seen.add(id(cause))
        error = cause


def _out_of_memory(error: BaseException) -> bool:
    # torch reports a refused allocation (RLIMIT_AS reached) as a RuntimeError, not a MemoryError.
    return "can't allocate memory" in str(error) or "bad_alloc" in str(error)


@contextmanager
def step(stage: str, timings: dict[str, float], key: str, building: bool = False) -> Iterator[None]:
    """Time one step; an exception inside ends the cell as a ``CellFailure`` of ``stage``."""
    started = time.perf_counter()
    try:
        yield
    except CellFailure:
        raise
    except Exception as error:
        raise CellFailure(stage, error, building) from error
    finally:
        timings[key] = round(time.perf_counter() - started, 3)


# ── Building the model ──


def build_model(job: dict[str, Any], checkout: Path | None) -> Any:
    """The tiny model of ``job["model_class"]``; a class outside the auto mappings is imported from its module and
    built from its own config class (a text tower's, not its model type's composite config)."""
    from hfexport import tiny_models

    try:
        return tiny_models.tiny_model(job["model_class"], seed=0, checkout=checkout)
    except tiny_models.UnknownModelError:
        if not job.get("module"):
            raise
    model_class = getattr(importlib.import_module(job["module"]), job["model_class"])
    return tiny_models.tiny_model(model_class, seed=0, checkout=checkout)


# ── Comparing outputs ──


class OutputMismatch(ExportFailure):
    """The exported program's outputs (or generated tokens) differ from eager's."""


def flat_outputs(outputs: Any) -> list[tuple[str, Any]]:
    """(name, tensor) for every tensor or number leaf of a model output, caches included.

    Numbers (maskformer-swin's spatial sizes) count as 0-d tensors: a runtime that returns every output as a tensor
    (onnxruntime) still lines up with eager, and the values are compared too.
    """
    import torch

    from hfexport.exporters.pytree import leaf_names, register_cache_types
    from hfexport.torch_compat import pytree

    register_cache_types()
    leaves, spec = pytree.tree_flatten(outputs)
    try:
        names = leaf_names(spec)
    except Exception:
        names = [str(i) for i in range(len(leaves))]
    numbers = (int, float)
    return [
        (name, leaf if isinstance(leaf, torch.Tensor) else torch.tensor(leaf))
        for name, leaf in zip(names, leaves, strict=True)
        if isinstance(leaf, torch.Tensor) or (isinstance(leaf, numbers) and not isinstance(leaf, bool))
    ]


def compare(expected: Any, actual: Any, tolerance: float) -> tuple[float, float, str | None]:
    """(max abs diff, max rel diff, problem or None); rel diff is abs diff over the largest reference magnitude.

    An output matches when its abs diff or its rel diff is within ``tolerance``: float32 error grows with the values,
    so outputs of magnitude 10-30 (Clap's audio states, CpmAnt's keys) differ by 1.3e-4 on onnxruntime, 4e-6 of them.
    """
    import torch

    reference, produced = flat_outputs(expected), flat_outputs(actual)
    if len(reference) != len(produced):
        names = [n for n, _ in reference]
        return float("nan"), float("nan"), f"{len(produced)} outputs, eager returns {len(reference)}: {names}"
    max_abs = max_rel = 0.0
    failing: list[tuple[float, str, float]] = []
    for (name, ref), (_, out) in zip(reference, produced, strict=True):
        if tuple(ref.shape) != tuple(out.shape):
            return float("nan"), float("nan"), f"{name}: shape {tuple(out.shape)}, eager {tuple(ref.shape)}"
        if ref.numel() == 0:
            continue
        ref64, out64 = ref.detach().to(torch.float64), out.detach().to(torch.float64)
        # NaN and inf pass only where eager has the same (NaN, or inf of the same sign); the rest is compared.
        finite = torch.isfinite(ref64)
        if not torch.equal(finite, torch.isfinite(out64)) or not torch.equal(
            ref64[~finite].isnan(), out64[~finite].isnan()
        ):
            return float("nan"), float("nan"), f"{name}: NaN or inf where eager has none (or the reverse)"
        if not torch.equal(ref64[~finite].nan_to_num(0.0), out64[~finite].nan_to_num(0.0)):
            return float("nan"), float("nan"), f"{name}: inf of the other sign than eager's"
        if not bool(finite.any()):
            continue
        ref64, out64 = ref64[finite], out64[finite]
        abs_diff = float((ref64 - out64).abs().max())
        rel_diff = abs_diff / max(float(ref64.abs().max()), 1e-12)
        max_abs, max_rel = max(max_abs, abs_diff), max(max_rel, rel_diff)
        if abs_diff > tolerance and rel_diff > tolerance:
            failing.append((abs_diff, name, rel_diff))
    if failing:
        abs_diff, name, rel_diff = max(failing)
        return max_abs, max_rel, f"{name}: max abs diff {abs_diff:.3g} > {tolerance:g} (relative {rel_diff:.3g})"
    return max_abs, max_rel, None


# ── Engines ──


def _gate_export(backend: str, generation: bool = False) -> tuple[Any, Any]:
    """The exporter and config the gate exports a backend with."""
    from hfexport.exporters import AutoExportConfig, AutoHfExporter

    # Greedy generation is compared at the traced prompt only, so its prefill and decode programs are static: half
    # the export time, and fewer XNNPACK partitions (4 against 33 on gemma3). Dynamic shapes are what the main
    # export and its second shape check.
    options = {"export_format": backend, "dynamic": not generation, **GATE_OPTIONS.get(backend, {})}
    config = AutoExportConfig.from_dict(options)
    return AutoHfExporter.from_config(config), config


def _hfexport_engine() -> tuple[Callable, Callable, Callable]:
    from hfexport.exporters import ExportedModel

    def export(
        model: Any, inputs: dict[str, Any], backend: str, generation: bool, trace: Any = None, cache: str = "slots"
    ) -> Any:
        exporter, config = _gate_export(backend, generation)
        if generation:  # ``trace``: one SharedTrace per generation component; ``cache``: slots or static
            return exporter.export_for_generation(model, inputs, config, traces=trace, cache=cache)
        return exporter.export(model, inputs, config, trace=trace)

    return export, lambda exported, path: exported.save_pretrained(path), ExportedModel.from_pretrained


def shared_trace(backends: list[str], engine_name: str, generation: bool = False) -> Any:
    """An empty ``SharedTrace`` for the cells of one class on ``backends`` (in order), or None when none can share."""
    if not _can_share_traces(backends, engine_name):
        return None
    from hfexport.exporters.exporter_dynamo import SharedTrace

    return SharedTrace.for_exports(*(_gate_export(backend, generation) for backend in backends[1:]))


def shared_generation_traces(backends: list[str], engine_name: str) -> dict[str, Any] | None:
    """An empty ``SharedTrace`` per generation component (prefill and decode, or encoder and decoder), made as each
    is first exported; None when the backends cannot share traces."""
    if not _can_share_traces(backends, engine_name):
        return None
    return collections.defaultdict(lambda: shared_trace(backends, engine_name, generation=True))


def _can_share_traces(backends: list[str], engine_name: str) -> bool:
    # dynamo traces first and hands its trace on to the backends after it.
    return engine_name == "hfexport" and len(backends) >= 2 and backends[0] == "dynamo"


def engine(name: str) -> tuple[Callable, Callable, Callable]:
    """(export, save, load) of an engine: hfexport's exporters, or the checkout's own ``transformers.exporters``."""
    if name == "transformers":
        from .engine_transformers import transformers_engine

        return transformers_engine()
    return _hfexport_engine()


def workarounds_used(exported: Any, model_module: str) -> list[str]:
    """Fixes that changed the graph, and patches and dims declarations of the model's own code (torch-op patches are
    installed always)."""
    model_package = model_module.rpartition(".")[0] + "."
    names: list[str] = []
    for component in getattr(exported, "manifest", {}).get("components", {}).values():
        used = component.get("workarounds", {})
        declarations = [*used.get("static_dims", []), *used.get("dim_multiples", [])]
        records = [_patch_record(entry) for entry in [*used.get("patches", []), *declarations]]
        patches = [record["name"] for record in records if record["target"].startswith(model_package)]
        for name in [*patches, *used.get("fixes", [])]:
            if name not in names:
                names.append(name)
    return names


def _patch_record(entry: dict[str, str] | str) -> dict[str, str]:
    """A manifest's patch record; schema 1 exports wrote it as a ``"name -> target"`` string."""
    if isinstance(entry, str):
        name, _, target = entry.partition(" -> ")
        return {"name": name, "target": target}
    return entry


def generates(model_class: type, config: Any) -> bool:
    """Whether the gate runs greedy generation on a model of ``model_class`` with ``config``: a decoder-only model
    that can generate from ``input_ids`` (the coverage record counts its cells by this too)."""
    import inspect

    forward_inputs = inspect.signature(model_class.forward).parameters
    return bool(model_class.can_generate()) and not config.is_encoder_decoder and "input_ids" in forward_inputs


def generation_available(engine_name: str) -> bool:
    return engine_name == "hfexport" and importlib.util.find_spec("hfexport.exporters.generation") is not None


# ── One cell ──


class ClassUnderTest:
    """What the cells of one model class in one job share: the tiny model, its sample inputs and eager outputs, built
    once by the first cell (a failure there ends every cell the same way), and the traces dynamo hands on to ONNX
    (the model's, and its generation components').

    Eager runs on a copy of the model (``reference``), never on the one exported: a forward may grow the model's state
    (SeamlessM4T's conformer widens its positional table to the longest input seen), and the export must see the
    model as loaded, as a user's export would."""

    def __init__(
        self, job: dict[str, Any], checkout: Path | None, trace: Any = None, generation_traces: Any = None
    ) -> None:
        self.job, self.checkout, self.trace, self.generation_traces = job, checkout, trace, generation_traces
        self.built: tuple[Any, Any, dict[str, Any], Any] | None = None
        self.failure: CellFailure | None = None

    def build(self, timings: dict[str, float]) -> tuple[Any, Any, dict[str, Any], Any]:
        """(model to export, model eager runs on, sample inputs, eager outputs); timed in the first cell only."""
        import torch

        from hfexport import tiny_models

        if self.failure is not None:
            raise self.failure
        if self.built is None:
            try:
                with step("build", timings, "build", building=True):
                    model = build_model(self.job, self.checkout)
                    inputs = tiny_models.sample_inputs(model)
                    reference = _eager_copy(model, self.job, self.checkout)
                with step("eager", timings, "eager", building=True), torch.no_grad():
                    expected = reference(**copy.deepcopy(inputs))
            except CellFailure as failure:
                self.failure = failure
                raise
            self.built = (model, reference, inputs, expected)
        return self.built


def _eager_copy(model: Any, job: dict[str, Any], checkout: Path | None) -> Any:
    """An identical model for eager to run on: a deep copy, or the same seeded build where it cannot be copied."""
    try:
        return copy.deepcopy(model)
    except Exception:  # a module holding something deepcopy refuses (a lock, a generator): build it again, same seed
        return build_model(job, checkout)


def run_cells(job: dict[str, Any], checkout: Path | None, engine_name: str = "hfexport") -> Iterator[dict[str, Any]]:
    """Check one model class on each of ``job["backends"]`` in turn, yielding each cell as it is done; the model is
    built once, and dynamo's trace is ONNX's where it is the program ONNX would trace."""
    backends = list(job["backends"])
    traces = shared_trace(backends, engine_name), shared_generation_traces(backends, engine_name)
    shared = ClassUnderTest(job, checkout, *traces)
    for backend in backends:
        yield run_cell({**job, "backend": backend}, checkout, engine_name, shared)


def run_cell(
    job: dict[str, Any], checkout: Path | None, engine_name: str = "hfexport", shared: ClassUnderTest | None = None
) -> dict[str, Any]:
    """Check one (model class, backend): returns status, stage, error, diffs, timings and workarounds."""
    started = time.perf_counter()
    timings: dict[str, float] = {}
    backend = job["backend"]
    tolerance = TOLERANCES.get(backend, DEFAULT_TOLERANCE)
    cell: dict[str, Any] = {"tolerance": tolerance, "timings": timings, "workarounds": [], "generation": None}
    try:
        _check(shared or ClassUnderTest(job, checkout), engine_name, backend, tolerance, cell, timings)
        cell.update(status="pass", stage=None, error_type=None, error=None)
    except CellFailure as failure:
        cell.update(status=failure.status, stage=failure.step, error_type=failure.error_type, error=failure.first_line)
        cell["frame"] = frame_record(failure.frame, checkout, failure.workaround)
    timings["total"] = round(time.perf_counter() - started, 3)
    cell["disabled"] = compat.disabled()
    return cell


def frame_record(frame: Frame | None, checkout: Path | None, workaround: str | None = None) -> dict[str, Any] | None:
    """The deciding frame for the report: path relative to the checkout (or to hfexport's parent), and its text."""
    if frame is None:
        return None
    path = Path(frame.file)
    for root in (checkout, Path(hfexport.__file__).resolve().parent.parent):
        if root is not None and path.is_relative_to(root.resolve()):
            path = path.relative_to(root.resolve())
            break
    text = linecache.getline(frame.file, frame.line).strip()[:300]
    return {
        "file": path.as_posix(),
        "line": frame.line,
        "function": frame.function,
        "text": text,
        "workaround": workaround,
    }


def _check(
    shared: ClassUnderTest,
    engine_name: str,
    backend: str,
    tolerance: float,
    cell: dict[str, Any],
    timings: dict[str, float],
) -> None:
    from hfexport.exporters.utils import ExportStageError

    export, save, load = engine(engine_name)
    model, reference, inputs, expected = shared.build(timings)
    traced = {"trace": shared.trace} if shared.trace is not None else {}
    with tempfile.TemporaryDirectory(prefix="hfexport-cell-") as scratch:
        try:
            with step(f"{backend} · export", timings, "export"):
                exported = export(model, copy.deepcopy(inputs), backend, False, **traced)
        except CellFailure as failure:
            cause = failure.__cause__
            if isinstance(cause, ExportStageError):
                failure.step = cause.where
            raise
        cell["workarounds"] = workarounds_used(exported, type(model).__module__)
        # Where the export's time went (torch.export, lowering, optimizing...), for the profile in the report.
        for component in (getattr(exported, "manifest", None) or {}).get("components", {}).values():
            timings.update({f"export · {step}": seconds for step, seconds in (component.get("timings") or {}).items()})
        with step("save", timings, "save"):
            save(exported, Path(scratch) / "export")
        with step("load", timings, "load"):
            loaded = load(Path(scratch) / "export")
        with step(f"run on {RUNTIMES.get(backend, backend)}", timings, "run"):
            actual = loaded(**copy.deepcopy(inputs))
        with step("compare", timings, "compare"):
            max_abs, max_rel, problem = compare(expected, actual, tolerance)
            cell.update(max_abs_diff=max_abs, max_rel_diff=max_rel)
            if problem:
                traced = {name: list(value.shape) for name, value in inputs.items() if hasattr(value, "shape")}
                raise OutputMismatch(f"at the traced shape ({shapes_text(traced)}): {problem}")
        _check_second_shape(reference, inputs, loaded, tolerance, cell, timings)
        # Health reads hfexport's ExportedModel (its manifest and programs): the competitor's engine is not measured.
        if engine_name == "hfexport":
            with step("export health", timings, "health"):
                cell.update(
                    metrics.measure(Path(scratch) / "export", loaded, inputs, backend, shared.job.get("health"))
                )
    if shared.job.get("generation") and generation_available(engine_name) and generates(type(model), model.config):
        traces = {"trace": shared.generation_traces} if shared.generation_traces is not None else {}
        _check_generation(model, reference, inputs, functools.partial(export, **traces), backend, cell, timings)


def _check_second_shape(
    model: Any, inputs: dict[str, Any], loaded: Callable, tolerance: float, cell: dict[str, Any], timings
) -> None:
    """The export at ``SECOND_SHAPE`` must match eager there too; a shape the model itself cannot run is skipped,
    one hfexport's input builder fails to make is a tool error."""
    import torch

    from hfexport import tiny_models

    try:
        second = tiny_models.sample_inputs(model, seed=1, **SECOND_SHAPE)
        if _changes_declared_static_dims(loaded, inputs, second):
            # A workaround declared the sequence static (one program per length): vary the batch only.
            second = tiny_models.sample_inputs(model, seed=1, batch_size=SECOND_SHAPE["batch_size"])
        if _changes_declared_static_dims(loaded, inputs, second):
            cell["second_shape"] = {"status": "skipped", "detail": "a static-dims workaround keeps the batch static"}
            return
        with torch.no_grad():
            expected = model(**copy.deepcopy(second))
    except Exception as error:
        if blame(error).owner == "hfexport":
            raise CellFailure("second shape", error) from error  # our input builder broke: a tool error, not a skip
        cell["second_shape"] = {"status": "skipped", "detail": f"eager does not run there: {first_line(error)[:200]}"}
        return
    shapes = {
        name: list(value.shape)
        for name, value in second.items()
        if isinstance(value, torch.Tensor) and value.shape != getattr(inputs.get(name), "shape", None)
    }
    with step("second shape", timings, "second_shape"):
        actual = loaded(**copy.deepcopy(second))
        max_abs, _, problem = compare(expected, actual, tolerance)
        if problem:
            raise OutputMismatch(f"at the second shape ({shapes_text(shapes)}): {problem}")
    cell["second_shape"] = {"status": "pass", "inputs": shapes, "max_abs_diff": max_abs}


def _changes_declared_static_dims(loaded: Any, inputs: dict[str, Any], second: dict[str, Any]) -> bool:
    """Whether ``second`` resizes an input dimension that a static-dims workaround kept static in the export."""
    for component in getattr(loaded, "components", {}).values():
        declared = component.get("declared_static_dims", {}) if isinstance(component, dict) else {}
        for name, dims in declared.items():
            first, other = getattr(inputs.get(name), "shape", None), getattr(second.get(name), "shape", None)
            if first is not None and other is not None and any(first[dim] != other[dim] for dim in dims):
                return True
    return False


def shapes_text(shapes: dict[str, list[int]]) -> str:
    return ", ".join(f"{name} {tuple(shape)}" for name, shape in shapes.items())


# The generation parts of a decoder LM's cell that hfexport exports, in the order they run, with the cache the
# exported components hold: hfexport's slot cache first (the default), then transformers' own StaticCache.
GENERATION_PARTS = (("generation", "slots"), ("generation_static", "static"))


def _check_generation(
    model: Any, reference: Any, inputs: dict[str, Any], export: Callable, backend: str, cell: dict[str, Any], timings
) -> None:
    """A few greedy steps must pick eager's tokens: on exported prefill/decode programs holding hfexport's slot cache
    (``generation``) and transformers' StaticCache (``generation_static``), then through transformers' own exportable
    module (``export_module``) on the backends whose runtimes run it. A part that declines the model is not_checked."""
    input_ids = inputs["input_ids"]
    try:
        expected = _eager_tokens(reference, input_ids)
    except Exception as error:  # eager itself has no greedy text generation (higgs_audio_v2 emits audio codebooks)
        detail = f"not compared: eager generate() fails: {type(error).__name__}: {error}"
        cell["generation"] = {"status": "skipped", "detail": detail.splitlines()[0][:300]}
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


def _eager_tokens(reference: Any, input_ids: Any) -> Any:
    import torch

    with torch.no_grad():
        return reference.generate(
            input_ids=input_ids,
            attention_mask=torch.ones_like(input_ids),
            max_new_tokens=GENERATION_TOKENS,
            min_new_tokens=GENERATION_TOKENS,
            do_sample=False,
        )


def _declined_or(cell: dict[str, Any], key: str, export: Callable[[], Any]) -> Any:
    """``export()``, or None with the part not_checked where the exporter declines the model (no Cache returned, a
    config StaticCache cannot lay out, a cache layer hfexport does not carry)."""
    try:
        return export()
    except NotImplementedError as declined:
        cell[key] = {"status": "not_checked", "detail": f"not checked: {first_line(declined)[:300]}"}
        return None


def _compare_tokens(produced: Any, expected: Any, cell: dict[str, Any], key: str) -> None:
    import torch

    produced = produced if isinstance(produced, torch.Tensor) else torch.as_tensor(produced)
    same = produced.shape == expected.shape and bool((produced == expected).all())
    detail = f"{GENERATION_TOKENS} greedy tokens {'match' if same else 'differ from'} eager"
    cell[key] = {"status": "pass" if same else "fail", "detail": detail}
    if not same:
        raise OutputMismatch(f"{detail}: {produced.tolist()} != {expected.tolist()}")


def _check_export_module(
    model: Any, reference: Any, prompt: Any, backend: str, cell: dict[str, Any], timings: dict[str, float]
) -> None:
    """transformers' ``TorchExportableModuleForDecoderOnlyLM`` export, run token by token (see ``export_modules``)."""
    from ..exporters.generation.export import token_id_list
    from .export_modules import ModuleDeclined, export_module_program, greedy_tokens, runtime_step

    expected = _eager_tokens(reference, prompt)
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
