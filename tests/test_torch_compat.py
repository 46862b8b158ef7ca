"""The torch compatibility layer: every non-public torch name hfexport uses goes through ``hfexport/torch_compat.py``,
resolves in the installed torch, and ``hfexport registry --check`` names the ones a torch lacks or changed.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from hfexport import torch_compat
from hfexport.cli import main
from hfexport.torch_compat import MissingTorchInternalError, TorchInternal

ROOT = Path(__file__).resolve().parent.parent
LAYER = ROOT / "hfexport" / "torch_compat.py"
# Public torch APIs whose members are named with an underscore: ATen ops (torch.ops.aten._to_copy) and torch._check.
PUBLIC_UNDERSCORE = ("torch.ops.", "torch._check")


def _is_internal(dotted: str) -> bool:
    parts = dotted.split(".")
    internal = any(part.startswith("_") for part in parts[1:]) or dotted.startswith(
        ("torch.fx.experimental", "torch.fx.passes")
    )
    return parts[0] == "torch" and internal and not dotted.startswith(PUBLIC_UNDERSCORE)


def _dotted(node: ast.AST) -> str | None:
    names = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(names)]) if isinstance(node, ast.Name) else None


def _torch_internals_used(path: Path) -> list[str]:
    """Non-public torch names a source file imports or reads as ``torch.x._y`` (patch targets are strings: the
    registry resolves those)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found += [
                f"{node.module}.{alias.name}" for alias in node.names if _is_internal(f"{node.module}.{alias.name}")
            ]
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if _is_internal(alias.name)]
        elif isinstance(node, ast.Attribute) and (dotted := _dotted(node)) and _is_internal(dotted):
            found.append(dotted)
    return found


def test_no_module_uses_torch_internals_past_the_torch_compat_layer() -> None:
    offenders = {
        str(path.relative_to(ROOT)): names
        for path in sorted((ROOT / "hfexport").rglob("*.py"))
        if path != LAYER and (names := _torch_internals_used(path))
    }
    assert offenders == {}


def test_every_declared_torch_internal_resolves_in_the_installed_torch() -> None:
    assert torch_compat.unresolved() == []
    import torch._prims_common

    assert torch_compat.infer_size is torch._prims_common.infer_size
    assert torch_compat.pytree.__name__ == "torch.utils._pytree"


def test_importing_the_layer_imports_no_torch() -> None:
    # The gate's parent process reads the declarations (registry --check, reports) without loading torch.
    code = "import sys, hfexport.torch_compat as t; assert t.INTERNALS; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


@pytest.fixture
def missing_and_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A name this torch lacks and a real function declared with a parameter it does not take."""
    monkeypatch.setitem(torch_compat.INTERNALS, "gone", TorchInternal("torch._prims_common.no_such_helper", "a test"))
    changed = TorchInternal("torch._prims_common.infer_size", "view shapes", ("shape", "total"))
    monkeypatch.setitem(torch_compat.INTERNALS, "renamed", changed)


def test_a_missing_or_changed_torch_name_is_named_with_what_needs_it(missing_and_changed: None) -> None:
    problems = {declared.path: reason for declared, reason in torch_compat.unresolved()}
    assert set(problems) == {"torch._prims_common.no_such_helper", "torch._prims_common.infer_size"}
    assert problems["torch._prims_common.no_such_helper"].startswith("missing: ")
    changed = problems["torch._prims_common.infer_size"]
    assert changed.startswith("changed: torch._prims_common.infer_size(shape")  # the signature it has now
    assert changed.endswith(" no longer takes 'total'")
    with pytest.raises(MissingTorchInternalError) as raised:
        from hfexport.torch_compat import gone  # noqa: F401
    version = torch_compat.torch_version()
    assert str(raised.value).startswith(f"torch {version} lacks torch._prims_common.no_such_helper, which a test needs")
    with pytest.raises(AttributeError):
        torch_compat.undeclared_name  # noqa: B018 - a name used without declaring it is a bug here


def test_registry_check_reports_torch_names_missing_or_changed(missing_and_changed: None) -> None:
    result = CliRunner().invoke(main, ["registry", "--backend", "dynamo", "--check"])
    assert result.exit_code == 1, result.output
    assert f"checking against torch {torch_compat.torch_version()}" in result.output
    assert "TORCH internal torch._prims_common.no_such_helper (a test): missing: " in result.output
    assert "TORCH internal torch._prims_common.infer_size (view shapes): changed: " in result.output
