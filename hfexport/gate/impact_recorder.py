"""Recording, in the gate worker, which transformers functions and methods a job executed (see ``impact.py``).

Every function reachable from the transformers modules the worker has imported gets one call inserted at its entry,
before the jobs fork: ``__hfexport_executed__(number)``, which adds the function's number to a set (SlipCover's
bytecode editor inserts it). A forked child empties the set, runs its job and reads the numbers back. Tracers were
measured and rejected: on Python 3.11 any tracer slows an export 2x or more (LlamaForCausalLM on dynamo and ONNX:
cProfile +109 %, coverage.py's C tracer +114 %, ``sys.setprofile`` +293 %, ``sys.settrace`` +338 %), as the
interpreter runs every frame in its slow tracing mode while one is set; a call per transformers function call costs
next to nothing (``scripts/bench_impact_overhead.py`` measures it).

Lambdas and comprehensions count as the function around them. A module the job itself imports (lazily, mid-export) is
not instrumented: the record lists it among the job's modules, so module-level selection still sees it.
"""

from __future__ import annotations

import dis
import sys
from collections.abc import Callable
from pathlib import Path
from types import CodeType, FunctionType, ModuleType
from typing import Any

import torch
import transformers
from slipcover.bytecode import (
    Editor,
    ExceptionTableEntry,
    LineEntry,
    calc_max_stack,
    offset2branch,
    op_CALL,
    op_LOAD_CONST,
    op_LOAD_GLOBAL,
    op_NOP,
    op_POP_TOP,
    op_PRECALL,
    opcode_arg,
)

from .impact import CodeUnit, ExecutedUnit, expected_versions

PROBE = "__hfexport_executed__"  # the global each instrumented function calls at its start


class ImpactRecorder:
    """Instruments loaded transformers modules once (``instrument_loaded``); per job ``reset`` then ``record``."""

    def __init__(self, root: Path | None):
        self.root = root
        self.executed: set[int] = set()
        self._probe = _probe_adding_to(self.executed)
        self.units: list[ExecutedUnit] = []
        self._done: set[str] = set()  # modules already instrumented
        self._seen: set[int] = set()  # ids of function objects already instrumented
        self._instrumented: dict[CodeType, CodeType] = {}  # a decorator's wrappers share their code
        self._packages = _package_parents(root)
        self._files: dict[str, str] = {}  # absolute file -> transformers/... path

    def instrument_loaded(self) -> int:
        """Instrument the functions reachable from every transformers module imported since the last call, wherever
        in transformers they are defined (a decorator's wrapper in ``utils/generic.py``); returns how many units."""
        before = len(self.units)
        loaded = [(name, m) for name, m in list(sys.modules.items()) if _is_transformers(name) and m is not None]
        files = {getattr(m, "__file__", None): name for name, m in loaded}
        for name, module in [(name, m) for name, m in loaded if name not in self._done]:
            self._done.add(name)
            for function in _functions_of(module):
                source = function.__code__.co_filename
                if source in files and id(function) not in self._seen:
                    self._seen.add(id(function))
                    function.__globals__[PROBE] = self._probe
                    function.__code__ = self._instrument(function.__code__, files[source], self._relative(source))
        return len(self.units) - before

    def reset(self) -> None:
        """Forget what ran so far (in a forked child: what its parent ran)."""
        self.executed.clear()

    def record(self, sources: list[str]) -> dict[str, Any]:
        """The job's impact record: the units that ran since ``reset`` and the modules of its ``sources`` (the
        result cache's list of the transformers files it depended on)."""
        units = sorted(self.units[n].as_row() for n in self.executed)
        modules = sorted(filter(None, (_module_of(source) for source in sources)))
        return {"versions": expected_versions(self.root), "units": units, "modules": modules}

    def _instrument(self, code: CodeType, module: str, file: str) -> CodeType:
        if code in self._instrumented:
            return self._instrumented[code]
        editor = _EntryEditor(code)
        for index, constant in enumerate(code.co_consts):
            if isinstance(constant, CodeType):
                editor.set_const(index, self._instrument(constant, module, file))
        if code.co_name.startswith("<"):
            return editor.finish()
        lines = [line for _, _, line in code.co_lines() if line]
        self.units.append(
            ExecutedUnit(CodeUnit(module, code.co_qualname), file, code.co_firstlineno, max(lines, default=0))
        )
        instrumented = self._instrumented[code] = editor.finish_with_probe(len(self.units) - 1)
        # A function an instrumented factory makes later (a decorator's wrapper in a module imported after it) already
        # runs this code: instrumented again, it would no longer be the code hfexport's patches find wrappers by
        # (dynamic_rope_update's: "Could not guard on data-dependent expression" on rope_type dynamic, recorded only).
        self._instrumented[instrumented] = instrumented
        return instrumented

    def _relative(self, file: str) -> str:
        """``transformers/...py``, whether the file is the checkout's or the installed package's."""
        if file not in self._files:
            path = Path(file).resolve()
            parent = next((p for p in self._packages if path.is_relative_to(p)), None)
            self._files[file] = (path.relative_to(parent) if parent else path).as_posix()
        return self._files[file]


