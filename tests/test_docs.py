"""The README and the docs/ pages: every link lands, every page is reachable from the README, and what they name exists.

The workflows docs/action.md shows are run in test_action.py, test_bisect.py and test_impact.py; the README's install
and test commands in test_action.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest
import yaml

from hfexport.cli import main

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_CODE_BLOCK = re.compile(r"```.*?```", re.S)


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = _CODE_BLOCK.sub("", page.read_text())
    return {_anchor(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")}


def _commands(group: click.Group, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], click.Command]:
    """Every hfexport command by its words (``("impact", "build")``); ``()`` is the group itself."""
    found: dict[tuple[str, ...], click.Command] = {path: group}
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            found |= _commands(command, (*path, name))
        else:
            found[(*path, name)] = command
    return found


def _options(command: click.Command) -> set[str]:
    return {o for p in command.params for o in (*p.opts, *p.secondary_opts)} | {"--help"}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_link_lands_on_a_file_and_heading(page: Path) -> None:
    for target in _LINK.findall(_CODE_BLOCK.sub("", page.read_text())):
        if target.startswith(("http://", "https://")):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.is_file(), f"{page.name}: {target} is no file"
        if anchor:
            assert anchor in _anchors(linked), f"{page.name}: {target} names no heading of {linked.name}"


def test_the_readme_links_every_docs_page() -> None:
    linked = {(ROOT / target.partition("#")[0]).resolve() for target in _LINK.findall((ROOT / "README.md").read_text())}
    assert not {p for p in PAGES[1:] if p not in linked}, "a docs page the README does not link"


def test_every_option_the_docs_name_is_one_hfexport_takes() -> None:
    commands = _commands(main)
    any_command = set().union(*map(_options, commands.values()))
    for page in PAGES:
        prose = _CODE_BLOCK.sub("", page.read_text()).replace("\n", " ")
        for span in re.findall(r"`([^`]+)`", prose):
            words = span.replace("[", " ").replace("]", " ").split()
            named = {word.split("=")[0] for word in words if word.startswith("--")}
            while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):  # GH_TOKEN=... hfexport comment
                words.pop(0)
            if words[:1] == ["hfexport"]:
                rest, path = words[1:], ()
                while rest and (*path, rest[0]) in commands:
                    path = (*path, rest.pop(0))
                assert named <= _options(commands[path]), f"{page.name}: `{span}`"
            elif span.startswith("--"):  # an option named alone belongs to some command
                assert words[0].split("=")[0] in any_command, f"{page.name}: `{span}`"


def test_the_action_page_lists_every_input_and_output() -> None:
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    page = (ROOT / "docs" / "action.md").read_text()
    rows = set(re.findall(r"^\| `([\w-]+)` \|", page, re.M))
    assert rows == set(action["inputs"]), "the input table and action.yml's inputs differ"
    assert all(f"`{name}`" in page for name in action["outputs"])


def test_the_pre_commit_page_configures_the_hook_this_repository_defines() -> None:
    (hook,) = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    (config,) = re.findall(r"```yaml\n(.*?)```", (ROOT / "docs" / "pre-commit.md").read_text(), re.S)
    (repo,) = yaml.safe_load(config)["repos"]
    assert [h["id"] for h in repo["hooks"]] == [hook["id"]]
    assert f"default: the fast backends, {hook['args'][0]}" in config  # the comment says the hook's own default


@pytest.mark.slow  # 40 s: two tiny Llama exports (ONNX, then dynamo and ONNX from one trace); test_shared_trace.py
def test_the_python_page_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the example saves into ./llama-onnx
    names: dict[str, object] = {}
    for block in re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "python.md").read_text(), re.S):
        exec(compile(block, "docs/python.md", "exec"), names)  # each block runs on the names the ones above defined
    assert type(names["outputs"]).__name__ == "CausalLMOutputWithPast"
    assert (tmp_path / "llama-onnx" / "model.onnx").is_file()
    assert names["onnx"].components["model"]["trace_shared_from"] == "dynamo"  # "no second torch.export"
