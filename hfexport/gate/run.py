"""``hfexport check`` end to end: selection -> jobs at head -> again at base -> report.

A cell that fails at head is run at base, in a checkout of the base commit of its own (a temporary directory), and is
pre-existing when it fails there too. A cell that passes at head is run at base for its export health (``health.py``:
its program against the base's, the two timed together; the result cache makes an unchanged base free), unless
``--no-health``; then only ``report_fixed`` runs it there.
"""

from __future__ import annotations

import re
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import changes, health, report, views
from .bisect import Range, bisect_new_failures
from .cells import FAILURE_STATUSES, NOT_REGENERATED, Cell, Frame, in_shard
from .dispatch import LazyWorker, resolve_names, run_cells_on_worker
from .engine_transformers import transformers_exporters_present
from .impact import default_class
from .revisions import code_at, regenerated
from .skips import skip_reason
from .targets import CheckOptions, GateError, Target
from .worker_parent import transformers_dir


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
    if options.engine == "transformers" and not transformers_exporters_present(target.checkout):
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
    with code_at(target, target.head) as checked_out, regenerated(checked_out, selection, echo) as (head_code, stale):
        head_worker = LazyWorker(head_code, options)
        try:
            if selection.names:
                resolve_names(head_worker.get(), selection, target.checkout)
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
                run_cells_on_worker(head_worker, to_run, options, record, deadline, store)
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
    with code_at(target, commit) as code:
        worker = LazyWorker(code, options)
        try:
            probe = Cell(cell.model_type, cell.model_class, cell.backend)
            run_cells_on_worker(
                worker, [(probe, selected)], options, lambda _, outcome: outcomes.append(outcome), deadline
            )
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
    with code_at(target, target.base) as base_code:
        worker = LazyWorker(base_code, options)
        try:

            def record(cell: Cell, outcome: dict[str, Any]) -> None:
                _classify_against_base(cell, outcome)
                verdict = cell.regression or "unchanged"
                echo(f"  base · {cell.model_class} · {cell.backend}: {outcome.get('status')} -> {verdict}")
                if store and cell.status == "pass":
                    _assess_health(cell, outcome, options, echo)

            run_cells_on_worker(worker, again, options, record, deadline, store)
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
