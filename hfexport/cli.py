"""The ``hfexport`` command line: parses and prints; the work lives in modules a test can call directly."""

from __future__ import annotations

import os
import sys
import traceback
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import click

from .gate.cells import BACKENDS, parse_shard
from .github import actions
from .model_keyed import MODEL_KEYED_KINDS

if TYPE_CHECKING:
    from .gate.health import Thresholds
    from .gate.report import Report

FORMATS = BACKENDS


class UsageFailure(click.UsageError):
    """A usage mistake reported as one line with exit code 2."""

    def format_message(self) -> str:
        return actions.line(self.message)


def _say(text: object, err: bool = False) -> None:
    """One line of output that can hold words from a report, a checkout or an API answer: every line a command
    prints goes through here (or ``actions.print_block``), so none becomes a workflow command in Actions."""
    click.echo(actions.line(text), err=err)


def _fail(message: object) -> None:
    """The one way a command stops on an error: one inert line on stderr, exit code 2."""
    click.echo(f"error: {actions.line(message)}", err=True)
    sys.exit(2)


def _write_reports(report: Report, report_dir: Path) -> dict[str, Path]:
    """The report files (and the job summary); a directory or summary file that cannot be written is exit code 2."""
    from .gate.views import write_reports

    try:
        return write_reports(report, report_dir)
    except OSError as error:
        _fail(f"cannot write the reports to {report_dir}: {error.strerror or error}")
        raise


def _format_size(path: Path) -> str:
    size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size} B"


class _Main(click.Group):
    """The command group. Output cut short by its reader (``hfexport registry | head``) is a normal end, exit 0; an
    unexpected exception (a bug in hfexport) ends with exit code 2, never 1, which says "a regression"."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            # The reader is gone: send what is still buffered nowhere, so flushing at exit cannot fail again.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(0)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise  # click's own ending (it quotes the values it echoes)
        except Exception as error:
            for text in traceback.format_exception(error):
                for line in text.rstrip("\n").splitlines():
                    _say(line, err=True)
            _fail(f"hfexport failed: {type(error).__name__}: {error} (a bug in hfexport: the traceback is above)")


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"]})
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

    handler = logging.StreamHandler()
    handler.setFormatter(actions.LineFormatter("%(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, handlers=[handler])


@main.command()
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
    _quiet_libraries()
    from .exporters import AutoExportConfig, AutoHfExporter
    from .tiny_models import UnknownModelError, load_local_model, sample_inputs, tiny_model

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
    _say(f"exporting {type(loaded).__name__} to {export_format} ({'dynamic' if dynamic else 'static'} shapes)…")
    if for_generation:
        exported = exporter.export_for_generation(loaded, inputs, config, max_cache_len=max_cache_len)
    else:
        exported = exporter.export(loaded, inputs, config)
    exported.save_pretrained(target)
    _say(f"saved {target} ({_format_size(target)}): {', '.join(sorted(exported.manifest['files']))}")


# Packages whose warnings are about themselves (torchao's optional kernels, torch's pytree notes, ONNX registration of
# ops of packages not installed): shown with -v only.
_LIBRARIES = ("torch", "torchao", "executorch", "onnx", "onnxscript", "onnx_ir", "onnxruntime", "transformers")


def _quiet_libraries() -> None:
    """Other packages' warnings only with -v (their log records below ERROR, deprecation warnings). Set once torch
    and transformers are imported: importing them resets their loggers' levels."""
    import logging
    import warnings

    if click.get_current_context().find_root().params.get("verbose"):
        return
    import torch  # noqa: F401
    import transformers  # noqa: F401

    for name in _LIBRARIES:
        logging.getLogger(name).setLevel(logging.ERROR)
    # Deprecation notes are for those packages' callers (torch's own pytree among them), not for this command's user.
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)


def _check_model_name(model: str, source: Path) -> None:
    """Before torch is imported (seconds): a path that is no directory, or a name transformers does not define."""
    from .gate.changes import SelectionError, check_model_names

    if source.exists() or "/" in model or os.sep in model or model.startswith((".", "~")):
        what = "not a directory" if source.exists() else "no such directory"
        raise UsageFailure(f"{model}: {what} (MODEL is a save_pretrained directory, or a model type or class)")
    try:
        check_model_names([model], None)  # the installed transformers: the one the export imports
    except SelectionError as error:
        raise UsageFailure(str(error)) from None


