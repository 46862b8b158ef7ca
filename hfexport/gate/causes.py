"""One cause, one entry: failing cells grouped by where and how they broke, each group with a hint of what to do.

A change that breaks one line of a model usually breaks every class and backend that runs it; the report names the
line once and lists the cells under it. Hints cover the common kinds of failure, read from the error a cell records.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from .cells import BACKENDS, NOT_A_RESULT, Cell, FirstBadCommit

_DATA_DEPENDENT = re.compile(r"data-dependent expression (?P<expression>.+?)(?: \(|$)")
_SPECIALIZED = re.compile(
    r"input '(?P<input>[^']+)' dimension (?P<dim>\d+) has size (?P<size>\d+), but the program accepts only size "
    r"(?P<traced>\d+)"
)
_OP = re.compile(r"\b(?P<op>(?:aten|prims|quantized_decomposed|transformers)[.:]{1,2}[A-Za-z_][\w.]*)")
_NO_TRANSLATION = ("No ONNX function found", "has no translation", "no lowering", "Unsupported FX nodes")
# ExecuTorch's runtime names no operator when loading fails for a missing kernel: error 0x14 is OperatorMissing.
_NO_KERNEL = ("Missing operator", "missing out variant", "OperatorMissing", "error: 0x:14", "error: 0x14")
# What hfexport adds for an operator a backend lacks, in the reviewer's words (the comment names no hfexport path). The
# modules: ONNX's translations and FX node fixes in workarounds/onnx/{translations,node_fixes}.py, decompositions of
# ops ExecuTorch's runtime has no kernel for in workarounds/executorch/kernel_*.py, its other fixes in
# executorch/fixes.py.
_MISSING_OP_WORKAROUND = {"onnx": "an ONNX translation or an FX node fix", "executorch": "an FX node fix"}
_OUTPUT = re.compile(r"at the (?P<shape>traced|second) shape \((?P<inputs>.*)\): (?P<output>[^:]+): (?P<how>.+)")


@dataclass
class Cause:
    """Failing cells that broke at the same place the same way; ``cell`` is the first of them."""

    cell: Cell
    cells: list[Cell] = field(default_factory=list)

    @property
    def where(self) -> str:
        """The model line when the trace reached the checkout's code, else the step it failed in."""
        location = self.cell.model_location
        if location:
            return f"{location.file}:{location.line}"
        return self.cell.step or "unknown step"

    @property
    def broken(self) -> str:
        """The cells it breaks: ``LlamaModel · dynamo, onnx; LlamaForCausalLM · dynamo``."""
        order = {backend: position for position, backend in enumerate(BACKENDS)}
        by_class: dict[str, list[str]] = {}
        # Backends in the order reports show them (the grid's columns), others after them.
        for cell in sorted(self.cells, key=lambda c: order.get(c.backend, len(order))):
            by_class.setdefault(cell.model_class, []).append(cell.backend)
        return "; ".join(f"{name} · {', '.join(backends)}" for name, backends in by_class.items())

    def first_bad_commits(self) -> list[tuple[FirstBadCommit, str]]:
        """``check --bisect``'s answers for its cells, each once, with the cells it is for ("" when it is for all)."""
        found: dict[str, tuple[FirstBadCommit, list[str]]] = {}
        for cell in self.cells:
            if cell.first_bad_commit is not None:
                entry = found.setdefault(cell.first_bad_commit.text(), (cell.first_bad_commit, []))
                entry[1].append(f"{cell.model_class} · {cell.backend}")
        if len(found) == 1 and len(next(iter(found.values()))[1]) == len(self.cells):
            return [(next(iter(found.values()))[0], "")]
        return [(answer, "; ".join(names)) for answer, names in found.values()]


def _key(cell: Cell) -> tuple[str, ...]:
    location = cell.model_location
    if location:
        # The same line and error type: the message can differ by class (symbol numbers, sizes).
        return ("line", str(location.file), str(location.line), str(cell.error_type))
    return ("step", cell.status or "", cell.step, str(cell.error_type), str(cell.error))


