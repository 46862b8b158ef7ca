"""A report's cell, typed, and its vocabulary, defined once: backends, statuses, shards, and the text every view shows.

``Cell`` is the one in-memory form of a (model class, backend) result; ``Cell.as_dict`` is its JSON form in the
report schema. The views (terminal, JUnit, annotations, markdown, the coverage document) all take their words from
``Cell``'s label, short form and location, so a cell reads the same everywhere.
Imported by the gate's parent process, the report views and ``hfexport comment``, so it imports nothing heavy.
"""

from __future__ import annotations

import dataclasses
import zlib
from dataclasses import dataclass, field
from typing import Any

# The built-in backends, in the order reports show them.
BACKENDS = ("dynamo", "onnx", "executorch")
# The backends whose cells of one class run in one job (``checks.cell.check_class_in_job``) and one shard: dynamo's
# trace is ONNX's wherever no ONNX patch is reached. ExecuTorch bounds its dynamic dimensions and patches attention, so
# its trace differs: its cells run on their own.
SHARED_TRACE_BACKENDS = ("dynamo", "onnx")

# "tool_error": hfexport itself failed (exit code 2); "not_checked": no tiny model could be built or run eagerly.
# Neither is a model's failure. "error" is schema 1's build/eager/job error, read but no longer written.
STATUSES = ("pass", "fail", "crash", "timeout", "oom", "skipped", "error", "tool_error", "not_checked", "not_run")
FAILURE_STATUSES = frozenset({"fail", "crash", "timeout", "oom", "error"})
# "not_run": the time budget (--budget) ran out before the cell started; never a pass.
NOT_A_RESULT = frozenset({"tool_error", "not_checked", "not_run"})
# The result of a cell whose job did not start before the time budget ran out.
# A decoder LM's generation parts (``checks.generation.GENERATION_PARTS`` and the export module) and the words reports
# use.
GENERATION_KEYS = ("generation", "generation_static", "export_module")
GENERATION_STATUSES = ("pass", "fail", "skipped", "not_checked")
# The backends whose runtimes run transformers' exported module (torch.export's program, ExecuTorch's LLM runner).
EXPORT_MODULE_BACKENDS = ("dynamo", "executorch")
GENERATION_LABELS = {
    "generation": "generation",
    "generation_static": "generation · static cache",
    "export_module": "transformers export module",
}
NOT_RUN = {"status": "not_run", "stage": None, "error_type": "Budget", "error": "not run: the time budget ran out"}
# The error_type of a "not_checked" cell whose modular file changed but whose modeling file could not be regenerated:
# the change was never checked, so the gate does not pass (exit code 1).
NOT_REGENERATED = "NotRegenerated"


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass(frozen=True)
class Annotation:
    """What to flag on a workflow's run: a level (``error``, ``warning``, ``notice``), a message, a title and the
    file and line it belongs to; ``github/actions.py`` writes it as a workflow command."""

    level: str
    message: str
    title: str
    file: str | None = None
    line: int | None = None


@dataclass
class Frame:
    """A line of code: where a failure broke (``frame``) or where a model class is defined (``source``)."""

    file: str | None = None
    line: int | None = None
    function: str | None = None
    text: str | None = None  # the line's source text
    workaround: str | None = None  # the hfexport workaround that was running, if any


@dataclass
class SecondShape:
    """The run at a second input shape: passed (with the inputs it resized and the max diff) or skipped (why)."""

    status: str  # "pass" or "skipped"
    inputs: dict[str, list[int]] | None = None
    max_abs_diff: float | None = None
    detail: str | None = None


@dataclass
class Generation:
    """A greedy generation check of a decoder LM: "pass", "fail", "skipped" (no eager reference) or "not_checked" (the
    exporter or transformers' module declines the model), and what it found."""

    status: str
    detail: str | None = None


@dataclass
class Metrics:
    """What a passing cell's exported program is (``metrics.py``; docs/health.md); None: not measured."""

    nodes: int | None = None  # operator nodes (ONNX: nodes of the model and its subgraphs; ExecuTorch: instructions)
    bytes: int | None = None  # the saved program's files, less its nodes' debug metadata (stack traces...)
    latency_ms: float | None = None  # median at the traced shape on the backend's runtime, after warm-up
    ops: dict[str, int] | None = None  # nodes by operator
    dynamic_dims: int | None = None  # input dimensions the program takes at any size (within its bounds)
    partitions: int | None = None  # ExecuTorch: subgraphs delegated (XNNPACK)
    planned_bytes: int | None = None  # ExecuTorch: memory planned for activations


@dataclass
class Health:
    """Head against base (``health.py``): what moved past a threshold, the latencies timed together, or why not."""

    regressions: list[str] | None = None
    improvements: list[str] | None = None
    latency: dict[str, float] | None = None  # head_ms, base_ms, ratio: timed in one process, interleaved
    note: str | None = None