@main.command()
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
    from .exporters.registry import WORKAROUND_KINDS

    every_kind = (*WORKAROUND_KINDS, *MODEL_KEYED_KINDS)
    if unknown := sorted(set(kinds) - set(every_kind)):
        raise UsageFailure(f"--kind {unknown[0]}: not a kind; one of {', '.join(every_kind)}")
    workarounds, model_keyed = _listed_parts(backend, kinds)
    if not workarounds and backend:
        raise UsageFailure(f"--kind {', '.join(kinds)}: model-keyed, not a backend's: leave out --backend")
    from .gate.changes import find_checkout
    from .gate.worker import install_checkout

    install_checkout(checkout or find_checkout(Path.cwd()))
    _quiet_libraries()
    from .exporters.backends import import_backend_modules
    from .exporters.registry import all_workarounds, model_exceptions

    if workarounds:
        for skipped in import_backend_modules(backend):
            _say(f"note: {skipped}", err=True)
        listed = [w for w in all_workarounds(backend) if _wanted(w.kind, kinds)]
        for w in sorted(listed, key=lambda w: (w.backend, w.stage, w.key, w.name)):
            targets = ", ".join(w.targets) or "-"
            _say(f"{w.key:<18} {w.stage:<22} {w.kind:<16} {w.name}")
            _say(f"    targets: {targets}")
            _say(f"    why: {w.reason}")
        _say(f"{len(listed)} workaround(s){_per_kind([w.kind for w in listed])}")
    if model_keyed:
        exceptions = [exception for exception in model_exceptions() if _wanted(exception.kind, kinds)]
        for exception in exceptions:
            _say(f"{exception.kind:<18} {exception.module}.{exception.name}")
            _say(f"    models: {', '.join(exception.models)}")
            _say(f"    why: {exception.why}")
        models = [exception.kind for exception in exceptions for _ in exception.models]
        _say(f"{len(models)} model-keyed exception(s){_per_kind(models)}")
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
    import transformers

    from . import compat, torch_compat
    from .exporters.registry import ABSENT_FEATURE, ABSENT_MODEL, unresolved_targets

    _say(f"checking against transformers {transformers.__version__} at {Path(transformers.__file__).parent}")
    _say(f"checking against torch {torch_compat.torch_version()}")
    workarounds, model_keyed = _listed_parts(backend, kinds)
    problems = _check_model_keyed(kinds) if model_keyed else 0
    for workaround, reason, absent in unresolved_targets(backend) if workarounds else ():
        if not _wanted(workaround.kind, kinds):
            continue
        if absent == ABSENT_MODEL:
            _say(f"absent model {workaround.key} {workaround.name}: {reason} (not needed here)")
        elif absent == ABSENT_FEATURE:
            off = compat.INTERNALS[workaround.defined_by].feature
            _say(f"absent feature {workaround.key} {workaround.name}: {reason} (off here: {off})")
        else:
            problems += 1
            _say(f"UNRESOLVED {workaround.key} {workaround.name}: {reason}", err=True)
    for internal, reason in compat.unresolved():
        problems += 1
        _say(f"MISSING transformers internal {internal.path}: off here: {internal.feature} ({reason})", err=True)
    for torch_internal, reason in torch_compat.unresolved():
        problems += 1
        _say(f"TORCH internal {torch_internal.path} ({torch_internal.feature}): {reason}", err=True)
    if problems:
        sys.exit(1)
    _say(
        f"every patch target and model-keyed exception, all {len(compat.INTERNALS)} transformers internals and all "
        f"{len(torch_compat.INTERNALS)} torch internals hfexport uses resolve"
    )


def _check_model_keyed(kinds: tuple[str, ...]) -> int:
    """Report the model-keyed exceptions whose model does not resolve here; return how many drifted."""
    from .exporters.registry import ABSENT_MODEL, unresolved_models

    drifted = 0
    for exception, reason, absent in unresolved_models():
        if not _wanted(exception.kind, kinds):
            continue
        if absent == ABSENT_MODEL:
            _say(f"absent model {exception.kind} {exception.name}: {reason} (not needed here)")
        else:
            drifted += 1
            _say(f"UNRESOLVED {exception.kind} {exception.name}: {reason}", err=True)
    return drifted


