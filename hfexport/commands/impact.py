"""``hfexport impact build|merge``: record which transformers code each class's check ran, and join shard maps."""

from __future__ import annotations

from pathlib import Path

import click

from ..gate.cache import CacheError, default_cache_dir
from ..gate.impact import ImpactMapError, merge_files
from ..gate.impact_build import build_map
from ..gate.targets import CheckOptions, GateError, target_for
from .options import FORMATS, backends_option, shard_option
from .output import fail, say


@click.group()
def impact() -> None:
    """The impact map: which transformers code each model class's check ran, so a change selects the classes it reaches.

    \b
    Examples:
      hfexport impact build --all --shard 3/16 -o map-3.json
      hfexport impact merge map-*.json -o impact-map.json
    """


@impact.command("build")
@click.option("--models", help="Model types or class names, comma-separated.")
@click.option("--all", "select_all", is_flag=True, help="Every architecture of the transformers checked.")
@click.option(
    "--variants",
    is_flag=True,
    help="Record, too, the config variants (Class@variant: rope types, sliding windows, ...) of each selected type's "
    "default head, so that `check` selects a variant when a change reaches code only that variant runs.",
)
@click.option(
    "--backends", default=",".join(FORMATS), show_default=True, callback=backends_option, help="Comma-separated."
)
@click.option("-j", "--jobs", default=1, show_default=True, type=click.IntRange(1), help="Jobs run in parallel.")
@click.option("--shard", default="1/1", callback=shard_option, help="K/N: record the K-th of N shares (as `check`).")
@click.option("--budget", type=click.FloatRange(min=0, min_open=True), metavar="MINUTES", help="As for `check`.")
@click.option(
    "--cache-dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="The result cache whose recorded results are reused and kept (default: as for `check`).",
)
@click.option("--no-cache", is_flag=True, help="Run every cell; neither read nor write the result cache.")
@click.option("-o", "--output", type=click.Path(path_type=Path, dir_okay=False), required=True, help="The map (JSON).")
def impact_build(
    models: str | None,
    select_all: bool,
    variants: bool,
    backends: list[str],
    jobs: int,
    shard: tuple[int, int],
    budget: float | None,
    cache_dir: Path | None,
    no_cache: bool,
    output: Path,
) -> None:
    """Check the selected classes, recording what transformers code each ran, and write the impact map.

    A failing cell still records what it ran; the exit code is 0 once the map is written (2: usage or infrastructure).
    Classes whose cells were skipped, crashed or timed out have no record: selection treats them by static analysis.
    """
    names = [name.strip() for name in (models or "").split(",") if name.strip()]
    if bool(names) == select_all:
        fail("pass --models or --all (one of them)")
    if no_cache and cache_dir is not None:
        fail("--cache-dir and --no-cache contradict each other")
    options = CheckOptions(backends, jobs, shard=shard, budget_minutes=budget)
    options.cache_dir, options.export_health = None if no_cache else (cache_dir or default_cache_dir()), False
    try:
        target = target_for(Path.cwd(), [], names, select_all, None, None)
        target.selection.variants = variants
        built = build_map(target, options, echo=say)
        built.dump(output)
    except (GateError, CacheError, ImpactMapError, OSError) as error:
        fail(str(error))
    say(f"impact map of {len(built.model_classes())} class(es): {output}")


@impact.command("merge")
@click.argument("maps", nargs=-1, required=True, type=click.Path(path_type=Path, dir_okay=False))
@click.option("-o", "--output", type=click.Path(path_type=Path, dir_okay=False), required=True, help="The merged map.")
def impact_merge(maps: tuple[Path, ...], output: Path) -> None:
    """Join the maps of `impact build --shard K/N` runs (all of one transformers and hfexport version) into one."""
    try:
        merged = merge_files(list(maps))
        merged.dump(output)
    except (ImpactMapError, OSError) as error:
        fail(str(error))
    say(f"impact map of {len(merged.model_classes())} class(es): {output}")
