"""Base classes every backend builds on: the config mixin, ``HfExporter``, ``ModelRunner`` and ``ExportedModel``."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from .backends import get_exporter_class, get_runner_class
from .dependencies import package_versions
from .errors import ExportFailure, SpecializedDimension

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel

# Imports inside this module's functions are deliberate: ``hfexport.exporters`` loads it in the gate's parent process,
# which imports no torch or transformers (nor ``pytree``, ``generation`` or ``torch_compat``'s names, which do) and no
# hub client until an export, a load or a hub call needs them.

# 2: workarounds.patches and .unresolved hold {"name", "key", "target"} records (1: "name -> path" strings).
EXPORT_SCHEMA_VERSION = 2
READABLE_SCHEMA_VERSIONS = (1, 2)
MANIFEST_NAME = "export.json"
MODEL_CONFIG_NAME = "config.json"
SINGLE_COMPONENT = "model"


@dataclasses.dataclass
class ExportConfigMixin:
    """Options shared by every backend. Subclasses are dataclasses that add their own fields."""

    export_format: str = ""
    dynamic: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {f.name: _jsonable(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> ExportConfigMixin:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(
                f"unknown option(s) {', '.join(unknown)} for {cls.__name__}; valid: {', '.join(sorted(known))}"
            )
        return cls(**values)


def _jsonable(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return repr(value)


class HfExporter:
    """A backend: traces one graph per component and writes/reads its programs.

    Workarounds: an export runs those registered under ``workaround_keys(config)``, most general key first. Patches
    are installed in that order (a later key's patch of a path wraps an earlier key's, e.g. ExecuTorch's SDPA patches
    wrap dynamo's) and undone in reverse; fixes run in that order. While tracing, every key's patches are installed;
    a backend that then lowers the traced program installs its own keys' patches (all but ``"dynamo"``) again around
    lowering. The same rule holds for every backend.
    """

    export_format: ClassVar[str] = ""
    config_class: ClassVar[type[ExportConfigMixin]] = ExportConfigMixin
    program_suffix: ClassVar[str] = ""
    # Whether reading a program file can run code from it. A backend sets False only with evidence that its
    # load_program runs nothing from the file; True makes ExportedModel.from_pretrained ask for trust_remote_code.
    loads_code: ClassVar[bool] = True
    # Distributions whose versions are recorded in export.json besides torch and transformers.
    recorded_packages: ClassVar[tuple[str, ...]] = ()

    def workaround_keys(self, config: ExportConfigMixin) -> tuple[str, ...]:
        """Registry keys this export runs, in order: a backend's own, then one delegate's (``"executorch.xnnpack"``)."""
        return (self.export_format,)

    @classmethod
    def preload(cls) -> None:
        """One-time work every export of this backend shares, done ahead (the gate's worker, before it forks jobs)."""

    def export_program(
        self, model: PreTrainedModel, sample_inputs: dict[str, Any], config: ExportConfigMixin
    ) -> tuple[Any, dict[str, Any]]:
        """Trace ``model`` on ``sample_inputs``; return the backend program and the metadata recorded while tracing."""
        raise NotImplementedError

    @classmethod
    def save_program(cls, program: Any, path: Path) -> None:
        raise NotImplementedError

    @classmethod
    def load_program(cls, path: Path) -> Any:
        raise NotImplementedError

    def _config_or_default(self, config: ExportConfigMixin | None) -> ExportConfigMixin:
        config = config if config is not None else self.config_class()
        if not isinstance(config, self.config_class):
            raise TypeError(f"{type(self).__name__} needs a {self.config_class.__name__}, got {type(config).__name__}")
        return config

    def export(
        self,
        model: PreTrainedModel,
        sample_inputs: dict[str, Any],
        config: ExportConfigMixin | None = None,
        trace: Any = None,
    ) -> ExportedModel:
        """Export ``model`` as one program and wrap it in an :class:`ExportedModel`.

        ``trace``: a ``SharedTrace`` handed to every export of one model, for the backends converting from torch.export
        (dynamo, ONNX, ExecuTorch): the first traces, a later one reuses that trace where it is the one it would make.
        """
        config = self._config_or_default(config)
        shared = {} if trace is None else {"trace": trace}  # a backend of one's own may take no trace
        program, metadata = self.export_program(model, sample_inputs, config, **shared)
        return self._exported_model({SINGLE_COMPONENT: (program, metadata)}, model, config)

    def export_for_generation(
        self, model: PreTrainedModel, sample_inputs: dict[str, Any], config: ExportConfigMixin | None = None, **kwargs
    ) -> ExportedModel:
        """Export what greedy generation needs (prefill and decode with a KV cache).

        ``traces``: a ``SharedTrace`` per component name, as ``export``'s ``trace`` (``export_generation_components``).
        """
        from .generation import export_generation_components

        config = self._config_or_default(config)
        components, generation = export_generation_components(self, model, sample_inputs, config, **kwargs)
        return self._exported_model(components, model, config, generation=generation)

    def _exported_model(
        self,
        components: dict[str, tuple[Any, dict[str, Any]]],
        model: PreTrainedModel,
        config: ExportConfigMixin,
        generation: dict[str, Any] | None = None,
    ) -> ExportedModel:
        model_class = type(model)
        manifest = {
            "schema_version": EXPORT_SCHEMA_VERSION,
            "export_format": self.export_format,
            "export_config": config.to_dict(),
            "model_class": f"{model_class.__module__}.{model_class.__qualname__}",
            "components": {name: metadata for name, (_, metadata) in components.items()},
            "versions": package_versions(*self.recorded_packages),
        }
        if generation is not None:
            manifest["generation"] = generation
        programs = {name: program for name, (program, _) in components.items()}
        return ExportedModel(programs, manifest, model.config.to_dict())


class ModelRunner:
    """Runs an :class:`ExportedModel` on its runtime; returns outputs in the model's own output structure.

    Every runner feeds and rebuilds through the pytree specs recorded at export time, so a runtime that only sees
    flat tensors still returns the model's ``ModelOutput`` (caches included).
    """

    # What to change when an input is outside a dynamic dimension's bounds (only bounded backends have any).
    bound_hint = "export again with a larger bound"

    def __init__(self, exported: ExportedModel):
        from .pytree import ensure_pytree_types

        self.exported = exported
        for component in exported.components.values():
            ensure_pytree_types(component.get("pytree_types", []))

    def run(self, component: str, inputs: dict[str, Any]) -> Any:
        raise NotImplementedError

    def flatten_inputs(self, component: str, inputs: dict[str, Any]) -> list[Any]:
        """The flat input list in traced order; a missing or unexpected input name is a clear error."""
        from ..torch_compat import pytree

        in_spec = self._spec(component, "in_spec")
        expected = list(in_spec.child(1).context)
        if set(inputs) != set(expected):
            raise ValueError(
                f"{component}: expected inputs {expected}, got {sorted(inputs)} "
                f"(missing: {sorted(set(expected) - set(inputs))}, unexpected: {sorted(set(inputs) - set(expected))})"
            )
        flat, spec = pytree.tree_flatten(((), {name: inputs[name] for name in expected}))
        if spec != in_spec:
            raise ValueError(f"{component}: inputs are not structured as at export time: {spec} != {in_spec}")
        self.check_shapes(component, flat)
        return flat

    def check_shapes(self, component: str, flat: list[Any]) -> None:
        """Reject inputs the program was not built for, naming the input, the dimension and why, before the runtime.

        A dynamic dimension must not pass the upper bound recorded at export time, nor be other than a multiple of what
        the export declared it one of; any other dimension must equal the traced size. Runtimes would otherwise fail
        with an opaque error, resize past planned memory, or (a program whose code baked in a size) run and return
        wrong values. Exports that predate the record are not checked.
        """
        import torch

        metadata = self.exported.components[component]
        if "dynamic_dims" not in metadata:
            return
        bounds = metadata["dynamic_dims"]
        declared = metadata.get("declared_static_dims", {})
        multiples = metadata.get("declared_dim_multiples", {})
        dynamic = bool(self.exported.manifest.get("export_config", {}).get("dynamic"))
        for name, value, traced in zip(metadata["input_names"], flat, metadata["input_shapes"], strict=True):
            if not isinstance(value, torch.Tensor) or traced is None:
                continue
            if value.dim() != len(traced):
                raise ExportFailure(
                    f"{component}: input {name!r} has {value.dim()} dimensions, exported with {len(traced)}"
                )
            for dim, size in enumerate(value.shape):
                low_high = bounds.get(name, {}).get(str(dim))
                if low_high is None and size != traced[dim]:
                    kept = dim in declared.get(name, ())
                    where = metadata.get("specialized_at", {}).get(name, {}).get(str(dim))
                    raise SpecializedDimension(component, name, dim, traced[dim], size, dynamic, kept, where)
                multiple = multiples.get(name, {}).get(str(dim))
                if multiple is not None and size % multiple:
                    raise ExportFailure(
                        f"{component}: input {name!r} dimension {dim} is {size}, not a multiple of {multiple}: the "
                        f"model takes multiples of {multiple} only (declared at export)"
                    )
                # Only the upper bound binds: a lower bound of 2 is torch.export's 0/1 rule, the program takes 1 too.
                if low_high is not None and low_high[1] is not None and size > low_high[1]:
                    raise ExportFailure(
                        f"{component}: input {name!r} dimension {dim} is {size}, outside the exported bounds "
                        f"[{low_high[0]}, {low_high[1]}] ({self.bound_hint})"
                    )

    def rebuild_outputs(self, component: str, flat_outputs: list[Any]) -> Any:
        from ..torch_compat import pytree

        return pytree.tree_unflatten(list(flat_outputs), self._spec(component, "out_spec"))

    @functools.cache  # noqa: B019 - one runner per ExportedModel; specs are parsed once
    def _spec(self, component: str, key: str) -> Any:
        from ..torch_compat import pytree

        return pytree.treespec_loads(self.exported.components[component][key])

    def __call__(self, **inputs: Any) -> Any:
        return self.run(SINGLE_COMPONENT, inputs)


class ExportedModel:
    """Programs plus the manifest needed to feed them and rebuild their outputs; calling it runs it."""

    def __init__(self, programs: dict[str, Any], manifest: dict[str, Any], model_config: dict[str, Any] | None = None):
        self.programs = programs
        self.manifest = manifest
        self.model_config = model_config or {}

    @property
    def export_format(self) -> str:
        return self.manifest["export_format"]

    @property
    def components(self) -> dict[str, dict[str, Any]]:
        return self.manifest["components"]

    @functools.cached_property
    def runner(self) -> ModelRunner:
        return get_runner_class(self.export_format)(self)

    def __call__(self, **inputs: Any) -> Any:
        return self.runner(**inputs)

    def run(self, component: str, **inputs: Any) -> Any:
        return self.runner.run(component, inputs)

    def generate(self, input_ids: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        """Greedy generation on the exported prefill/decode programs (see ``export_for_generation``)."""
        from .generation import generate

        return generate(self, input_ids, **kwargs)

    def save_pretrained(self, save_directory: str | os.PathLike) -> Path:
        """Write the programs, ``export.json`` and ``config.json`` atomically: a half-written export never appears."""
        exporter_class = get_exporter_class(self.export_format)
        target = Path(save_directory)
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        try:
            for name, program in self.programs.items():
                exporter_class.save_program(program, staging / f"{name}{exporter_class.program_suffix}")
            manifest = dict(self.manifest, files=sorted(p.name for p in staging.iterdir()))
            for name, component in manifest["components"].items():
                component["file"] = f"{name}{exporter_class.program_suffix}"
            (staging / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2, sort_keys=True))
            (staging / MODEL_CONFIG_NAME).write_text(json.dumps(self.model_config, indent=2, sort_keys=True))
            if target.exists():
                shutil.rmtree(target)
            os.replace(staging, target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        self.manifest = manifest
        _SAVED_HERE.update(_file_identity(target / c["file"]) for c in manifest["components"].values())
        return target

    @classmethod
    def from_pretrained(
        cls,
        path_or_repo_id: str | os.PathLike,
        revision: str | None = None,
        token: str | None = None,
        *,
        trust_remote_code: bool = False,
    ) -> ExportedModel:
        """Load a saved export from a local directory or a Hub repository (only the files its manifest names).

        Some programs run code when loaded: torch.export.load unpickles parts of a ``.pt2`` (``torch.load`` with
        ``weights_only=False``, ``pickle.loads``). Such an export loads only when this process saved it (the same
        files, unchanged) or with ``trust_remote_code=True``; so do output types outside ``transformers``. ONNX and
        ExecuTorch programs run no code when loaded and need no opt-in.
        """
        directory = Path(path_or_repo_id)
        if not directory.is_dir():
            directory = _download_export(str(path_or_repo_id), revision, token)
        manifest_path = directory / MANIFEST_NAME
        if not manifest_path.is_file():
            raise FileNotFoundError(f"{directory} has no {MANIFEST_NAME}: not a saved export")
        manifest = json.loads(manifest_path.read_text())
        version = manifest.get("schema_version")
        if version not in READABLE_SCHEMA_VERSIONS:
            raise ValueError(
                f"{manifest_path}: schema version {version}, this hfexport reads {READABLE_SCHEMA_VERSIONS}"
            )
        exporter_class = get_exporter_class(manifest["export_format"])
        files = {name: directory / _plain_file_name(c.get("file")) for name, c in manifest["components"].items()}
        if not trust_remote_code:
            _check_trusted(str(path_or_repo_id), manifest, exporter_class, list(files.values()))
        from .pytree import ensure_pytree_types

        for component in manifest["components"].values():
            ensure_pytree_types(component.get("pytree_types", []))
        programs = {name: exporter_class.load_program(path) for name, path in files.items()}
        config_path = directory / MODEL_CONFIG_NAME
        model_config = json.loads(config_path.read_text()) if config_path.is_file() else {}
        return cls(programs, manifest, model_config)

    def push_to_hub(
        self, repo_id: str, token: str | None = None, private: bool | None = None, commit_message: str | None = None
    ) -> str:
        """Save into a temporary directory and upload it as one commit; returns the commit URL."""
        from huggingface_hub import HfApi

        api = HfApi(token=token)
        api.create_repo(repo_id, private=private, exist_ok=True)
        with tempfile.TemporaryDirectory() as scratch:
            folder = self.save_pretrained(Path(scratch) / "export")
            info = api.upload_folder(
                repo_id=repo_id,
                folder_path=folder,
                commit_message=commit_message or f"Upload {self.export_format} export",
            )
        return str(info)


def _download_export(repo_id: str, revision: str | None, token: str | None) -> Path:
    from huggingface_hub import hf_hub_download

    manifest_file = hf_hub_download(repo_id, MANIFEST_NAME, revision=revision, token=token)
    manifest = json.loads(Path(manifest_file).read_text())
    for name in [*manifest.get("files", ()), MODEL_CONFIG_NAME]:
        hf_hub_download(repo_id, _plain_file_name(name), revision=revision, token=token)
    return Path(manifest_file).parent


# ── Loading what someone else saved ──

# Program files this process saved, by what identifies them on disk (path, device, inode, size, mtime): loading one
# back (the gate's save-and-reload) needs no opt-in; a file replaced or touched since is no longer one of them.
_SAVED_HERE: set[tuple[Any, ...]] = set()


class UntrustedExportError(PermissionError):
    """An export whose loading could run code from its files, loaded without ``trust_remote_code=True``."""


def _file_identity(path: Path) -> tuple[Any, ...]:
    stat = path.stat()
    return (str(path.resolve()), stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)


def _plain_file_name(name: Any) -> str:
    """A file the manifest names is a plain name inside the export: no directory part, no way out of the folder."""
    if not isinstance(name, str) or not name or name in (".", "..") or "/" in name or "\\" in name:
        raise ValueError(f"the manifest names {name!r}: an export's files are plain names inside its folder")
    return name


def _check_trusted(source: str, manifest: dict[str, Any], exporter_class: type[HfExporter], files: list[Path]) -> None:
    foreign = [
        path
        for component in manifest["components"].values()
        for path in component.get("pytree_types", [])
        if not (isinstance(path, str) and path.startswith("transformers.") and path.replace(".", "").isidentifier())
    ]
    if foreign:
        raise UntrustedExportError(
            f"{source} names output types outside transformers ({', '.join(map(repr, foreign[:3]))}), which are "
            "imported (their code runs) when loaded: pass trust_remote_code=True for an export you trust"
        )
    saved_here = all(path.is_file() and _file_identity(path) in _SAVED_HERE for path in files)
    if exporter_class.loads_code and not saved_here:
        raise UntrustedExportError(
            f"{source} holds {exporter_class.export_format} programs, which run code when loaded (torch.export.load "
            "unpickles parts of a .pt2): pass trust_remote_code=True for an export you trust, or use onnx or "
            "executorch, which load without running code"
        )
