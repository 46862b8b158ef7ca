"""The pre-commit hook, run by the real ``pre-commit`` tool on a git repository laid out like a transformers checkout.

The hook is ``language: system``: it runs the ``hfexport`` the contributor has installed, with their torch and
transformers. Here that is a ``hfexport`` launcher on PATH for this interpreter. The runs override the backends
through ``args`` (one backend each) to stay short; the default is checked from the hook file.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from checkout_fixture import LLAMA, ONNX_BREAKAGE, commit, git, llama_source, make_checkout

ROOT = Path(__file__).resolve().parents[1]


def run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def hook_repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """This repository's hook definition in a git repository of its own (pre-commit clones hooks by revision)."""
    repo = tmp_path_factory.mktemp("hooks")
    git(repo, "init", "-q", "-b", "main")
    return repo, commit(repo, {".pre-commit-hooks.yaml": (ROOT / ".pre-commit-hooks.yaml").read_text()}, "hooks")


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The contributor's shell: ``hfexport`` on PATH in this Python environment, a private pre-commit cache."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    launcher = bin_dir / "hfexport"
    launcher.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m hfexport.cli "$@"\n')
    launcher.chmod(0o755)
    return os.environ | {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),
        "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-cache"),
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }


def install_hook(
    checkout: Path, hook_repo: tuple[Path, str], env: dict[str, str], args: list[str], verbose: bool = False
) -> None:
    hook = {"id": "hfexport-check", "args": args, "verbose": verbose}  # verbose: its output shown when it passes
    config = {"repos": [{"repo": str(hook_repo[0]), "rev": hook_repo[1], "hooks": [hook]}]}
    commit(checkout, {".pre-commit-config.yaml": yaml.safe_dump(config)}, "pre-commit config")
    result = run([sys.executable, "-m", "pre_commit", "install"], checkout, env)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hook_definition():
    (hook,) = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert (hook["id"], hook["entry"], hook["language"]) == ("hfexport-check", "hfexport check", "system")
    assert hook["args"] == ["--backends=dynamo,onnx"]  # the fast backends; ExecuTorch through `args`
    pattern = re.compile(hook["files"])
    # Every file the selection can act on: a model's own files and the shared code every model runs.
    for name in (
        "src/transformers/models/llama/modeling_llama.py",
        "src/transformers/models/llama/modular_llama.py",
        "src/transformers/models/bert/configuration_bert.py",
        "src/transformers/masking_utils.py",
        "src/transformers/cache_utils.py",
        "src/transformers/integrations/sdpa_attention.py",
        "checkouts/transformers/src/transformers/generation/utils.py",
    ):
        assert pattern.search(name), name
    for name in (
        "src/transformers/models/llama/tokenization_llama.py",
        "src/transformers/models/gemma3/image_processing_pil_gemma3.py",
        "src/transformers/models/llama/convert_llama_weights_to_hf.py",
        "src/transformers/cli/serve.py",
        "src/transformers/models/llama/modeling_llama.pyi",
        "tests/models/llama/test_modeling_llama.py",
        "docs/modeling_llama.md",
    ):
        assert not pattern.search(name), name


def test_try_repo_skips_files_that_are_not_modeling_code(tmp_path, hook_repo, env):
    checkout = make_checkout(tmp_path / "transformers")
    result = run(
        [sys.executable, "-m", "pre_commit", "try-repo", str(hook_repo[0]), "hfexport-check", "--files", "README.md"],
        checkout,
        env,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "hfexport export check" in result.stdout and "(no files to check)Skipped" in result.stdout


@pytest.mark.slow  # 30 s; the hook's run of the gate is in CI through the blocking test, its pass through the next
def test_installed_hook_passes_an_exportable_model(tmp_path, hook_repo, env):
    checkout = make_checkout(tmp_path / "transformers", heads=1)
    install_hook(checkout, hook_repo, env, ["--backends=dynamo", "--no-generation"])
    (checkout / LLAMA).write_text(
        llama_source(1).replace(
            "@auto_docstring\nclass LlamaModel(", "_UNUSED = 1\n\n\n@auto_docstring\nclass LlamaModel("
        )
    )
    git(checkout, "add", LLAMA)
    before = git(checkout, "rev-parse", "HEAD")
    result = run(["git", "commit", "-m", "touch llama"], checkout, env)
    output = result.stdout + result.stderr  # a git hook's output goes to stderr
    assert result.returncode == 0, output
    assert "hfexport export check....." in output and output.rstrip().endswith("Passed")
    assert git(checkout, "rev-parse", "HEAD~1") == before  # committed


def test_hook_fires_on_shared_code_and_comments_select_nothing(tmp_path, hook_repo, env):
    checkout = make_checkout(tmp_path / "transformers")
    install_hook(checkout, hook_repo, env, ["--backends=dynamo", "--no-generation"], verbose=True)
    cache_utils = checkout / "src/transformers/cache_utils.py"
    cache_utils.write_text(cache_utils.read_text() + "\n# a note on caches, no code\n")
    git(checkout, "add", "src/transformers/cache_utils.py")
    result = run(["git", "commit", "-m", "a comment in cache_utils"], checkout, env)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    # The hook ran on the staged shared file (the old files: pattern skipped it) and read the change at line level.
    assert "hfexport export check....." in output and "Skipped" not in output
    assert "checking 0 cell(s): no code of a model's files or of shared code changed" in output


def test_installed_hook_blocks_a_broken_model(tmp_path, hook_repo, env):
    checkout = make_checkout(tmp_path / "transformers", heads=1)
    # --only: the modular files copying LlamaForCausalLM select their types too; llama's cell is the one this is about.
    install_hook(checkout, hook_repo, env, ["--backends=onnx", "--no-generation", "--only=llama"])
    # A worktree of the contributor's own on a disk not mounted now: checking the base must leave its record.
    away = tmp_path / "usb" / "other"
    git(checkout, "worktree", "add", "-q", "-b", "other", str(away))
    shutil.rmtree(tmp_path / "usb")
    before = git(checkout, "rev-parse", "HEAD")
    (checkout / LLAMA).write_text(llama_source(1).replace(*ONNX_BREAKAGE))
    git(checkout, "add", LLAMA)
    result = run(["git", "commit", "-m", "break llama on onnx"], checkout, env)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "hfexport export check....." in output and "Failed" in output and "exit code: 1" in output
    assert "LlamaForCausalLM · onnx: fail · stage 4 ONNX translations" in output and "(1 new" in output
    assert git(checkout, "rev-parse", "HEAD") == before  # the commit was refused
    assert f"worktree {away}" in git(checkout, "worktree", "list", "--porcelain")  # ran at base, record kept


def test_no_hfexport_installed_is_a_clear_failure(tmp_path, hook_repo, env):
    checkout = make_checkout(tmp_path / "transformers")
    path = [p for p in env["PATH"].split(os.pathsep) if not (Path(p) / "hfexport").exists()]
    bare = env | {"PATH": os.pathsep.join(path)}
    assert shutil.which("hfexport", path=bare["PATH"]) is None
    result = run(
        [sys.executable, "-m", "pre_commit", "try-repo", str(hook_repo[0]), "hfexport-check", "--files", LLAMA],
        checkout,
        bare,
    )
    assert result.returncode != 0
    assert "Executable `hfexport` not found" in result.stdout
