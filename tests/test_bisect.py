"""``check --bisect``: the first commit of a range at which a new failure fails, on real git repositories.

Each repository is ``checkout_fixture.make_checkout``'s (the installed 5.23.0 modeling_llama.py, one task head).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
from pathlib import Path

import pytest
from checkout_fixture import LLAMA, commit, git, llama_source, make_checkout
from click.testing import CliRunner
from test_action import ACTION, documented_workflows
from test_gate import DATA_DEPENDENT

import hfexport
from hfexport.cli import main
from hfexport.gate import changes, schema
from hfexport.gate.bisect import Range, RunAt, bisect_new_failures
from hfexport.gate.cache import code_fingerprint
from hfexport.gate.cells import Cell, FirstBadCommit
from hfexport.gate.report import Report, new_report
from hfexport.gate.run import run_one_cell_at
from hfexport.gate.targets import CheckOptions, Target
from hfexport.gate.views import github_annotations, terminal_table
from hfexport.github.actions import annotation_commands

NO_OP = "_unused_{} = 0\n"  # a module-level line of code that changes no model


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_checkout(tmp_path / "transformers", heads=1)


def _commit_no_op(repo: Path, number: int) -> str:
    source = (repo / LLAMA).read_text() + NO_OP.format(number)
    return commit(repo, {LLAMA: source}, f"no-op line {number} (#{100 + number})")


def _four_commits(repo: Path) -> list[str]:
    """The issue's range: a no-op line, a data-dependent branch in LlamaRMSNorm.forward, two more no-op lines."""
    first = _commit_no_op(repo, 1)
    broken = (repo / LLAMA).read_text().replace(*DATA_DEPENDENT)
    second = commit(repo, {LLAMA: broken}, "Merge pull request #4242 from someone/rmsnorm-branch")
    return [first, second, _commit_no_op(repo, 3), _commit_no_op(repo, 4)]


def _run(args: list[str], cwd: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    monkeypatch.chdir(cwd)
    result = CliRunner().invoke(main, args)
    return result.exit_code, result.output


@pytest.mark.slow  # 4 cell runs (head, base, 2 steps), each its own worker: ~75 s on a loaded core
def test_bisect_names_the_commit_that_broke_the_export(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = git(repo, "rev-parse", "HEAD")
    commits = _four_commits(repo)
    out, cache = tmp_path / "report", tmp_path / "cache"
    monkeypatch.setenv("GITHUB_SERVER_URL", "https://github.com")
    monkeypatch.setenv("GITHUB_REPOSITORY", "huggingface/transformers")
    args = ["check", "--base", base, "--bisect", "--backends", "dynamo", "--models", "LlamaForCausalLM"]
    args += ["--no-generation", "--cache-dir", str(cache), "--report-dir", str(out)]
    hfexport_code = code_fingerprint(Path(hfexport.__file__).parent)
    started = time.monotonic()
    code, output = _run(args, repo, monkeypatch)
    took = time.monotonic() - started
    assert code == 1, output
    data = json.loads((out / "report.json").read_text())
    assert not schema.validate_report(data)
    failing = [cell for cell in data["cells"] if cell["regression"] == "new"]
    assert failing and all(cell["first_bad_commit"]["sha"] == commits[1] for cell in failing), failing
    found = failing[0]["first_bad_commit"]
    assert found["pr"] == 4242 and found["subject"].startswith("Merge pull request #4242")
    # 4 commits: the search runs the cell at the 2nd (fails) and the 1st (passes), nothing else.
    assert found["runs"] == 2, (found, took)
    assert f"first bad commit: {commits[1][:7]} Merge pull request #4242" in output
    comment = (out / "report.md").read_text()
    link = f"[`{commits[1][:7]}`](https://github.com/huggingface/transformers/commit/{commits[1]})"
    assert f"**First bad commit:** {link} Merge pull request " in comment and "(PR #4242)" in comment, comment
    # Again with the same cache: every step's commit has the files of a run before, so nothing runs (unless
    # hfexport's own code changed meanwhile, as in a tree others edit: the cache's entries are for the old code).
    code, output = _run(args, repo, monkeypatch)
    again = json.loads((out / "report.json").read_text())["cells"][0]["first_bad_commit"]
    assert code == 1 and again["sha"] == found["sha"], output
    if code_fingerprint(Path(hfexport.__file__).parent) == hfexport_code:
        assert again["runs"] == 0, output


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["--base", "no-such-revision", "--bisect"], "no-such-revision"),
        (["--bisect", "--bisect-budget", "0.5"], "--bisect-budget is a share of --budget"),
        (["--bisect", "--models", "LlamaModel"], "--bisect searches a range of commits"),
        (["--bisect", "--budget", "5", "--bisect-budget", "1"], "--bisect-budget"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    repo: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], reason: str
) -> None:
    code, output = _run(["check", "--no-cache", *args], repo, monkeypatch)
    assert code == 2 and reason in output and "Traceback" not in output, output
    assert len(output.strip().splitlines()) <= 4  # click's usage lines for a bad option value, else one line