def group(cells: list[Cell]) -> list[Cause]:
    """The causes of every cell that is a failure, a tool error or not checked, in the order first seen."""
    causes: dict[tuple[str, ...], Cause] = {}
    for cell in cells:
        if not (cell.failed or cell.status in NOT_A_RESULT):
            continue
        key = (cell.status if cell.status in NOT_A_RESULT else "failure", *_key(cell))
        causes.setdefault(key, Cause(cell)).cells.append(cell)
    return list(causes.values())


def _backticked(text: str) -> str:
    return f"`{text}`"


def failure_kind(cell: Cell) -> str:
    """What broke, in one or two words (a status grid cell, a cause's title): "data-dependent", "no kernel", ..."""
    if cell.status in KIND_OF_STATUS:
        return KIND_OF_STATUS[cell.status]
    error = f"{cell.error_type}: {cell.error}"[:2000]  # the first lines say the kind; bounds the regex work
    if _DATA_DEPENDENT.search(error):
        return "data-dependent"
    if _SPECIALIZED.search(error):
        return "specialized"
    if any(text in error for text in _NO_TRANSLATION):
        return "no translation"
    if any(text in error for text in _NO_KERNEL):
        return "no kernel"
    if cell.error_type == "OutputMismatch":
        return "wrong values"
    return "fails"


# A status that says what broke by itself; the others are told apart by their error.
KIND_OF_STATUS = {
    "crash": "crash",
    "timeout": "timeout",
    "oom": "out of memory",
    "tool_error": "tool error",
    "not_checked": "not checked",
    "not_run": "not run",
}


def hint(cell: Cell, code: Callable[[str], str] = _backticked) -> str | None:
    """What to do about a failure of a common kind, in a sentence; None when the error is of no known kind.

    ``code`` quotes the report's own text (an expression, an input, an operator, a path): the markdown view passes
    one that keeps untrusted text inert; the hint's own words are hfexport's.
    """
    if cell.status == "not_run":
        return (
            "not run: the time budget (--budget) ran out first. Run every cell by splitting the check over a matrix: "
            "`hfexport check --shard K/N` in N jobs, then `hfexport merge` of their report.json files."
        )
    error = f"{cell.error_type}: {cell.error}"[:2000]  # the first lines say the kind; bounds the regex work
    location = cell.model_location
    at = f" at {code(f'{location.file}:{location.line}')}" if location else ""
    if match := _DATA_DEPENDENT.search(error):
        return (
            f"data-dependent: the code{at} branches on, or sizes from, a tensor's values "
            f"({code(match['expression'].strip())}). Use `torch._check(...)` to state what holds, tensor ops instead "
            "of a Python `if` on values (`torch.where`, masking), or `torch.cond` for a real branch."
        )
    if match := _SPECIALIZED.search(error):
        return (
            f"specialized: tracing fixed input {code(match['input'])} dimension {match['dim']} to {match['traced']}"
            f"{at}, so the export rejects {match['size']}. Look for a Python int taken from a shape "
            "(`int(x.shape[1])`, `.item()`, `.tolist()`), a branch on a size, or a size written into a "
            "`view`/`reshape`; keep sizes symbolic (`x.shape[1]`, `-1`)."
        )
    op = _OP.search(error)
    if any(text in error for text in _NO_TRANSLATION):
        named = code(op["op"]) if op else "an operator"
        return (
            f"no translation: {code(cell.backend)} cannot express {named}. Write it with ops it has, or ask hfexport "
            f"for {_MISSING_OP_WORKAROUND.get(cell.backend, 'a workaround')} on this backend."
        )
    if any(text in error for text in _NO_KERNEL):
        named = code(op["op"]) if op else "an operator (the job's log names it)"
        return (
            f"no kernel: the {code(cell.backend)} runtime has no kernel for {named}. Decompose it into ops the "
            "runtime has (an FX node fix in hfexport's workarounds for this backend), or avoid it in the model."
        )
    if cell.error_type == "OutputMismatch" and (match := _OUTPUT.search(str(cell.error)[:2000])):
        return (
            f"wrong values: output {code(match['output'].strip())} differs from eager ({code(match['how'].strip())}) "
            f"at the {match['shape']} shape ({code(match['inputs'])}). Look for randomness, in-place updates of "
            "inputs or buffers, or an op whose semantics differ on the runtime."
        )
    return None