@main.command()
@click.argument("report", type=click.Path(exists=True, path_type=Path))
@click.option("--repo", help="OWNER/NAME (default: $GITHUB_REPOSITORY).")
@click.option("--pr", "pr_number", type=int, help="PR number (default: from $GITHUB_EVENT_PATH, else the report's).")
@click.option(
    "--issue",
    type=click.IntRange(1),
    help="Post to this tracking issue, not a PR (the scheduled run on main): one sticky comment, edited in place.",
)
@click.option("--api-url", help="REST API root, e.g. https://ghe.example.com/api/v3 (default: $GITHUB_API_URL).")
@click.option("--token", help="Prefer $HFEXPORT_GITHUB_TOKEN, $GITHUB_TOKEN or $GH_TOKEN: options show in `ps`.")
@click.option("--head-sha", help="Commit the report must be for (default: the triggering event's head).")
@click.option("--author", help="Login whose comment is the sticky one (default: the token's user).")
@click.option("--details-url", help="Link for the full report when the comment is cut (default: this run's page).")
@click.option("--retries", default=5, show_default=True, help="Attempts on 5xx and secondary rate limits.")
@click.option("--backoff", default=2.0, show_default=True, help="First retry wait in seconds (doubles each time).")
@click.option("--request-interval", default=0.25, show_default=True, help="Seconds between API calls (writes: 4x).")
@click.option(
    "--write-settle",
    default=15.0,
    show_default=True,
    help="After a post whose outcome is unknown (5xx), seconds to look for it before posting again.",
)
def comment(
    report: Path,
    repo: str | None,
    pr_number: int | None,
    issue: int | None,
    api_url: str | None,
    token: str | None,
    head_sha: str | None,
    author: str | None,
    details_url: str | None,
    retries: int,
    backoff: float,
    request_interval: float,
    write_settle: float,
) -> None:
    """Post REPORT (report.json from `hfexport check`, or its directory) to the PR (or --issue) as one sticky comment.

    \b
    In GitHub Actions everything comes from the environment:
      hfexport comment hfexport-report/report.json
    Elsewhere:
      GH_TOKEN=... hfexport comment report.json --repo huggingface/transformers --pr 123
    """
    from .gate.schema import ReportError, load_report
    from .github.comment import CommentError, post_report, resolve_target

    if issue is not None and pr_number is not None:
        _fail("--issue and --pr name two places to post: pass one")
    try:
        target = resolve_target(
            os.environ,
            repository=repo,
            pr_number=pr_number,
            api_url=api_url,
            token=token,
            head_sha=head_sha,
            details_url=details_url,
        )
        outcome = post_report(
            load_report(report),
            target,
            issue=issue,
            author=author,
            attempts=retries,
            backoff=backoff,
            request_interval=request_interval,
            settle=write_settle,
        )
    except (CommentError, ReportError) as error:
        _fail(error)
    _say(f"{outcome.message}: {outcome.url}" if outcome.url else outcome.message)


def _shard(_ctx: click.Context, _param: click.Parameter, value: str) -> tuple[int, int]:
    try:
        return parse_shard(value)
    except ValueError as error:
        _fail(f"--shard: {error}")
        raise


def _backends(_ctx: click.Context, _param: click.Parameter, value: str) -> list[str]:
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in FORMATS]
    if unknown or not names:
        _fail(f"--backends: unknown backend(s) {', '.join(unknown) or '(none)'}; choose from {', '.join(FORMATS)}")
    return list(dict.fromkeys(names))


def _health_thresholds(_ctx: click.Context, _param: click.Parameter, value: str) -> Thresholds:
    from .gate.health import Thresholds

    try:
        return Thresholds.parse(value)
    except ValueError as error:
        _fail(f"--health-thresholds: {error}")
        raise


