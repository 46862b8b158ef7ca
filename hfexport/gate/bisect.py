"""``check --bisect``: the first commit of the range at which a newly failing cell fails.

A binary search over the range's first-parent commits (``git rev-list --first-parent base..head``): the base is
known good (the cell is new: it did not fail there) and the head bad; each step runs that one cell (class and backend)
at the middle commit, an isolated job as ``check`` runs every cell, answered by the result cache wherever the
commit's files for the class are unchanged. About log2(N) runs for N commits.

It never names a wrong commit: a step that cannot say pass or fail as the head does (the class does not exist at that
commit, a tool error or another kind of failure, the budget ran out, a shallow clone lacks the commits) ends the
search with a note saying why, and the narrowest range it had reached.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import changes
from .cells import Cell, FirstBadCommit

# Where uncommitted changes are the head: the working tree, after the last commit.
WORKING_TREE = "the working tree"
# How a step runs one cell: (cell, its class, a commit or None for the working tree, deadline) -> its result, or
# None when it did not run (``run.run_one_cell_at``).
RunAt = Callable[[Cell, changes.SelectedClass, str | None, float | None], dict[str, Any] | None]


@dataclass(frozen=True)
class Range:
    """The commits checked: ``base..head`` of the repository at ``root``; ``working_tree``: the head run checked the
    uncommitted changes too. ``checkout`` is the transformers checkout inside it (class files are relative to it)."""

    root: Path
    base: str
    head: str
    working_tree: bool
    checkout: Path | None


# A merge commit's subject (GitHub's merge button) or a squash commit's (its trailing "(#123)").
_PR_NUMBER = re.compile(r"^Merge pull request #(\d+)|\(#(\d+)\)\s*$")


class _Unknown(Exception):
    """A step that cannot say pass or fail: the search stops with this reason."""


def bisect_new_failures(
    checked: Range,
    pairs: list[tuple[Cell, changes.SelectedClass]],
    run_at: RunAt,
    echo: Callable[[str], None],
    deadline: float | None,
) -> None:
    """Set ``first_bad_commit`` on every new failure of the range."""
    failing = [(cell, selected) for cell, selected in pairs if cell.failed and cell.new_failure]
    if not failing:
        return
    try:
        positions = _positions(checked)
    except _Unknown as problem:
        for cell, _ in failing:
            cell.first_bad_commit = FirstBadCommit(runs=0, note=str(problem))
        return
    echo(f"bisecting {len(failing)} new failure(s) over {len(positions)} commit(s) after {checked.base[:12]}")
    for cell, selected in failing:
        cell.first_bad_commit = _bisect(checked, run_at, cell, selected, positions, deadline)
        echo(f"  first bad commit · {cell.model_class} · {cell.backend}: {cell.first_bad_commit.text()}")


def _positions(checked: Range) -> list[str]:
    """The range's first-parent commits, oldest first, then the working tree where the head is uncommitted changes."""
    root, base, head = checked.root, checked.base, checked.head
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
    if checked.working_tree and changes.git(root, "diff", "--name-only", "HEAD"):
        commits.append(WORKING_TREE)
    if not commits:
        raise _Unknown("the range has no commits")
    return commits


def _bisect(
    checked: Range,
    run_at: RunAt,
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
            outcome = _outcome_at(checked, run_at, cell, selected, positions[middle], deadline)
        except _Unknown as problem:
            return FirstBadCommit(runs=runs, note=f"{problem}; {_between(positions, good, bad)}")
        runs += 0 if outcome.get("cached") else 1
        if outcome["status"] == cell.status:
            bad = middle
        else:
            good = middle
    if good == -1:
        try:
            problem = _fails_at_base(checked, run_at, cell, selected, deadline)
        except _Unknown as unknown:
            problem = f"{unknown}; the base could not be seen to pass"
        if problem:
            return FirstBadCommit(runs=runs, note=problem)
    return _answer(checked, positions[bad], runs)


def _fails_at_base(
    checked: Range, run_at: RunAt, cell: Cell, selected: changes.SelectedClass, deadline: float | None
) -> str | None:
    """Why the range's first commit is not the answer though every step failed: the cell's base run may have been no
    result (a tool error), so the base is run (the result cache usually answers). None: it passes, or the class is
    not there (the range's first commit added it, failing)."""
    try:
        _require_class(checked, selected, checked.base)
    except _Unknown:
        return None
    if _outcome_at(checked, run_at, cell, selected, checked.base, deadline)["status"] == cell.status:
        return f"it fails at the base {checked.base[:12]} too: no commit of the range broke it"
    return None


def _outcome_at(
    checked: Range,
    run_at: RunAt,
    cell: Cell,
    selected: changes.SelectedClass,
    commit: str,
    deadline: float | None,
) -> dict[str, Any]:
    """The cell's result at ``commit``: a model failure or a pass, else ``_Unknown`` saying why neither."""
    short = commit[:12] if commit != WORKING_TREE else commit
    if deadline is not None and time.monotonic() >= deadline:
        raise _Unknown("the bisect budget ran out")
    _require_class(checked, selected, commit)
    outcome = run_at(cell, selected, None if commit == WORKING_TREE else commit, deadline) or {"status": "not_run"}
    status = outcome.get("status")
    if status == "not_run":
        raise _Unknown("the bisect budget ran out")
    # Only the head's own status is bad: a timeout or an out-of-memory where the head failed may be the machine's load.
    if status not in (cell.status, "pass"):
        error = str(outcome.get("error"))[:200]
        raise _Unknown(f"at {short} the cell is {status} (at the head: {cell.status}): {error}")
    return outcome


def _require_class(checked: Range, selected: changes.SelectedClass, commit: str) -> None:
    """``_Unknown`` when the commit's modeling file lacks the class: nothing there can pass or fail."""
    if commit == WORKING_TREE or not selected.file or checked.checkout is None:
        return
    path = (checked.checkout / selected.file).resolve()
    if not path.is_relative_to(checked.root.resolve()):
        return  # the installed transformers' code: the same at every commit
    name = path.relative_to(checked.root.resolve()).as_posix()
    try:
        source = changes.git(checked.root, "show", f"{commit}:{name}")
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


def _answer(checked: Range, commit: str, runs: int) -> FirstBadCommit:
    if commit == WORKING_TREE:
        return FirstBadCommit(runs=runs, note="the uncommitted changes of the working tree; every commit passes")
    subject = changes.git(checked.root, "log", "-1", "--format=%s", commit)
    found = _PR_NUMBER.search(subject)
    pr = int(found.group(1) or found.group(2)) if found else None
    return FirstBadCommit(sha=commit, subject=subject[:300], pr=pr, runs=runs)
