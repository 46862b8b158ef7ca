"""``hfexport registry [--check]``: list every registered workaround and model-keyed exception, and resolve them."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import click

from .. import compat, torch_compat
from ..exporters.backends import import_backend_modules
from ..exporters.registry import (
    ABSENT_FEATURE,
    ABSENT_MODEL,
    WORKAROUND_KINDS,
    all_workarounds,
    model_exceptions,
    unresolved_models,
    unresolved_targets,
)
from ..gate.changes import find_checkout
from ..gate.worker_child import install_checkout
from ..model_keyed import MODEL_KEYED_KINDS
from .options import FORMATS
from .output import UsageFailure, quiet_libraries, say


@click.command()
@click.option("--backend", type=click.Choice(FORMATS), help="Only this backend's workarounds.")
@click.option(
    "--kind",
    "kinds",
    multiple=True,
    metavar="KIND",
    help=f"Only these kinds (repeatable): workaround kinds (patch, fx_node_fix, ...), {', '.join(MODEL_KEYED_KINDS)}.",
)
@click.option(
    "--check",
    is_flag=True,
    help="Exit 1 when a patch target, a model-keyed exception's model, or a transformers or torch internal hfexport "
    "uses is missing or changed here.",
)
@click.option(
    "--checkout",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Transformers checkout to check against (default: the one around the current directory, else the installed).",
)
def registry(backend: str | None, kinds: tuple[str, ...], check: bool, checkout: Path | None) -> None:
    """List every registered workaround: key (backend or delegate), stage, kind, name, targets and why; then, without
    --backend, every model-keyed exception (export skips, cache types, tiny-model entries): kind, the table that holds
    it, its models and why.

    With --check, also resolve every patch target, every model-keyed exception's model and every non-public
    transformers name hfexport uses (the compatibility layer) in the transformers that `hfexport check` would export
    from here, and every non-public torch name (hfexport/torch_compat.py) in the running torch.
    """
    every_kind = (*WORKAROUND_KINDS, *MODEL_KEYED_KINDS)
    if unknown := sorted(set(kinds) - set(every_kind)):
        raise UsageFailure(f"--kind {unknown[0]}: not a kind; one of {', '.join(every_kind)}")
    workarounds, model_keyed = _listed_parts(backend, kinds)
    if not workarounds and backend:
        raise UsageFailure(f"--kind {', '.join(kinds)}: model-keyed, not a backend's: leave out --backend")
    install_checkout(checkout or find_checkout(Path.cwd()))
    quiet_libraries()
    if workarounds:
        for skipped in import_backend_modules(backend):
            say(f"note: {skipped}", err=True)
        listed = [w for w in all_workarounds(backend) if _wanted(w.kind, kinds)]
        for w in sorted(listed, key=lambda w: (w.backend, w.stage, w.key, w.name)):
            targets = ", ".join(w.targets) or "-"
            say(f"{w.key:<18} {w.stage:<22} {w.kind:<16} {w.name}")
            say(f"    targets: {targets}")
            say(f"    why: {w.reason}")
        say(f"{len(listed)} workaround(s){_per_kind([w.kind for w in listed])}")
    if model_keyed:
        exceptions = [exception for exception in model_exceptions() if _wanted(exception.kind, kinds)]
        for exception in exceptions:
            say(f"{exception.kind:<18} {exception.module}.{exception.name}")
            say(f"    models: {', '.join(exception.models)}")
            say(f"    why: {exception.why}")
        models = [exception.kind for exception in exceptions for _ in exception.models]
        say(f"{len(models)} model-keyed exception(s){_per_kind(models)}")
    if check:
        _check_registry(backend, kinds)


def _listed_parts(backend: str | None, kinds: tuple[str, ...]) -> tuple[bool, bool]:
    """Whether `hfexport registry` lists the backends' workarounds, and whether the model-keyed exceptions."""
    model_keyed = set(kinds) & set(MODEL_KEYED_KINDS)
    return not kinds or len(model_keyed) < len(set(kinds)), backend is None and (not kinds or bool(model_keyed))


def _wanted(kind: str, kinds: tuple[str, ...]) -> bool:
    return not kinds or kind in kinds


def _per_kind(kinds: list[str]) -> str:
    return (": " + ", ".join(f"{kind} {count}" for kind, count in Counter(kinds).items())) if kinds else ""


def _check_registry(backend: str | None, kinds: tuple[str, ...]) -> None:
    # Deliberately here: transformers is imported only once install_checkout has chosen which one.
    import transformers

    say(f"checking against transformers {transformers.__version__} at {Path(transformers.__file__).parent}")
    say(f"checking against torch {torch_compat.torch_version()}")
    workarounds, model_keyed = _listed_parts(backend, kinds)
    problems = _check_model_keyed(kinds) if model_keyed else 0
    for workaround, reason, absent in unresolved_targets(backend) if workarounds else ():
        if not _wanted(workaround.kind, kinds):
            continue
        if absent == ABSENT_MODEL:
            say(f"absent model {workaround.key} {workaround.name}: {reason} (not needed here)")
        elif absent == ABSENT_FEATURE:
            off = compat.INTERNALS[workaround.defined_by].feature
            say(f"absent feature {workaround.key} {workaround.name}: {reason} (off here: {off})")
        else:
            problems += 1
            say(f"UNRESOLVED {workaround.key} {workaround.name}: {reason}", err=True)
    for internal, reason in compat.unresolved():
        problems += 1
        say(f"MISSING transformers internal {internal.path}: off here: {internal.feature} ({reason})", err=True)
    for torch_internal, reason in torch_compat.unresolved():
        problems += 1
        say(f"TORCH internal {torch_internal.path} ({torch_internal.feature}): {reason}", err=True)
    if problems:
        sys.exit(1)
    say(
        f"every patch target and model-keyed exception, all {len(compat.INTERNALS)} transformers internals and all "
        f"{len(torch_compat.INTERNALS)} torch internals hfexport uses resolve"
    )


def _check_model_keyed(kinds: tuple[str, ...]) -> int:
    """Report the model-keyed exceptions whose model does not resolve here; return how many drifted."""
    drifted = 0
    for exception, reason, absent in unresolved_models():
        if not _wanted(exception.kind, kinds):
            continue
        if absent == ABSENT_MODEL:
            say(f"absent model {exception.kind} {exception.name}: {reason} (not needed here)")
        else:
            drifted += 1
            say(f"UNRESOLVED {exception.kind} {exception.name}: {reason}", err=True)
    return drifted