@dataclass
class FirstBadCommit:
    """``check --bisect`` on a new failure: the first first-parent commit of the range at which the cell fails, or
    (``sha`` None) why no commit is named: the budget ran out, or a commit could not be checked."""

    sha: str | None = None  # the full commit id
    subject: str | None = None
    pr: int | None = None  # the pull request a merge or squash commit's subject names ("Merge pull request #12")
    runs: int | None = None  # cell runs the search took (results from the result cache not counted)
    note: str | None = None  # why no commit is named

    def text(self) -> str:
        """``abc1234 fix the rope (PR #12)``, or ``not found: <why>``."""
        if self.sha is None:
            return f"not found: {self.note}"
        pr = f" (PR #{self.pr})" if self.pr else ""
        return f"{self.sha[:7]} {self.subject or ''}".rstrip() + pr


Part = Frame | SecondShape | Generation | Metrics | Health | FirstBadCommit


def _part(kind: type[Part], data: Any) -> Any:
    """A typed part from its JSON object (keys outside the part are left); None stays None."""
    if not isinstance(data, dict):
        return None
    return kind(**{f.name: data.get(f.name) for f in dataclasses.fields(kind)})


def _part_json(part: Part | None) -> dict[str, Any] | None:
    """A part's JSON object: the keys it has a value for."""
    if part is None:
        return None
    return {key: value for key, value in dataclasses.asdict(part).items() if value is not None}


@dataclass
class Cell:
    """One (model class, backend) of a report. Fields are the schema's cell keys, in their order."""

    model_type: str
    model_class: str
    backend: str
    status: str | None = None
    regression: str | None = None  # "new", "pre-existing", "fixed" or None (no base run, or unchanged)
    stage: str | None = None
    error_type: str | None = None
    error: str | None = None
    max_abs_diff: float | None = None
    max_rel_diff: float | None = None
    tolerance: float | None = None
    timings: dict[str, float] = field(default_factory=dict)
    workarounds: list[str] = field(default_factory=list)
    skip_reason: str | None = None
    source: Frame | None = None  # the model class's line (file and line)
    generation: Generation | None = None  # on hfexport's slot cache (the default)
    generation_static: Generation | None = None  # on transformers' StaticCache, as cache_implementation="static" runs
    export_module: Generation | None = None  # transformers' TorchExportableModuleForDecoderOnlyLM, on the runtime
    frame: Frame | None = None  # where it broke
    disabled: dict[str, str] | None = None  # transformers internals the checkout lacks -> the feature turned off
    second_shape: SecondShape | None = None
    cached: bool | None = None  # the result came from the result cache: the same code gave it in an earlier run
    metrics: Metrics | None = None  # a passing cell's program: at head
    base_metrics: Metrics | None = None  # ... and at the base revision
    health: Health | None = None  # what moved from base to head
    # Why the gate selected the class: "masking_utils.create_causal_mask changed" (None: named by --models or --all).
    selected_because: str | None = None
    first_bad_commit: FirstBadCommit | None = None  # a new failure bisected over the range (check --bisect)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Cell:
        """A cell from its JSON form (a validated report's, or a job's outcome): the one place JSON becomes typed.
        Keys outside the schema (a sweep's ``engine``, ``created_at``) are left."""
        values = {key: data.get(key) for key in CELL_KEYS if key in data or key in _REQUIRED}
        for key, kind in _PARTS.items():
            values[key] = _part(kind, values.get(key))
        values["timings"] = values.get("timings") or {}
        values["workarounds"] = values.get("workarounds") or []
        return cls(**values)

    def as_dict(self) -> dict[str, Any]:
        """The cell's JSON form in the report schema."""
        data = {key: getattr(self, key) for key in CELL_KEYS}
        return data | {key: _part_json(data[key]) for key in _PARTS}

    def apply_result(self, result: dict[str, Any]) -> None:
        """Take a job's outcome (see ``checks.cell.run_cell``) as this cell's result: the worker's dict, typed once."""
        outcome = Cell.from_dict({**result, **{key: getattr(self, key) for key in _REQUIRED}})
        keys = ("status", "stage", "error_type", "error", "max_abs_diff", "max_rel_diff", "generation", "frame")
        for key in (*keys, *GENERATION_KEYS[1:], "second_shape", "cached", "timings", "workarounds", "metrics"):
            setattr(self, key, getattr(outcome, key))
        self.disabled = result.get("disabled") or {}
        if result.get("tolerance") is not None:
            self.tolerance = result["tolerance"]

    # ── Facts ──

    def generation_parts(self) -> list[tuple[str, Generation]]:
        """The generation parts this cell ran, each with the words reports use for it."""
        return [(GENERATION_LABELS[key], part) for key in GENERATION_KEYS if (part := getattr(self, key)) is not None]

    @property
    def failed(self) -> bool:
        """A model's failure (export, runtime or comparison), pre-existing or not."""
        return self.status in FAILURE_STATUSES

    @property
    def new_failure(self) -> bool:
        return self.failed and self.regression != "pre-existing"

    @property
    def pre_existing(self) -> bool:
        return self.regression == "pre-existing"

    @property
    def seconds(self) -> float | None:
        total = (self.timings or {}).get("total")
        return total if _number(total) else None

    @property
    def step(self) -> str:
        """The stage without its backend prefix ("onnx · stage 4 ONNX translations" -> "stage 4 ONNX translations")."""
        stage = self.stage or ""
        prefix = f"{self.backend} · "
        return stage[len(prefix) :] if stage.startswith(prefix) else stage

    @property
    def error_line(self) -> str:
        if self.error_type and self.error:
            return f"{self.error_type}: {self.error}"
        return str(self.error_type or self.error or "")

    @property
    def model_location(self) -> Frame | None:
        """The checked-out transformers line a model's failure broke at (``src/transformers/...``), if any."""
        if self.status in ("pass", "skipped", *NOT_A_RESULT) or self.frame is None:
            return None
        file = self.frame.file
        return self.frame if file and file.startswith("src/transformers/") else None

    # ── Words, shared by every view ──

    def kind(self) -> str:
        """What the cell is, in words: "pass", "fixed", "fail", "pre-existing fail", "tool error", "not checked"."""
        if self.status == "pass":
            return "fixed" if self.regression == "fixed" else "pass"
        status = (self.status or "not run").replace("_", " ")
        return f"pre-existing {status}" if self.failed and self.pre_existing else status

    def frame_note(self) -> str:
        """Where it broke: the hfexport code of a tool error, or the checked-out model line of a failure."""
        frame = self.frame
        if frame is None or not frame.file or self.status == "pass":
            return ""
        workaround = frame.workaround
        if self.status == "tool_error":
            named = f", workaround {workaround}" if workaround else ""
            return f" (at {frame.file}:{frame.line} in {frame.function}{named})"
        if self.model_location is None:
            return ""
        text = f": {frame.text}" if frame.text else ""
        running = f", while hfexport's {workaround} ran" if workaround else ""
        return f" (at {frame.file}:{frame.line}{text}{running})"

    def label(self) -> str:
        """One line: ``pass (max abs 2e-06)``, ``fail · stage 4 …: RuntimeError: … (at file:line: text)``."""
        cached = " [cached]" if self.cached else ""
        if self.status == "pass":
            fixed = " fixed" if self.regression == "fixed" else ""
            diff = f" (max abs {self.max_abs_diff:.1e})" if _number(self.max_abs_diff) else ""
            return f"pass{fixed}{diff}{cached}"
        if self.status == "skipped":
            return f"skipped: {self.skip_reason}"
        where = f" · {self.step}" if self.step else ""  # the backend is said where the cell is named
        return f"{self.kind()}{where}: {self.error_type}: {self.error}{self.frame_note()}{cached}"

    def short(self) -> str:
        """A table cell of the terminal view, in ``label``'s words: ``pass``, ``fail · stage 4 ONNX translations``."""
        if self.status in ("pass", "skipped", "not_checked", "not_run") or not self.step:
            return self.kind()
        return f"{self.kind()} · {self.step}"


