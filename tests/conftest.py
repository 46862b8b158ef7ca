"""Every test starts with an empty result cache of its own: no test's outcome comes from another test's run."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _own_result_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HFEXPORT_CACHE_DIR", str(tmp_path / "result-cache"))
