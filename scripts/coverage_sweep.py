"""Coverage sweep: hfexport's exporters side by side with ``transformers.exporters`` on every architecture.

For each selected model class and backend, the gate's own check (``hfexport.gate.run.run_check``: warm worker,
one forked job per cell, tiny seeded model, export, save, reload, run, compare with eager) runs once per engine:
``hfexport`` and ``transformers`` (the installed transformers' own ``transformers.exporters``). Both engines build
the very same tiny model and sample inputs (same builder, same seed) in the same job runner, so a difference in a
row is a difference of the exporters. Each invocation writes one gate report per engine under ``--results``;
``render`` joins the committed record ``docs/coverage.json`` and every report found there (the newest result of a
cell wins) into ``docs/coverage.md``, and writes the joined record back: a sweep on any checkout adds to the
published cells instead of starting over.

    python scripts/coverage_sweep.py run --all --backends dynamo,onnx,executorch --shard 1/4 -j 2
    python scripts/coverage_sweep.py run --set heads --backends dynamo,onnx --shard 2/2
    python scripts/coverage_sweep.py run --set representative --backends executorch
    python scripts/coverage_sweep.py run --models llama,bert --backends onnx
    python scripts/coverage_sweep.py render

Selections: ``--all`` every class the tiny-model builder lists for every model type (base model and main task
heads); ``--set heads`` one class per model type, its main task head (the class ``hfexport export <type>``
builds); ``--set representative`` a fixed set of architectures across families (decoder LMs, MoE,
encoders, encoder-decoders, vision, audio); ``--models`` explicit types or classes.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hfexport.gate import changes, views  # noqa: E402
from hfexport.gate.cells import BACKENDS, GENERATION_KEYS, Cell, in_shard, parse_shard  # noqa: E402
from hfexport.gate.model_sets import FAMILIES  # noqa: E402
from hfexport.gate.run import run_check  # noqa: E402
from hfexport.gate.targets import CheckOptions, GateError, Target  # noqa: E402

ENGINES = ("hfexport", "transformers")
DEFAULT_RESULTS = ROOT / "build" / "coverage"
DEFAULT_DOC = ROOT / "docs" / "coverage.md"
DEFAULT_STORE = ROOT / "docs" / "coverage.json"
ENGINE_TITLES = {"hfexport": "hfexport", "transformers": "transformers.exporters"}

# ── Selection ──


def _model_type(name: str) -> str:
    return name.strip().lower().replace("-", "_")


_EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")


@functools.cache
def family_of(model_type: str, model_class: str) -> str:
    """The family of ``FAMILIES`` a class belongs to: listed types by name, the others by config and head."""
    for family, types in FAMILIES.items():
        if model_type in {_model_type(t) for t in types}:
            return family
    from hfexport import tiny_models

    try:
        cls = tiny_models.resolve_model_class(model_class)
        config = cls.config_class()
    except Exception:
        return "other"
    text = config.get_text_config(decoder=True)
    if any(isinstance(getattr(text, k, None), int) and getattr(text, k) > 1 for k in _EXPERT_KEYS):
        return "MoE"
    if cls.main_input_name in ("input_values", "input_features"):
        return "audio"
    if cls.main_input_name == "pixel_values":
        return "vision"
    if getattr(config, "is_encoder_decoder", False):
        return "encoder-decoder"
    if model_class.endswith(("ForCausalLM", "LMHeadModel")):
        return "decoder LM"
    if model_class.endswith("ForMaskedLM"):
        return "encoder"
    return "other"


def selected_names(args: argparse.Namespace) -> list[str]:
    """Class names (the sets) or the given types / classes (``--models``) for the gate's worker to resolve."""
    if args.models:
        return [name.strip() for name in args.models.split(",") if name.strip()]
    return set_classes(_set_label(args))


def set_classes(label: str) -> list[str]:
    """The classes of a named selection: "all", "heads", "representative" or "variants" (variant names)."""
    if label == "representative":
        return representative_classes()
    if label == "variants":
        return [f"{model_class}{VARIANT_SEPARATOR}{v.name}" for model_class, v in variants() if v.unmade is None]
    from hfexport import tiny_models

    names: list[str] = []
    for model_type in tiny_models.all_model_types():
        if label == "all":
            names += [cls.__name__ for cls in tiny_models.model_classes_for_type(model_type)]
        else:
            names.append(tiny_models.resolve_model_class(model_type).__name__)
    return list(dict.fromkeys(names))


def classes_in_shard(classes: list[str], backends: list[str], shard: tuple[int, int]) -> list[str]:
    """The classes with a cell in ``shard`` (the gate shards cells by class and backend), so workers resolve no more."""
    return [c for c in classes if any(in_shard(c, b, shard) for b in backends)]


