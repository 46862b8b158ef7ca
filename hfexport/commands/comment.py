"""``hfexport comment``: post a report to its PR (or a tracking issue) as one sticky comment."""

from __future__ import annotations

import os
from pathlib import Path

import click

from ..gate.schema import ReportError, load_report
from ..github.comment import CommentError, post_report, resolve_target
from .output import fail, say


@click.command()
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
    if issue is not None and pr_number is not None:
        fail("--issue and --pr name two places to post: pass one")
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
        fail(error)
    say(f"{outcome.message}: {outcome.url}" if outcome.url else outcome.message)
