"""Post a gate report to its pull request as one sticky comment, edited in place on later runs.

The report may come from an untrusted pull-request run (the fork-safe ``workflow_run`` setup), so it is size-capped,
validated against its schema, rendered here with every string escaped, and posted only when its PR number and head
commit match what the GitHub API (and, when there is one, the trusted triggering event) says.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..gate.markdown import MARKER, render_markdown
from .event import EventError, event_pr, read_event

DEFAULT_API_URL = "https://api.github.com"
TOKEN_VARIABLES = ("HFEXPORT_GITHUB_TOKEN", "GITHUB_TOKEN", "GH_TOKEN")
BODY_LIMIT = 65000  # GitHub rejects comment bodies over 65,536 characters; keep a margin
ACTIONS_BOT = "github-actions[bot]"  # the author of comments posted with a workflow's GITHUB_TOKEN
FORK_HINT = (
    "a pull_request run from a fork gets a read-only token: run `hfexport check` in the pull_request job, upload "
    "the report, and post it from a `workflow_run` job (README: GitHub Action, fork pull requests)"
)

log = logging.getLogger(__name__)
T = TypeVar("T")


class CommentError(Exception):
    """Why nothing was posted, in one line (the CLI exits with code 2)."""


@dataclass(frozen=True)
class Target:
    """Where to post. ``expected_head_sha`` comes from a trusted event, never from the report."""

    repository: str
    api_url: str
    token: str = field(repr=False)
    pr_number: int | None = None
    expected_head_sha: str | None = None
    details_url: str | None = None


@dataclass(frozen=True)
class Outcome:
    action: str  # "created", "updated", "unchanged" or "skipped"
    message: str
    url: str | None = None


def resolve_target(
    environ: Mapping[str, str],
    *,
    repository: str | None = None,
    pr_number: int | None = None,
    api_url: str | None = None,
    token: str | None = None,
    head_sha: str | None = None,
    details_url: str | None = None,
) -> Target:
    """Options first, then the GitHub Actions environment (GITHUB_REPOSITORY, GITHUB_API_URL, GITHUB_EVENT_PATH)."""
    repository = repository or environ.get("GITHUB_REPOSITORY")
    if not repository or repository.count("/") != 1:
        raise CommentError("no repository: pass --repo OWNER/NAME or set GITHUB_REPOSITORY")
    token = token or next((environ[name] for name in TOKEN_VARIABLES if environ.get(name)), None)
    if not token:
        raise CommentError(f"no token: set one of {', '.join(TOKEN_VARIABLES)} (or pass --token)")
    try:
        event_number, event_head, run_url = event_pr(read_event(environ))
    except EventError as error:
        raise CommentError(str(error)) from None
    if not run_url and environ.get("GITHUB_RUN_ID"):
        server = environ.get("GITHUB_SERVER_URL", "https://github.com").rstrip("/")
        run_url = f"{server}/{repository}/actions/runs/{environ['GITHUB_RUN_ID']}"
    return Target(
        repository=repository,
        api_url=(api_url or environ.get("GITHUB_API_URL") or DEFAULT_API_URL).rstrip("/"),
        token=token,
        pr_number=pr_number or _as_int(event_number),
        expected_head_sha=head_sha or event_head,
        details_url=details_url or run_url,
    )


def _as_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def redact(text: str, token: str) -> str:
    return text.replace(token, "***") if token else text


def _status(error: Exception) -> int | None:
    from github import GithubException

    return error.status if isinstance(error, GithubException) else None


def _is_rate_limited(error: Exception) -> bool:
    from github import RateLimitExceededException

    message = str(getattr(error, "data", "") or "").lower()
    return isinstance(error, RateLimitExceededException) or "rate limit" in message


def _retry_after(error: Exception) -> float | None:
    headers = getattr(error, "headers", None) or {}
    value = {k.lower(): v for k, v in headers.items()}.get("retry-after")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _is_transient(error: Exception) -> bool:
    """5xx answers, secondary rate limits (403/429 with a rate-limit message) and dropped connections."""
    import requests

    if isinstance(error, requests.ConnectionError | requests.Timeout):
        return True
    status = _status(error)
    if status is None:
        return False
    return status >= 500 or (status in (403, 429) and _is_rate_limited(error))


def with_retries(
    operation: Callable[[], T],
    *,
    attempts: int = 5,
    backoff: float = 2.0,
    max_wait: float = 60.0,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Run ``operation``, retrying transient GitHub errors with exponential backoff (or the server's Retry-After)."""
    for attempt in range(1, attempts + 1):
        try:
            return operation()
        except Exception as error:
            if attempt == attempts or not _is_transient(error):
                raise
            wait = _retry_after(error)
            if wait is None:
                wait = backoff * 2 ** (attempt - 1) * (1 + random.random() / 4)
            if wait > max_wait:
                raise
            reason = f"HTTP {_status(error)}" if _status(error) else type(error).__name__
            log.warning("GitHub answered %s; retrying in %.1fs (attempt %d of %d)", reason, wait, attempt + 1, attempts)
            sleep(wait)
    raise AssertionError("unreachable")