CELL_KEYS = tuple(f.name for f in dataclasses.fields(Cell))
# The schema version that added each cell key after version 1: older cells lack it.
CELL_KEY_SINCE = {
    "frame": 2,
    "disabled": 2,
    "second_shape": 3,
    "cached": 3,
    "metrics": 4,
    "base_metrics": 4,
    "health": 4,
    "generation_static": 4,
    "export_module": 4,
    "selected_because": 4,
    "first_bad_commit": 5,
}
_REQUIRED = ("model_type", "model_class", "backend")
# The cell keys whose JSON object is a typed part.
_PARTS: dict[str, type[Part]] = {
    "source": Frame,
    "frame": Frame,
    "generation": Generation,
    "generation_static": Generation,
    "export_module": Generation,
    "second_shape": SecondShape,
    "metrics": Metrics,
    "base_metrics": Metrics,
    "health": Health,
    "first_bad_commit": FirstBadCommit,
}


def parse_shard(value: str) -> tuple[int, int]:
    """``"K/N"`` -> ``(K, N)``; ``ValueError`` unless 1 <= K <= N."""
    index, _, count = value.partition("/")
    if not (index.isdigit() and count.isdigit() and 1 <= int(index) <= int(count)):
        raise ValueError(f"expected K/N with 1 <= K <= N, got {value!r}")
    return int(index), int(count)


def in_shard(model_class: str, backend: str, shard: tuple[int, int]) -> bool:
    """Whether a cell is in shard ``(K, N)``: a stable hash of (class, backend) modulo N, so shards partition cells; a
    class's dynamo and ONNX cells hash as one, so they stay in one shard and share a trace there."""
    index, count = shard
    unit = "+".join(SHARED_TRACE_BACKENDS) if backend in SHARED_TRACE_BACKENDS else backend
    return zlib.crc32(f"{model_class}|{unit}".encode()) % count == index - 1


def disabled_features(cells: list[Cell]) -> dict[str, str]:
    """The transformers internals the checkout lacks, over every cell, with the feature each one turned off."""
    found: dict[str, str] = {}
    for cell in cells:
        found.update(cell.disabled or {})
    return found
