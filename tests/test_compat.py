"""The compatibility layer: every non-public transformers name goes through ``hfexport/compat.py``, and a real older
transformers checkout that lacks one of them still exports (the feature is off and says so; nothing is a tool error).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from support import load_script

from hfexport import compat
from hfexport.cli import main

ROOT = Path(__file__).resolve().parent.parent
# The competitor's engine reads transformers.exporters on purpose (a benchmark, not hfexport's engine).
COMPETITOR_ENGINE = ROOT / "hfexport" / "gate" / "engine_transformers.py"


def _transformers_imports(path: Path) -> list[str]:
    """Modules below ``transformers`` a source file imports by name (``import transformers.x``, ``from ... import``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("transformers."):
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.startswith("transformers.")]
    return found


def test_no_module_imports_transformers_internals_past_the_compat_layer() -> None:
    offenders = {
        str(path.relative_to(ROOT)): modules
        for path in sorted((ROOT / "hfexport").rglob("*.py"))
        if path != COMPETITOR_ENGINE and (modules := _transformers_imports(path))
    }
    assert offenders == {}


def test_every_declared_internal_resolves_in_the_installed_transformers() -> None:
    assert compat.unresolved() == []
    assert compat.internal("transformers.cache_utils.DummyLayer") is not None


def test_a_missing_internal_turns_off_its_feature_and_is_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(compat.INTERNALS, "transformers.cache_utils.NoSuchLayer", compat.Internal("x", "a feature"))
    monkeypatch.setattr(compat, "_disabled", {})
    assert compat.internal("transformers.cache_utils.NoSuchLayer") is None
    assert compat.internal_types("transformers.cache_utils.NoSuchLayer", "transformers.cache_utils.DummyLayer") == (
        compat.internal("transformers.cache_utils.DummyLayer"),
    )
    assert compat.disabled() == {"transformers.cache_utils.NoSuchLayer": "a feature"}
    with pytest.raises(KeyError):
        compat.internal("transformers.cache_utils.Undeclared")  # a name used without declaring it is a bug here


@pytest.mark.xdist_group("wheels")  # one download of a release's wheel at a time
def test_an_older_release_exports_with_the_missing_internal_turned_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # transformers 5.22.0 has no cache_utils.DummyLayer: before the compatibility layer every decoder LM failed there
    # with an ImportError inside hfexport, reported as the model's (pre-existing) failure.
    script = load_script("compat_check")
    checkout = script.make_checkout("5.22.0", tmp_path / "transformers", script.DEFAULT_WHEEL_DIR)
    monkeypatch.chdir(checkout)
    # Its own process: this one imported the installed transformers already.
    command = [
        sys.executable,
        "-c",
        "from hfexport.cli import main; main()",
        "registry",
        "--backend",
        "dynamo",
        "--check",
    ]
    registry = subprocess.run(command, capture_output=True, text=True)
    assert registry.returncode == 1
    assert "checking against transformers 5.22.0" in registry.stdout
    assert "MISSING transformers internal transformers.cache_utils.DummyLayer" in registry.stderr

    out = tmp_path / "report"
    args = [
        "check",
        "--models",
        "LlamaForCausalLM",
        "--backends",
        "dynamo",
        "--no-generation",
        "--report-dir",
        str(out),
    ]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    data = json.loads((out / "report.json").read_text())
    assert data["repository"]["transformers_version"] == "5.22.0"
    assert data["repository"]["transformers_path"].startswith(str(checkout))
    (cell,) = data["cells"]
    assert cell["status"] == "pass", cell
    assert cell["disabled"] == {"transformers.cache_utils.DummyLayer": compat.INTERNALS[
        "transformers.cache_utils.DummyLayer"
    ].feature}  # fmt: skip
    markdown = (out / "report.md").read_text()
    assert "Off in this transformers (internals it lacks): transformers.cache\\_utils.DummyLayer" in markdown
