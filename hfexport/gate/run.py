"""``hfexport check`` end to end: selection -> jobs at head -> again at base -> report.

A cell that fails at head is run at base, in a checkout of the base commit of its own (a temporary directory), and is
pre-existing when it fails there too. A cell that passes at head is run at base for its export health (``health.py``:
its program against the base's, the two timed together; the result cache makes an unchanged base free), unless
``--no-health``; then only ``report_fixed`` runs it there.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import changes, health, report, views
from .bisect import Range, bisect_new_failures
from .cache import ResultCache
from .cache import environment as cache_environment
from .cells import BACKENDS, FAILURE_STATUSES, NOT_REGENERATED, SHARED_TRACE_BACKENDS, Cell, Frame, in_shard
from .impact import ImpactMap, ImpactMapError, default_class, default_map, expected_versions
from .jobs import JobOptions, WorkerError, WorkerProcess, transformers_dir
from .skips import skip_reason


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


def _resolve_names(worker: WorkerProcess, selection: changes.Selection, checkout: Path | None) -> None:
    resolved = worker.resolve(selection.names, selection.mode == "all", selection.variants)
    if resolved["errors"]:
        raise GateError("; ".join(resolved["errors"]))
    for entry in resolved["classes"]:
        path = Path(entry["path"]) if entry["path"] else None
        selection.classes.append(
            changes.SelectedClass(
                entry["model_type"],
                entry["model_class"],
                changes._relative(path, checkout) if path else None,
                entry["line"],
                entry["module"],
            )
        )


# ── Jobs ──


def _job(cell: Cell, selected: changes.SelectedClass, options: CheckOptions) -> dict[str, Any]:
    return {
        "model_type": selected.model_type,
        "model_class": selected.model_class,
        "module": selected.module,
        "backend": cell.backend,
        "generation": options.generation,
        # A recorded result is cached under keys of its own: a result kept without a record never answers for one.
        **({"impact": True} if options.record_impact else {}),
    }


class _LazyWorker:
    """The job worker for the code at ``code``, started on first use: a run whose cells all come from the result
    cache imports no torch at all."""

    def __init__(self, code: Path | None, options: CheckOptions):
        self.code, self.options, self.worker = code, options, None

    def get(self) -> WorkerProcess:
        if self.worker is None:
            self.worker = _start(self.code, self.options)
        return self.worker

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()


def _result_cache(code: Path | None, options: CheckOptions) -> ResultCache | None:
    if options.cache_dir is None:
        return None
    package = transformers_dir(code)
    roots = {"checkout": code, "site": package.parent if package else None}
    return ResultCache(options.cache_dir, cache_environment(code, options.engine), roots)


def _run_cells(
    worker: _LazyWorker,
    cells: list[tuple[Cell, changes.SelectedClass]],
    options: CheckOptions,
    on_result: Callable[[Cell, dict[str, Any]], None],
    deadline: float | None = None,
    store: health.ProgramStore | None = None,
) -> None:
    """Run (cell, class) pairs on a worker; ``on_result(cell, result)`` as each finishes (in finishing order).

    A cell the result cache holds for the same code is answered from it, marked ``cached``, and not run.
    """
    cache = _result_cache(worker.code, options)
    jobs = [_job(cell, selected, options) for cell, selected in cells]
    to_run = []
    for index, job in enumerate(jobs):
        cached = cache.get(job) if cache else None
        if cached is not None:
            on_result(cells[index][0], {**cached, "cached": True})
        else:
            to_run.append(index)
    if not to_run:
        return
    groups = _sharing_jobs(to_run, jobs, options.engine)
    if deadline is None:
        groups = _longest_first(groups, jobs, cache)
    running = worker.get()
    running.warm(sorted({cells[i][1].module for i in to_run if cells[i][1].module}))
    class_jobs = [
        {
            **jobs[group[0]],
            "backends": [jobs[i]["backend"] for i in group],
            **(store.job_fields(jobs[group[0]]["model_class"]) if store else {}),
        }
        for group in groups
    ]
    for position, backend, result in running.run(class_jobs, deadline):
        index = next(i for i in groups[position] if jobs[i]["backend"] == backend)
        if cache:
            cache.put(jobs[index], result)
        on_result(cells[index][0], result)


def _sharing_jobs(indices: list[int], jobs: list[dict[str, Any]], engine: str) -> list[list[int]]:
    """The cells to run, as jobs: a class's dynamo and ONNX cells in one job (dynamo first, its trace handed on, see
    ``cells.SHARED_TRACE_BACKENDS``), every other cell in one of its own; in the order of each job's first cell."""
    if engine != "hfexport":
        return [[index] for index in indices]
    groups: list[list[int]] = []
    sharing: dict[str, list[int]] = {}
    for index in indices:
        job = jobs[index]
        if job["backend"] not in SHARED_TRACE_BACKENDS:
            groups.append([index])
            continue
        if job["model_class"] not in sharing:
            sharing[job["model_class"]] = []
            groups.append(sharing[job["model_class"]])
        sharing[job["model_class"]].append(index)
    for group in sharing.values():
        group.sort(key=lambda index: SHARED_TRACE_BACKENDS.index(jobs[index]["backend"]))
    return groups


