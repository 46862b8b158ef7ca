"""`hfexport comment` against a real HTTP server on 127.0.0.1 that answers the GitHub REST endpoints PyGithub uses."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fake_github import FakeGitHub
from test_markdown import HOSTILE, cell, report

from hfexport.cli import main
from hfexport.gate.escaping import text_size
from hfexport.gate.markdown import MARKER
from hfexport.gate.schema import ReportError, load_report
from hfexport.github.comment import ACTIONS_BOT, CommentError, resolve_target

TOKEN = "ghs_s3cr3tT0kenValue0123456789"
HEAD = "a" * 40


@pytest.fixture
def github():
    with FakeGitHub(repository="acme/transformers", pr_number=7, head_sha=HEAD) as fake:
        fake.add_token(TOKEN, "export-bot")
        yield fake


def write(tmp_path: Path, data: dict[str, Any], name: str = "report.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def environ(github: FakeGitHub, tmp_path: Path, event: dict[str, Any] | None = None) -> dict[str, str]:
    """What a GitHub Actions step sees, pointed at the fake server."""
    event = event or {"pull_request": {"number": github.pr_number, "head": {"sha": github.head_sha}}}
    event_path = tmp_path / "event.json"
    event_path.write_text(json.dumps(event), encoding="utf-8")
    return {
        "GITHUB_REPOSITORY": github.repository,
        "GITHUB_API_URL": github.api_url,
        "GITHUB_EVENT_PATH": str(event_path),
        "GITHUB_SERVER_URL": "https://github.example",
        "GITHUB_RUN_ID": "42",
        "GITHUB_TOKEN": TOKEN,
    }


def comment(env: dict[str, str], report_path: Path, *args: str) -> Any:
    fast = ["--backoff", "0.01", "--request-interval", "0", "--write-settle", "0.3"]
    return CliRunner().invoke(main, ["comment", str(report_path), *fast, *args], env=env)


def passing() -> dict[str, Any]:
    return report([cell("LlamaForCausalLM", "dynamo"), cell("LlamaForCausalLM", "onnx")], ("dynamo", "onnx"))


def failing() -> dict[str, Any]:
    return report([cell("LlamaForCausalLM", "dynamo"), cell("LlamaForCausalLM", "onnx", "crash")], ("dynamo", "onnx"))


def test_first_run_creates_then_later_runs_edit_the_same_comment(github, tmp_path):
    github.add_comment("someone", f"quoting the bot: {MARKER}")  # a user's comment with the marker is never edited
    env = environ(github, tmp_path)
    first = comment(env, write(tmp_path, failing()))
    assert first.exit_code == 0, first.output
    assert "created comment on PR #7: https://github.example/acme/transformers/pull/7#issuecomment-" in first.output
    second = comment(env, write(tmp_path, passing()))
    assert second.exit_code == 0, second.output
    assert "updated comment on PR #7" in second.output
    third = comment(env, write(tmp_path, passing()))
    assert "already up to date" in third.output
    ours = [c for c in github.comments if c["user"]["login"] == "export-bot"]
    assert len(ours) == 1 and "every export passed" in ours[0]["body"] and ours[0]["body"].startswith(MARKER)
    assert github.comments[0]["body"] == f"quoting the bot: {MARKER}"
    assert [r.method for r in github.writes()] == ["POST", "PATCH"]
    # Enterprise-style API root: every request went under the /api/v3 prefix it was given.
    assert all(r.path.startswith("/api/v3/") for r in github.requests)


def test_github_token_without_user_endpoint_finds_the_actions_bot_comment(github, tmp_path):
    github.add_token("ghs_actions", ACTIONS_BOT, has_user_endpoint=False)
    env = environ(github, tmp_path) | {"GITHUB_TOKEN": "ghs_actions"}
    assert comment(env, write(tmp_path, failing())).exit_code == 0
    result = comment(env, write(tmp_path, passing()))
    assert "updated comment" in result.output
    assert [c["user"]["login"] for c in github.comments] == [ACTIONS_BOT]


def test_502_then_success_is_retried(github, tmp_path, caplog):
    github.fail("GET", r"/pulls/7$", 502, "Server Error")
    github.fail("POST", r"/issues/7/comments$", 502, "Server Error")
    result = comment(environ(github, tmp_path), write(tmp_path, failing()))
    assert result.exit_code == 0, result.output
    assert caplog.text.count("GitHub answered HTTP 502; retrying") == 2
    assert [r.method for r in github.writes()] == ["POST", "POST"]
    assert len(github.comments) == 1


def test_a_post_that_was_stored_before_the_502_is_not_posted_twice(github, tmp_path):
    github.fail("POST", r"/issues/7/comments$", 502, "Server Error", store_anyway=True)
    result = comment(environ(github, tmp_path), write(tmp_path, failing()))
    assert result.exit_code == 0, result.output
    assert len(github.comments) == 1 and "already up to date" in result.output


def test_secondary_rate_limit_waits_for_retry_after(github, tmp_path, caplog):
    message = "You have exceeded a secondary rate limit. Please wait a few minutes before you try again."
    github.fail("PATCH", r"/issues/comments/\d+$", 403, message, **{"Retry-After": "0"})
    env = environ(github, tmp_path)
    comment(env, write(tmp_path, failing()))
    result = comment(env, write(tmp_path, passing()))
    assert result.exit_code == 0 and "GitHub answered HTTP 403; retrying in 0.0s" in caplog.text
    assert [r.method for r in github.writes()] == ["POST", "PATCH", "PATCH"]


def test_persistent_5xx_gives_up_with_one_line(github, tmp_path):
    github.fail("GET", r"/repos/acme/transformers$", 503, "Unavailable", times=10)
    result = comment(environ(github, tmp_path), write(tmp_path, failing()), "--retries", "3")
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == (
        "error: GitHub error while reading acme/transformers PR #7 (HTTP 503 Unavailable)"
    )
    assert len([r for r in github.requests if r.path.endswith("/transformers")]) == 3


def test_403_on_a_fork_pr_explains_the_fork_safe_setup(github, tmp_path):
    github.add_token("ghs_readonly", ACTIONS_BOT, can_write=False, has_user_endpoint=False)
    env = environ(github, tmp_path) | {"GITHUB_TOKEN": "ghs_readonly"}
    result = comment(env, write(tmp_path, failing()))
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1
    assert "403 Resource not accessible by integration" in lines[0]
    assert "fork" in lines[0] and "workflow_run" in lines[0]
    assert github.comments == []


def test_oversized_report_is_truncated_under_the_limit_with_the_marker_kept(github, tmp_path):
    cells = [cell(f"Model{i:04d}Model", "onnx", "crash", error=f"{i} " + "boom " * 400) for i in range(300)]
    result = comment(environ(github, tmp_path), write(tmp_path, report(cells, ("onnx",))))
    assert result.exit_code == 0, result.output
    body = github.comments[0]["body"]
    assert text_size(body) <= 65536 and body.startswith(MARKER)
    assert "300 checks: 300 failed (300 new) · on" in body  # only the counts that are not zero
    assert "left out to stay under GitHub's size limit" in body
    assert "[the job summary](https://github.example/acme/transformers/actions/runs/42)" in body


def test_a_malicious_model_name_renders_inert(github, tmp_path):
    hostile = report([cell(HOSTILE, "onnx", "crash", error="@maintainers <script>x</script> | `")], ("onnx",))
    assert comment(environ(github, tmp_path), write(tmp_path, hostile)).exit_code == 0
    body = github.comments[0]["body"]
    assert "<img" not in body and "<script" not in body and "@octocat" not in body and "@maintainers" not in body
    assert "&lt;img src=x onerror=alert\\(1\\)&gt;" in body
    row = next(line for line in body.splitlines() if line.startswith("| Evil"))
    assert row.count("|") - row.count("\\|") == 3  # exactly two cells: no stray pipe from the name or the error


def test_token_never_appears_in_any_output(github, tmp_path, caplog, capfd):
    caplog.set_level(logging.DEBUG)  # PyGithub logs every request at DEBUG
    env = environ(github, tmp_path)
    github.fail("POST", r"/comments$", 502, f"echoing your token {TOKEN}")
    outputs = [comment(env, write(tmp_path, failing()), "--token", TOKEN).output]
    outputs.append(comment(env | {"GITHUB_TOKEN": TOKEN + "x"}, write(tmp_path, failing())).output)  # 401
    github.fail("GET", r"/pulls/7$", 500, f"token={TOKEN}", times=10)
    outputs.append(comment(env, write(tmp_path, failing()), "--retries", "2").output)
    captured = capfd.readouterr()
    assert "Bad credentials" in outputs[1] and "HTTP 500" in outputs[2]
    assert any(r.headers.get("Authorization") == f"token {TOKEN}" for r in github.requests)  # it was sent
    for text in [*outputs, captured.out, captured.err, caplog.text]:
        assert TOKEN not in text


def test_report_for_another_pr_is_refused(github, tmp_path):
    other = failing() | {"pr": {"number": 8, "head_sha": HEAD}}
    result = comment(environ(github, tmp_path), write(tmp_path, other))
    assert result.exit_code == 2 and "the report is for PR #8, not PR #7" in result.output
    assert github.writes() == []


def test_report_for_an_older_head_is_skipped(github, tmp_path):
    stale = failing() | {"pr": {"number": 7, "head_sha": "c" * 40}}
    event = {"workflow_run": {"head_sha": "c" * 40, "pull_requests": [], "html_url": "https://github.example/r/1"}}
    result = comment(environ(github, tmp_path, event), write(tmp_path, stale))
    assert result.exit_code == 0 and "not posting: PR #7 head is now aaaaaaaaaaaa" in result.output
    assert github.writes() == []


def test_workflow_run_of_a_fork_takes_the_pr_from_the_report_and_checks_the_trusted_head(github, tmp_path):
    event = {"workflow_run": {"head_sha": HEAD, "pull_requests": [], "html_url": "https://github.example/runs/9"}}
    env = environ(github, tmp_path, event)
    assert comment(env, write(tmp_path, failing())).exit_code == 0
    assert len(github.comments) == 1
    # A report claiming a commit the triggering run did not build is refused before any API call.
    forged = failing() | {"pr": {"number": 7, "head_sha": "d" * 40}}
    requests_before = len(github.requests)
    result = comment(env, write(tmp_path, forged))
    assert result.exit_code == 2 and "the triggering run built aaaaaaaaaaaa" in result.output
    assert len(github.requests) == requests_before


def test_invalid_and_oversized_reports_are_refused(tmp_path):
    with pytest.raises(ReportError, match="not a valid hfexport report"):
        load_report(write(tmp_path, {"schema": "something-else"}))
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ReportError, match="not valid JSON"):
        load_report(tmp_path / "bad.json")
    with pytest.raises(ReportError, match="over 1000 bytes"):
        load_report(write(tmp_path, failing()), max_bytes=1000)
    assert load_report(tmp_path).engine == "hfexport"  # a directory means its report.json


def test_target_from_options_and_environment(tmp_path):
    with pytest.raises(CommentError, match="no token"):
        resolve_target({"GITHUB_REPOSITORY": "a/b"})
    with pytest.raises(CommentError, match="no repository"):
        resolve_target({"GH_TOKEN": "t"})
    target = resolve_target({"GITHUB_REPOSITORY": "a/b", "GH_TOKEN": TOKEN})
    assert (target.api_url, target.pr_number, target.details_url) == ("https://api.github.com", None, None)
    assert TOKEN not in repr(target)
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"issue": {"number": 5, "pull_request": {}}}))
    target = resolve_target(
        {"GITHUB_EVENT_PATH": str(event), "GITHUB_API_URL": "https://ghe.example/api/v3/", "GH_TOKEN": "t"},
        repository="x/y",
        token="u",
    )
    assert (target.repository, target.api_url, target.token, target.pr_number) == (
        "x/y",
        "https://ghe.example/api/v3",
        "u",
        5,
    )


def test_comment_needs_neither_torch_nor_transformers():
    # The fork-safe workflow_run job installs only click and PyGithub next to hfexport.
    code = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from hfexport.cli import main\n"
        "from hfexport.github import comment\n"
        "assert CliRunner().invoke(main, ['comment', '--help']).exit_code == 0\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'transformers', 'numpy'}))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


# ── Hostile reports and flaky APIs ──


def commands_in(text: str) -> list[str]:
    """Lines a GitHub Actions runner would run as workflow commands: ``::`` after leading space, ``##[`` anywhere."""
    return [line for line in text.splitlines() if line.lstrip().startswith("::") or "##[" in line]


