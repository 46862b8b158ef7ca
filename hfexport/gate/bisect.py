"""``check --bisect``: the first commit of the range at which a newly failing cell fails.

A binary search over the range's first-parent commits (``git rev-list --first-parent base..head``): the base is
known good (the cell is new: it did not fail there) and the head bad; each step runs that one cell (class and backend)
at the middle commit, an isolated job as ``check`` runs every cell, answered by the result cache wherever the
commit's files for the class are unchanged. About log2(N) runs for N commits.

It never names a wrong commit: a step that cannot say pass or fail (the class does not exist at that commit, a tool
error, the budget ran out, a shallow clone lacks the commits) ends the search with a note saying why, and the
narrowest range it had reached.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

from . import changes
from .cells import FAILURE_STATUSES, Cell, FirstBadCommit
from .run import CheckOptions, Target, _code_at, _LazyWorker, _run_cells

# Where uncommitted changes are the head: the working tree, after the last commit.
WORKING_TREE = "the working tree"
# A merge commit's subject (GitHub's merge button) or a squash commit's (its trailing "(#123)").
_PR_NUMBER = re.compile(r"^Merge pull request #(\d+)|\(#(\d+)\)\s*$")


class _Unknown(Exception):
    """A step that cannot say pass or fail: the search stops with this reason."""


def bisect_new_failures(
    target: Target,
    options: CheckOptions,
    pairs: list[tuple[Cell, changes.SelectedClass]],
    echo: Callable[[str], None],
    deadline: float | None,
) -> None:
    """Set ``first_bad_commit`` on every new failure of a range (``target.base`` to the head)."""
    failing = [(cell, selected) for cell, selected in pairs if cell.failed and cell.new_failure]
    if not failing or target.repo_root is None or target.base is None:
        return
    try:
        positions = _positions(target)
    except _Unknown as problem:
        for cell, _ in failing:
            cell.first_bad_commit = FirstBadCommit(runs=0, note=str(problem))
        return
    echo(f"bisecting {len(failing)} new failure(s) over {len(positions)} commit(s) of {target.base[:12]}..")
    for cell, selected in failing:
        cell.first_bad_commit = _bisect(target, options, cell, selected, positions, deadline)
        echo(f"  first bad commit · {cell.model_class} · {cell.backend}: {cell.first_bad_commit.text()}")


def _positions(target: Target) -> list[str]:
    """The range's first-parent commits, oldest first, then the working tree where the head is uncommitted changes."""
    root, base = target.repo_root, target.base
    assert root is not None and base is not None
    head = target.head_sha or changes.git(root, "rev-parse", "HEAD")
    try:
        commits = changes.git(root, "rev-list", "--first-parent", "--reverse", f"{base}..{head}").split()
    except changes.SelectionError as error:
        raise _Unknown(f"git cannot list the range: {error}") from None
    if commits:
        try:
            parent = changes.git(root, "rev-parse", "--verify", "-q", f"{commits[0]}^1")
        except changes.SelectionError:
            raise _Unknown(f"{commits[0][:12]}'s parent is missing (a shallow clone? fetch the range whole)") from None
        if parent != base:
            raise _Unknown(f"the base {base[:12]} is not on the head's first-parent line (its first commit's parent)")
    if target.head is None and changes.git(root, "diff", "--name-only", "HEAD"):
        commits.append(WORKING_TREE)
    if not commits:
        raise _Unknown("the range has no commits")
    return commits


def _bisect(
    target: Target,
    options: CheckOptions,
    cell: Cell,
    selected: changes.SelectedClass,
    positions: list[str],
    deadline: float | None,
) -> FirstBadCommit:
    good, bad = -1, len(positions) - 1  # indexes into positions; -1 is the base
    runs = 0
    while bad - good > 1:
        middle = (good + bad) // 2
        try:
            outcome = _outcome_at(target, options, cell, selected, positions[middle], deadline)
        except _Unknown as problem:
            return FirstBadCommit(runs=runs, note=f"{problem}; {_between(positions, good, bad)}")
        runs += not outcome.get("cached")
        if outcome["status"] in FAILURE_STATUSES:
            bad = middle
        else:
            good = middle
    return _answer(target, positions[bad], runs)


def _outcome_at(
    target: Target,
    options: CheckOptions,
    cell: Cell,
    selected: changes.SelectedClass,
    commit: str,
    deadline: float | None,
) -> dict[str, Any]:
    """The cell's result at ``commit``: a model failure or a pass, else ``_Unknown`` saying why neither."""
    short = commit[:12] if commit != WORKING_TREE else commit
    if deadline is not None and time.monotonic() >= deadline:
        raise _Unknown("the bisect budget ran out")
    _require_class(target, selected, commit)
    outcomes: list[dict[str, Any]] = []
    with _code_at(target, None if commit == WORKING_TREE else commit) as code:
        worker = _LazyWorker(code, options)
        try:
            probe = Cell(cell.model_type, cell.model_class, cell.backend)
            _run_cells(worker, [(probe, selected)], options, lambda _, outcome: outcomes.append(outcome), deadline)
        finally:
            worker.close()
    outcome = outcomes[0] if outcomes else {"status": "not_run"}
    status = outcome.get("status")
    if status == "not_run":
        raise _Unknown("the bisect budget ran out")
    if status not in FAILURE_STATUSES and status != "pass":
        raise _Unknown(f"at {short} the cell is {status}: {str(outcome.get('error'))[:200]}")
    return outcome


def _require_class(target: Target, selected: changes.SelectedClass, commit: str) -> None:
    """``_Unknown`` when the commit's modeling file lacks the class: nothing there can pass or fail."""
    if commit == WORKING_TREE or not selected.file or target.checkout is None or target.repo_root is None:
        return
    path = (target.checkout / selected.file).resolve()
    if not path.is_relative_to(target.repo_root.resolve()):
        return  # the installed transformers' code: the same at every commit
    name = path.relative_to(target.repo_root.resolve()).as_posix()
    try:
        source = changes.git(target.repo_root, "show", f"{commit}:{name}")
    except changes.SelectionError:
        source = ""
    if not re.search(rf"^class {re.escape(selected.model_class)}\b", source, re.MULTILINE):
        raise _Unknown(f"{selected.model_class} does not exist at {commit[:12]} ({name})")


def _between(positions: list[str], good: int, bad: int) -> str:
    """The narrowest range reached: the first bad commit is one of positions[good+1 .. bad]."""
    first, last = positions[good + 1], positions[bad]
    shown = [p[:12] if p != WORKING_TREE else p for p in (first, last)]
    count = bad - good
    return f"it is {shown[0]}" if count == 1 else f"it is one of {count} commits, {shown[0]} to {shown[1]}"


def _answer(target: Target, commit: str, runs: int) -> FirstBadCommit:
    if commit == WORKING_TREE:
        return FirstBadCommit(runs=runs, note="the uncommitted changes of the working tree; every commit passes")
    assert target.repo_root is not None
    subject = changes.git(target.repo_root, "log", "-1", "--format=%s", commit)
    found = _PR_NUMBER.search(subject)
    pr = int(found.group(1) or found.group(2)) if found else None
    return FirstBadCommit(sha=commit, subject=subject[:300], pr=pr, runs=runs)
