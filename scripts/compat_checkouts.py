"""Transformers releases as git checkouts: each wheel (downloaded once), its ``transformers/`` unpacked as
``src/transformers/`` and committed; another release on top of it, or a one-model change."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from packaging.version import InvalidVersion, Version

DEFAULT_WHEEL_DIR = Path(os.environ.get("HFEXPORT_WHEEL_DIR") or Path.home() / ".cache" / "hfexport" / "wheels")
# A code line (a comment selects nothing): module level, so it selects the type's own classes only.
TOUCH_LINE = "\n_compat_check_touched = True\n"
GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "compat_check",
    "GIT_AUTHOR_EMAIL": "compat_check@localhost",
    "GIT_COMMITTER_NAME": "compat_check",
    "GIT_COMMITTER_EMAIL": "compat_check@localhost",
}


class UsageError(Exception):
    """Bad input (a version the index does not have, a model type the release lacks): exit 2 with this line."""


def parse_version(version: str) -> Version:
    try:
        return Version(version)
    except InvalidVersion:
        raise UsageError(f"{version!r} is not a version number") from None


def _find_wheel(version: str, wheel_dir: Path) -> Path | None:
    wanted = parse_version(version)
    for path in sorted(wheel_dir.glob("transformers-*.whl")):
        try:
            if Version(path.name.split("-")[1]) == wanted:  # 5.22 and 5.22.0 name the same wheel
                return path
        except InvalidVersion:
            continue
    return None


def wheel_for(version: str, wheel_dir: Path) -> Path:
    """The wheel of transformers ``version`` in ``wheel_dir``, downloaded with pip when it is not there yet."""
    found = _find_wheel(version, wheel_dir)
    if found is not None:
        return found
    wheel_dir.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet"]
    result = subprocess.run(
        [*command, f"transformers=={version}", "-d", str(wheel_dir)], capture_output=True, text=True
    )
    found = _find_wheel(version, wheel_dir)
    if result.returncode or found is None:
        lines = [line for line in (result.stderr or result.stdout).splitlines() if line.strip()]
        raise UsageError(f"transformers {version}: pip download failed: {lines[-1] if lines else 'no wheel'}")
    return found


def git(repo: Path, *args: str) -> str:
    # A fixed identity and no signing: the temporary repository must commit on any machine's git config.
    command = ["git", "-C", str(repo), "-c", "commit.gpgsign=false", *args]
    result = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **GIT_IDENTITY})
    if result.returncode:
        raise RuntimeError(f"git {' '.join(args)} failed in {repo}: {result.stderr.strip()}")
    return result.stdout.strip()


def make_checkout(version: str, dest: Path, wheel_dir: Path) -> Path:
    """A git repository at ``dest`` holding the wheel's ``transformers/`` as ``src/transformers/``, committed once."""
    if dest.exists() and any(dest.iterdir()):
        raise UsageError(f"{dest} is not empty")
    _unpack(version, wheel_dir, dest / "src")
    # The jobs import the checkout, leaving bytecode behind; ignored, it never shows in a diff or a status.
    (dest / ".gitignore").write_text("__pycache__/\n")
    git(dest, "init", "-q", "-b", "main")
    git(dest, "add", "-A")
    git(dest, "commit", "-q", "-m", f"transformers {version}")
    return dest


def _unpack(version: str, wheel_dir: Path, src: Path) -> None:
    with zipfile.ZipFile(wheel_for(version, wheel_dir)) as archive:
        archive.extractall(src, [name for name in archive.namelist() if name.startswith("transformers/")])


def overlay_release(checkout: Path, version: str, wheel_dir: Path) -> None:
    """Commit another release's ``transformers/`` on top of the checkout: the diff between two releases."""
    shutil.rmtree(checkout / "src" / "transformers")
    _unpack(version, wheel_dir, checkout / "src")
    git(checkout, "add", "-A")
    git(checkout, "commit", "-q", "-m", f"transformers {version}")


def _modeling_file(model_type: str) -> str:
    return f"src/transformers/models/{model_type}/modeling_{model_type}.py"


def require_model(version: str, wheel: Path, model_type: str) -> None:
    """Fail before any gate run when the release has no modeling file for ``model_type``."""
    with zipfile.ZipFile(wheel) as archive:
        if _modeling_file(model_type).removeprefix("src/") not in archive.namelist():
            raise UsageError(f"transformers {version} has no {_modeling_file(model_type)}")


def touch_model(checkout: Path, model_type: str) -> None:
    """A harmless one-model change, committed: the gate's diff then selects every class of ``model_type``."""
    with (checkout / _modeling_file(model_type)).open("a") as modeling:
        modeling.write(TOUCH_LINE)
    git(checkout, "commit", "-q", "-am", f"touch modeling_{model_type}.py")
