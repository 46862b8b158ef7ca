"""What the gate runs on: the pinned set of ``constraints.txt``, the package versions an interpreter holds, and the
torch axis's interpreters (one virtual environment per torch release, built on first use)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from compat_checkouts import UsageError, parse_version
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_VENV_DIR = Path(os.environ.get("HFEXPORT_VENV_DIR") or Path.home() / ".cache" / "hfexport" / "venvs")
PACKAGES = ("torch", "onnx", "onnxscript", "onnxruntime", "executorch", "transformers", "hfexport")

Echo = Callable[[str], None]


def pinned_version(constraints: Path = ROOT / "constraints.txt") -> str:
    match = re.search(r"^transformers==(\S+)", constraints.read_text(), re.MULTILINE)
    if match is None:
        raise UsageError(f"{constraints} pins no transformers version")
    return match.group(1)


def package_versions() -> dict[str, str]:
    """The installed versions (importlib.metadata) of what the gate runs on; the jobs' transformers is the checkout."""
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    versions["python"] = platform.python_version()
    return versions


def package_versions_of(python: str) -> dict[str, str]:
    """``package_versions()`` as the interpreter ``python`` (a torch release's environment) sees them."""
    if python == sys.executable:
        return package_versions()
    scripts = str(Path(__file__).parent)
    code = f"import json, sys; sys.path.insert(0, {scripts!r}); from compat_environments import package_versions as v; "
    code += "print(json.dumps(v()))"
    result = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(result.stdout)


def pinned_set_with_torch(version: str, constraints: Path = ROOT / "constraints.txt") -> str:
    """``constraints.txt`` with its torch pin replaced by ``version``: the known-good set on another torch."""
    parse_version(version)
    lines = [line for line in constraints.read_text().splitlines() if not re.match(r"torch\s*==", line)]
    return "\n".join([*lines, f"torch=={version}"]) + "\n"


def running_torch() -> str | None:
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def _same_release(installed: str | None, wanted: str) -> bool:
    return installed is not None and Version(installed).public == Version(wanted).public  # 2.13.0+cpu is 2.13.0


def torch_python(version: str, venv_dir: Path, echo: Echo = print, extras: tuple[str, ...] = ()) -> str:
    """The interpreter the gate runs on for torch ``version``: this one when it holds that torch, else the Python of
    ``venv_dir/torch-<version>``, built on first use and reused while this checkout and its pinned set are the same
    and it holds the ``extras`` (packages beside hfexport[all], e.g. timm and a torchvision of that torch)."""
    wanted = parse_version(version)
    if _same_release(running_torch(), version):
        return sys.executable
    venv = venv_dir / f"torch-{wanted}"
    python, ready = venv / "bin" / "python", venv / "hfexport-ready.json"
    pinned = pinned_set_with_torch(str(wanted))
    identity = {"root": str(ROOT), "pinned": pinned}
    built = json.loads(ready.read_text()) if python.exists() and ready.exists() else {}
    held = set(built.pop("extras", []))
    if built == identity and held >= set(extras):
        return str(python)
    extras = tuple(sorted(held | set(extras))) if built == identity else extras
    echo(f"torch {version}: building {venv} (torch, hfexport[all] and the pinned set)")
    ready.unlink(missing_ok=True)
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    (venv / "constraints.txt").write_text(pinned)
    # For this install only: a machine-wide constraint (one capping torch, say) would refuse the torch asked for.
    env = {**os.environ, "PIP_CONSTRAINT": str(venv / "constraints.txt")}
    command = [str(python), "-m", "pip", "install", "--quiet", "-e", f"{ROOT}[all]", *extras]
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    if result.returncode:
        lines = [line for line in (result.stderr or result.stdout).splitlines() if line.strip()]
        raise UsageError(f"torch {version}: pip install failed: {lines[-1] if lines else 'no output'}")
    ready.write_text(json.dumps({**identity, "extras": sorted(extras)}))
    return str(python)
