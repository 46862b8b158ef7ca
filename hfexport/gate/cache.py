"""The result cache: a cell is not run again while nothing it depends on has changed.

A cell depends on the content of every transformers source file its job imported (recorded by the job when it ran:
the model's modeling and configuration files, the shared modules, a ModelTester of the checkout's tests), on
hfexport's own code, and on the versions of python, torch, transformers, onnx, onnxscript, onnxruntime and
executorch. The key of an entry is everything but the files (class, backend, engine, options, code and versions); an
entry holds the files it read with their content hashes and the result. A lookup takes the first entry of the key
whose every file still hashes the same, so a base run and a head run of the same cell keep one entry each.

Files are recorded relative to where the run's code came from (``checkout:`` the repository's transformers checkout,
``site:`` the installed transformers), so the temporary worktree of a base run finds the entries of the last one.
Only deterministic outcomes are kept: a pass, a model's failure and a class that cannot be built; never a crash,
timeout, out-of-memory or tool error.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from ..exporters.dependencies import package_version
from ..files import read_regular_file
from .cells import CELL_KEYS
from .schema import validate_cell
from .worker_parent import hfexport_dir

CACHE_SCHEMA = 1
CACHED_STATUSES = frozenset({"pass", "fail", "not_checked"})
MAX_ENTRIES_PER_KEY = 8  # base and head of a few pushes; the oldest go first
MAX_ENTRY_BYTES = 4 * 1024 * 1024  # one cell's result and its files' hashes: far above any real entry

log = logging.getLogger(__name__)


class CacheError(RuntimeError):
    """The cache directory cannot be read or written, in one line (the CLI exits with code 2)."""


def default_cache_dir() -> Path:
    """``$HFEXPORT_CACHE_DIR``, else the user cache dir (``$XDG_CACHE_HOME/hfexport/results``)."""
    if os.environ.get("HFEXPORT_CACHE_DIR"):
        return Path(os.environ["HFEXPORT_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "hfexport" / "results"


def prepare_directory(directory: Path) -> None:
    """Create the cache directory before any cell runs: a path that is a file, or not writable, stops the run at
    once (CacheError), not after its first cell."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as error:
        raise CacheError(f"cannot use {directory} as the result cache: {error.strerror or error}") from None


