"""The GitHub Actions event that triggered a run (``$GITHUB_EVENT_PATH``): read once, by ``check`` and ``comment``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any


class EventError(ValueError):
    """The event file named by ``GITHUB_EVENT_PATH`` exists but cannot be read as JSON."""


def read_event(environ: Mapping[str, str]) -> dict[str, Any]:
    """The triggering event, or ``{}`` outside Actions."""
    path = environ.get("GITHUB_EVENT_PATH")
    if not path or not Path(path).is_file():
        return {}
    try:
        event = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise EventError(f"cannot read GITHUB_EVENT_PATH {path}: {error}") from None
    return event if isinstance(event, dict) else {}


def event_pr(event: dict[str, Any]) -> tuple[int | None, str | None, str | None]:
    """PR number, head SHA and the URL of the run that made the report, as the triggering event states them."""
    if isinstance(event.get("pull_request"), dict):
        pr = event["pull_request"]
        return pr.get("number"), (pr.get("head") or {}).get("sha"), None
    run = event.get("workflow_run")
    if isinstance(run, dict):
        # GitHub leaves workflow_run.pull_requests empty for fork PRs; the number then comes from the report.
        prs = [p for p in run.get("pull_requests") or [] if isinstance(p, dict)]
        return (prs[0].get("number") if prs else None), run.get("head_sha"), run.get("html_url")
    issue = event.get("issue")
    if isinstance(issue, dict) and isinstance(issue.get("pull_request"), dict):  # a comment on a PR
        return issue.get("number"), None, None
    return None, None, None


def pr_context(environ: Mapping[str, str]) -> dict[str, Any]:
    """PR number and head commit for ``check``'s report (nulls outside Actions or when the event is unreadable)."""
    try:
        number, head_sha, _ = event_pr(read_event(environ))
    except EventError:
        return {"number": None, "head_sha": None}
    return {"number": number, "head_sha": head_sha}