def _explain(error: Exception, token: str, doing: str) -> CommentError:
    """One line per failure kind; the token never appears in it."""
    from github import GithubException

    if isinstance(error, GithubException):
        data = error.data if isinstance(error.data, dict) else {}
        detail = redact(str(data.get("message") or error.message or "").strip(), token) or "no message"
        if error.status == 401:
            return CommentError(f"GitHub rejected the token while {doing} (401 {detail})")
        if error.status == 403 and not _is_rate_limited(error):
            return CommentError(f"GitHub refused {doing} (403 {detail}): {FORK_HINT}")
        if error.status == 404:
            return CommentError(f"not found while {doing} (404 {detail}): check the repository, PR number and token")
        return CommentError(f"GitHub error while {doing} (HTTP {error.status} {detail})")
    return CommentError(redact(f"GitHub unreachable while {doing}: {type(error).__name__}: {error}", token))


def _report_pr(report: dict[str, Any]) -> tuple[int | None, str | None]:
    pr = report.get("pr") if isinstance(report.get("pr"), dict) else {}
    return _as_int(pr.get("number")), pr.get("head_sha") if isinstance(pr.get("head_sha"), str) else None


def find_sticky(comments: Iterable[Any], author: str) -> Any | None:
    """The first comment by ``author`` that carries the marker (a user quoting the marker is never edited)."""
    for comment in comments:
        if comment.user is not None and comment.user.login == author and MARKER in (comment.body or ""):
            return comment
    return None


def _author(github: Any, author: str | None, attempts: int, backoff: float) -> str:
    """Whose comment to look for: --author, else the token's user, else the Actions bot (GITHUB_TOKEN has no /user)."""
    if author:
        return author
    from github import GithubException

    try:
        return with_retries(lambda: github.get_user().login, attempts=attempts, backoff=backoff)
    except GithubException as error:
        if error.status in (401, 403):
            return ACTIONS_BOT
        raise


def post_report(
    report: dict[str, Any],
    target: Target,
    *,
    author: str | None = None,
    attempts: int = 5,
    backoff: float = 2.0,
    request_interval: float = 0.25,
    timeout: int = 30,
) -> Outcome:
    """Create or edit the sticky comment for ``report`` on its pull request.

    ``request_interval`` spaces API calls (writes four times as far: GitHub asks for a second between them).
    """
    import requests
    from github import Auth, Github, GithubException

    report_number, report_head = _report_pr(report)
    number = target.pr_number or report_number
    if number is None:
        raise CommentError("no PR number: pass --pr, run on a pull_request event, or use a report made in a PR run")
    if report_number != number:
        raise CommentError(f"the report is for PR #{report_number}, not PR #{number}: not posting")
    if not report_head:
        raise CommentError("the report has no PR head SHA: not posting")
    if target.expected_head_sha and report_head != target.expected_head_sha:
        raise CommentError(
            f"the report is for commit {report_head[:12]}, the triggering run built {target.expected_head_sha[:12]}"
        )
    body = render_markdown(report, max_chars=BODY_LIMIT, details_url=target.details_url)
    # retry=None: PyGithub's own retry would repeat a POST whose comment may already exist; we retry whole steps.
    github = Github(
        auth=Auth.Token(target.token),
        base_url=target.api_url,
        retry=None,
        timeout=timeout,
        seconds_between_requests=request_interval,
        seconds_between_writes=4 * request_interval,
    )
    doing = f"reading {target.repository} PR #{number}"
    try:
        repo = with_retries(lambda: github.get_repo(target.repository), attempts=attempts, backoff=backoff)
        pull = with_retries(lambda: repo.get_pull(number), attempts=attempts, backoff=backoff)
        if pull.head.sha != report_head:
            moved = f"PR #{number} head is now {pull.head.sha[:12]}, the report is for {report_head[:12]}"
            return Outcome("skipped", f"not posting: {moved} (the run for the new head will post)")
        login = _author(github, author, attempts, backoff)
        doing = f"commenting on {target.repository} PR #{number}"

        def upsert() -> Outcome:
            # Listing again on every attempt: a POST that failed after GitHub stored it must not make a second one.
            existing = find_sticky(pull.get_issue_comments(), login)
            if existing is None:
                created = pull.create_issue_comment(body)
                return Outcome("created", f"created comment on PR #{number}", created.html_url)
            if existing.body == body:
                return Outcome("unchanged", f"comment on PR #{number} already up to date", existing.html_url)
            existing.edit(body)
            return Outcome("updated", f"updated comment on PR #{number}", existing.html_url)

        return with_retries(upsert, attempts=attempts, backoff=backoff)
    except (GithubException, requests.RequestException) as error:
        raise _explain(error, target.token, doing) from None
    finally:
        github.close()
