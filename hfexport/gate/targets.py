"""What ``hfexport check`` is asked to check and how: the target (selection, checkout, range), the run's options, and
the usage error that stops it (exit code 2)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from . import changes, health
from .cells import BACKENDS
from .impact import ImpactMap, ImpactMapError, default_map, expected_versions
from .worker_parent import JobOptions


class GateError(RuntimeError):
    """A usage or infrastructure error: exit code 2 with this one-line message."""


@dataclass
class Target:
    """What to check and where its code lives."""

    selection: changes.Selection
    checkout: Path | None  # transformers checkout whose code is exported (None: the installed transformers)
    repo_root: Path | None = None
    base: str | None = None  # base commit: failures there are pre-existing
    head: str | None = None  # head commit, or None for the working tree
    head_sha: str | None = None


@dataclass
class CheckOptions:
    backends: list[str] = field(default_factory=lambda: list(BACKENDS))
    jobs: int = 1
    timeout: float = 600.0
    memory_limit_gib: float = 16.0
    engine: str = "hfexport"
    generation: bool = True
    shard: tuple[int, int] = (1, 1)
    report_fixed: bool = False
    cache_dir: Path | None = None  # the result cache (see cache.py); None: run every cell
    budget_minutes: float | None = None  # past it no more cells start; the rest are "not_run"
    export_health: bool = True  # passing cells run at base too, their programs compared (health.py)
    health_thresholds: health.Thresholds = field(default_factory=health.Thresholds)
    fail_on_health: bool = False  # a health regression fails the gate (exit code 1)
    record_impact: bool = False  # each result holds the transformers code its job ran (impact.py)
    bisect: bool = False  # name each new failure's first bad commit of the range (bisect.py)
    bisect_share: float = 0.3  # with bisect, the share of the budget kept for it (the head and base runs get the rest)

    def job_options(self) -> JobOptions:
        options = (self.jobs, self.timeout, self.memory_limit_gib, tuple(self.backends), self.engine)
        return JobOptions(*options, impact=self.record_impact)


# ── Selection ──


def target_for(
    cwd: Path,
    files: list[str],
    models: list[str],
    select_all: bool,
    base: str | None,
    head: str | None,
    *,
    impact_map: Path | None = None,
    cache_dir: Path | None = None,
) -> Target:
    """Decide what changed: --models / --all, explicit files, or the git range (the default).

    A change is read with the impact map at ``impact_map``, else the one the result cache at ``cache_dir`` keeps
    (see ``impact.default_map``), else by static analysis alone; the cache also keeps the source facts read."""
    try:
        if models or select_all:
            # "representative" stands for the built-in set used when shared code changes.
            names = [n for m in models for n in (changes.REPRESENTATIVE_NAMES if m == "representative" else [m])]
            changes.check_model_names(names, changes.find_checkout(cwd))
            selection = changes.Selection(mode="all" if select_all else "models", names=names)
            selection.representative = "representative" in models
            selection.reason = "--all" if select_all else f"--models {','.join(models)}"
            return _models_target(selection, cwd, base, head)
        if files:
            return _files_target(cwd, files, impact_map, cache_dir)
        root = changes.repository_root(cwd)
        base_sha, head_sha = changes.resolve_range(root, base, head)
        mapped, note = _impact_map(impact_map, cache_dir, changes.find_checkout(root))
        changed = changes.changed_files(root, base_sha, head)
        selection = changes.select_from_files(changed, root, "diff", (root, base_sha, head), mapped, _facts(cache_dir))
        selection.notes[:0] = [note] if note else []
        return _range_target(selection, root, base_sha, head, head_sha)
    except changes.SelectionError as error:
        raise GateError(str(error)) from None


def _models_target(selection: changes.Selection, cwd: Path, base: str | None, head: str | None) -> Target:
    """--models / --all, at the working tree; with --base (or --head) too, at that range, its base run as a diff's."""
    if base is None and head is None:
        return Target(selection, changes.find_checkout(cwd))
    root = changes.repository_root(cwd)
    base_sha, head_sha = changes.resolve_range(root, base, head)
    return _range_target(selection, root, base_sha, head, head_sha)


def _range_target(selection: changes.Selection, root: Path, base_sha: str, head: str | None, head_sha: str) -> Target:
    explicit_head = head is not None and head_sha != changes.git(root, "rev-parse", "HEAD")
    return Target(selection, changes.find_checkout(root), root, base_sha, head if explicit_head else None, head_sha)


def _files_target(cwd: Path, files: list[str], impact_map: Path | None, cache_dir: Path | None) -> Target:
    """Explicit file names (the pre-commit hook): compared with HEAD when inside a git repository."""
    paths = [(cwd / name).resolve() for name in files]
    checkout = next((c for c in map(changes.find_checkout, [p.parent for p in paths]) if c), None)
    checkout = checkout or changes.find_checkout(cwd.resolve())
    mapped, note = _impact_map(impact_map, cache_dir, checkout)
    try:
        repo_root = changes.repository_root(checkout or cwd)
        head_sha = changes.git(repo_root, "rev-parse", "--verify", "HEAD^{commit}")
    except changes.SelectionError:
        names = [
            p.relative_to(checkout).as_posix() if checkout and p.is_relative_to(checkout) else p.as_posix()
            for p in paths
        ]
        selection = changes.select_from_files(names, checkout, "files", None, mapped, _facts(cache_dir))
        selection.notes[:0] = [note] if note else []
        return Target(selection, checkout)
    names = [p.relative_to(repo_root).as_posix() if p.is_relative_to(repo_root) else p.as_posix() for p in paths]
    # Files holding changes (the hook's staged files) are read at function precision; files that hold none were named
    # to be checked, so they count whole, as outside a repository.
    edited = set(changes.changed_files(repo_root, head_sha, None)) & set(names)
    diff = (repo_root, head_sha, None) if edited else None
    selection = changes.select_from_files(names, checkout, "files", diff, mapped, _facts(cache_dir))
    named_types = [match["type"] for match in map(changes.MODEL_FILE.search, names) if match]
    # Model files named while none holds a change: their own classes, not the hundreds whose modular files copy code.
    if not edited and len(named_types) == len(names):
        selection.keep_only(named_types)
    selection.notes[:0] = [note] if note else []
    return Target(selection, checkout, repo_root, base=head_sha, head=None, head_sha=head_sha)


def _impact_map(path: Path | None, cache_dir: Path | None, checkout: Path | None) -> tuple[ImpactMap | None, str]:
    """The impact map to select with, and the one line that says why there is none where one was asked for."""
    expect = expected_versions(checkout)
    if path is None:
        return default_map(cache_dir, expect), ""
    try:
        return ImpactMap.load(path, expect), ""
    except ImpactMapError as error:
        return None, f"{error}: selecting by static analysis"


def _facts(cache_dir: Path | None) -> Path | None:
    """Where selection keeps the source facts it read (by file content), beside the result cache."""
    return cache_dir / "selection-facts.json" if cache_dir is not None else None
