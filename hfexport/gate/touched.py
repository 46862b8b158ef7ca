"""What a diff touched, at function precision: each hunk's changed lines, on the base side and on the head side, mapped
to the functions, methods, class-level or module-level statements of the file at that revision (``ast``).

- A changed line inside a function or method body (its signature included) touches that function or method; a nested
  function counts as the one it is nested in.
- A decorator, a class attribute or a class's bases touch the class (``kind`` "class"); any other top-level
  statement touches the module (``kind`` "module"), with the names it binds.
- A line that holds only a comment, or belongs to a docstring, or is blank, touches nothing: a hunk that only
  changes comments or docstrings touches nothing, as transformers' ``utils/tests_fetcher.py`` decides.
- A file that does not parse at a revision, or a diff that cannot be read, counts as a module-level change of the
  whole file, said in one line (``Touches.notes``).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

from .impact import CodeUnit

# A Python file of the transformers package, anywhere in the repository (a checkout may sit in a subfolder).
TRANSFORMERS_FILE = re.compile(r"(?:^|/)src/(?P<module>transformers/(?:[^/]+/)*[^/]+)\.py$")
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_NOT_CODE = frozenset(
    {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
)


class DiffError(ValueError):
    """A diff this module cannot read."""


@dataclass(frozen=True)
class Touch:
    """One code unit a change touched."""

    module: str  # "transformers.masking_utils"
    qualname: str  # "create_causal_mask", "GenericForSequenceClassification.forward"; the class or "" otherwise
    kind: str  # "function" (a function or method), "class" (class-level statement) or "module" (top level)
    names: tuple[str, ...]  # top-level names the touched statement defines or binds (empty: none known)
    file: str  # relative to the repository root
    line: int  # first changed line in the unit, on its side
    side: str  # "base" or "head"

    @property
    def unit(self) -> CodeUnit:
        """The impact map's unit: the function or method, or the module's top level for anything else."""
        return CodeUnit(self.module, self.qualname if self.kind == "function" else "")

    @property
    def label(self) -> str:
        """``masking_utils.create_causal_mask``, ``modeling_utils.PreTrainedModel (class level)``,
        ``masking_utils.py (module level)``."""
        short = self.module.rsplit(".", 1)[-1]
        if self.kind == "function":
            return f"{short}.{self.qualname}"
        if self.kind == "class":
            return f"{short}.{self.qualname} (class level)"
        return f"{Path(self.file).name} (module level)"


@dataclass
class Touches:
    """What a change touched in transformers' Python files."""

    touches: list[Touch] = field(default_factory=list)
    files: list[str] = field(default_factory=list)  # transformers .py files whose code changed
    notes: list[str] = field(default_factory=list)  # one line per fallback taken


def module_of(path: str) -> str | None:
    """``src/transformers/models/llama/modeling_llama.py`` -> ``transformers.models.llama.modeling_llama``."""
    match = TRANSFORMERS_FILE.search(path)
    if match is None:
        return None
    parts = match["module"].split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


# ── The diff's changed lines ──


def changed_lines(diff: str) -> dict[str, tuple[set[int], set[int]]]:
    """Per file (the head-side path, or the base-side one for a deleted file): (base lines, head lines) changed.

    ``diff`` is ``git diff -U0 --no-renames`` output; ``DiffError`` when it does not have that shape."""
    files: dict[str, tuple[set[int], set[int]]] = {}
    current: tuple[set[int], set[int]] | None = None
    base_path = None
    for line in diff.splitlines():
        if line.startswith("diff --git "):
            current, base_path = None, None
        elif line.startswith("--- "):
            base_path = None if line == "--- /dev/null" else _diff_path(line[4:], "a/")
        elif line.startswith("+++ "):
            path = base_path if line == "+++ /dev/null" else _diff_path(line[4:], "b/")
            if path is None:
                raise DiffError(f"no file named for {line!r}")
            current = files.setdefault(path, (set(), set()))
        elif line.startswith("@@"):
            match = _HUNK.match(line)
            if match is None or current is None:
                raise DiffError(f"a hunk header without its file: {line[:80]!r}")
            old_start, old_count, new_start, new_count = (
                int(match[1]),
                int(match[2] or 1),
                int(match[3]),
                int(match[4] or 1),
            )
            current[0].update(range(old_start, old_start + old_count))
            current[1].update(range(new_start, new_start + new_count))
    return files


