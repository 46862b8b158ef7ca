"""The composite action: its metadata, and its `run:` steps executed with bash as written.

The steps run the way the runner runs a composite action's `run:` steps (`bash --noprofile --norc -eo pipefail`),
with `${{ }}` expressions evaluated from a fake GitHub context, files for GITHUB_OUTPUT / GITHUB_STEP_SUMMARY, an
event file, and the local GitHub server. Steps that `uses:` another action are not run here (they need the
runner); their configuration is checked instead. This machine is offline, so pip is told to use what is installed
(PIP_NO_INDEX, no build isolation) in a virtual environment that sees the system packages.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import site
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from checkout_fixture import LLAMA, LLAMA_CLASSES, commit, git, llama_source, make_checkout
from fake_github import FakeGitHub

from hfexport.gate.markdown import MARKER

ROOT = Path(__file__).resolve().parents[1]
ACTION = yaml.safe_load((ROOT / "action.yml").read_text())
STEPS = ACTION["runs"]["steps"]
EXPRESSION = re.compile(r"\$\{\{(.*?)\}\}", re.S)
TOKEN = "ghs_actionT0ken"


# ── A small evaluator for the GitHub expressions the action uses: paths, literals, == != && || ! () ──


def _lookup(context: dict[str, Any], path: str) -> Any:
    value: Any = context
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value is None else value


def evaluate(expression: str, context: dict[str, Any]) -> Any:
    def token(match: re.Match[str]) -> str:
        text = match.group(0)
        if text.startswith("'"):
            return repr(text[1:-1])
        return {"&&": " and ", "||": " or ", "!": " not "}.get(text) or f"_get({text!r})"

    python = re.sub(r"'[^']*'|&&|\|\||!(?!=)|[A-Za-z_][\w-]*(?:\.[\w-]+)*", token, expression)
    return eval(python, {"_get": lambda path: _lookup(context, path)})


def interpolate(text: str, context: dict[str, Any]) -> str:
    return EXPRESSION.sub(lambda m: str(evaluate(m.group(1), context)), str(text))


def condition(step: dict[str, Any], context: dict[str, Any]) -> bool:
    if "if" not in step:
        return True
    expression = step["if"]
    match = EXPRESSION.fullmatch(expression.strip())
    return bool(evaluate(match.group(1) if match else expression, context))


# ── Metadata ──


def test_action_metadata_parses_and_every_input_is_used_through_env_or_with():
    assert ACTION["runs"]["using"] == "composite"
    expected = {"backends", "models", "base-ref", "jobs", "shard", "python-version", "comment", "token"}
    assert expected <= set(ACTION["inputs"])
    references = " ".join(json.dumps([step.get("env", {}), step.get("with", {}), step.get("if", "")]) for step in STEPS)
    for name in ACTION["inputs"]:
        assert re.search(rf"inputs\.{re.escape(name)}\b(?!-)", references), f"input {name} is never used"
    for step in STEPS:
        if "run" in step:
            assert "${{" not in step["run"], f"{step['name']}: an expression interpolated into run:"
            assert step["shell"] == "bash"
    assert set(ACTION["outputs"]) == {"report-path", "regressions"}
    ids = {step.get("id") for step in STEPS}
    for output in ACTION["outputs"].values():
        assert re.fullmatch(r"\$\{\{ steps\.([\w-]+)\.outputs\.[\w-]+ \}\}", output["value"]).group(1) in ids


def test_steps_that_use_other_actions_are_configured():
    uses = {step["uses"].split("@")[0]: step for step in STEPS if "uses" in step}
    assert set(uses) == {"actions/setup-python", "actions/cache", "actions/cache/restore", "actions/upload-artifact"}
    assert uses["actions/setup-python"]["with"]["python-version"] == "${{ inputs.python-version }}"
    pip, results = (step["with"] for step in STEPS if step.get("uses", "").startswith("actions/cache@"))
    assert (pip["path"], pip["key"]) == ("${{ steps.pip-cache.outputs.dir }}", "${{ steps.pip-cache.outputs.key }}")
    # The result cache: the directory `check` reads through $HFEXPORT_CACHE_DIR, restored from the newest run.
    check = next(step for step in STEPS if step.get("id") == "check")
    assert results["path"] == check["env"]["HFEXPORT_CACHE_DIR"] == "${{ runner.temp }}/hfexport-results"
    assert results["restore-keys"] == "${{ steps.results-cache.outputs.restore-key }}"
    upload = uses["actions/upload-artifact"]
    assert upload["if"] == "steps.check.outputs.report-path != ''"
    assert upload["with"]["path"] == "${{ runner.temp }}/hfexport-report"
    assert upload["with"]["name"] == "${{ steps.check.outputs.artifact-name }}"
    order = [step.get("uses", step["name"]).split("@")[0] for step in STEPS]
    assert order.index("actions/setup-python") == 0
    assert order.index("actions/cache") < order.index("Install hfexport") < order.index("Run hfexport check")


@pytest.mark.parametrize(
    ("event", "inputs", "posts"),
    [
        ({"pull_request": {"head": {"repo": {"full_name": "acme/transformers"}}}}, {}, True),
        ({"pull_request": {"head": {"repo": {"full_name": "someone/transformers"}}}}, {}, False),  # a fork
        ({"pull_request": {"head": {"repo": {"full_name": "acme/transformers"}}}}, {"comment": "false"}, False),
        ({"pull_request": {"head": {"repo": {"full_name": "acme/transformers"}}}}, {"shard": "2/4"}, False),
        ({}, {}, False),  # a push: no pull request
    ],
)
def test_comment_step_runs_only_where_it_can_and_should(event, inputs, posts):
    step = next(s for s in STEPS if s["name"] == "Comment on the pull request")
    context = {
        "inputs": {name: spec.get("default", "") for name, spec in ACTION["inputs"].items()} | inputs,
        "github": {"event": event, "repository": "acme/transformers"},
        "steps": {"check": {"outputs": {"report-path": "/tmp/report.json"}}},
    }
    assert condition(step, context) is posts


# ── The steps, run ──


def _outputs(path: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return dict(pairs)


def _action_copy(destination: Path) -> Path:
    """What `uses: hf/export-check@v1` checks out: the repository at a tag (here, the files the action needs)."""
    destination.mkdir()
    for name in ("action.yml", "pyproject.toml", "constraints.txt", "README.md"):
        if (ROOT / name).exists():
            shutil.copy(ROOT / name, destination / name)
    if not (destination / "README.md").exists():
        (destination / "README.md").write_text("hfexport\n")
    shutil.copytree(ROOT / "hfexport", destination / "hfexport", ignore=shutil.ignore_patterns("__pycache__"))
    return destination


def _python_of_its_own(venv: Path) -> Path:
    """What setup-python provides: a Python of its own, seeing the packages this suite runs with (torch included).

    Not ``--system-site-packages``: run from a virtual environment, that would see the base interpreter's packages
    (an old setuptools, no wheel) instead of this environment's. A .pth file adds this environment's site-packages,
    after the new environment's own, whichever interpreter the suite runs on.
    """
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site_packages = next((venv / "lib").glob("python*/site-packages"))
    (site_packages / "suite-packages.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return venv


def test_run_steps_execute_as_written(tmp_path):
    # The PR: a feature branch touching llama on top of main, checked out as the workspace.
    workspace = make_checkout(tmp_path / "workspace")
    base = git(workspace, "rev-parse", "HEAD")
    git(workspace, "checkout", "-q", "-b", "feature")
    head = commit(workspace, {LLAMA: llama_source() + "\n_edited = True\n"}, "edit")  # code: selects llama's classes
    action_path = _action_copy(tmp_path / "action")
    runner_temp = tmp_path / "runner-temp"
    runner_temp.mkdir()
    venv = _python_of_its_own(tmp_path / "venv")
    event = {
        "number": 7,
        "pull_request": {
            "number": 7,
            "head": {"sha": head, "repo": {"full_name": "acme/transformers"}},
            "base": {"sha": base, "repo": {"full_name": "acme/transformers"}},
        },
    }
    event_path = tmp_path / "event.json"
    event_path.write_text(json.dumps(event))
    summary = tmp_path / "step-summary.md"
    summary.touch()

    with FakeGitHub(repository="acme/transformers", pr_number=7, head_sha=head) as github:
        github.add_token(TOKEN, "github-actions[bot]", has_user_endpoint=False)
        base_env = {
            "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}",
            "HOME": os.environ.get("HOME", str(tmp_path)),
            "GITHUB_ACTIONS": "true",
            "GITHUB_ACTION_PATH": str(action_path),
            "GITHUB_WORKSPACE": str(workspace),
            "GITHUB_REPOSITORY": "acme/transformers",
            "GITHUB_EVENT_NAME": "pull_request",
            "GITHUB_EVENT_PATH": str(event_path),
            "GITHUB_API_URL": github.api_url,
            "GITHUB_SERVER_URL": "https://github.example",
            "GITHUB_RUN_ID": "42",
            "GITHUB_STEP_SUMMARY": str(summary),
            "RUNNER_OS": "Linux",
            "RUNNER_TEMP": str(runner_temp),
            # Offline machine: install from what is there (pip's find-links / installed packages).
            "PIP_NO_INDEX": "1",
            "PIP_NO_BUILD_ISOLATION": "0",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        }
        context: dict[str, Any] = {
            "github": {
                "event": event,
                "event_name": "pull_request",
                "repository": "acme/transformers",
                "token": TOKEN,
                "workspace": str(workspace),
                "action_path": str(action_path),
            },
            "runner": {"os": "Linux", "temp": str(runner_temp)},
            "steps": {},
        }
        given = {"backends": "dynamo", "torch-index-url": ""}
        context["inputs"] = {
            name: given.get(name, interpolate(spec.get("default", ""), context))
            for name, spec in ACTION["inputs"].items()
        }

        ran = []
        for index, step in enumerate(STEPS):
            if "uses" in step or not condition(step, context):
                continue
            output_file = tmp_path / f"output-{index}"
            output_file.touch()
            env = base_env | {k: interpolate(v, context) for k, v in step.get("env", {}).items()}
            env["GITHUB_OUTPUT"] = str(output_file)
            result = subprocess.run(
                ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
                cwd=workspace,
                env=env,
                capture_output=True,
                text=True,
                timeout=900,
            )
            assert result.returncode == 0, f"{step['name']}:\n{result.stdout}\n{result.stderr}"
            ran.append((step["name"], result.stdout + result.stderr))
            if "id" in step:
                context["steps"][step["id"]] = {"outputs": _outputs(output_file)}

    names = [name for name, _ in ran]
    assert names == [
        "Compute the pip cache key",
        "Compute the result cache key",
        "Install hfexport",
        "Install the transformers checkout",
        "Run hfexport check",
        "Write the job summary",
        "Comment on the pull request",
        "Fail on new export failures",
    ]
    logs = dict(ran)
    results_key = context["steps"]["results-cache"]["outputs"]
    assert results_key["key"] == "hfexport-results-Linux-dynamo-1-of-1-42-1"
    assert results_key["key"].startswith(results_key["restore-key"])
    assert any((runner_temp / "hfexport-results").rglob("*.json")), "check wrote no result cache entry"
    key = context["steps"]["pip-cache"]["outputs"]["key"]
    torch = re.escape(ACTION["inputs"]["torch-version"]["default"])
    assert re.fullmatch(rf"hfexport-pip-Linux-py3\.11-torch{torch}-dynamo-[0-9a-f]{{16}}", key)
    assert "not a transformers checkout" in logs["Install the transformers checkout"]  # a partial checkout
    check = context["steps"]["check"]["outputs"]
    report_path = Path(check["report-path"])
    assert report_path == runner_temp / "hfexport-report" / "report.json"
    assert (check["exit-code"], check["regressions"], check["artifact-name"]) == ("0", "0", "hfexport-report-1-of-1")
    report = json.loads(report_path.read_text())
    assert report["pr"] == {"number": 7, "head_sha": head}
    assert report["repository"]["base"] == base  # the PR's range: base-ref defaulted to the event's base
    assert sorted(c["model_class"] for c in report["cells"]) == sorted(LLAMA_CLASSES)
    assert summary.read_text().startswith(MARKER)  # written by `check --report-dir`, once
    assert summary.read_text().count(MARKER) == 1
    (posted,) = github.comments
    assert posted["user"]["login"] == "github-actions[bot]" and posted["body"].startswith(MARKER)
    assert "created comment on PR #7" in logs["Comment on the pull request"]
    for _, log in ran:
        assert TOKEN not in log


# ── The workflows docs/action.md shows ──


def documented_workflows() -> list[dict[str, Any]]:
    """Every workflow docs/action.md shows (PyYAML reads their key ``on`` as True)."""
    blocks = re.findall(r"```yaml\n(.*?)```", (ROOT / "docs" / "action.md").read_text(), re.S)
    return [w for w in map(yaml.safe_load, blocks) if isinstance(w, dict) and "jobs" in w]


def test_every_documented_workflow_serializes_runs_and_leaves_no_token_on_disk():
    workflows = documented_workflows()
    assert len(workflows) == 6  # one job, fork check, fork comment, matrix, impact map, exports on main
    for workflow in workflows:
        name = f"{workflow['name']} on {workflow[True]}"
        assert workflow.get("concurrency", {}).get("group"), f"{name}: overlapping runs can both post"
        for job in workflow["jobs"].values():
            for step in job["steps"]:
                if step.get("uses", "").startswith("actions/checkout@"):
                    assert step["with"].get("persist-credentials") is False, f"{name}: the token stays in .git/config"


def _closure(*names: str) -> set[str]:
    """The distributions ``names`` need, read from what is installed here (with PyJWT's crypto extra)."""
    from importlib import metadata

    from packaging.markers import Marker
    from packaging.requirements import Requirement

    found: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        key = name.lower().replace("_", "-")
        if key in found:
            continue
        found.add(key)
        for line in metadata.distribution(name).requires or []:
            requirement = Requirement(line)
            marker = requirement.marker or Marker("python_version >= '0'")
            if marker.evaluate({"extra": "crypto"}) or marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return found


def test_the_trusted_comment_job_installs_only_pinned_wheels_and_runs_hfexport_s_own_code():
    (workflow,) = [w for w in documented_workflows() if "workflow_run" in w[True]]
    (job,) = workflow["jobs"].values()
    checkout = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/checkout@"))
    assert checkout["with"]["repository"] == "hf/export-check"  # never the PR's code
    runs = [s["run"] for s in job["steps"] if "run" in s]
    install = next(r for r in runs if "pip install" in r).split()
    assert {"--no-deps", "--only-binary=:all:", "-c", "hfexport-src/constraints.txt"} <= set(install)
    named = {w.lower().replace("_", "-") for w in install[install.index("hfexport-src/constraints.txt") + 1 :]}
    pins = {
        name.lower().replace("_", "-"): version
        for name, _, version in (
            line.partition("==") for line in (ROOT / "constraints.txt").read_text().splitlines() if "==" in line
        )
    }
    assert named == _closure("click", "PyGithub"), "the job must name every package `hfexport comment` needs"
    assert named <= set(pins), f"unpinned: {sorted(named - set(pins))}"
    run = next(s for s in job["steps"] if "hfexport" in s.get("run", "") and "comment" in s["run"])
    assert run["env"]["PYTHONPATH"] == "hfexport-src"


def test_outputs_with_a_line_break_are_refused(tmp_path):
    # A shard input carrying a newline would have written an output line of its own (report-path=/etc/passwd).
    step = next(s for s in STEPS if s["name"] == "Run hfexport check")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "hfexport").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m hfexport.cli "$@"\n')
    (bin_dir / "hfexport").chmod(0o755)
    output = tmp_path / "output"
    output.touch()
    env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),
        "GITHUB_WORKSPACE": str(tmp_path),
        "GITHUB_OUTPUT": str(output),
        "BACKENDS": "dynamo",
        "SHARD": "1/1\nreport-path=/etc/passwd",
        "REPORT_DIR": str(tmp_path / "report"),
    }
    result = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "output artifact-name: the value has a line break" in result.stderr
    assert output.read_text().splitlines() == ["exit-code=2"]


