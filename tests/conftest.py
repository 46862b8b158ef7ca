"""Every test starts with an empty result cache of its own: no test's outcome comes from another test's run."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _own_result_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    # Outside the test's own tmp_path, where a test may list what the gate wrote.
    monkeypatch.setenv("HFEXPORT_CACHE_DIR", str(tmp_path_factory.mktemp("result-cache")))