class _EntryEditor(Editor):
    """SlipCover's bytecode editor, inserting ``__hfexport_executed__(number)`` where the code starts. The probe is
    loaded as a global: dynamo (strict exports) traces only literal constants, and calls the probe while tracing
    (``assume_constant_result``), so what dynamo traces is recorded too."""

    def finish_with_probe(self, number: int) -> CodeType:
        code = self.orig_code
        names = code.co_names if PROBE in code.co_names else (*code.co_names, PROBE)
        insert = bytearray([op_NOP, 0])  # SlipCover's editor keeps a NOP first in each insert
        insert += bytes(opcode_arg(op_LOAD_GLOBAL, names.index(PROBE) << 1 | 1))  # the low bit pushes NULL first
        insert += bytes(opcode_arg(op_LOAD_CONST, self.add_const(number)))
        insert += bytes(opcode_arg(op_PRECALL, 1) + opcode_arg(op_CALL, 1) + [op_POP_TOP, 0])
        self._insert(next(dis.findlinestarts(code))[0], insert)
        return self.finish().replace(co_names=names)

    def _insert(self, offset: int, insert: bytearray) -> None:
        """What ``Editor.insert_function_call`` does with its own call, for ours, but for the jumps: inserted where the
        first line starts, with only MAKE_CELL/COPY_FREE_VARS/RETURN_GENERATOR before it, no jump crosses the insert
        (3.11's jumps are relative), so none is read or moved (a third of the instrumenting time)."""
        if self.patch is None:
            self.patch = bytearray(self.orig_code.co_code)
            self.branches = []
            self.ex_table = ExceptionTableEntry.from_code(self.orig_code)
            self.lines = LineEntry.from_code(self.orig_code)
        insert[1] = offset2branch(len(insert) - 2)
        self.max_addtl_stack = max(self.max_addtl_stack, calc_max_stack(insert))
        self.patch[offset:offset] = insert
        for entry in (*self.lines, *self.branches, *self.ex_table):
            entry.adjust(offset, len(insert))
        self.inserts.append(offset)


def _probe_adding_to(executed: set[int]) -> Callable[[int], None]:
    def probe(number: int) -> None:
        executed.add(number)

    # Dynamo calls it while it traces (a strict export runs no Python of the model) instead of tracing into it.
    return torch.compiler.assume_constant_result(probe)


def _is_transformers(name: str) -> bool:
    return name == "transformers" or name.startswith("transformers.")


def _package_parents(root: Path | None) -> list[Path]:
    """Where ``transformers/`` lies: the checkout's ``src`` and the installed package's parent."""
    parents = [root.resolve() / "src"] if root is not None else []
    return [*parents, Path(transformers.__file__).resolve().parent.parent]


def _module_of(source: str) -> str | None:
    """``checkout:src/transformers/a/b.py`` or ``site:transformers/a/b.py`` -> ``transformers.a.b``."""
    parts = Path(source.partition(":")[2]).with_suffix("").parts
    if "transformers" not in parts:
        return None
    dotted = list(parts[parts.index("transformers") :])
    return ".".join(dotted[:-1] if dotted[-1] == "__init__" else dotted)


def _functions_of(module: ModuleType) -> list[FunctionType]:
    """The functions a module defines: its own, its classes' (static, class and property ones too), and those its
    decorators wrap (``__wrapped__``), where transformers' ``can_return_tuple`` and friends keep a model's forward."""
    found: list[FunctionType] = []
    for value in list(vars(module).values()):
        if isinstance(value, type) and value.__module__ == module.__name__:
            for member in list(vars(value).values()):
                found.extend(_unwrapped(member))
        else:
            found.extend(_unwrapped(value))
    return found


def _unwrapped(value: Any) -> list[FunctionType]:
    """The functions behind a class or module attribute: itself, what it wraps (``__wrapped__``) and, for a decorator
    that does not say what it wraps, the functions its closure holds."""
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    if isinstance(value, property):
        return [f for accessor in (value.fget, value.fset, value.fdel) for f in _unwrapped(accessor)]
    found: list[FunctionType] = []
    todo = [value]
    while todo:
        current = todo.pop()
        if isinstance(current, FunctionType) and not any(current is f for f in found):
            found.append(current)
            todo.append(getattr(current, "__wrapped__", None))
            todo.extend(_contents(cell) for cell in current.__closure__ or ())
    return found


def _contents(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell: a name the function assigns later
        return None