def _bisected(repo: Path, base: str, head: str, deadline: float | None = None) -> Cell:
    """Bisect one new failure of ``base..head`` with the gate's own step runner; each case here stops before a step
    would run a cell."""
    cell = Cell("llama", "LlamaForCausalLM", "dynamo", status="fail", regression="new", error="x", error_type="E")
    selected = changes.SelectedClass("llama", "LlamaForCausalLM", LLAMA, 1, "transformers.models.llama.modeling_llama")
    target = Target(changes.Selection("models"), repo, repo, base, None, head)
    options = CheckOptions(backends=["dynamo"], cache_dir=None)

    def run_at(cell: Cell, selected: changes.SelectedClass, commit: str | None, until: float | None) -> dict | None:
        return run_one_cell_at(target, options, cell, selected, commit, until)

    bisect_new_failures(Range(repo, base, head, True, repo), [(cell, selected)], run_at, lambda _: None, deadline)
    assert cell.first_bad_commit is not None and cell.first_bad_commit.sha is None
    return cell


def test_a_search_it_cannot_finish_says_why_and_names_no_commit(repo: Path, tmp_path: Path) -> None:
    base = git(repo, "rev-parse", "HEAD")
    commits = _four_commits(repo)
    # The budget ran out before the first step: the answer is somewhere in the whole range.
    note = _bisected(repo, base, commits[-1], deadline=time.monotonic() - 1).first_bad_commit.note
    assert note == f"the bisect budget ran out; it is one of 4 commits, {commits[0][:12]} to {commits[3][:12]}"

    # The class does not exist at the commit the search would check.
    gone = commit(repo, {LLAMA: llama_source(1).replace("class LlamaForCausalLM", "class LlamaCausalLM")}, "rename")
    _commit_no_op(repo, 5)
    later = _commit_no_op(repo, 6)
    note = _bisected(repo, commits[-1], later).first_bad_commit.note
    assert note == f"LlamaForCausalLM does not exist at {gone[:12]} ({LLAMA}); it is one of 3 commits, " + (
        f"{gone[:12]} to {later[:12]}"
    )

    # A shallow clone holds the base and the head's last 2 commits, not those between: no search starts.
    git(repo, "branch", "base", commits[-1])
    clone = tmp_path / "shallow"
    shallow = ["git", "clone", "-q", "--no-single-branch", "--depth", "2", f"file://{repo}", str(clone)]
    subprocess.run(shallow, check=True)
    note = _bisected(clone, commits[-1], later).first_bad_commit.note
    assert "parent is missing (a shallow clone? fetch the range whole)" in note, note


def test_sixteen_commits_take_four_steps_and_another_kind_of_failure_stops_the_search(repo: Path) -> None:
    """The search itself, over a real 16-commit range; each step's cell run is stood in for by reading the commit's
    file (fails where the data-dependent branch is), so the test counts steps, not exports."""
    base = git(repo, "rev-parse", "HEAD")
    commits = []
    for number in range(1, 17):
        source = (repo / LLAMA).read_text()
        source = source.replace(*DATA_DEPENDENT) if number == 11 else source + NO_OP.format(number)
        commits.append(commit(repo, {LLAMA: source}, f"commit {number}"))
    steps: list[str | None] = []

    def reading(status_there: str) -> RunAt:
        def run_at(cell: Cell, selected: changes.SelectedClass, at: str | None, until: float | None) -> dict:
            steps.append(at)
            broken = "1e30" in git(repo, "show", f"{at}:{LLAMA}")
            return {"status": status_there if broken else "pass", "error": "boom", "cached": len(steps) == 1}

        return run_at

    cell = Cell("llama", "LlamaForCausalLM", "dynamo", status="fail", regression="new", error="x", error_type="E")
    selected = changes.SelectedClass("llama", "LlamaForCausalLM", LLAMA, 1, "transformers.models.llama.modeling_llama")
    checked = Range(repo, base, commits[-1], False, repo)
    bisect_new_failures(checked, [(cell, selected)], reading("fail"), lambda _: None, None)
    assert cell.first_bad_commit.sha == commits[10] and cell.first_bad_commit.subject == "commit 11"
    assert len(steps) == 4 and cell.first_bad_commit.runs == 3  # the first step's result came from the cache
    # Where the head failed, a timeout at a step may be the machine's load: no commit is named.
    steps.clear()
    bisect_new_failures(checked, [(cell, selected)], reading("timeout"), lambda _: None, None)
    assert cell.first_bad_commit.sha is None and len(steps) == 2
    assert cell.first_bad_commit.note.startswith(f"at {commits[11][:12]} the cell is timeout (at the head: fail)")
    # Every step fails: the answer is the range's first commit only once the base is seen to pass.
    for base_here, named in ((commits[9], commits[10]), (commits[10], None)):
        steps.clear()
        later = Range(repo, base_here, commits[-1], False, repo)
        bisect_new_failures(later, [(cell, selected)], reading("fail"), lambda _: None, None)
        assert cell.first_bad_commit.sha == named and steps[-1] == base_here, cell.first_bad_commit
    assert cell.first_bad_commit.note == f"it fails at the base {commits[10][:12]} too: no commit of the range broke it"


