"""A git repository laid out like a transformers checkout, for every test that runs the gate end to end.

The repository holds ``src/transformers/models/llama/modeling_llama.py``: a copy of the installed file cut after its
first task heads (few model classes keep the runs short). The gate's workers overlay it on the installed
transformers, so what gets exported is the repository's code, edits included.
"""

from __future__ import annotations

import os
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
