"""The ``hfexport`` command line: parses and prints; the work lives in modules a test can call directly."""

from __future__ import annotations

import sys
from pathlib import Path

import click

FORMATS = ("dynamo", "onnx", "executorch")


class UsageFailure(click.UsageError):
    """A usage mistake reported as one line with exit code 2."""


def _format_size(path: Path) -> str:
    size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size} B"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="hfexport")
@click.option("-v", "--verbose", is_flag=True, help="Log what the exporters do (patches installed, fixes applied).")
def main(verbose: bool) -> None:
    """hfexport: check that transformers models still export to torch.export, ONNX and ExecuTorch.

    \b
    Main job:   hfexport check            (models touched by this branch, every backend)
    One model:  hfexport export llama --format onnx
    Workarounds: hfexport registry --check
    """
    import logging

    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(name)s: %(message)s")


@main.command()
@click.argument("model")
@click.option(
    "--format", "export_format", type=click.Choice(FORMATS), default="dynamo", show_default=True, help="Target backend."
)
@click.option("-o", "--output", type=click.Path(path_type=Path), help="Where to save (default: ./<model>-<format>).")
@click.option("--dynamic/--static", default=True, show_default=True, help="Export with dynamic batch/sequence sizes.")
@click.option("--for-generation", is_flag=True, help="Export prefill + decode programs for greedy generation.")
@click.option("--seed", default=0, show_default=True, help="Seed for tiny random weights and sample inputs.")
def export(model: str, export_format: str, output: Path | None, dynamic: bool, for_generation: bool, seed: int) -> None:
    """Export MODEL: a directory saved with save_pretrained, or a model type / class name (tiny random weights).

    \b
    Examples:
      hfexport export llama --format onnx
      hfexport export ./my-bert --format executorch --static
      hfexport export LlamaForCausalLM --for-generation -o llama-gen
    """
    from .exporters import AutoExportConfig, AutoHfExporter
    from .tiny_models import UnknownModelError, load_local_model, sample_inputs, tiny_model

    source = Path(model)
    try:
        loaded = load_local_model(source, seed=seed) if source.is_dir() else tiny_model(model, seed=seed)
    except (UnknownModelError, FileNotFoundError, ValueError) as error:
        raise UsageFailure(str(error)) from None
    inputs = sample_inputs(loaded, seed=seed)
    config = AutoExportConfig.from_dict({"export_format": export_format, "dynamic": dynamic})
    exporter = AutoHfExporter.from_config(config)
    name = source.name if source.is_dir() else model
    target = output or Path(f"{name}-{export_format}")
    click.echo(f"exporting {type(loaded).__name__} to {export_format} ({'dynamic' if dynamic else 'static'} shapes)…")
    if for_generation:
        exported = exporter.export_for_generation(loaded, inputs, config)
    else:
        exported = exporter.export(loaded, inputs, config)
    exported.save_pretrained(target)
    click.echo(f"saved {target} ({_format_size(target)}): {', '.join(sorted(exported.manifest['files']))}")


@main.command()
@click.option("--backend", type=click.Choice(FORMATS), help="Only this backend's workarounds.")
@click.option("--check", is_flag=True, help="Exit 1 when a patch target no longer resolves in the installed packages.")
def registry(backend: str | None, check: bool) -> None:
    """List every registered workaround: backend, stage, kind, name, targets and why it exists."""
    from .exporters.auto import import_backend_modules
    from .exporters.utils import all_workarounds, unresolved_targets

    for skipped in import_backend_modules(backend):
        click.echo(f"note: {skipped}", err=True)
    rows = sorted(all_workarounds(backend), key=lambda w: (w.backend, w.stage, w.name))
    for w in rows:
        targets = ", ".join(w.targets) or "-"
        click.echo(f"{w.backend:<10} {w.stage:<22} {w.kind:<16} {w.name}\n    targets: {targets}\n    why: {w.reason}")
    click.echo(f"{len(rows)} workaround(s)")
    if check:
        missing = unresolved_targets(backend)
        for workaround, reason in missing:
            click.echo(f"UNRESOLVED {workaround.backend} {workaround.name}: {reason}", err=True)
        if missing:
            sys.exit(1)
        click.echo("every patch target resolves")


if __name__ == "__main__":
    main()
