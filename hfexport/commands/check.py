"""``hfexport check`` and ``hfexport merge``: check the classes a change touched, and join the shards of a check."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from ..gate import schema as gate_schema
from ..gate import shards as gate_shards
from ..gate import views as gate_views
from ..gate.cache import CacheError, default_cache_dir, prepare_directory
from ..gate.health import Thresholds
from ..gate.impact import recording_supported
from ..gate.run import run_check
from ..gate.targets import CheckOptions, GateError, target_for
from ..github import actions
from ..github.event import pr_context
from .options import FORMATS, backends_option, health_thresholds_option, shard_option
from .output import fail, say, write_reports


@click.command()
@click.argument("files", nargs=-1, type=click.Path(path_type=Path))
@click.option(
    "--base", help="Base revision (default: merge base of HEAD with the default branch; --models/--all: none)."
)
@click.option("--head", help="Head revision (default: the working tree).")
@click.option(
    "--models",
    help="Model types or class names, comma-separated, instead of a git range; "
    "'representative' is the built-in set (llama, bert, vit, t5).",
)
@click.option("--all", "select_all", is_flag=True, help="Every architecture of the installed transformers.")
@click.option(
    "--backends", default=",".join(FORMATS), show_default=True, callback=backends_option, help="Comma-separated."
)
@click.option("-j", "--jobs", default=1, show_default=True, type=click.IntRange(1), help="Jobs run in parallel.")
@click.option("--timeout", default=600.0, show_default=True, help="Seconds per job before it counts as a timeout.")
@click.option("--memory-limit", default=16.0, show_default=True, help="GiB of address space per job (0: no limit).")
@click.option("--shard", default="1/1", callback=shard_option, help="K/N: run the K-th of N deterministic shares.")
@click.option("--engine", type=click.Choice(["hfexport", "transformers"]), default="hfexport", show_default=True)
@click.option("--generation/--no-generation", default=True, show_default=True, help="Greedy generation on decoder LMs.")
@click.option("--report-fixed", is_flag=True, help="Also run passing cells at base, to report fixed ones.")
@click.option("--report-dir", type=click.Path(path_type=Path), help="Write report.json, report.md and junit.xml here.")
@click.option(
    "--cache-dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Result cache: a cell whose imported transformers files, hfexport and package versions are unchanged is "
    "not run again (default: $HFEXPORT_CACHE_DIR, else ~/.cache/hfexport/results).",
)
@click.option("--no-cache", is_flag=True, help="Run every cell; neither read nor write the result cache.")
@click.option(
    "--budget",
    type=click.FloatRange(min=0, min_open=True),
    metavar="MINUTES",
    help="Start no cell after this many minutes; cells run every model type on every backend first, the rest are "
    "reported 'not run (budget)'. For huge changes, split instead: --shard K/N in a matrix, then `hfexport merge`.",
)
@click.option(
    "--health/--no-health",
    default=True,
    show_default=True,
    help="Export health: run passing cells at base too and report programs whose nodes, bytes or latency grew.",
)
@click.option(
    "--health-thresholds",
    default="",
    callback=health_thresholds_option,
    metavar="NAME=VALUE,...",
    help="Report past: nodes=10 and bytes=10 (percent; one operator kind: by op-min-nodes=2 too), latency=1.25 "
    "(ratio) beyond latency-floor-ms=0.05.",
)
@click.option("--fail-on-health", is_flag=True, help="Exit 1 on a health regression (default: a warning only).")
@click.option(
    "--impact-map",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Select the classes whose recorded checks ran the changed code (`hfexport impact build`); default: the "
    "records the result cache keeps. Classes without a record, or an unusable map, are selected by static analysis.",
)
@click.option(
    "--only",
    metavar="NAMES",
    help="Check only the selected classes of these model types or class names, comma-separated (e.g. to re-check "
    "a few of a large selection).",
)
@click.option(
    "--bisect",
    is_flag=True,
    help="For each new failure, find the first commit of the range (first parents of base..head) at which it fails: "
    "a binary search rerunning that class on that backend (about log2(commits) runs, fewer from the result cache).",
)
@click.option(
    "--bisect-budget",
    type=click.FloatRange(0, 1, max_open=True),
    metavar="SHARE",
    help="With --bisect and --budget: the share of the budget kept for bisecting (default 0.3); the head and base "
    "runs get the rest. A failure whose search it cannot finish says so, with the narrowest range reached.",
)
def check(
    files: tuple[Path, ...],
    base: str | None,
    head: str | None,
    models: str | None,
    select_all: bool,
    backends: list[str],
    jobs: int,
    timeout: float,
    memory_limit: float,
    shard: tuple[int, int],
    engine: str,
    generation: bool,
    report_fixed: bool,
    report_dir: Path | None,
    cache_dir: Path | None,
    no_cache: bool,
    budget: float | None,
    health: bool,
    health_thresholds: Thresholds,
    fail_on_health: bool,
    impact_map: Path | None,
    only: str | None,
    bisect: bool,
    bisect_budget: float | None,
) -> None:
    """Export the model classes a change touched on every backend; exit 1 when one is newly broken.

    \b
    Exit codes: 0 nothing newly broken, 1 a regression, 2 a usage or infrastructure error.
    \b
    Examples:
      hfexport check                                  (this branch vs. the default branch)
      hfexport check --base v5.0.0 --head HEAD
      hfexport check src/transformers/models/llama/modeling_llama.py
      hfexport check --models llama,bert,vit --backends dynamo,onnx -j 2 --report-dir out
    """
    names = [name.strip() for name in (models or "").split(",") if name.strip()]
    if sum(map(bool, (files, names, select_all))) > 1:
        fail("pass file names, --models or --all, not several")
    if no_cache and cache_dir is not None:
        fail("--cache-dir and --no-cache contradict each other")
    if only and (names or select_all):
        fail("--only narrows what a change selects: with --models or --all, name just the classes there")
    if bisect_budget is not None and not (bisect and budget):
        fail("--bisect-budget is a share of --budget kept for --bisect: pass both")
    cache = None if no_cache else (cache_dir or default_cache_dir())
    try:
        if cache is not None:
            prepare_directory(cache)
    except CacheError as error:
        fail(str(error))
    options = CheckOptions(
        backends, jobs, timeout, memory_limit, engine, generation, shard, report_fixed, cache, budget
    )
    options.export_health, options.health_thresholds, options.fail_on_health = health, health_thresholds, fail_on_health
    options.record_impact = cache is not None and recording_supported()  # the cache keeps each class's impact record
    options.bisect = bisect
    options.bisect_share = options.bisect_share if bisect_budget is None else bisect_budget
    try:
        target = target_for(
            Path.cwd(), [str(f) for f in files], names, select_all, base, head, impact_map=impact_map, cache_dir=cache
        )
        if only:
            target.selection.keep_only([name.strip() for name in only.split(",") if name.strip()])
        if bisect and target.base is None:
            fail("--bisect searches a range of commits: pass --base (--models and file names alone have none)")
        result = run_check(target, options, echo=say, pr=pr_context(os.environ))
    except (GateError, CacheError) as error:
        fail(str(error))
    actions.print_block(click.echo, gate_views.terminal_table(result))
    if actions.in_actions():
        for line in actions.annotation_commands(gate_views.github_annotations(result)):
            click.echo(line)  # workflow commands, every value escaped by actions.command
    if report_dir is not None:
        written = write_reports(result, report_dir)
        say(f"reports: {', '.join(str(p) for p in written.values())}")
    sys.exit(result.exit_code)


@click.command()
@click.argument("reports", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--report-dir", type=click.Path(path_type=Path), required=True, help="Where the merged reports go.")
@click.option(
    "--allow-partial",
    is_flag=True,
    help="Merge even when shards are missing: the report says which (never a pass) and the exit code is 2.",
)
def merge(reports: tuple[Path, ...], report_dir: Path, allow_partial: bool) -> None:
    """Join the report.json of every shard (`check --shard K/N`) into one report; exit as `check` would.

    The shards must be 1..N of one N, each once, from one run: one PR, base and head commit, engine, set of backends,
    hfexport version and schema version. Anything else is refused (exit code 2).
    """
    try:
        loaded = [gate_schema.load_report(path) for path in reports]
        merged = gate_shards.merge(loaded, allow_partial)
    except (ValueError, OSError) as error:
        fail(str(error))
    actions.print_block(click.echo, gate_views.terminal_table(merged))
    note = gate_shards.incomplete_note(merged)
    if note:
        say(note)
    write_reports(merged, report_dir)
    sys.exit(merged.exit_code)
