"""The ``hfexport`` command line: the command group and its registration; each command lives in hfexport/commands/
(parsing and printing only: the work lives in modules a test can call directly)."""

from __future__ import annotations

import logging
import os
import sys
import traceback

import click

from .commands.check import check, merge
from .commands.comment import comment
from .commands.export import export
from .commands.impact import impact
from .commands.output import fail, say
from .commands.registry import registry
from .github import actions


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
                    say(line, err=True)
            fail(f"hfexport failed: {type(error).__name__}: {error} (a bug in hfexport: the traceback is above)")


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
    handler = logging.StreamHandler()
    handler.setFormatter(actions.LineFormatter("%(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, handlers=[handler])


for _command in (check, merge, export, registry, comment, impact):
    main.add_command(_command)

if __name__ == "__main__":
    main()