# Popular architectures whose config variants the `variants` set sweeps (issue 53: what hub checkpoints switch on).
VARIANT_TYPES = ("llama", "mistral", "qwen2", "gemma2", "phi3", "falcon", "bloom", "gpt_neox", "mixtral", "t5")
VARIANT_SEPARATOR = "@"  # tiny_models.VARIANT_SEPARATOR


@functools.cache
def variants() -> list[tuple[str, Any]]:
    """(main head class, ``tiny_models.Variant``) of every config variant of ``VARIANT_TYPES``, made or not."""
    from hfexport import tiny_models

    found = []
    for model_type in VARIANT_TYPES:
        model_class = tiny_models.resolve_model_class(model_type).__name__
        found += [(model_class, variant) for variant in tiny_models.config_variants(model_class)]
    return found


def representative_classes() -> list[str]:
    """The main task head of every type in ``FAMILIES``."""
    from hfexport import tiny_models

    return [tiny_models.resolve_model_class(t).__name__ for types in FAMILIES.values() for t in types]


def _set_label(args: argparse.Namespace) -> str:
    if args.models:
        return "models"
    return "all" if args.all else args.set


# ── Running ──


def run_sweep(
    names: list[str],
    backends: list[str],
    engines: list[str],
    results: Path,
    label: str,
    shard: tuple[int, int] = (1, 1),
    jobs: int = 1,
    timeout: float = 600.0,
    echo: Any = print,
    generation: bool = False,
) -> list[Path]:
    """Run the gate's check on ``names`` once per engine; write and return one report file per engine.

    ``generation``: run the gate's greedy generation parts on decoder LMs too (the document's generation column).
    """
    results.mkdir(parents=True, exist_ok=True)
    written = []
    for engine in engines:
        selection = changes.Selection(mode="models", names=list(names), reason=f"coverage sweep ({label})")
        options = CheckOptions(
            backends=list(backends), jobs=jobs, timeout=timeout, engine=engine, generation=generation, shard=shard
        )
        echo(f"── {ENGINE_TITLES[engine]} · {','.join(backends)} · {label} · shard {shard[0]}/{shard[1]}")
        started = time.time()
        result = run_check(Target(selection, checkout=None), options, echo=echo)
        seconds = round(time.time() - started, 1)
        result.extra["sweep"] = {"set": label, "seconds": seconds, "argv": sys.argv[1:], "generation": generation}
        if label == "variants":  # what the set leaves out, and why: the document lists them
            result.extra["sweep"]["unmade"] = {
                f"{model_class}{VARIANT_SEPARATOR}{v.name}": v.unmade for model_class, v in variants() if v.unmade
            }
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        path = results / f"{stamp}-{engine}-{'_'.join(backends)}-{label}-{shard[0]}of{shard[1]}.json"
        path.write_text(views.to_json(result))
        written.append(path)
        seconds = result.extra["sweep"]["seconds"]
        echo(f"   {result.summary['passed']}/{result.summary['total']} passed in {seconds} s")
    return written


# ── Rendering ──

Key = tuple[str, str, str]  # (engine, model class, backend)


# What the document shows of a cell and of a run: all the committed record keeps.
_CELL_KEYS = (
    "engine",
    "model_type",
    "model_class",
    "backend",
    "status",
    "stage",
    "error_type",
    "error",
    "max_abs_diff",
    *GENERATION_KEYS,
)
# When the gate started running every export at a second shape (commit df80b46).
SECOND_SHAPE_SINCE = "2026-12-01T04:27:53Z"


def _at_two_shapes(cell: dict[str, Any]) -> bool:
    return (cell.get("created_at") or "") >= SECOND_SHAPE_SINCE


_RUN_KEYS = ("engine", "backends", "sweep", "shard", "created_at")
_STORED_ERROR_CHARS = 300