def code_fingerprint(package_dir: Path) -> str:
    """A hash of every Python file of hfexport as the jobs import it."""
    digest = hashlib.sha256()
    for path in sorted(package_dir.rglob("*.py")):
        digest.update(path.relative_to(package_dir).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def environment(root: Path | None, engine: str) -> dict[str, Any]:
    """What every result of a run depends on besides the transformers files a job reads: computed by the parent
    without importing torch, so a run whose cells are all cached starts no job worker at all."""
    packages = ("torch", "transformers", "onnx", "onnxscript", "onnx-ir", "onnxruntime", "executorch")
    return {
        "python": sys.version.split()[0],
        "engine": engine,
        "hfexport": code_fingerprint(hfexport_dir(root)),
        "packages": {name: package_version(name) for name in packages},
    }


def _reachable(start: list[ModuleType]) -> list[ModuleType]:
    """The transformers modules ``start`` reaches through its globals (modules, and the modules of its classes and
    functions), transitively: the code a model can run, without the whole package its lazy import machinery loaded."""
    seen: dict[str, ModuleType] = {}
    stack = list(start)
    while stack:
        module = stack.pop()
        if module.__name__ in seen:
            continue
        seen[module.__name__] = module
        for value in list(vars(module).values()):
            target = value if isinstance(value, ModuleType) else sys.modules.get(getattr(value, "__module__", "") or "")
            name = getattr(target, "__name__", "")
            if (name == "transformers" or name.startswith("transformers.")) and name not in seen:
                stack.append(target)
    return list(seen.values())


def imported_sources(
    checkout: Path | None, start: list[ModuleType], imported_here: list[ModuleType], test_files: set[str]
) -> list[str]:
    """The transformers source files a job depended on, as ``checkout:<path>`` or ``site:<path>``: those reachable from
    ``start`` (the model's and its config's modules) and from the modules the job itself imported, and the checkout's
    test files its tiny config was read from (a ModelTester, imported and dropped again: ``test_files``)."""
    import transformers  # deliberately here: the parent, which imports this module, never imports transformers

    roots = [("checkout", checkout.resolve())] if checkout is not None else []
    roots.append(("site", Path(transformers.__file__).resolve().parent.parent))
    files = {getattr(m, "__file__", None) for m in _reachable([*start, *imported_here])}
    if checkout is not None:
        files.update(name for name in test_files if Path(name).resolve().is_relative_to(checkout.resolve() / "tests"))
    found = set()
    for file in filter(None, files):
        path = Path(file).resolve()
        for tag, root in roots:
            inside = path.is_relative_to(root)
            if inside and (tag == "checkout" or path.relative_to(root).parts[0] == "transformers"):
                found.add(f"{tag}:{path.relative_to(root).as_posix()}")
                break
    return sorted(found)


class ResultCache:
    """Entries under ``directory``; ``roots`` say where ``checkout:`` and ``site:`` paths are for this run."""

    def __init__(self, directory: Path, environment: dict[str, Any], roots: dict[str, Path | None]):
        self.directory = directory
        self.environment = environment
        self.roots = roots
        self._hashes: dict[str, str | None] = {}

    def key(self, job: dict[str, Any]) -> str:
        fields = {"schema": CACHE_SCHEMA, "job": job, "environment": self.environment}
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()

    def _hash(self, source: str) -> str | None:
        if source not in self._hashes:
            tag, _, relative = source.partition(":")
            root = self.roots.get(tag)
            try:
                self._hashes[source] = hashlib.sha256((root / relative).read_bytes()).hexdigest() if root else None
            except OSError:
                self._hashes[source] = None
        return self._hashes[source]

    def get(self, job: dict[str, Any]) -> dict[str, Any] | None:
        """The result of an entry whose every source file is unchanged, or None. An entry this cache did not write
        (restored corrupt, edited, of another schema) is removed, so its cell runs and a good entry replaces it."""
        for path, entry in self._entries(job):
            if all(self._hash(source) == digest for source, digest in entry["sources"].items()):
                with contextlib.suppress(OSError):
                    os.utime(path, follow_symlinks=False)  # recently used: the last to be evicted
                return entry["result"]
        return None

    def last_seconds(self, job: dict[str, Any]) -> float | None:
        """How long the newest kept run of ``job`` took, whatever its files were then: an estimate of the next one."""
        for _, entry in self._entries(job):
            total = (entry["result"].get("timings") or {}).get("total")
            if isinstance(total, int | float):
                return float(total)
        return None

    def _entries(self, job: dict[str, Any]) -> Iterator[tuple[Path, dict[str, Any]]]:
        """The valid entries of ``job``'s key, newest first; each invalid one is logged and removed."""
        for path in _newest_first(self.directory / self.key(job)):
            try:
                # NaN (a diff that could not be computed) is read as null, as the report records it.
                entry = json.loads(read_regular_file(path, MAX_ENTRY_BYTES), parse_constant=lambda _: None)
                problem = _problem(entry, job)
            except FileNotFoundError:
                continue
            except (OSError, ValueError, RecursionError) as error:
                problem = f"unreadable ({type(error).__name__})"
            if problem is None:
                yield path, entry
                continue
            log.warning("result cache: removing a broken entry (%s): %s", problem, path)
            with contextlib.suppress(OSError):
                path.unlink()

    def put(self, job: dict[str, Any], result: dict[str, Any]) -> None:
        """Keep a deterministic result with the hashes of the files its job imported (``result["sources"]``)."""
        sources = result.get("sources") or []
        if result.get("status") not in CACHED_STATUSES or not sources:
            return
        hashes = {source: self._hash(source) for source in sources}
        if any(digest is None for digest in hashes.values()):
            return  # a file gone since the job read it: the entry could never be checked
        kept = {k: v for k, v in result.items() if k != "sources"}
        entry = {"schema": CACHE_SCHEMA, "job": job, "sources": hashes, "result": kept}
        folder = self.directory / self.key(job)
        name = hashlib.sha256(json.dumps(hashes, sort_keys=True).encode()).hexdigest()[:32] + ".json"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            # Written whole then renamed: a reader never sees half an entry, concurrent writers never mix.
            with tempfile.NamedTemporaryFile("w", dir=folder, suffix=".tmp", delete=False) as handle:
                json.dump(entry, handle)
            os.replace(handle.name, folder / name)
        except OSError as error:
            raise CacheError(f"cannot write the result cache at {self.directory}: {error.strerror or error}") from None
        for stale in _newest_first(folder)[MAX_ENTRIES_PER_KEY:]:
            with contextlib.suppress(OSError):
                stale.unlink()


def _newest_first(folder: Path) -> list[Path]:
    """The entry files of a key, most recently used first."""
    dated = []
    for path in folder.glob("*.json"):
        with contextlib.suppress(FileNotFoundError):  # removed meanwhile by a concurrent run's eviction
            dated.append((path.lstat().st_mtime, path))
    return [path for _, path in sorted(dated, reverse=True)]


def _problem(entry: Any, job: dict[str, Any]) -> str | None:
    """Why ``entry`` is not one ``put`` wrote for ``job``, or None. Its result must be a cell of the report schema
    (as the report will hold it); keys outside the schema (an ``impact`` record) are left to their readers."""
    if not isinstance(entry, dict) or entry.get("schema") != CACHE_SCHEMA or entry.get("job") != job:
        return "not an entry of this schema for this cell"
    sources = entry.get("sources")
    if not isinstance(sources, dict) or not sources or not all(isinstance(v, str) for v in sources.values()):
        return "no hashes of the files it read"
    result = entry.get("result")
    status = result.get("status") if isinstance(result, dict) else None
    if not isinstance(status, str) or status not in CACHED_STATUSES:
        return "no result to keep"
    cell = {key: result.get(key) for key in CELL_KEYS} | {
        "model_type": "",
        "model_class": str(job.get("model_class")),
        "backend": str(job.get("backend")),
        "timings": result.get("timings") or {},
        "workarounds": result.get("workarounds") or [],
    }
    errors = validate_cell(cell)
    return f"result {errors[0]}" if errors else None