# A cell's usual seconds per backend (a tiny model, one core), until the result cache knows that cell's own.
TYPICAL_SECONDS = {"executorch": 30.0, "onnx": 12.0, "dynamo": 6.0}


def _longest_first(groups: list[list[int]], jobs: list[dict[str, Any]], cache: ResultCache | None) -> list[list[int]]:
    """Without a budget the longest jobs start first, so no core idles at the end behind one started last; a cell's
    expected length is its own last run where the result cache kept one, else its backend's usual."""

    def expected(index: int) -> float:
        known = cache.last_seconds(jobs[index]) if cache else None
        return known if known is not None else TYPICAL_SECONDS.get(jobs[index]["backend"], 10.0)

    return sorted(groups, key=lambda group: -sum(map(expected, group)))


@contextlib.contextmanager
def worktree(repo_root: Path, commit: str) -> Iterator[Path]:
    """The files of ``commit`` in a temporary directory, removed afterwards.

    Written from an index of hfexport's own (``read-tree`` + ``checkout-index``), not with ``git worktree``: nothing is
    recorded in the repository, so nothing needs pruning, and the records of the user's own worktrees (a folder on
    an unmounted disk included) are left as they are.
    """
    scratch = Path(tempfile.mkdtemp(prefix="hfexport-rev-"))
    path = scratch / "tree"
    try:
        index = scratch / "index"
        changes.git(repo_root, "read-tree", commit, index_file=index)
        changes.git(repo_root, "checkout-index", "--all", f"--prefix={path}{os.sep}", index_file=index)
        yield path
    except changes.SelectionError as error:
        raise GateError(f"cannot check out {commit[:12]}: {error}") from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _checkout_in(tree: Path, target: Target) -> Path | None:
    """The transformers checkout inside a worktree of the repository (same place as in the repository)."""
    if target.checkout is None or target.repo_root is None:
        return None
    return tree / target.checkout.relative_to(target.repo_root)


@contextlib.contextmanager
def _code_at(target: Target, commit: str | None) -> Iterator[Path | None]:
    """The checkout holding the code of ``commit`` (None: the working tree as it is)."""
    if commit is None or target.repo_root is None:
        yield target.checkout
        return
    with worktree(target.repo_root, commit) as tree:
        yield _checkout_in(tree, target) or tree


# ── Modular files: the modeling file a changed modular file makes ──

CONVERTER = "utils/modular_model_converter.py"