def test_readme_installs_select_the_cpu_wheels_the_action_uses_and_name_the_report_dir():
    readme = (ROOT / "README.md").read_text()
    index = ACTION["inputs"]["torch-index-url"]["default"]
    commands = [line for block in re.findall(r"```bash\n(.*?)```", readme, re.S) for line in block.splitlines()]
    installs = [line for line in commands if "pip install" in line and "constraints.txt" in line]
    assert len(installs) == 2 and all(f"--extra-index-url {index}" in line for line in installs), installs
    first_run = next(line for line in commands if line.startswith("hfexport check"))
    assert "--report-dir" in first_run  # where report.json, report.md and junit.xml are written


def _install_step(tmp_path: Path, torch_version: str, **env: str) -> subprocess.CompletedProcess:
    """The "Install hfexport" step as written, with ``torch-version`` given and pip's options set through ``env``."""
    step = next(s for s in STEPS if s["name"] == "Install hfexport")
    venv = _python_of_its_own(tmp_path / "venv")
    (tmp_path / "runner-temp").mkdir()
    inputs = {"backends": "dynamo", "torch-index-url": "", "torch-version": torch_version}
    step_env = {k: interpolate(v, {"inputs": inputs}) for k, v in step["env"].items()}
    base = {"PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}", "HOME": os.environ.get("HOME", str(tmp_path))}
    paths = {"GITHUB_ACTION_PATH": str(_action_copy(tmp_path / "action")), "RUNNER_TEMP": str(tmp_path / "runner-temp")}
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
        env={**base, **paths, **step_env, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_torch_version_defaults_to_the_pin_and_a_bad_one_is_refused(tmp_path: Path) -> None:
    pin = re.search(r"^torch==(\S+)$", (ROOT / "constraints.txt").read_text(), re.M).group(1)
    assert ACTION["inputs"]["torch-version"]["default"] == pin
    result = _install_step(tmp_path, "2.15.0\n--index-url=https://evil.example")
    assert result.returncode == 2
    assert result.stderr.strip().startswith("torch-version: '2.15.0")
    assert "is not a torch release (like 2.15.0 or 2.16.0rc1)" in result.stderr


@pytest.mark.slow  # 35 s: pip reads the package index (test_torch_releases.py installs 2.14.1 the same way in CI)
def test_torch_version_installs_that_torch_with_the_rest_of_the_pinned_set(tmp_path: Path) -> None:
    # pip's own resolver, dry run, against this machine's index (which holds torch 2.14.1's wheel and CUDA wheels).
    report = tmp_path / "pip-report.json"
    env = {"PIP_DRY_RUN": "1", "PIP_REPORT": str(report), "PIP_QUIET": "1", "PIP_NO_BUILD_ISOLATION": "0"}
    result = _install_step(tmp_path, "2.14.1", **env)
    assert result.returncode == 0, result.stdout + result.stderr
    constraints = (tmp_path / "runner-temp" / "hfexport-constraints.txt").read_text().splitlines()
    assert [line for line in constraints if line.startswith("torch==")] == ["torch==2.14.1"]
    pinned = (ROOT / "constraints.txt").read_text().splitlines()
    assert set(constraints) - {"torch==2.14.1"} == {line for line in pinned if not line.startswith("torch==")}
    installs = {
        item["metadata"]["name"]: item["metadata"]["version"] for item in json.loads(report.read_text())["install"]
    }
    assert installs["torch"] == "2.14.1"
    assert installs.keys().isdisjoint({"transformers", "onnx", "executorch"})  # the rest: the pinned set, as installed
