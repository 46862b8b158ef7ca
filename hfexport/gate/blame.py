"""Whose failure a cell's exception is, decided from its traceback's frames (never from the message text).

- ``hfexport``: raised by hfexport's own code: the innermost frame outside the standard library is ours and the
  error came from its own instruction (a raise, an import, an attribute or key lookup), not out of a C function it
  called (a torch op). The gate reports it as ``tool_error``: the gate is broken there. So is an error transformers
  raised itself on an object hfexport handed it (the raising frame holds it: a ``Cache`` of hfexport's slot layers).
- ``model``: the innermost frame that is hfexport's or transformers' is transformers code (the checkout's model).
- ``toolchain``: torch, onnx or executorch raised while hfexport's exporter, runner or one of its workarounds drove
  them (a lowering with no translation, a kernel the runtime lacks): the export fails for this model.

``workaround`` names the workaround (``_patch_*``, ``_fix_*``, ``_aten_*``) that was running, if any: a thin wrapper
such as a patched ``run_decompositions`` is on the stack of every failure inside it, so it is named, not blamed. A
replacement of hfexport's that holds the ``original`` it wraps (a patch's, or the pass-through a shared trace watches a
patch target with) and was calling when the error came out stands in for that call: the deciding frame is its
caller's (the model line that called torch's SDPA, not the wrapper's forwarding line).

A failure after tracing (a lowering with no translation, a fix or a partitioner choking on a node) has no model
frame of its own: ``traced_model_frame`` finds the graph node being handled on the failing stack and reads the model
line that produced it from the ``stack_trace`` torch.export recorded on the node.

``ExportFailure`` is hfexport's deliberate finding about an export (outputs differ, a shape it does not accept):
raised by our code on purpose, so it is the model's result, not a tool error.
"""

from __future__ import annotations

import dis
import re
import sys
from dataclasses import dataclass
from types import CodeType, TracebackType
from typing import Literal

from ..exporters.errors import ExportFailure

_WORKAROUND = re.compile(r"_(patch|fix|aten)_\w+")
_STACK_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<function>\S+)')

Owner = Literal["hfexport", "model", "toolchain"]


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    function: str
    module: str
    at_call: bool = False  # the frame was calling when the error came out of the callee
    wraps_original: bool = False  # a replacement holding the function it replaces (``original``)
    holds_ours: bool = False  # a local (or ``self``'s list of parts) is an object of hfexport's

    def as_dict(self) -> dict[str, str | int]:
        return {"file": self.file, "line": self.line, "function": self.function}


@dataclass(frozen=True)
class Blame:
    owner: Owner
    frame: Frame | None  # the frame that decided (hfexport's or the model's), None when only libraries raised
    workaround: str | None = None  # the workaround that was running, if any


def _frames(tb: TracebackType | None) -> list[Frame]:
    """Frames of one traceback, innermost first."""
    frames = []
    while tb is not None:
        code = tb.tb_frame.f_code
        function = getattr(code, "co_qualname", code.co_name)
        module = str(tb.tb_frame.f_globals.get("__name__", ""))
        at_call, wraps = _is_call(code, tb.tb_lasti), "original" in code.co_freevars
        holds = _holds_ours(tb.tb_frame.f_locals)
        frames.append(Frame(code.co_filename, tb.tb_lineno, function, module, at_call, wraps, holds))
        tb = tb.tb_next
    return frames[::-1]


def _is_call(code: CodeType, offset: int) -> bool:
    """Whether the instruction at ``offset`` is a call: then the error came out of a callee with no Python frame of
    its own (a C function such as a torch op), not from this frame's own code (a raise, an import, an attribute)."""
    if not 0 <= offset < len(code.co_code):
        return False
    return dis.opname[code.co_code[offset]].startswith(("CALL", "PRECALL"))


def _is_stdlib(frame: Frame) -> bool:
    # The standard library is part of the code that called it: a failing copy.deepcopy or json.dumps in hfexport's
    # code is hfexport's failure.
    return frame.module.split(".")[0] in sys.stdlib_module_names


