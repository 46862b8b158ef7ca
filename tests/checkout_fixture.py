"""A git repository laid out like a transformers checkout, for every test that runs the gate end to end.

The repository holds ``src/transformers/models/llama/modeling_llama.py``: a copy of the installed file cut after its
first task heads (few model classes keep the runs short). The gate's workers overlay it on the installed
transformers, so what gets exported is the repository's code, edits included.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
from pathlib import Path

import transformers

INSTALLED = Path(transformers.__file__).parent
LLAMA = "src/transformers/models/llama/modeling_llama.py"
LLAMA_CLASSES = ["LlamaModel", "LlamaForCausalLM", "LlamaForSequenceClassification"]
# torch.onnx has no translation for aten.cumprod; eager and torch.export run it fine. Multiplying by the
# cumulative product of ones keeps the logits unchanged.
ONNX_BREAKAGE = (
    "        logits = self.lm_head(hidden_states)\n",
    "        logits = self.lm_head(hidden_states)\n"
    "        logits = logits * torch.cumprod(torch.ones_like(logits), dim=-1)\n",
)
GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@t",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@t",
}


def llama_source(heads: int = 2) -> str:
    """The installed modeling_llama.py cut after its first ``heads`` task heads (fewer classes, shorter runs)."""
    source = (INSTALLED / "models/llama/modeling_llama.py").read_text()
    heads_in_order = ["LlamaForSequenceClassification", "LlamaForQuestionAnswering", "LlamaForTokenClassification"]
    cut = source.index(f"class {heads_in_order[heads - 1]}")
    return source[:cut] + '__all__ = ["LlamaForCausalLM", "LlamaModel", "LlamaPreTrainedModel"]\n'


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, **GIT_IDENTITY}
    result = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True, env=env)
    return result.stdout.strip()


def commit(repo: Path, files: dict[str, str], message: str) -> str:
    for name, text in files.items():
        path = repo / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def make_checkout(root: Path, heads: int = 2) -> Path:
    """A transformers-like checkout on branch main with llama and bert modeling files and cache_utils.py."""
    root.mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    commit(
        root,
        {
            LLAMA: llama_source(heads),
            "src/transformers/models/bert/modeling_bert.py": (INSTALLED / "models/bert/modeling_bert.py").read_text(),
            "src/transformers/cache_utils.py": (INSTALLED / "cache_utils.py").read_text(),
            "README.md": "checkout\n",
        },
        "base",
    )
    return root


def make_release_checkout(root: Path, package: Path = INSTALLED) -> Path:
    """A whole transformers release laid out as a checkout (``src/transformers``), one commit on branch main: the
    installed package's files by default, or a release unpacked from its wheel."""
    root.mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    shutil.copytree(package, root / "src" / "transformers", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "README.md").write_text("checkout\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "release")
    return root


def prepend_to(source: str, qualname: str, statements: str) -> str:
    """``source`` with ``statements`` (lines, unindented) first in the body of function or method ``qualname``, after
    its docstring: where a change to a release's function goes, whatever its line numbers."""
    scope: ast.AST = ast.parse(source)
    for name in qualname.split("."):
        scope = next(n for n in scope.body if isinstance(n, ast.ClassDef | ast.FunctionDef) and n.name == name)
    body = scope.body
    first = body[1] if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) else body[0]
    lines = source.splitlines(keepends=True)
    indent = " " * first.col_offset
    added = "".join(f"{indent}{line}\n" for line in statements.splitlines())
    return "".join(lines[: first.lineno - 1]) + added + "".join(lines[first.lineno - 1 :])


def commit_prepended(repo: Path, path: str, qualname: str, statements: str) -> str:
    """Commit ``statements`` put first in ``qualname`` of one file of the checkout (see ``prepend_to``)."""
    return commit(repo, {path: prepend_to((repo / path).read_text(), qualname, statements)}, f"change {qualname}")
