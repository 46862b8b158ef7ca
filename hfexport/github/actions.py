"""The one writer for text a GitHub Actions runner reads: workflow commands, one-line messages, verbatim blocks.

The runner scans every line a step prints, stdout and stderr alike: a line starting with ``::`` (after leading
whitespace) is a workflow command, and so is ``##[name]`` anywhere in a line (the older syntax). Text taken from a
report, a checkout or an API answer must never become one, so everything hfexport prints in a workflow goes through
here: ``command`` escapes a command's data and properties, ``line`` turns free text into one inert line, and
``print_block`` prints text that must keep its lines between ``stop-commands`` markers. Each drops Unicode format
characters (``visible``): a bidi override or a zero-width character in a class name would make the log lie.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import secrets
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Mapping

from ..gate.cells import Annotation

# ``##[`` opens a command anywhere in a line; writing its second ``#`` as %23 keeps the text readable and inert.
_OLD_COMMAND = re.compile(r"##\[")
_LEADING_COMMAND = re.compile(r"^(\s*):")


def visible(text: object) -> str:
    """``text`` without Unicode format characters (category Cf: bidi overrides, zero-width joiners, U+FEFF, tags),
    which reorder or hide what a reader of the log or the PR sees."""
    text = str(text)
    return text if text.isascii() else "".join(c for c in text if unicodedata.category(c) != "Cf")


def escape_data(text: str) -> str:
    """A command's message, escaped the way the runner unescapes it (``%``, CR, LF), format characters dropped."""
    return visible(text).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A command's property value (``title=…``, ``file=…``): also ``:`` and ``,``, which end a property."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def command(name: str, message: str, **properties: str | int | None) -> str:
    """``::name key=value,…::message`` with every value escaped; properties that are None are left out."""
    escaped = ",".join(f"{key}={escape_property(str(value))}" for key, value in properties.items() if value is not None)
    return f"::{name}{' ' + escaped if escaped else ''}::{escape_data(message)}"


def annotation_commands(records: Iterable[Annotation]) -> list[str]:
    """The workflow commands that show each record on its file and line (``::error file=…,line=…,title=…::…``)."""
    return [command(r.level, r.message, file=r.file, line=r.line, title=r.title) for r in records]


def line(text: object) -> str:
    """Free text as one line no runner reads as a command: CR/LF escaped, ``##[`` and a leading ``:`` defused,
    format characters dropped. A ``%`` stays as it is: the runner unescapes a command's data only, and a progress
    line's "+59 %" would otherwise read "+59 %25"."""
    escaped = _OLD_COMMAND.sub("#%23[", visible(text).replace("\r", "%0D").replace("\n", "%0A"))
    return _LEADING_COMMAND.sub(r"\1%3A", escaped)


def in_actions(environ: Mapping[str, str] | None = None) -> bool:
    return (os.environ if environ is None else environ).get("GITHUB_ACTIONS") == "true"


@contextlib.contextmanager
def verbatim(echo: Callable[[str], None], environ: Mapping[str, str] | None = None) -> Iterator[None]:
    """Print multi-line free text (a table of untrusted names) with command processing off in Actions.

    The resume token is random, so the text itself cannot end the block early.
    """
    if not in_actions(environ):
        yield
        return
    token = f"hfexport-{secrets.token_hex(16)}"
    echo(f"::stop-commands::{token}")
    try:
        yield
    finally:
        echo(f"::{token}::")


def print_block(echo: Callable[[str], None], text: str, environ: Mapping[str, str] | None = None) -> None:
    """Multi-line free text (a table of untrusted names) as it is, but for format characters, with command processing
    off around it in Actions."""
    with verbatim(echo, environ):
        echo(visible(text))


class LineFormatter(logging.Formatter):
    """Log records as one inert line each (a record's text can hold an API answer or a report's words)."""

    def format(self, record: logging.LogRecord) -> str:
        return line(super().format(record))
