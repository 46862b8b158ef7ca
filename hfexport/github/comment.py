"""Post a gate report to its pull request as one sticky comment, edited in place on later runs.

The report may come from an untrusted pull-request run (the fork-safe ``workflow_run`` setup), so it is size-capped,
validated against its schema, rendered here with every string escaped, and posted only when its PR number and head
commit match what the GitHub API (and, when there is one, the trusted triggering event) says.
"""

from __future__ import annotations

import ipaddress
import logging
import random
import time
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..gate.escaping import repository_url
from ..gate.markdown import MARKER, render_markdown
from ..gate.report import Report
from ..gate.schema import SHA
from .event import EventError, event_pr, read_event

# PyGithub (the optional github extra) and requests, its dependency, are imported inside the functions that use them:
# every other command runs without them.

DEFAULT_API_URL = "https://api.github.com"
TOKEN_VARIABLES = ("HFEXPORT_GITHUB_TOKEN", "GITHUB_TOKEN", "GH_TOKEN")
BODY_LIMIT = 65000  # GitHub rejects comment bodies over 65,536 characters; keep a margin
ACTIONS_BOT = "github-actions[bot]"  # the author of comments posted with a workflow's GITHUB_TOKEN
FORK_HINT = (
    "a pull_request run from a fork gets a read-only token: run `hfexport check` in the pull_request job, upload "
    "the report, and post it from a `workflow_run` job (docs/action.md: pull requests from forks)"
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
    server_url: str = "https://github.com"  # where the comment's line links point (GITHUB_SERVER_URL)


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
    token = checked_token(token or next((environ[name] for name in TOKEN_VARIABLES if environ.get(name)), None))
    try:
        event_number, event_head, run_url = event_pr(read_event(environ))
    except EventError as error:
        raise CommentError(str(error)) from None
    if not run_url and environ.get("GITHUB_RUN_ID"):
        server = environ.get("GITHUB_SERVER_URL", "https://github.com").rstrip("/")
        run_url = f"{server}/{repository}/actions/runs/{environ['GITHUB_RUN_ID']}"
    expected = head_sha or event_head
    if expected is not None and not (isinstance(expected, str) and SHA.fullmatch(expected)):
        raise CommentError("the head commit to check the report against (--head-sha or the event's) is not a SHA")
    return Target(
        repository=repository,
        api_url=checked_api_url(api_url or environ.get("GITHUB_API_URL") or DEFAULT_API_URL),
        token=token,
        pr_number=pr_number or _as_int(event_number),
        expected_head_sha=expected,
        details_url=details_url or run_url,
        server_url=environ.get("GITHUB_SERVER_URL") or "https://github.com",
    )


def _as_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def checked_api_url(url: str) -> str:
    """The API root the token is sent to: https, or plain http to a loopback address only (a local test server),
    where nothing on the network can read the token."""
    try:
        parsed = urllib.parse.urlsplit(url.strip())
        host = parsed.hostname or ""
    except ValueError:  # an unclosed IPv6 bracket
        raise CommentError("the API URL (--api-url or GITHUB_API_URL) is not a URL") from None
    if (parsed.scheme == "https" and host) or (parsed.scheme == "http" and _is_loopback(host)):
        return url.strip().rstrip("/")
    shown = f"{parsed.scheme}://{host}" if parsed.scheme else "a URL without a scheme"
    raise CommentError(
        f"not sending the token to {shown}: the API URL (--api-url or GITHUB_API_URL) must be https "
        "(plain http only to a loopback address)"
    )


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def checked_token(token: str | None) -> str:
    """The token as sent: surrounding whitespace (a secret saved with its newline) dropped, anything else refused.

    A token with a space or control character inside would reach the HTTP layer, whose error message prints the
    header value: it is refused here, in words that never hold it.
    """
    if not token or not token.strip():
        raise CommentError(f"no token: set one of {', '.join(TOKEN_VARIABLES)} (or pass --token)")
    token = token.strip()
    if not all("!" <= char <= "~" for char in token):
        raise CommentError("the token has a space, control or non-ASCII character inside it: check the secret")
    return token


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


def _report_pr(report: Report) -> tuple[int | None, str | None]:
    pr = report.pr or {}
    return _as_int(pr.get("number")), pr.get("head_sha") if isinstance(pr.get("head_sha"), str) else None


@dataclass(frozen=True)
class Identity:
    """The account the token posts as. ``bot``: an app installation (GITHUB_TOKEN included), ``<slug>[bot]``."""

    login: str
    bot: bool = False

    def wrote(self, comment: Any) -> bool:
        user = comment.user
        if user is None or str(user.login).lower() != self.login.lower():
            return False
        return not self.bot or user.type == "Bot"


def is_sticky(comment: Any, identity: Identity) -> bool:
    """Ours: the token's account wrote it and it opens with the marker (a comment quoting the marker is not ours)."""
    return identity.wrote(comment) and (comment.body or "").startswith(MARKER)


def find_sticky(comments: Iterable[Any], identity: Identity) -> Any | None:
    """The first sticky comment of ``identity``, if any."""
    return next((comment for comment in comments if is_sticky(comment, identity)), None)


def _not_a_user(error: Exception) -> bool:
    """GitHub's answer to GET /user from an app installation's token: 403 "Resource not accessible by integration"."""
    return _status(error) == 403 and not _is_rate_limited(error) and "integration" in str(getattr(error, "data", ""))


_VIEWER = "query { viewer { login } }"


def identity_of(github: Any, author: str | None, retrying: Callable[[Callable[[], T]], T]) -> Identity:
    """Whose comment is the sticky one: --author, else the token's user (GET /user), else, for an app installation
    (GITHUB_TOKEN or a GitHub App's token), the bot GraphQL's ``viewer`` names. Never a guess: when neither answers,
    the command stops and asks for --author."""
    from github import GithubException

    if author:
        return Identity(author, bot=author.endswith("[bot]"))
    try:
        return Identity(retrying(lambda: github.get_user().login))
    except GithubException as error:
        if not _not_a_user(error):
            raise
    try:
        _, answer = retrying(lambda: github.requester.graphql_query(_VIEWER, {}))
        login = str(answer["data"]["viewer"]["login"])
    except GithubException as error:
        if _is_transient(error) or _status(error) == 401:
            raise
        raise CommentError(
            "cannot tell which account this token posts as (GitHub answered neither GET /user nor GraphQL viewer): "
            "pass --author LOGIN, e.g. --author github-actions[bot]"
        ) from None
    except (KeyError, TypeError):
        raise CommentError("GraphQL viewer gave no login for this token: pass --author LOGIN") from None
    # GraphQL names a bot by its slug; its comments are by "<slug>[bot]".
    return Identity(login if login.endswith("[bot]") else f"{login}[bot]", bot=True)


def _ambiguous(error: Exception) -> bool:
    """A write whose outcome is unknown: GitHub may have stored it although the answer was an error."""
    import requests

    status = _status(error)
    return isinstance(error, requests.ConnectionError | requests.Timeout) or (status is not None and status >= 500)


def post_report(
    report: Report,
    target: Target,
    *,
    issue: int | None = None,
    author: str | None = None,
    attempts: int = 5,
    backoff: float = 2.0,
    request_interval: float = 0.25,
    timeout: int = 30,
    settle: float = 15.0,
    sleep: Callable[[float], None] = time.sleep,
) -> Outcome:
    """Create or edit the sticky comment for ``report`` on its pull request, or with ``issue`` on that tracking issue
    (the scheduled run on main: its report names no PR).

    ``request_interval`` spaces API calls (writes four times as far: GitHub asks for a second between them). After a
    POST whose outcome is unknown (a 5xx, a dropped connection), the comments are listed again for up to ``settle``
    seconds before posting again: GitHub can store a comment and show it seconds after answering 502.
    """
    import requests
    from github import GithubException

    number, report_head = _checked_pr(report, target) if issue is None else (issue, None)
    where = f"PR #{number}" if issue is None else f"issue #{issue}"
    body = _body(report, target)
    github = _client(target, timeout, request_interval)

    def retrying(operation: Callable[[], T]) -> T:
        return with_retries(operation, attempts=attempts, backoff=backoff, sleep=sleep)

    doing = f"reading {target.repository} {where}"
    try:
        repo = retrying(lambda: github.get_repo(target.repository))
        if issue is None:
            thread = retrying(lambda: repo.get_pull(number))
            if thread.head.sha != report_head:
                moved = f"PR #{number} head is now {thread.head.sha[:12]}, the report is for {report_head[:12]}"
                return Outcome("skipped", f"not posting: {moved} (the run for the new head will post)")
            comments, create = thread.get_issue_comments, thread.create_issue_comment
        else:
            thread = retrying(lambda: repo.get_issue(issue))
            comments, create = thread.get_comments, thread.create_comment
        identity = identity_of(github, author, retrying)
        doing = f"commenting on {target.repository} {where}"
        upsert = _sticky_upsert(comments, create, body, identity, settle, sleep)
        return retrying(lambda: upsert(where))
    except (GithubException, requests.RequestException) as error:
        raise _explain(error, target.token, doing) from None
    finally:
        github.close()


def _checked_pr(report: Report, target: Target) -> tuple[int, str]:
    """The PR to post to and the head commit the report is for, or why the report must not be posted there."""
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
    return number, report_head


def _body(report: Report, target: Target) -> str:
    repository = repository_url(target.server_url, target.repository)
    return render_markdown(report, max_chars=BODY_LIMIT, details_url=target.details_url, repository=repository)


def _client(target: Target, timeout: int, request_interval: float) -> Any:
    from github import Auth, Github

    # retry=None: PyGithub's own retry would repeat a POST whose comment may already exist; we retry whole steps.
    return Github(
        auth=Auth.Token(target.token),
        base_url=target.api_url,
        retry=None,
        timeout=timeout,
        seconds_between_requests=request_interval,
        seconds_between_writes=4 * request_interval,
    )


def _sticky_upsert(
    comments: Callable[[], Iterable[Any]],
    create: Callable[[str], Any],
    body: str,
    identity: Identity,
    settle: float,
    sleep: Callable[[float], None],
) -> Callable[[str], Outcome]:
    """One attempt at the sticky comment of a thread (``comments`` lists it, ``create`` posts to it), named ``where``
    in the outcome. Each attempt lists again, and after a write whose outcome is unknown (a 5xx, a dropped connection)
    waits up to ``settle`` seconds for it to show: never a second comment."""
    unknown_write = False

    def sticky() -> Any | None:
        found = find_sticky(comments(), identity)
        waited = 0.0
        while found is None and unknown_write and waited < settle:
            step = min(1.0, settle - waited)
            sleep(step)
            waited += step
            found = find_sticky(comments(), identity)
        return found

    def upsert(where: str) -> Outcome:
        nonlocal unknown_write
        existing = sticky()
        if existing is None:
            try:
                created = create(body)
            except Exception as error:
                unknown_write = unknown_write or _ambiguous(error)
                raise
            return Outcome("created", f"created comment on {where}", created.html_url)
        if existing.body == body:
            return Outcome("unchanged", f"comment on {where} already up to date", existing.html_url)
        existing.edit(body)
        return Outcome("updated", f"updated comment on {where}", existing.html_url)

    return upsert