@contextlib.contextmanager
def _regenerated(
    code: Path | None, selection: changes.Selection, echo: Callable[[str], None]
) -> Iterator[tuple[Path | None, dict[str, str]]]:
    """The code to check, with the modeling file of each changed ``modular_X.py`` regenerated by transformers' own
    converter in a temporary copy of ``src/`` and ``utils/`` (never in the user's tree); and, per model type whose
    file could not be regenerated, why (its cells are then not checked, and the gate does not pass)."""
    if not selection.modular:
        yield code, {}
        return
    if code is None or not (code / CONVERTER).is_file():
        yield code, {t: _not_regenerated(f, f"the checkout has no {CONVERTER}") for t, f in selection.modular.items()}
        return
    with tempfile.TemporaryDirectory(prefix="hfexport-modular-") as scratch:
        tree = Path(scratch)
        for part in ("src", "utils"):
            shutil.copytree(code / part, tree / part, ignore=shutil.ignore_patterns("__pycache__", ".git"))
        failed = {}
        for model_type, file in selection.modular.items():
            problem = _convert(tree, file[file.index("src/transformers/") :])
            if problem:
                failed[model_type] = _not_regenerated(file, problem)
            else:
                echo(f"{Path(file).name}: its modeling file regenerated ({CONVERTER}), the regenerated code is checked")
        yield tree, failed


def _convert(tree: Path, modular: str) -> str | None:
    """Run the converter on one modular file in ``tree``; None when it succeeded, else its last words."""
    # Releases before 5.x name the option --files_to_parse; later ones --files.
    option = "--files" if '"--files"' in (tree / CONVERTER).read_text() else "--files_to_parse"
    try:
        done = subprocess.run(
            [sys.executable, CONVERTER, option, modular], cwd=tree, capture_output=True, text=True, timeout=600
        )
    except subprocess.TimeoutExpired:
        return "the converter ran past 600 s"
    if done.returncode == 0:
        return None
    last = (done.stderr.strip().splitlines() or done.stdout.strip().splitlines() or ["no output"])[-1]
    return f"the converter failed (exit {done.returncode}): {last[:200]}"


def _not_regenerated(modular_file: str, why: str) -> str:
    name = Path(modular_file).name
    modeling = name.replace("modular_", "modeling_", 1)
    relative = modular_file[modular_file.find("src/transformers/") :] if "src/transformers/" in modular_file else name
    return f"{modeling} is not regenerated from {name} ({why}); run: python {CONVERTER} --files {relative}"


def _start(checkout: Path | None, options: CheckOptions) -> WorkerProcess:
    try:
        worker = WorkerProcess(checkout, options.job_options())
    except WorkerError as error:
        raise GateError(str(error)) from None
    if worker.backend_problems:
        worker.close()
        backend, problem = next(iter(worker.backend_problems.items()))
        raise GateError(f"backend {backend} cannot be loaded: {problem}")
    return worker


def _classify_against_base(cell: Cell, base: dict[str, Any]) -> None:
    # Only a model failure at base makes one at head pre-existing: a class not checked at base (not buildable there)
    # or a tool error there proves nothing, so the head's failure stays new.
    base_failed = base.get("status") in FAILURE_STATUSES
    if cell.failed:
        cell.regression = "pre-existing" if base_failed else "new"
    elif cell.status == "pass" and base_failed:
        cell.regression = "fixed"