def _chain(error: BaseException) -> list[BaseException]:
    """The exception and its causes, innermost cause first."""
    chain, seen = [], set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        chain.append(current)
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
    return chain[::-1]


def _is_ours(frame: Frame) -> bool:
    return frame.module == "hfexport" or frame.module.startswith("hfexport.")


def _is_model(frame: Frame) -> bool:
    return frame.module == "transformers" or frame.module.startswith("transformers.")


def _holds_ours(frame_locals: dict[str, object]) -> bool:
    """Whether a frame names an object of hfexport's: a local of its type, or a part listed on ``self`` (the layers
    of the ``Cache`` whose method raised). A model forward's cache argument is a transformers object: not counted."""
    owner = frame_locals.get("self")
    parts = (
        [item for value in vars(owner).values() if isinstance(value, list) for item in value]
        if _has_vars(owner)
        else []
    )
    return any(_of_ours(value) for value in [*frame_locals.values(), *parts])


def _has_vars(value: object) -> bool:
    return isinstance(getattr(value, "__dict__", None), dict)


def _of_ours(value: object) -> bool:
    module = type(value).__module__
    return module == "hfexport" or module.startswith("hfexport.")


def _workaround(frame: Frame) -> str | None:
    match = _WORKAROUND.fullmatch(frame.function.split(".")[0])
    return match.group(0) if match else None


def blame(error: BaseException) -> Blame:
    """Decide whose failure ``error`` is (see the module docstring)."""
    chain = _chain(error)
    frames = [frame for exception in chain for frame in _frames(exception.__traceback__)]
    raiser = next((frame for frame in frames if not _is_stdlib(frame)), None)
    through_stdlib = bool(frames) and raiser is not frames[0]
    raised_here = raiser is not None and (through_stdlib or not raiser.at_call)
    if raised_here and _is_ours(raiser) and not isinstance(chain[0], ExportFailure):
        return Blame("hfexport", raiser, _workaround(raiser))
    if raised_here and _is_model(raiser) and raiser.holds_ours:
        # transformers refused an object hfexport handed it (a Cache holding its slot layers): hfexport's limit.
        return Blame("hfexport", raiser)
    running = next((name for frame in frames if _is_ours(frame) and (name := _workaround(frame))), None)
    for frame in frames:
        if _is_model(frame):
            return Blame("model", frame, running)
        if _is_ours(frame) and not _forwards(frame):
            return Blame("toolchain", frame, running)
    return Blame("toolchain", None, running)


def _forwards(frame: Frame) -> bool:
    """A replacement of ours calling on (the function it wraps, as a rule): transparent, its caller decides."""
    return frame.at_call and frame.wraps_original and _is_ours(frame)


def traced_model_frame(error: BaseException) -> Frame | None:
    """The model line behind the graph node a failure after tracing was handling, from the node's ``stack_trace``.

    Looks for a ``node`` (an FX node) among the locals of the failing frames, innermost first: torch.onnx's
    translation loop, hfexport's node fixes and ExecuTorch's passes all hold the node they work on under that name.
    """
    for exception in _chain(error):
        tb, frames = exception.__traceback__, []
        while tb is not None:
            frames.append(tb.tb_frame)
            tb = tb.tb_next
        for frame in reversed(frames):
            node = frame.f_locals.get("node")
            trace = getattr(node, "meta", {}).get("stack_trace") if hasattr(node, "meta") else None
            if isinstance(trace, str) and (found := _model_frame_in(trace)):
                return found
    return None


def _model_frame_in(stack_trace: str) -> Frame | None:
    """The innermost transformers frame of a recorded stack trace (``File "...", line N, in f`` lines)."""
    frames = [m for m in _STACK_FRAME.finditer(stack_trace) if "/transformers/" in m["file"].replace("\\", "/")]
    if not frames:
        return None
    last = frames[-1]
    return Frame(last["file"], int(last["line"]), last["function"], "transformers")
