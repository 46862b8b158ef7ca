"""An impact map recorded once per test session, for every test that selects by impact.

``impact_map`` runs ``hfexport impact build`` on a checkout (``checkout_fixture.make_checkout``: llama's two first
classes and bert) for LlamaForCausalLM and BertModel on dynamo, with a result cache of its own. conftest.py loads
this module as a plugin; tests that take the fixture share one xdist worker, so it is built once::

    from impact_fixture import IMPACT_GROUP, BuiltMap

    @pytest.mark.xdist_group(IMPACT_GROUP)
    def test_something(impact_map: BuiltMap) -> None:
        impact_map.map.classes_running(CodeUnit("transformers.masking_utils", "create_causal_mask"))
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

import pytest
from checkout_fixture import make_checkout
from click.testing import CliRunner

from hfexport.cli import main
from hfexport.gate.impact import ImpactMap, expected_versions

IMPACT_GROUP = "impact_map"
MAPPED_CLASSES = ["LlamaForCausalLM", "BertModel"]


@dataclass
class BuiltMap:
    map: ImpactMap
    path: Path  # the map file `impact build` wrote
    checkout: Path  # the checkout it was recorded on (a git repository)
    cache_dir: Path  # the result cache the build kept its records in
    expect: dict[str, str | None]  # the versions a run on that checkout expects


def build(checkout: Path, cache_dir: Path, output: Path, *extra: str) -> tuple[int, str]:
    """``hfexport impact build`` in ``checkout``: its exit code and output."""
    args = ["impact", "build", "--models", ",".join(MAPPED_CLASSES), "--backends", "dynamo"]
    with contextlib.chdir(checkout):
        result = CliRunner().invoke(main, [*args, "--cache-dir", str(cache_dir), "-o", str(output), *extra])
    return result.exit_code, result.output


@pytest.fixture(scope="session")
def impact_map(tmp_path_factory: pytest.TempPathFactory) -> BuiltMap:
    root = tmp_path_factory.mktemp("impact")
    checkout = make_checkout(root / "transformers", heads=1)
    path, cache_dir = root / "map.json", root / "cache"
    code, output = build(checkout, cache_dir, path)
    assert code == 0, output
    expect = expected_versions(checkout)
    return BuiltMap(ImpactMap.load(path, expect), path, checkout, cache_dir, expect)