def test_the_answer_is_in_the_schema_the_terminal_and_the_comment() -> None:
    sha = "a" * 40
    report = new_report("hfexport", ["dynamo"], {"mode": "diff", "model_types": ["llama"], "representative": False}, {})
    report.repository = {"root": None, "base": None, "head": None}
    cell = Cell("llama", "LlamaModel", "dynamo", status="fail", regression="new", error_type="E", error="boom")
    report.cells = [cell]
    cell.first_bad_commit = FirstBadCommit(sha=sha, subject="a change", runs=3)
    data = report.finalize().as_dict()
    assert not schema.validate_report(data)
    assert "first bad commit: aaaaaaa a change" in terminal_table(Report.from_dict(data))
    assert "%0AFirst bad commit: aaaaaaa a change" in annotation_commands(github_annotations(Report.from_dict(data)))[0]
    for bad in ({"sha": "HEAD~1"}, {"sha": None}, {"sha": sha, "pr": -1}):
        data["cells"][0]["first_bad_commit"] = bad
        assert any("first_bad_commit" in error for error in schema.validate_report(data)), bad


# ── The scheduled run on main (docs/action.md) ──


def _main_workflow() -> dict:
    (workflow,) = [w for w in documented_workflows() if w["name"] == "exports on main"]
    return workflow


def _step(job: dict, uses: str) -> dict:
    return next(step for step in job["steps"] if step.get("uses", "").startswith(uses))


def _run_script(script: str, tmp_path: Path, **env: str) -> dict[str, str]:
    """Run a workflow's `run:` script with bash as a runner would; the step outputs it wrote."""
    output = tmp_path / "github-output"
    output.write_text("")
    base = {"PATH": os.environ["PATH"], "RUNNER_TEMP": str(tmp_path), "GITHUB_OUTPUT": str(output)}
    subprocess.run(["bash", "-e", "-c", script], check=True, env={**base, **env}, cwd=tmp_path)
    return dict(line.split("=", 1) for line in output.read_text().splitlines())


def test_the_scheduled_run_on_main_bisects_since_the_last_green_commit_and_keeps_it(tmp_path: Path) -> None:
    workflow = _main_workflow()
    assert "schedule" in workflow[True]
    jobs = workflow["jobs"]
    assert jobs["shards"]["needs"] == "range" and jobs["report"]["needs"] == "shards"
    assert _step(jobs["shards"], "actions/checkout@")["with"]["fetch-depth"] == 0  # the range's commits, to bisect
    check = _step(jobs["shards"], "hf/export-check@")["with"]
    assert check["bisect"] == "true" and check["base-ref"] == "${{ needs.range.outputs.base }}"
    assert set(check) <= set(ACTION["inputs"]), "every input the workflow passes is one the action has"
    shards = jobs["shards"]["strategy"]["matrix"]["shard"]
    assert check["shard"] == f"${{{{ matrix.shard }}}}/{len(shards)}" and shards == list(range(1, len(shards) + 1))
    # The last green commit: saved (only when the merged report is green) where the range job restores it from.
    restore, save = _step(jobs["range"], "actions/cache/restore@"), _step(jobs["report"], "actions/cache/save@")
    assert save["with"]["path"] == restore["with"]["path"] == "${{ runner.temp }}/hfexport-last-green"
    assert save["with"]["key"].startswith(restore["with"]["restore-keys"])
    assert save["if"] == "steps.merge.outputs.exit-code == '0'"
    scripts = {step.get("id") or step.get("if", ""): step["run"] for step in jobs["report"]["steps"] if "run" in step}
    remember = next(run for run in scripts.values() if "hfexport-last-green" in run)
    assert _run_script(jobs["range"]["steps"][1]["run"], tmp_path) == {"sha": "HEAD~1"}  # none saved yet
    _run_script(remember, tmp_path, GITHUB_SHA="c" * 40)
    assert _run_script(jobs["range"]["steps"][1]["run"], tmp_path) == {"sha": "c" * 40}
    (tmp_path / "hfexport-last-green" / "sha").write_text("$(touch pwned) HEAD\n")  # a restored file is not trusted
    assert _run_script(jobs["range"]["steps"][1]["run"], tmp_path) == {"sha": "HEAD~1"}
    assert not (tmp_path / "pwned").exists()
    # The merged report's exit code decides green; the tracking issue gets the sticky comment.
    merged = _run_script(scripts["merge"].replace("python -m hfexport.cli", "false"), tmp_path)
    assert merged == {"exit-code": "1"}
    post = next(run for run in scripts.values() if " comment " in run)
    for words in (shlex.split(run) for run in scripts.values() if "hfexport.cli" in run):
        name = words[words.index("hfexport.cli") + 1]
        options = {o for p in main.get_command(None, name).params for o in p.opts}
        assert {w for w in words if w.startswith("--")} <= options, words
    assert "--issue" in post and jobs["report"]["permissions"] == {"issues": "write"}