@main.command()
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
@click.option("--backends", default=",".join(FORMATS), show_default=True, callback=_backends, help="Comma-separated.")
@click.option("-j", "--jobs", default=1, show_default=True, type=click.IntRange(1), help="Jobs run in parallel.")
@click.option("--timeout", default=600.0, show_default=True, help="Seconds per job before it counts as a timeout.")
@click.option("--memory-limit", default=16.0, show_default=True, help="GiB of address space per job (0: no limit).")
@click.option("--shard", default="1/1", callback=_shard, help="K/N: run the K-th of N deterministic shares.")
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
    callback=_health_thresholds,
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
    from .gate import views as gate_views
    from .gate.cache import CacheError, default_cache_dir, prepare_directory
    from .gate.impact import recording_supported
    from .gate.run import CheckOptions, GateError, run_check, target_for
    from .github.event import pr_context

    names = [name.strip() for name in (models or "").split(",") if name.strip()]
    if sum(map(bool, (files, names, select_all))) > 1:
        _fail("pass file names, --models or --all, not several")
    if no_cache and cache_dir is not None:
        _fail("--cache-dir and --no-cache contradict each other")
    if only and (names or select_all):
        _fail("--only narrows what a change selects: with --models or --all, name just the classes there")
    if bisect_budget is not None and not (bisect and budget):
        _fail("--bisect-budget is a share of --budget kept for --bisect: pass both")
    cache = None if no_cache else (cache_dir or default_cache_dir())
    try:
        if cache is not None:
            prepare_directory(cache)
    except CacheError as error:
        _fail(str(error))
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
            _fail("--bisect searches a range of commits: pass --base (--models and file names alone have none)")
        result = run_check(target, options, echo=_say, pr=pr_context(os.environ))
    except (GateError, CacheError) as error:
        _fail(str(error))
    actions.print_block(click.echo, gate_views.terminal_table(result))
    if actions.in_actions():
        for line in actions.annotation_commands(gate_views.github_annotations(result)):
            click.echo(line)  # workflow commands, every value escaped by actions.command
    if report_dir is not None:
        written = _write_reports(result, report_dir)
        _say(f"reports: {', '.join(str(p) for p in written.values())}")
    sys.exit(result.exit_code)


@main.command()
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
    from .gate import schema as gate_schema
    from .gate import shards as gate_shards
    from .gate import views as gate_views

    try:
        loaded = [gate_schema.load_report(path) for path in reports]
        merged = gate_shards.merge(loaded, allow_partial)
    except (ValueError, OSError) as error:
        _fail(str(error))
    actions.print_block(click.echo, gate_views.terminal_table(merged))
    note = gate_shards.incomplete_note(merged)
    if note:
        _say(note)
    _write_reports(merged, report_dir)
    sys.exit(merged.exit_code)


@main.group()
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
@click.option("--backends", default=",".join(FORMATS), show_default=True, callback=_backends, help="Comma-separated.")
@click.option("-j", "--jobs", default=1, show_default=True, type=click.IntRange(1), help="Jobs run in parallel.")
@click.option("--shard", default="1/1", callback=_shard, help="K/N: record the K-th of N shares (as `check`).")
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
    from .gate.cache import CacheError, default_cache_dir
    from .gate.impact import ImpactMapError
    from .gate.impact_build import build_map
    from .gate.run import CheckOptions, GateError, target_for

    names = [name.strip() for name in (models or "").split(",") if name.strip()]
    if bool(names) == select_all:
        _fail("pass --models or --all (one of them)")
    if no_cache and cache_dir is not None:
        _fail("--cache-dir and --no-cache contradict each other")
    options = CheckOptions(backends, jobs, shard=shard, budget_minutes=budget)
    options.cache_dir, options.export_health = None if no_cache else (cache_dir or default_cache_dir()), False
    try:
        target = target_for(Path.cwd(), [], names, select_all, None, None)
        target.selection.variants = variants
        built = build_map(target, options, echo=_say)
        built.dump(output)
    except (GateError, CacheError, ImpactMapError, OSError) as error:
        _fail(str(error))
    _say(f"impact map of {len(built.model_classes())} class(es): {output}")


@impact.command("merge")
@click.argument("maps", nargs=-1, required=True, type=click.Path(path_type=Path, dir_okay=False))
@click.option("-o", "--output", type=click.Path(path_type=Path, dir_okay=False), required=True, help="The merged map.")
def impact_merge(maps: tuple[Path, ...], output: Path) -> None:
    """Join the maps of `impact build --shard K/N` runs (all of one transformers and hfexport version) into one."""
    from .gate.impact import ImpactMapError, merge_files

    try:
        merged = merge_files(list(maps))
        merged.dump(output)
    except (ImpactMapError, OSError) as error:
        _fail(str(error))
    _say(f"impact map of {len(merged.model_classes())} class(es): {output}")


if __name__ == "__main__":
    main()
