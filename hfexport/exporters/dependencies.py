"""The backends' optional dependencies (checked before a backend loads) and the package versions an export records."""

from __future__ import annotations

import importlib.metadata
import importlib.util


class MissingDependencyError(ImportError):
    """A backend's optional packages are not installed."""


def require(*packages: str, extra: str) -> None:
    """Import-check ``packages``; raise one error naming what is missing, what is installed and what was tested."""
    missing = [name for name in packages if importlib.util.find_spec(name) is None]
    if not missing:
        return
    installed = {name: package_version(name) for name in packages if name not in missing}
    raise MissingDependencyError(
        f"the {extra} backend needs {', '.join(missing)} (installed: {installed or 'none of them'}); "
        f"install with `pip install -c constraints.txt 'hfexport[{extra}]'` (tested set in constraints.txt)"
    )


def package_version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def package_versions(*extra: str) -> dict[str, str]:
    """Versions of the packages an export depends on, recorded in ``export.json``."""
    names = ("hfexport", "torch", "transformers", *extra)
    return {name: version for name in names if (version := package_version(name)) is not None}