def _diff_path(text: str, prefix: str) -> str:
    text = text.split("\t", 1)[0]
    if text.startswith('"'):
        raise DiffError(f"a quoted path: {text[:80]}")
    if not text.startswith(prefix):
        raise DiffError(f"a path without {prefix!r}: {text[:80]}")
    return text[len(prefix) :]


# ── Lines -> code units of one file at one revision ──


def code_lines(source: str, tree: ast.Module) -> set[int]:
    """Lines holding code: a token that is no comment, outside every docstring."""
    lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in _NOT_CODE:
            lines.update(range(token.start[0], token.end[0] + 1))
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                lines.difference_update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return lines


def bound_names(statement: ast.stmt, imports: bool = True) -> tuple[str, ...]:
    """Top-level names a module-level statement defines or binds (assignments, defs under an ``if``, and imports
    unless ``imports`` is False)."""
    names: list[str] = []
    for node in ast.walk(statement):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.append(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.append(node.name)
        elif isinstance(node, ast.alias) and imports:
            names.append((node.asname or node.name).split(".")[0])
    return tuple(dict.fromkeys(names))


_Unit = tuple[str, str, tuple[str, ...]]  # (kind, qualname, names)


def _span(node: ast.AST) -> range:
    """The node's lines, its decorators included (``lineno`` is the ``def`` or ``class`` line, after them)."""
    decorators = getattr(node, "decorator_list", [])
    return range(min([node.lineno, *(d.lineno for d in decorators)]), (node.end_lineno or node.lineno) + 1)


def _decorator_lines(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> set[int]:
    return {line for decorator in node.decorator_list for line in _span(decorator)}


def _class_units(node: ast.ClassDef, prefix: str, top: str, lines: set[int]) -> dict[int, _Unit]:
    """Each changed line of a class: its methods' bodies are functions, everything else is the class's level."""
    found: dict[int, _Unit] = {}
    qualname = f"{prefix}{node.name}"
    class_level: _Unit = ("class", top, (top,))
    for line in lines & set(_span(node)):
        found[line] = class_level
    for statement in node.body:
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
            method = ("function", f"{qualname}.{statement.name}", (top,))
            for line in lines & set(_span(statement)) - _decorator_lines(statement):
                found[line] = method
        elif isinstance(statement, ast.ClassDef):
            found.update(_class_units(statement, f"{qualname}.", top, lines))
    return found


def units_at(source: str, lines: set[int]) -> dict[int, _Unit]:
    """(kind, qualname, names) of the code unit each changed code line of ``source`` belongs to.

    ``SyntaxError`` (or a tokenize error) when the file does not parse."""
    tree = ast.parse(source)
    lines = lines & code_lines(source, tree)
    found: dict[int, _Unit] = {}
    for statement in tree.body:
        inside = lines & set(_span(statement))
        if not inside:
            continue
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
            decorators = _decorator_lines(statement)
            for line in inside:
                found[line] = (
                    ("module", "", (statement.name,))
                    if line in decorators
                    else ("function", statement.name, (statement.name,))
                )
        elif isinstance(statement, ast.ClassDef):
            found.update(_class_units(statement, "", statement.name, inside))
        else:
            names = bound_names(statement)
            for line in inside:
                found[line] = ("module", "", names)
    return found


def touches_in(source: str | None, lines: set[int], module: str, file: str, side: str) -> list[Touch]:
    """The touches of one side of one file (``source`` None: the file does not exist on that side)."""
    if source is None or not lines:
        return []
    first: dict[_Unit, int] = {}
    for line, unit in sorted(units_at(source, lines).items()):
        first.setdefault(unit, line)
    return [Touch(module, qualname, kind, names, file, line, side) for (kind, qualname, names), line in first.items()]


def whole_file(module: str, file: str, side: str = "head") -> Touch:
    """The fallback touch: the whole file counts as a module-level change."""
    return Touch(module, "", "module", (), file, 1, side)