def load_results(
    results: Path, store: Path | None = None
) -> tuple[dict[Key, dict[str, Any]], list[dict[str, Any]], dict[str, float]]:
    """The newest cell per (engine, class, backend) of the record and every report file, every run's header, and
    the record's summed wall time, per engine, of the runs whose own times were not kept (``untimed_seconds``).

    A cell carries its run's ``created_at``; of two results of a cell the later run wins, so reports already in the
    record, or older than it, change nothing.
    """
    record = json.loads(store.read_text()) if store is not None and store.exists() else {}
    cells: dict[Key, dict[str, Any]] = {}
    runs = {_run_key(run): run for run in record.get("runs", [])}
    candidates = list(record.get("cells", []))
    for path in sorted(results.glob("*.json")):  # names start with a UTC timestamp
        data = json.loads(path.read_text())
        run = {k: data.get(k) for k in _RUN_KEYS}
        runs.setdefault(_run_key(run), run)
        candidates += [{**cell, "engine": data["engine"], "created_at": data["created_at"]} for cell in data["cells"]]
    for cell in candidates:
        key = (cell["engine"], cell["model_class"], cell["backend"])
        if key not in cells or (cell.get("created_at") or "") >= (cells[key].get("created_at") or ""):
            cells[key] = cell
    return cells, list(runs.values()), record.get("untimed_seconds", {})


def _run_key(run: dict[str, Any]) -> tuple[str, ...]:
    """Runs of parallel sweeps can start in the same second: the command tells them apart."""
    return (run["engine"], run["created_at"], *((run.get("sweep") or {}).get("argv") or ()))


def _record_text(cells: dict[Key, dict[str, Any]], runs: list[dict[str, Any]], untimed: dict[str, float]) -> str:
    """The committed record: one run or cell per line, cells in key order, so a sweep's change reads as a diff."""

    def stored(cell: dict[str, Any]) -> dict[str, Any]:
        kept = {k: cell[k] for k in (*_CELL_KEYS, "created_at") if cell.get(k) is not None}
        if "error" in kept:
            kept["error"] = kept["error"][:_STORED_ERROR_CHARS]
        for key in GENERATION_KEYS:
            if kept.get(key, {}).get("detail"):
                kept[key] = {**kept[key], "detail": kept[key]["detail"][:_STORED_ERROR_CHARS]}
        timings = cell.get("timings") or {}
        export = timings.get("export")
        if export is not None:  # an ONNX cell that lowered dynamo's trace: its export counts that trace too
            export = round(export + timings.get("export · reused trace (not spent)", 0.0), 3)
        return {**kept, "timings": {} if export is None else {"export": export}}

    lines = ["{", f'"untimed_seconds": {json.dumps(untimed)},', '"runs": [']
    lines.append(",\n".join(json.dumps({k: run.get(k) for k in _RUN_KEYS}) for run in runs))
    lines += ["],", '"cells": [']
    lines.append(",\n".join(json.dumps(stored(cells[key])) for key in sorted(cells)))
    lines += ["]", "}"]
    return "\n".join(lines) + "\n"


def _not_built(cell: dict[str, Any]) -> bool:
    """The tiny model or its eager run failed: nothing was exported (the builder's problem, not the engine's)."""
    return cell["status"] == "not_checked" or (cell["status"] == "error" and cell.get("stage") in ("build", "eager"))


def _result(cell: dict[str, Any] | None) -> str:
    if cell is None:
        return "—"
    typed = Cell.from_dict(cell)
    if typed.status in ("pass", "skipped"):
        return typed.kind()
    error = typed.error_line.replace("|", "/").replace("\n", " ")
    error = error if len(error) <= 90 else error[:87] + "..."
    return f"{typed.kind()} · {(typed.stage or '').replace('|', '/')} · `{error.replace('`', '')}`"


def _diff(cell: dict[str, Any] | None) -> str:
    value = (cell or {}).get("max_abs_diff")
    return f"{value:.1e}" if isinstance(value, int | float) and value == value else "—"


def _seconds(cell: dict[str, Any] | None) -> str:
    value = ((cell or {}).get("timings") or {}).get("export")
    return f"{value:.1f}" if isinstance(value, int | float) else "—"