def run_check(
    target: Target,
    options: CheckOptions,
    echo: Callable[[str], None] = print,
    pr: dict[str, Any] | None = None,
    on_outcome: Callable[[Cell, dict[str, Any]], None] | None = None,
) -> report.Report:
    """Run the gate and return the finalized report (``exit_code`` 0 or 1); ``on_outcome(cell, result)`` sees each
    head result whole (``impact build`` takes its impact record)."""
    budget = options.budget_minutes
    end = None if budget is None else time.monotonic() + budget * 60
    deadline = end if end is None or not options.bisect else end - budget * 60 * options.bisect_share
    if options.engine == "transformers":
        from .engine_transformers import transformers_exporters_present

        if not transformers_exporters_present(target.checkout):
            raise GateError("--engine transformers: this transformers has no transformers.exporters")
    selection = target.selection
    repository = {
        "root": str(target.repo_root or target.checkout or "") or None,
        "base": target.base,
        "head": target.head_sha,
    }
    # The head's saved programs, kept for the base jobs to time theirs against (export health).
    programs = (
        tempfile.TemporaryDirectory(prefix="hfexport-programs-") if options.export_health and target.base else None
    )
    store = health.ProgramStore(Path(programs.name)) if programs else None
    with _code_at(target, target.head) as checked_out, _regenerated(checked_out, selection, echo) as (head_code, stale):
        head_worker = _LazyWorker(head_code, options)
        try:
            if selection.names:
                _resolve_names(head_worker.get(), selection, target.checkout)
            result = report.new_report(
                options.engine,
                options.backends,
                selection.as_report(),
                repository,
                options.shard,
                pr,
            )
            pairs = _cells(selection, options)
            echo(f"checking {len(pairs)} cell(s): {selection.reason}")
            for note in selection.notes:
                echo(note)
            done = 0
            total = len(pairs)

            def record(cell: Cell, outcome: dict[str, Any]) -> None:
                nonlocal done
                cell.apply_result(outcome)
                if on_outcome is not None:
                    on_outcome(cell, outcome)
                if cell.failed and target.base is None:
                    cell.regression = "new"
                done += 1
                echo(views.progress_line(done, total, cell))

            to_run = []
            for cell, selected in pairs:
                if cell.model_type in stale:
                    cell.status, cell.error_type, cell.error = "not_checked", NOT_REGENERATED, stale[cell.model_type]
                if cell.status in ("skipped", "not_checked"):
                    done += 1
                    echo(views.progress_line(done, total, cell))
                else:
                    to_run.append((cell, selected))
            if to_run:
                _run_cells(head_worker, to_run, options, record, deadline, store)
            repository.update(_transformers_record(head_code))
        finally:
            head_worker.close()
    if target.base is not None:
        _compare_with_base(target, options, pairs, echo, deadline, store and store.for_base())
    if options.bisect and target.repo_root is not None and target.base is not None:
        checked = Range(target.repo_root, target.base, target.head_sha, target.head is None, target.checkout)

        def run_at(cell: Cell, selected: changes.SelectedClass, commit: str | None, until: float | None) -> dict | None:
            return run_one_cell_at(target, options, cell, selected, commit, until)

        bisect_new_failures(checked, pairs, run_at, echo, end)
    if programs:
        programs.cleanup()
    result.cells = [cell for cell, _ in pairs]
    result.finalize()
    if options.fail_on_health and result.summary["health_regressions"] and result.exit_code == 0:
        result.exit_code = 1
    return result


def run_one_cell_at(
    target: Target,
    options: CheckOptions,
    cell: Cell,
    selected: changes.SelectedClass,
    commit: str | None,
    deadline: float | None,
) -> dict[str, Any] | None:
    """``cell``'s result with the code of ``commit`` (None: the working tree), an isolated job as every cell's, or
    from the result cache; None when the deadline left it unstarted. ``cell`` itself is left as it is."""
    outcomes: list[dict[str, Any]] = []
    with _code_at(target, commit) as code:
        worker = _LazyWorker(code, options)
        try:
            probe = Cell(cell.model_type, cell.model_class, cell.backend)
            _run_cells(worker, [(probe, selected)], options, lambda _, outcome: outcomes.append(outcome), deadline)
        finally:
            worker.close()
    return outcomes[0] if outcomes else None


def _transformers_record(code: Path | None) -> dict[str, Any]:
    """Which transformers the jobs import (a checkout's, of any version, or the installed one), from its files."""
    package = transformers_dir(code)
    if package is None:
        return {}
    init = package / "__init__.py"
    found = re.search(r"""^__version__\s*=\s*["']([^"']+)["']""", init.read_text(), re.MULTILINE)
    return {"transformers_version": found.group(1) if found else None, "transformers_path": str(init)}


