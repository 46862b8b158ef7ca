"""``hfexport export``: one model (a save_pretrained directory, or tiny random weights) to one backend."""

from __future__ import annotations

import os
from pathlib import Path

import click

from ..gate.changes import SelectionError, check_model_names
from .options import FORMATS
from .output import UsageFailure, quiet_libraries, say


@click.command()
@click.argument("model")
@click.option(
    "--format", "export_format", type=click.Choice(FORMATS), default="dynamo", show_default=True, help="Target backend."
)
@click.option("-o", "--output", type=click.Path(path_type=Path), help="Where to save (default: ./<model>-<format>).")
@click.option("--dynamic/--static", default=True, show_default=True, help="Export with dynamic batch/sequence sizes.")
@click.option("--for-generation", is_flag=True, help="Export prefill + decode programs for greedy generation.")
@click.option(
    "--max-cache-len", type=click.IntRange(min=2), help="With --for-generation: KV cache slots (prompt + new tokens)."
)
@click.option(
    "--dynamic-upper-bound",
    type=click.IntRange(min=2),
    help="ExecuTorch: the largest size a dynamic dimension accepts (default 256, lowered while planned memory is "
    "over 2 GiB, never below 16; always at least twice the traced size). ExecuTorch plans memory for it; ONNX and "
    "torch.export need no bound.",
)
@click.option("--seed", default=0, show_default=True, help="Seed for tiny random weights and sample inputs.")
def export(
    model: str,
    export_format: str,
    output: Path | None,
    dynamic: bool,
    for_generation: bool,
    max_cache_len: int | None,
    dynamic_upper_bound: int | None,
    seed: int,
) -> None:
    """Export MODEL: a directory saved with save_pretrained, or a model type / class name (tiny random weights).

    \b
    Examples:
      hfexport export llama --format onnx
      hfexport export ./my-bert --format executorch --static
      hfexport export LlamaForCausalLM --for-generation -o llama-gen
    """
    if max_cache_len is not None and not for_generation:
        raise UsageFailure("--max-cache-len only applies with --for-generation")
    if dynamic_upper_bound is not None and (export_format != "executorch" or not dynamic):
        raise UsageFailure("--dynamic-upper-bound only applies to --format executorch with --dynamic")

    source = Path(model)
    if not source.is_dir():
        _check_model_name(model, source)
    quiet_libraries()
    # Deliberately here: the exporters and tiny models import torch and transformers (seconds), not for `--help`.
    from ..exporters import AutoExportConfig, AutoHfExporter
    from ..tiny_models import UnknownModelError, load_local_model, sample_inputs, tiny_model

    try:
        loaded = load_local_model(source) if source.is_dir() else tiny_model(model, seed=seed)
    except (UnknownModelError, FileNotFoundError, ValueError) as error:
        raise UsageFailure(str(error)) from None
    inputs = sample_inputs(loaded, seed=seed)
    options: dict[str, object] = {"export_format": export_format, "dynamic": dynamic}
    if dynamic_upper_bound is not None:
        # An explicit bound is kept whatever memory it plans.
        options.update(dynamic_upper_bound=dynamic_upper_bound, planned_memory_budget_gib=None)
    config = AutoExportConfig.from_dict(options)
    exporter = AutoHfExporter.from_config(config)
    name = source.name if source.is_dir() else model
    target = output or Path(f"{name}-{export_format}")
    say(f"exporting {type(loaded).__name__} to {export_format} ({'dynamic' if dynamic else 'static'} shapes)…")
    if for_generation:
        exported = exporter.export_for_generation(loaded, inputs, config, max_cache_len=max_cache_len)
    else:
        exported = exporter.export(loaded, inputs, config)
    exported.save_pretrained(target)
    say(f"saved {target} ({_format_size(target)}): {', '.join(sorted(exported.manifest['files']))}")


def _format_size(path: Path) -> str:
    size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size} B"


def _check_model_name(model: str, source: Path) -> None:
    """Before torch is imported (seconds): a path that is no directory, or a name transformers does not define."""
    if source.exists() or "/" in model or os.sep in model or model.startswith((".", "~")):
        what = "not a directory" if source.exists() else "no such directory"
        raise UsageFailure(f"{model}: {what} (MODEL is a save_pretrained directory, or a model type or class)")
    try:
        check_model_names([model], None)  # the installed transformers: the one the export imports
    except SelectionError as error:
        raise UsageFailure(str(error)) from None