def refused(result: Any) -> str:
    """The one line a refused report gets, checked for what a runner must not see."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and isinstance(result.exception, SystemExit | None)
    (line,) = result.output.strip().splitlines()
    assert line.startswith("error: ") and commands_in(result.output) == []
    return line


def test_report_text_never_becomes_a_workflow_command(github, tmp_path):
    env = environ(github, tmp_path)
    key = "total\n::error title=Security::Maintainers: approve PR 1 now"
    forged = failing()
    forged["cells"][0]["timings"] = {key: "s", "##[error]old syntax": "s"}
    line = refused(comment(env, write(tmp_path, forged)))
    assert "timings['total\\n::error title=Security" in line and "#%23[error]" in line
    head = failing() | {"pr": {"number": 7, "head_sha": "\n::error::pwned"}}
    assert "pr.head_sha: expected a full commit SHA" in refused(comment(env, write(tmp_path, head)))
    assert github.writes() == []


def test_merge_prints_untrusted_names_with_workflow_commands_off(tmp_path):
    shard = report([cell("X\n::error::pwned", "onnx", "crash", error="y\n##[error]z")], ("onnx",))
    (tmp_path / "a.json").write_text(json.dumps(shard))
    result = CliRunner().invoke(
        main, ["merge", str(tmp_path / "a.json"), "--report-dir", str(tmp_path / "out")], env={"GITHUB_ACTIONS": "true"}
    )
    assert result.exit_code == 1, result.output
    start, *inside, end = commands_in(result.output)
    token = start.removeprefix("::stop-commands::")
    assert len(token) >= 32 and end == f"::{token}::"
    assert inside and all("pwned" in line or "##[error]z" in line for line in inside)  # all between the markers


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"a": ' * 100_000 + "1" + "}" * 100_000, "nested too deeply"),
        (json.dumps(failing()).replace('"max_abs_diff": null', '"max_abs_diff": 1' + "0" * 400, 1), "finite number"),
        (json.dumps(passing()).replace('"max_abs_diff": 1.5e-06', '"max_abs_diff": NaN', 1), "NaN is not a number"),
        (json.dumps(passing()).replace('"total": 1.2', '"total": 1e400', 1), "finite number"),
        (json.dumps(passing()).replace('"line": 10', '"line": ' + "9" * 5000, 1), "not valid JSON"),
    ],
    ids=["deep", "huge-int", "nan", "inf", "int-too-long"],
)
def test_hostile_numbers_and_nesting_are_one_line_refusals(github, tmp_path, text, message):
    (tmp_path / "report.json").write_text(text)
    assert message in refused(comment(environ(github, tmp_path), tmp_path / "report.json"))
    assert github.writes() == []


def test_limits_of_the_schema(tmp_path):
    wide = report([cell(f"C{i}", f"b{i}") for i in range(17)], tuple(f"b{i}" for i in range(17)))
    unlisted = report([cell("A", "dynamo"), cell("A", "tflite")], ("dynamo",))
    twice = report([cell("A", "onnx"), cell("A", "onnx")], ("onnx",))
    long_error = report([cell("A", "onnx", "crash", error="x" * 20_001)], ("onnx",))
    for data, message in [
        (wide, "backends: 17 of them, at most 16"),
        (unlisted, "'tflite' is not in backends"),
        (twice, "a second cell for 'A' on 'onnx'"),
        (long_error, "20001 characters, at most 20000"),
    ]:
        with pytest.raises(ReportError, match=re.escape(message)):
            load_report(write(tmp_path, data))
    brackets = "[" * 600_000
    (tmp_path / "brackets.json").write_text(json.dumps(passing() | {"x": brackets}))
    with pytest.raises(ReportError, match="over 500000 objects and arrays"):
        load_report(tmp_path / "brackets.json")


def test_token_with_surrounding_whitespace_is_used_trimmed_and_never_printed(github, tmp_path):
    env = environ(github, tmp_path) | {"GITHUB_TOKEN": f" {TOKEN}\n"}
    result = comment(env, write(tmp_path, failing()))
    assert result.exit_code == 0, result.output
    assert "created comment" in result.output and TOKEN not in result.output
    assert all(r.headers.get("Authorization") == f"token {TOKEN}" for r in github.requests)
    inside = comment(env | {"GITHUB_TOKEN": f"{TOKEN[:10]}\n{TOKEN[10:]}"}, write(tmp_path, failing()))
    line = refused(inside)
    assert "control or non-ASCII character inside it" in line and TOKEN[:10] not in line and TOKEN[10:] not in line


def test_a_rate_limited_user_endpoint_never_makes_a_second_sticky_comment(github, tmp_path):
    env = environ(github, tmp_path)
    assert comment(env, write(tmp_path, failing())).exit_code == 0
    limit = "You have exceeded a secondary rate limit. Please wait a few minutes before you try again."
    github.fail("GET", r"/user$", 403, limit, times=10, **{"Retry-After": "300"})
    result = comment(env, write(tmp_path, passing()))
    assert result.exit_code == 2 and "rate limit" in result.output
    github.fail("GET", r"/user$", 403, limit, **{"Retry-After": "0"})
    github.failures = github.failures[-1:]
    assert "updated comment" in comment(env, write(tmp_path, passing())).output
    assert len(github.comments) == 1


def test_a_bad_token_is_an_error_not_a_guess_at_the_author(github, tmp_path):
    github.fail("GET", r"/user$", 401, "Bad credentials")
    result = comment(environ(github, tmp_path), write(tmp_path, failing()))
    assert result.exit_code == 2 and "rejected the token" in result.output
    assert github.writes() == []


def test_a_github_app_token_edits_its_own_comment(github, tmp_path):
    github.add_token("ghs_app", "export-app[bot]", has_user_endpoint=False)
    env = environ(github, tmp_path) | {"GITHUB_TOKEN": "ghs_app"}
    assert "created comment" in comment(env, write(tmp_path, failing())).output
    assert "updated comment" in comment(env, write(tmp_path, passing())).output
    assert [c["user"]["login"] for c in github.comments] == ["export-app[bot]"]


def test_an_app_token_graphql_does_not_name_asks_for_the_author(github, tmp_path):
    github.add_token("ghs_app", "export-app[bot]", has_user_endpoint=False, has_viewer=False)
    env = environ(github, tmp_path) | {"GITHUB_TOKEN": "ghs_app"}
    assert "pass --author" in refused(comment(env, write(tmp_path, failing())))
    assert "created comment" in comment(env, write(tmp_path, failing()), "--author", "export-app[bot]").output
    assert "updated comment" in comment(env, write(tmp_path, passing()), "--author", "export-app[bot]").output
    assert len(github.comments) == 1


def test_another_bot_comment_that_merely_contains_the_marker_is_left_alone(github, tmp_path):
    github.add_token("ghs_actions", ACTIONS_BOT, has_user_endpoint=False)
    github.add_comment(ACTIONS_BOT, f"Coverage report. Other tools' output quoted below:\n{MARKER}\n…")
    env = environ(github, tmp_path) | {"GITHUB_TOKEN": "ghs_actions"}
    assert "created comment" in comment(env, write(tmp_path, failing())).output
    assert "updated comment" in comment(env, write(tmp_path, passing())).output
    assert github.comments[0]["body"].startswith("Coverage report.")
    assert [c["body"].startswith(MARKER) for c in github.comments] == [False, True]


def test_a_post_that_shows_seconds_after_its_502_is_not_posted_twice(github, tmp_path):
    github.fail("POST", r"/issues/7/comments$", 502, "Server Error", store_after=3.0)
    env = environ(github, tmp_path)
    # The default wait for a late write: no --write-settle.
    args = ["comment", str(write(tmp_path, failing())), "--backoff", "0.01", "--request-interval", "0"]
    result = CliRunner().invoke(main, args, env=env)
    assert result.exit_code == 0, result.output
    assert len(github.comments) == 1 and "already up to date" in result.output
    assert [r.method for r in github.writes()] == ["POST"]


def test_the_posted_comment_links_the_broken_line_at_the_reports_head(github, tmp_path):
    frame = {"file": "src/transformers/models/llama/modeling_llama.py", "line": 63, "function": "f", "text": "if x:"}
    data = report([cell("LlamaModel", "onnx", "fail", frame=frame)], ("onnx",))
    assert comment(environ(github, tmp_path), write(tmp_path, data)).exit_code == 0
    body = github.comments[0]["body"]
    # The server and repository come from the trusted environment; the commit is the report's head, checked above.
    link = f"https://github.example/acme/transformers/blob/{HEAD}/{frame['file']}#L63"
    assert f"[`{frame['file']}:63`]({link})" in body and "```python\nif x:\n```" in body


def test_the_scheduled_run_edits_one_sticky_comment_on_its_tracking_issue(github, tmp_path):
    # The scheduled run on main: no pull request in its event or its report; issue #7 tracks main.
    env = environ(github, tmp_path, event={"schedule": "0 4 * * *"})
    on_main = failing() | {"pr": {"number": None, "head_sha": None}}
    github.add_comment("someone", f"{MARKER} quoted by a person")
    first = comment(env, write(tmp_path, on_main), "--issue", "7")
    assert first.exit_code == 0 and "created comment on issue #7" in first.output, first.output
    second = comment(env, write(tmp_path, passing() | {"pr": {"number": None, "head_sha": None}}), "--issue", "7")
    assert second.exit_code == 0 and "updated comment on issue #7" in second.output, second.output
    ours = [c for c in github.comments if c["user"]["login"] == "export-bot"]
    assert len(ours) == 1 and "every export passed" in ours[0]["body"]
    assert [r.method for r in github.writes()] == ["POST", "PATCH"]
    both = comment(env, write(tmp_path, on_main), "--issue", "7", "--pr", "7")
    assert both.exit_code == 2 and "--issue and --pr" in both.output
    missing = comment(env, write(tmp_path, on_main), "--issue", "8")
    assert missing.exit_code == 2 and "issue #8" in missing.output and "Traceback" not in missing.output
