"""How every command speaks: one writer for output lines, usage failures, the report files, quiet libraries."""

from __future__ import annotations

import logging
import sys
import warnings
from pathlib import Path

import click

from ..gate.report import Report
from ..gate.views import write_reports as write_report_files
from ..github import actions

# Packages whose warnings are about themselves (torchao's optional kernels, torch's pytree notes, ONNX registration of
# ops of packages not installed): shown with -v only.
_LIBRARIES = ("torch", "torchao", "executorch", "onnx", "onnxscript", "onnx_ir", "onnxruntime", "transformers")


class UsageFailure(click.UsageError):
    """A usage mistake reported as one line with exit code 2."""

    def format_message(self) -> str:
        return actions.line(self.message)


def say(text: object, err: bool = False) -> None:
    """One line of output that can hold words from a report, a checkout or an API answer: every line a command
    prints goes through here (or ``actions.print_block``), so none becomes a workflow command in Actions."""
    click.echo(actions.line(text), err=err)


def fail(message: object) -> None:
    """The one way a command stops on an error: one inert line on stderr, exit code 2."""
    click.echo(f"error: {actions.line(message)}", err=True)
    sys.exit(2)


def write_reports(report: Report, report_dir: Path) -> dict[str, Path]:
    """The report files (and the job summary); a directory or summary file that cannot be written is exit code 2."""
    try:
        return write_report_files(report, report_dir)
    except OSError as error:
        fail(f"cannot write the reports to {report_dir}: {error.strerror or error}")
        raise


def quiet_libraries() -> None:
    """Other packages' warnings only with -v (their log records below ERROR, deprecation warnings). Set once torch
    and transformers are imported: importing them resets their loggers' levels."""
    if click.get_current_context().find_root().params.get("verbose"):
        return
    # Deliberately here: importing torch and transformers takes seconds and stays out of `hfexport --help`.
    import torch  # noqa: F401
    import transformers  # noqa: F401

    for name in _LIBRARIES:
        logging.getLogger(name).setLevel(logging.ERROR)
    # Deprecation notes are for those packages' callers (torch's own pytree among them), not for this command's user.
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