def _cells(selection: changes.Selection, options: CheckOptions) -> list[tuple[Cell, changes.SelectedClass]]:
    pairs = []
    seen = set()
    for selected in selection.classes:
        if selected.model_class in seen:
            continue
        seen.add(selected.model_class)
        for backend in options.backends:
            source = Frame(selected.file, selected.line) if selected.file else None
            cell = Cell(selected.model_type, selected.model_class, backend, source=source)
            cell.selected_because = selected.reason
            reason = skip_reason(default_class(selected.model_class))  # a config variant's too
            if reason:
                cell.status, cell.skip_reason = "skipped", reason
            pairs.append((cell, selected))
    return _by_priority([(c, s) for c, s in pairs if in_shard(c.model_class, c.backend, options.shard)])


def _by_priority(pairs: list[tuple[Cell, changes.SelectedClass]]) -> list[tuple[Cell, changes.SelectedClass]]:
    """Every model type on every backend first: the first class of each type on each backend, then the second...;
    config variants (``Class@variant``) in the rounds after every default class.

    The order jobs start in, so a time budget that runs out leaves the later classes of the larger types, and the
    variants, never a whole type or backend unchecked. Types and the classes within a type go by how directly they run
    the change (``SelectedClass.rank``: a changed own file, then an impact-map hit, then static analysis nearest
    first). Deterministic: then the selection's order, the backends' order.
    """
    best: dict[str, int] = {}
    for cell, selected in pairs:
        best[cell.model_type] = min(best.get(cell.model_type, selected.rank), selected.rank)
    types = {model_type: index for index, model_type in enumerate(dict.fromkeys(c.model_type for c, _ in pairs))}
    count: dict[tuple[bool, str, str], int] = {}
    keyed = []
    for position, (cell, selected) in sorted(enumerate(pairs), key=lambda item: (item[1][1].rank, item[0])):
        variant = default_class(cell.model_class) != cell.model_class
        round_of = (variant, cell.model_type, cell.backend)
        within = count[round_of] = count.get(round_of, -1) + 1
        keyed.append(((variant, within, best[cell.model_type], types[cell.model_type], position), (cell, selected)))
    return [pair for _, pair in sorted(keyed, key=lambda item: item[0])]


def _compare_with_base(
    target: Target,
    options: CheckOptions,
    pairs: list[tuple[Cell, changes.SelectedClass]],
    echo: Callable[[str], None],
    deadline: float | None,
    store: health.ProgramStore | None = None,
) -> None:
    """Run at base what can change the verdict (failing cells; passing ones too with ``report_fixed``), and with a
    program ``store`` the passing cells, whose programs are compared with the base's (export health).

    A failure whose base run the budget left no room for stays new: nothing showed it was there before.
    """
    wanted = {"pass", *FAILURE_STATUSES} if options.report_fixed or store else FAILURE_STATUSES
    again = [(cell, selected) for cell, selected in pairs if cell.status in wanted]
    if not again:
        return
    echo(f"running {len(again)} cell(s) at base {target.base[:12]} to tell new failures from pre-existing ones")
    with _code_at(target, target.base) as base_code:
        worker = _LazyWorker(base_code, options)
        try:

            def record(cell: Cell, outcome: dict[str, Any]) -> None:
                _classify_against_base(cell, outcome)
                verdict = cell.regression or "unchanged"
                echo(f"  base · {cell.model_class} · {cell.backend}: {outcome.get('status')} -> {verdict}")
                if store and cell.status == "pass":
                    _assess_health(cell, outcome, options, echo)

            _run_cells(worker, again, options, record, deadline, store)
        finally:
            worker.close()


def _assess_health(cell: Cell, base: dict[str, Any], options: CheckOptions, echo: Callable[[str], None]) -> None:
    """Compare a passing cell's program with the base's; the latencies timed together only where neither side came
    from the result cache (a cached base's timing was against another head)."""
    cell.base_metrics = health.metrics_from(base.get("metrics")) if base.get("status") == "pass" else None
    paired = None if cell.cached or base.get("cached") else base.get("paired_latency")
    health.assess(cell, paired, options.health_thresholds)
    if cell.health and cell.health.regressions:
        echo(f"  health · {cell.model_class} · {cell.backend}: {', '.join(cell.health.regressions)}")