def _median(values: list[float]) -> float | None:
    values = sorted(values)
    return values[len(values) // 2] if values else None


def render(results: Path, doc: Path, store: Path | None = None) -> str:
    """Write the document (and the joined record to ``store``) from the record and the reports under ``results``."""
    cells, runs, untimed = load_results(results, store)
    if not cells:
        raise SystemExit(f"no sweep results under {results} or in {store}")
    import transformers

    from hfexport.exporters.dependencies import package_versions

    versions = package_versions("onnx", "onnxscript", "onnxruntime", "executorch")
    versions["transformers"] = transformers.__version__
    variant_cells = {key: cell for key, cell in cells.items() if VARIANT_SEPARATOR in key[1]}
    variant_runs = [run for run in runs if (run.get("sweep") or {}).get("set") == "variants"]
    cells = {key: cell for key, cell in cells.items() if key not in variant_cells}
    runs = [run for run in runs if run not in variant_runs]
    types_of: dict[str, str] = {}
    for (_, model_class, _), cell in cells.items():
        types_of[model_class] = cell["model_type"]
    lines = [
        "# Export coverage: hfexport vs. transformers.exporters",
        "",
        "Generated by `scripts/coverage_sweep.py` (do not edit by hand). Every row is one tiny random-weight model",
        "class (built by `hfexport.tiny_models`, seed 0, same sample inputs for both engines), exported with",
        "dynamic shapes, saved, reloaded, run on the backend's runtime and compared with eager PyTorch by the gate's",
        "job runner (`hfexport.gate.run.run_check`, isolated jobs; hfexport's dynamo and ONNX cells of a class share",
        "one trace, counted in both export times). `hfexport` is this project's staged exporters;",
        f"`transformers.exporters` is the one shipped in transformers {versions['transformers']}.",
        "",
        "Versions: " + ", ".join(f"{k} {v}" for k, v in sorted(versions.items())) + ".",
        "",
    ]
    lines += _sweep_section(cells, runs, untimed)
    generation_runs = _generation_runs(runs)
    lines += _totals_section(cells, generation_runs)
    lines += _builder_section(cells, types_of)
    lines += _variants_section(variant_cells, variant_runs)
    for backend in BACKENDS:
        lines += _backend_section(cells, backend, generation_runs)
    text = "\n".join(lines).rstrip() + "\n"
    _write(doc, text)
    if store is not None:
        _write(store, _record_text(cells | variant_cells, runs + variant_runs, untimed))
    return text


def _variants_section(cells: dict[Key, dict[str, Any]], runs: list[dict[str, Any]]) -> list[str]:
    """The config variants of ``VARIANT_TYPES`` (``--set variants``): pass rates per engine and backend, each variant's
    result, and the variants the builder cannot make, with the reason."""
    from hfexport.tiny_models.variants import SHORT_CONTEXT

    lines = [
        "## Config variants",
        "",
        "The main head of " + ", ".join(f"`{t}`" for t in VARIANT_TYPES) + " at each config variant it supports",
        "(`hfexport.tiny_models.variants`: found from the config class and the modeling code; a cell is",
        "`Class@variant`, checked at the traced shape and the second one, as every cell). Dynamic NTK rope has a",
        f"context of {SHORT_CONTEXT} positions, so the second shape runs past it.",
        "",
    ]
    if not cells:
        return [*lines, "Not swept yet: `coverage_sweep.py run --set variants`.", ""]
    seconds = Counter()
    for run in runs:
        seconds[run["engine"]] += (run.get("sweep") or {}).get("seconds") or 0
    swept = ", ".join(f"{ENGINE_TITLES[e]} {s / 60:.0f} min" for e, s in seconds.items())
    lines += [f"{len(runs)} gate runs ({swept}).", ""]
    lines += ["| engine | " + " | ".join(BACKENDS) + " |", "|---|" + "---|" * len(BACKENDS)]
    for engine in ENGINES:
        row = []
        for backend in BACKENDS:
            ran = [c for (e, _, b), c in cells.items() if e == engine and b == backend]
            passed = sum(c["status"] == "pass" for c in ran)
            row.append(f"{passed} / {len(ran)} ({100 * passed / len(ran):.0f} %)" if ran else "—")
        lines.append(f"| {ENGINE_TITLES[engine]} | " + " | ".join(row) + " |")
    unswept = [ENGINE_TITLES[engine] for engine in ENGINES if not any(e == engine for (e, _, _) in cells)]
    if unswept:
        lines += ["", f"Not run on the variants yet: {', '.join(unswept)} (its columns say —)."]
    names = sorted({model_class for (_, model_class, _) in cells})
    lines += [
        "",
        "| model type | class @ variant | "
        + " | ".join(f"{b} (hfexport / transformers.exporters)" for b in BACKENDS)
        + " |",
        "|---|---|" + "---|" * len(BACKENDS),
    ]
    for name in sorted(names, key=lambda n: (_variant_type(cells, n), n)):
        row = [" / ".join(_result(cells.get((engine, name, b))) for engine in ENGINES) for b in BACKENDS]
        row = [result if result != "— / —" else "—" for result in row]
        lines.append(f"| {_variant_type(cells, name)} | {name} | " + " | ".join(row) + " |")
    unmade = {name: why for run in runs for name, why in (run["sweep"].get("unmade") or {}).items()}
    lines += ["", f"{len(unmade)} variants the builder cannot make (the config class refuses them):", ""]
    lines += [f"- {name}: {why.replace('`', chr(39))}" for name, why in sorted(unmade.items())]
    return [*lines, ""]


def _variant_type(cells: dict[Key, dict[str, Any]], name: str) -> str:
    return next(cell["model_type"] for (_, model_class, _), cell in cells.items() if model_class == name)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_suffix(path.suffix + ".tmp")
    scratch.write_text(text)
    os.replace(scratch, path)


def _swept_by_hfexport_alone(
    cells: dict[Key, dict[str, Any]], engines_by_shard: dict[tuple[str, str], set[str]], backend: str
) -> list[str]:
    """A line per set with shards only hfexport ran on ``backend``: the shards and how many of the set's classes ran."""
    alone: dict[str, set[str]] = {}
    for (label, shard), engines in engines_by_shard.items():
        if engines == {"hfexport"}:
            alone.setdefault(label, set()).add(shard)
    lines = []
    ran = _classes(cells, "hfexport", backend)
    for label, shards in sorted(alone.items()):
        members = set_classes(label)
        listed = ", ".join(sorted(shards, key=_shard_key))
        run = f"{len(ran.intersection(members))} of its {len(members)} classes run"
        lines.append(f"  - hfexport alone: set `{label}`, shards {listed}: {run}.")
    return lines


def _classes(cells: dict[Key, dict[str, Any]], engine: str, backend: str) -> set[str]:
    return {c for (e, c, b) in cells if e == engine and b == backend}


def _compared(cells: dict[Key, dict[str, Any]], backend: str) -> list[str]:
    """Classes run by both engines on ``backend`` whose tiny model could be built and run eagerly."""
    both = _classes(cells, "hfexport", backend) & _classes(cells, "transformers", backend)
    return sorted(c for c in both if not any(_not_built(cells[(e, c, backend)]) for e in ENGINES))


def _sweep_section(
    cells: dict[Key, dict[str, Any]], runs: list[dict[str, Any]], untimed: dict[str, float]
) -> list[str]:
    lines = ["## What was swept", ""]
    unswept: dict[str, list[str]] = {}
    for backend in BACKENDS:
        swept = _classes(cells, "hfexport", backend) & _classes(cells, "transformers", backend)
        if not swept:
            lines.append(f"- **{backend}**: not swept.")
            continue
        types = {cells[("hfexport", c, backend)]["model_type"] for c in swept}
        engines_by_shard: dict[tuple[str, str], set[str]] = {}
        for run in runs:
            if backend in run["backends"] and run.get("sweep") and run["sweep"]["set"] != "models":
                shard = f"{run['shard']['index']}/{run['shard']['count']}"
                engines_by_shard.setdefault((run["sweep"]["set"], shard), set()).add(run["engine"])
        shards: dict[str, set[str]] = {}
        for (label, shard), engines in engines_by_shard.items():
            if engines >= set(ENGINES):  # a shard counts once both engines have run it
                shards.setdefault(label, set()).add(shard)
        expected = {c for label in shards for c in set_classes(label)}
        unswept[backend] = sorted(expected - swept)
        done = "; ".join(f"set `{label}`, shards {', '.join(sorted(s, key=_shard_key))}" for label, s in shards.items())
        left = f"; {len(unswept[backend])} classes of those sets not run (shards left out)" if unswept[backend] else ""
        run = f"{len(swept)} classes of {len(types)} model types run by both engines ({done})"
        lines.append(f"- **{backend}**: {run}{left}.")
        lines += _swept_by_hfexport_alone(cells, engines_by_shard, backend)
    lines += [
        "",
        "Sets: `heads` is one class per model type, its main task head (the class `hfexport export <type>`",
        "builds); `representative` is the main head of each type in `FAMILIES` of the script; `all` is every",
        "class the tiny-model builder lists (base model and main task heads). A shard K/N is the gate's deterministic",
        "share of the (class, backend) cells, so the shards run are a sample of the set, not a choice of models; a",
        "class's dynamo and ONNX cells are one share (they share a trace) since 2026-12-04, placed apart before.",
        "",
    ]
    seconds: Counter = Counter(untimed)
    for run in runs:
        if run.get("sweep") and run["sweep"]["seconds"] is not None:
            seconds[run["engine"]] += run["sweep"]["seconds"]
    lines += [
        f"{len(runs)} gate runs (one per engine, backend set and shard); summed wall time "
        + ", ".join(f"{ENGINE_TITLES[e]} {s / 60:.0f} min" for e, s in seconds.items())
        + ". The commands, oldest first (a later run of a cell replaces an earlier one):",
        "",
    ]
    for run in runs:
        if run.get("sweep"):
            argv = " ".join(run["sweep"]["argv"])
            lines.append(f"- `{run['created_at']}` {ENGINE_TITLES[run['engine']]}: `coverage_sweep.py {argv}`")
    lines.append("")
    for backend, classes in unswept.items():
        if classes:
            lines += [
                f"<details><summary>{backend}: {len(classes)} classes not run</summary>",
                "",
                ", ".join(classes),
                "",
                "</details>",
                "",
            ]
    return lines


def _shard_key(shard: str) -> tuple[int, int]:
    index, count = shard.split("/")
    return int(count), int(index)


def _totals_section(cells: dict[Key, dict[str, Any]], generation_runs: set[tuple[str, str]]) -> list[str]:
    lines = [
        "## Totals",
        "",
        "Over the classes both engines ran on a backend and whose tiny model builds and runs eagerly.",
        "",
        "| backend | classes | hfexport pass | transformers.exporters pass | both | only hfexport "
        "| only transformers.exporters | median export s (hfexport / transformers.exporters) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    differences = []
    for backend in BACKENDS:
        compared = _compared(cells, backend)
        if not compared:
            continue
        ours = {c for c in compared if cells[("hfexport", c, backend)]["status"] == "pass"}
        theirs = {c for c in compared if cells[("transformers", c, backend)]["status"] == "pass"}
        for engine, only in (("hfexport", ours - theirs), ("transformers", theirs - ours)):
            if only:
                differences.append(f"- {backend}, only {ENGINE_TITLES[engine]} passes: {', '.join(sorted(only))}")
        medians = []
        for engine, passed in (("hfexport", ours), ("transformers", theirs)):
            value = _median([cells[(engine, c, backend)]["timings"].get("export", 0.0) for c in passed])
            medians.append("—" if value is None else f"{value:.1f}")
        lines.append(
            f"| {backend} | {len(compared)} | **{len(ours)}** | **{len(theirs)}** | {len(ours & theirs)} "
            f"| {len(ours - theirs)} | {len(theirs - ours)} | {' / '.join(medians)} |"
        )
    lines += ["", *differences, *_generation_totals(cells, generation_runs)]
    lines += [
        "",
        "hfexport alone, over every class it ran on a backend whose tiny model builds and runs eagerly (classes the",
        "builder made only after transformers.exporters' last run included):",
        "",
        "| backend | classes | hfexport pass | pass rate | of them run at two shapes | pass | pass rate |",
        "|---|---|---|---|---|---|---|",
    ]
    for backend in BACKENDS:
        checked = [c for c in _classes(cells, "hfexport", backend) if not _not_built(cells[("hfexport", c, backend)])]
        if checked:
            columns = []
            for classes in (checked, [c for c in checked if _at_two_shapes(cells[("hfexport", c, backend)])]):
                passed = sum(cells[("hfexport", c, backend)]["status"] == "pass" for c in classes)
                rate = f"{100 * passed / len(classes):.1f} %" if classes else "—"
                columns.append(f"{len(classes)} | **{passed}** | {rate}")
            lines.append(f"| {backend} | {' | '.join(columns)} |")
    lines += [
        "",
        f"A cell run before {SECOND_SHAPE_SINCE} passed at its traced shape only: the gate did not yet run each",
        "export again at a second shape (another batch and length), so its pass is an upper bound until it is swept",
        "again.",
        "",
        "Per family (hfexport / transformers.exporters passes): the types of `FAMILIES` by name, the others by their",
        "default config and head (experts: MoE; audio or image input; encoder-decoder; causal or masked LM head);",
        "`other` is mostly multimodal models and base models of text types.",
        "",
    ]
    lines += ["| family | " + " | ".join(BACKENDS) + " |", "|---|" + "---|" * len(BACKENDS)]
    for family in [*FAMILIES, "other"]:
        row = []
        for backend in BACKENDS:
            compared = [c for c in _compared(cells, backend) if _family(cells, c, backend) == family]
            ours = sum(cells[("hfexport", c, backend)]["status"] == "pass" for c in compared)
            theirs = sum(cells[("transformers", c, backend)]["status"] == "pass" for c in compared)
            row.append(f"{ours} / {theirs} of {len(compared)}" if compared else "—")
        lines.append(f"| {family} | " + " | ".join(row) + " |")
    return [*lines, ""]


def _family(cells: dict[Key, dict[str, Any]], model_class: str, backend: str) -> str:
    return family_of(cells[("hfexport", model_class, backend)]["model_type"], model_class)


def _builder_section(cells: dict[Key, dict[str, Any]], types_of: dict[str, str]) -> list[str]:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    from hfexport import tiny_models

    # Both engines build with the same builder on every backend: a class's newest cell, of any engine, tells.
    newest: dict[str, dict[str, Any]] = {}
    for (_, model_class, _), cell in sorted(cells.items()):
        if model_class not in newest or (cell.get("created_at") or "") > (newest[model_class].get("created_at") or ""):
            newest[model_class] = cell
    problems = {
        model_class: f"{cell['stage']}: {cell.get('error_type')}: {cell.get('error') or ''}"
        for model_class, cell in newest.items()
        if _not_built(cell)
    }
    classless = sorted(set(CONFIG_MAPPING_NAMES) - set(tiny_models.all_model_types()))
    lines = [
        "## Tiny-model builder",
        "",
        f"{len(problems)} swept classes could not be built or run eagerly by `hfexport.tiny_models` in their newest",
        "run (shown once, not counted in the totals); the list is meant to shrink.",
        "",
        "| model type | class | reason |",
        "|---|---|---|",
    ]
    for model_class, reason in sorted(problems.items(), key=lambda item: (types_of[item[0]], item[0])):
        reason = reason.replace("|", "/").replace("\n", " ")
        reason = reason if len(reason) <= 160 else reason[:157] + "..."
        lines.append(f"| {types_of[model_class]} | {model_class} | `{reason.replace('`', '')}` |")
    lines += ["", "Classes built only where an optional package imports (elsewhere not checked, `needs ...`):", ""]
    lines += [f"- `{name}`: {', '.join(needs)}" for name, needs in sorted(tiny_models.NEEDS_PACKAGES.items())]
    lines += [
        "",
        f"{len(classless)} config types have no model class in the auto mappings the builder reads (sub-configs,",
        "tokenizer-only or processor-only entries): " + ", ".join(f"`{t}`" for t in classless) + ".",
        "",
    ]
    return lines


def _backend_section(
    cells: dict[Key, dict[str, Any]], backend: str, generation_runs: set[tuple[str, str]]
) -> list[str]:
    compared = _compared(cells, backend)
    if not compared:
        return []
    lines = [
        f"## {backend}",
        "",
        "| model type | class | hfexport | transformers.exporters | max abs diff (hf / tr) | export s (hf / tr) "
        "| generation (hfexport) |",
        "|---|---|---|---|---|---|---|",
    ]
    for model_class in sorted(compared, key=lambda c: (cells[("hfexport", c, backend)]["model_type"], c)):
        ours, theirs = cells[("hfexport", model_class, backend)], cells[("transformers", model_class, backend)]
        generation = _generation(ours, generation_runs)
        lines.append(
            f"| {ours['model_type']} | {model_class} | {_result(ours)} | {_result(theirs)} "
            f"| {_diff(ours)} / {_diff(theirs)} | {_seconds(ours)} / {_seconds(theirs)} | {generation} |"
        )
    return [*lines, ""]


# ── Generation ──


@functools.cache
def generating_class(model_class: str) -> bool:
    """Whether the gate runs greedy generation on the tiny model of ``model_class`` (``generation.generates``)."""
    from hfexport import tiny_models
    from hfexport.gate.checks.generation import generates

    try:
        cls = tiny_models.resolve_model_class(model_class)
        return generates(cls, tiny_models.tiny_config(cls))
    except Exception:  # a class the builder cannot make: its cells are in the builder's list, counted nowhere else
        return False


def _generation_runs(runs: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """(engine, created_at) of the runs swept with ``--generation``: their cells ran it wherever the gate does."""
    return {(run["engine"], run["created_at"]) for run in runs if (run.get("sweep") or {}).get("generation")}


def _generation_state(cell: dict[str, Any], generation_runs: set[tuple[str, str]]) -> str:
    """A cell's generation: "ran" (its parts are in the cell), "not reached" (swept with generation, but the cell
    failed before it), "not run" (swept without ``--generation``), or "" (the gate does not generate with the class)."""
    if any(cell.get(key) for key in GENERATION_KEYS):
        return "ran"
    if (cell["engine"], cell.get("created_at")) in generation_runs:  # the gate itself decided, in the run
        return "not reached" if cell["status"] != "pass" and generating_class(cell["model_class"]) else ""
    return "not run" if generating_class(cell["model_class"]) else ""


def _generation_totals(cells: dict[Key, dict[str, Any]], generation_runs: set[tuple[str, str]]) -> list[str]:
    """Per backend, hfexport's decoder-LM cells: swept with generation, passing with it, and not run."""
    lines = [
        "",
        "Generation, hfexport alone. The gate runs greedy generation on every decoder LM (hfexport's slot cache,",
        "transformers' StaticCache, and transformers' exportable module on dynamo and ExecuTorch); a generation",
        "failure fails the cell. Over the decoder-LM cells whose tiny model builds and runs eagerly:",
        "",
        "| backend | decoder-LM cells | swept with generation | pass, generation included | pass rate "
        "| of the passes, a part not checked | generation not run |",
        "|---|---|---|---|---|---|---|",
    ]
    for backend in BACKENDS:
        states: Counter = Counter()
        for (engine, _, cell_backend), cell in cells.items():
            if engine != "hfexport" or cell_backend != backend or _not_built(cell):
                continue
            state = _generation_state(cell, generation_runs)
            if not state:
                continue
            states[state] += 1
            if state == "ran" and cell["status"] == "pass":
                states["pass"] += 1
                parts = [cell.get(key) or {} for key in GENERATION_KEYS]
                states["declined"] += any(part.get("status") == "not_checked" for part in parts)
        swept = states["ran"] + states["not reached"]
        if swept + states["not run"]:
            rate = f"{100 * states['pass'] / swept:.1f} %" if swept else "—"
            lines.append(
                f"| {backend} | {swept + states['not run']} | {swept} | **{states['pass']}** | {rate} "
                f"| {states['declined']} | {states['not run']} |"
            )
    return [
        *lines,
        "",
        "Swept with generation: the cells of runs with `--generation`, those whose export failed before generation",
        "included (they fail). A part `not checked` is one an exporter declines (hfexport's slot cache on",
        "linear-attention layers, which keep conv and recurrent states; transformers' module where the StaticCache",
        "part declined): the cell passes on the parts that ran, and its row says which part. Not run: swept without",
        "`--generation`, so the cell's pass is the export's alone (the backend tables say `not run`).",
    ]


def _generation(cell: dict[str, Any], generation_runs: set[tuple[str, str]]) -> str:
    """A backend table's generation column: "pass", each part that did not pass, "not run", "not reached" or "—"."""
    state = _generation_state(cell, generation_runs)
    if state != "ran":
        return state or "—"
    odd = []
    for label, part in Cell.from_dict(cell).generation_parts():
        if part.status != "pass":
            detail = (part.detail or "").removeprefix("not checked: ")
            detail = detail.replace("|", "/").replace("\n", " ").replace("`", "'")[:80]
            odd.append(f"{label} {part.status.replace('_', ' ')}" + (f": {detail}" if detail else ""))
    return "; ".join(odd) or "pass"


# ── Command line ──


def _shard(value: str) -> tuple[int, int]:
    try:
        return parse_shard(value)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _csv(choices: tuple[str, ...]) -> Any:
    def parse(value: str) -> list[str]:
        names = [name.strip() for name in value.split(",") if name.strip()]
        unknown = [name for name in names if name not in choices]
        if unknown or not names:
            raise argparse.ArgumentTypeError(f"choose from {', '.join(choices)}")
        return names

    return parse


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run a sweep (one gate run per engine), then re-render the document")
    chosen = run.add_mutually_exclusive_group()
    chosen.add_argument("--all", action="store_true", help="every class of every model type")
    chosen.add_argument("--set", choices=("heads", "representative", "variants"), default="heads")
    chosen.add_argument("--models", help="comma-separated model types or classes")
    run.add_argument("--backends", type=_csv(BACKENDS), default=list(BACKENDS))
    run.add_argument("--engines", type=_csv(ENGINES), default=list(ENGINES))
    run.add_argument("--shard", type=_shard, default=(1, 1), help="K/N: the K-th of N deterministic shares")
    run.add_argument("-j", "--jobs", type=int, default=1, help="jobs in parallel per gate run")
    run.add_argument("--timeout", type=float, default=600.0, help="seconds per cell")
    run.add_argument(
        "--generation", action="store_true", help="also run the gate's greedy generation on decoder LMs (a column)"
    )
    for command in (run, commands.add_parser("render", help="write the document from the results")):
        command.add_argument("--results", type=Path, default=DEFAULT_RESULTS, help="where the reports go")
        command.add_argument("--doc", type=Path, default=DEFAULT_DOC)
        command.add_argument("--store", type=Path, default=DEFAULT_STORE, help="the committed record of every cell")
    args = parser.parse_args(argv)
    if args.command == "run":
        names = selected_names(args)
        if not args.models:  # the sets are class names: shard them here already
            names = classes_in_shard(names, args.backends, args.shard)
        try:
            run_sweep(
                names,
                args.backends,
                args.engines,
                args.results,
                _set_label(args),
                args.shard,
                args.jobs,
                args.timeout,
                generation=args.generation,
            )
        except GateError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    render(args.results, args.doc, args.store)
    print(f"wrote {args.doc} and {args.store}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
