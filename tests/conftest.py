"""Suite-wide settings: each test's own result cache, the slowest tests started first, shared exports made once,
one torch thread per worker.

Slowest first: with two xdist workers, a long test started last keeps one worker busy while the other idles, so
tests run in the order of the call times recorded in ``durations.json`` (longest first; tests not recorded last).
Refresh it after adding or speeding up a slow test: ``python -m pytest --record-durations``.

Made once: the tests sharing one parameter of a module-scoped fixture (one model's export, read by several tests)
run one after another on one worker. Sorted one by one, or spread over both workers, they would export it again.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

# ``impact_map``: an impact map recorded once per session, for tests that select by it (see impact_fixture.py).
pytest_plugins = ["impact_fixture"]
DURATIONS = Path(__file__).with_name("durations.json")
_RECORDED: dict[str, float] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--record-durations",
        action="store_true",
        help=f"write each test's setup + call + teardown seconds to {DURATIONS.name} (the order the suite runs in)",
    )


def pytest_configure(config: pytest.Config) -> None:
    # Two xdist workers share two cores: one intra-op thread each. With torch's default of a thread per core, each
    # worker's idle pool threads spin while the other worker computes (the in-process tests took 18 % more CPU).
    torch.set_num_threads(1)


def _test_id(nodeid: str) -> str:
    # xdist appends the group to grouped tests' ids ("...::test@wheels").
    return nodeid.split("@", 1)[0]


def _shared_setup(item: pytest.Item) -> tuple | None:
    """The module's file and the parameters of the item's wider-scoped fixtures: what its neighbours set up too."""
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return None
    fixtures = item._fixtureinfo.name2fixturedefs
    shared = tuple(
        (name, callspec.indices[name])
        for name in sorted(callspec.params)
        if name in fixtures and fixtures[name][-1].scope != "function"
    )
    return (str(item.path), shared) if shared else None


# Before xdist's own hook, which reads the xdist_group marks into the ids it schedules by.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    known = json.loads(DURATIONS.read_text()) if DURATIONS.is_file() else {}
    runs: dict[object, list[pytest.Item]] = {}
    for item in items:
        runs.setdefault(_shared_setup(item) or item.nodeid, []).append(item)
    for key, members in runs.items():
        if len(members) > 1 and not any(item.get_closest_marker("xdist_group") for item in members):
            # No "]" in a group's name: xdist takes an id's "@" after its last "]" as the group's.
            group = f"{Path(key[0]).stem}:" + ",".join(str(members[0].callspec.params[name]) for name, _ in key[1])
            for item in members:
                item.add_marker(pytest.mark.xdist_group(group))
    ordered = sorted(runs.values(), key=lambda members: -sum(known.get(_test_id(i.nodeid), 0.0) for i in members))
    items[:] = [item for members in ordered for item in members]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _RECORDED[_test_id(report.nodeid)] = _RECORDED.get(_test_id(report.nodeid), 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    if not config.getoption("--record-durations") or hasattr(config, "workerinput"):
        return  # the controller (or a run without xdist) writes the file, from every worker's reports
    known = json.loads(DURATIONS.read_text()) if DURATIONS.is_file() else {}
    known.update({test: round(seconds, 1) for test, seconds in _RECORDED.items()})
    DURATIONS.write_text(json.dumps(dict(sorted(known.items(), key=lambda kv: -kv[1])), indent=0) + "\n")


@pytest.fixture(autouse=True)
def _own_result_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test starts with an empty result cache of its own: no test's outcome comes from another test's run."""
    # Outside the test's own tmp_path, where a test may list what the gate wrote.
    monkeypatch.setenv("HFEXPORT_CACHE_DIR", str(tmp_path_factory.mktemp("result-cache")))
