"""Untrusted text made inert for GitHub markdown (table cells, HTML blocks, code blocks), its size as GitHub counts
it, and links built only from validated parts (a repository, a commit, a file's line)."""

from __future__ import annotations

import re
import unicodedata
from typing import Any

# Characters CommonMark/GFM give a meaning to inline (emphasis, links, images, math, strikethrough).
_MD_PUNCTUATION = frozenset("\\*_[]()!~$^{}")
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "|": "&#124;", "`": "&#96;"}
# A zero-width space where GitHub would start a link makes the text inert and reads the same: after "@" or "#"
# ("@user" pings, "#12" and "owner/repo#12" cross-reference), after "GH-" before a number, between a scheme's ":" and
# "//" (plain URLs are autolinked, even after a backslash), and between "www" and "." (so are www. addresses).
_AUTOLINK = re.compile(r"(?<=[@#])(?=\w)|(?i:(?<=\bGH-)(?=\d))|(?<=:)(?=//)|(?i:(?<=\bwww)(?=\.))")


def text_size(text: str) -> int:
    """Length in UTF-16 code units: never less than ``len``, so a body that fits here fits GitHub's count."""
    return len(text.encode("utf-16-le")) // 2


def _plain(value: Any, limit: int) -> str:
    """One line of untrusted text cut to ``limit`` characters: control characters made spaces, format characters
    (Cf: bidi controls, zero-width and invisible characters, tags) dropped, as no reader sees them. The escapers'
    zero-width spaces are inserted after this."""
    text = ("" if value is None else str(value))[: 8 * limit + 1000]  # more than remains after collapsing spaces
    kinds = ((c, unicodedata.category(c)) for c in text)
    chars = (" " if kind == "Cc" else c for c, kind in kinds if kind != "Cf")
    text = " ".join("".join(chars).split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _inert(value: Any, limit: int) -> str:
    """One line of untrusted text with every place GitHub would start a link, ping or reference broken."""
    return _AUTOLINK.sub("\u200b", _plain(value, limit))


def escape_inline(value: Any, limit: int = 300) -> str:
    """Untrusted text for a markdown context (table cell, list item): rendered as the literal characters."""
    out = []
    for char in _inert(value, limit):
        if char in _ENTITIES:
            out.append(_ENTITIES[char])
        elif char in _MD_PUNCTUATION:
            out.append("\\" + char)
        else:
            out.append(char)
    return "".join(out)


def escape_html(value: Any, limit: int = 300) -> str:
    """Untrusted text inside an HTML block (``<summary>``), where markdown is not parsed but entities are."""
    return "".join(_ENTITIES.get(c, c) for c in _inert(value, limit))


def _longest_backtick_run(text: str) -> int:
    return max((len(run) for run in re.findall(r"`+", text)), default=0)


def code_block(value: Any, language: str = "python", limit: int = 300) -> str:
    """One line of untrusted text as a fenced code block: GitHub shows a code block's content literally (no links,
    pings, emphasis or HTML), so only its fence must outrun every backtick run in the line (a shorter one would close
    the block early)."""
    text = _plain(value, limit)
    fence = "`" * max(3, _longest_backtick_run(text) + 1)
    return f"{fence}{language}\n{text}\n{fence}"


_URL_PART = re.compile(r"[A-Za-z0-9_.-]+")
_SERVER = re.compile(r"https://[A-Za-z0-9.-]+(?::[0-9]{1,5})?")
_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


def repository_url(server: str | None, repository: str | None) -> str | None:
    """``{server}/{owner}/{name}`` when both parts are what GitHub allows (an https host, two plain names), else
    None: a line link is built only from validated parts."""
    owner, _, name = (repository or "").partition("/")
    parts_ok = all(_URL_PART.fullmatch(part) and part not in (".", "..") for part in (owner, name))
    if not (server and _SERVER.fullmatch(server.rstrip("/")) and parts_ok):
        return None
    return f"{server.rstrip('/')}/{owner}/{name}"


def line_url(repository: str | None, sha: str | None, path: str | None, line: int | None) -> str | None:
    """``{repository}/blob/{sha}/{path}#L{line}`` when every part is valid (a full SHA, a relative path of plain
    names, a positive line), else None."""
    segments = (path or "").split("/")
    path_ok = all(_URL_PART.fullmatch(part) and part not in (".", "..") for part in segments)
    line_ok = isinstance(line, int) and not isinstance(line, bool) and 0 < line < 10**7
    if not (repository and sha and _SHA.fullmatch(sha) and path_ok and line_ok):
        return None
    return f"{repository}/blob/{sha}/{path}#L{line}"
