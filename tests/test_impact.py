"""The impact map (hfexport/gate/impact.py): recorded by real checks on a checkout, kept by the result cache, built
and merged by the CLI, and refused in one line when it is not a map of this run's versions."""

from __future__ import annotations

import ast
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from checkout_fixture import LLAMA
from click.testing import CliRunner
from impact_fixture import IMPACT_GROUP, BuiltMap, build
from test_action import STEPS, documented_workflows

from hfexport.cli import main
from hfexport.gate.impact import CodeUnit, ImpactMap, ImpactMapError, default_map
from hfexport.gate.worker_parent import WorkerProcess

LLAMA_MODULE = "transformers.models.llama.modeling_llama"
VERSIONS = {"transformers": "5.23.0", "hfexport": "0.1.0"}


@pytest.mark.xdist_group(IMPACT_GROUP)
def test_the_map_holds_what_the_checks_ran_and_nothing_else(impact_map: BuiltMap) -> None:
    mapped = impact_map.map
    assert mapped.model_classes() == {"LlamaForCausalLM", "BertModel"}
    assert "LlamaForCausalLM" in mapped.classes_running(CodeUnit("transformers.masking_utils", "create_causal_mask"))
    assert mapped.classes_running(CodeUnit(LLAMA_MODULE, "LlamaRMSNorm.forward")) == {"LlamaForCausalLM"}
    # The model's forward sits under transformers' decorators; generation's static cache ran too.
    assert "LlamaForCausalLM" in mapped.classes_running(CodeUnit(LLAMA_MODULE, "LlamaForCausalLM.forward"))
    assert "LlamaForCausalLM" in mapped.classes_running(CodeUnit("transformers.cache_utils", "StaticLayer.update"))
    # Flex attention's mask builder: no export here runs it.
    assert mapped.classes_running(CodeUnit("transformers.masking_utils", "flex_attention_mask")) == set()
    assert mapped.classes_with_module("transformers.masking_utils") >= {"LlamaForCausalLM"}
    assert mapped.classes_with_module(LLAMA_MODULE) == {"LlamaForCausalLM"}


@pytest.mark.xdist_group(IMPACT_GROUP)
def test_units_name_the_checkouts_file_and_lines(impact_map: BuiltMap) -> None:
    """The checkout's modeling file (overlaid on the installed transformers) is what ran, at its own lines."""
    tree = ast.parse((impact_map.checkout / LLAMA).read_text())
    norm = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "LlamaRMSNorm")
    forward = next(n for n in norm.body if isinstance(n, ast.FunctionDef) and n.name == "forward")
    executed = {u.unit: u for u in impact_map.map.executed("LlamaForCausalLM")}
    unit = executed[CodeUnit(LLAMA_MODULE, "LlamaRMSNorm.forward")]
    assert (unit.file, unit.first_line, unit.last_line) == (
        LLAMA.removeprefix("src/"),
        forward.lineno,
        forward.end_lineno,
    )


@pytest.mark.xdist_group(IMPACT_GROUP)
def test_the_result_cache_keeps_the_records(
    impact_map: BuiltMap, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from_cache = default_map(impact_map.cache_dir, impact_map.expect)
    assert from_cache is not None and from_cache.to_json() == impact_map.map.to_json()
    # Built again from the cache alone: the worker only resolves the names, no job runs, the same map comes out.
    monkeypatch.setattr(WorkerProcess, "run", lambda *_: pytest.fail("a job ran for cached cells"))
    code, output = build(impact_map.checkout, impact_map.cache_dir, tmp_path / "again.json")
    assert code == 0, output
    assert json.loads((tmp_path / "again.json").read_text()) == json.loads(impact_map.path.read_text())
    # Another transformers: the cache's records are not this run's map.
    assert default_map(impact_map.cache_dir, {**impact_map.expect, "transformers": "0.0.1"}) is None


def _map(classes: dict[str, list[str]], versions: dict[str, str] = VERSIONS) -> ImpactMap:
    built = ImpactMap(versions)
    for name, functions in classes.items():
        rows = [["transformers.masking_utils", f, "transformers/masking_utils.py", 1, 2] for f in functions]
        built.add(name, {"units": rows, "modules": ["transformers.masking_utils"]})
    return built


def test_merge_joins_shards_of_one_version(tmp_path: Path) -> None:
    _map({"LlamaModel": ["create_causal_mask"]}).dump(tmp_path / "a.json")
    _map({"BertModel": ["sdpa_mask"], "LlamaModel": ["sdpa_mask"]}).dump(tmp_path / "b.json")
    result = CliRunner().invoke(
        main, ["impact", "merge", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "-o", str(tmp_path / "m.json")]
    )
    assert result.exit_code == 0, result.output
    merged = ImpactMap.load(tmp_path / "m.json", VERSIONS)
    assert merged.classes_running(CodeUnit("transformers.masking_utils", "sdpa_mask")) == {"BertModel", "LlamaModel"}
    assert merged.classes_running(CodeUnit("transformers.masking_utils", "create_causal_mask")) == {"LlamaModel"}

    _map({"T5Model": []}, {**VERSIONS, "transformers": "5.24.0"}).dump(tmp_path / "c.json")
    result = CliRunner().invoke(
        main, ["impact", "merge", str(tmp_path / "a.json"), str(tmp_path / "c.json"), "-o", str(tmp_path / "x.json")]
    )
    assert result.exit_code == 2 and "5.24.0" in result.output and not (tmp_path / "x.json").exists()


def _corrupt(document: dict, how: str) -> object:
    if how == "transformers version":
        return {**document, "versions": {**VERSIONS, "transformers": "5.24.0"}}
    if how == "hfexport version":
        return {**document, "versions": {**VERSIONS, "hfexport": "9.9.9"}}
    if how == "schema":
        return {**document, "schema": 2}
    if how == "not a map":
        return [1, 2, 3]
    if how == "line as text":
        return {**document, "units": [[*document["units"][0][:3], "1", 2]]}
    if how == "index past the rows":
        return {**document, "classes": {"LlamaModel": {"units": [7], "modules": []}}}
    if how == "module outside transformers":
        return {**document, "modules": ["os.path"]}
    if how == "class name with a newline":
        return {**document, "classes": {"Llama\nModel": {"units": [], "modules": []}}}
    raise AssertionError(how)


@pytest.mark.parametrize(
    "how",
    [
        "transformers version",
        "hfexport version",
        "schema",
        "not a map",
        "line as text",
        "index past the rows",
        "module outside transformers",
        "class name with a newline",
        "garbage",
        "missing",
    ],
)
def test_load_refuses_what_is_not_this_runs_map_in_one_line(tmp_path: Path, how: str) -> None:
    path = tmp_path / "map.json"
    if how == "garbage":
        path.write_bytes(b"\x00\xff{not json")
    elif how != "missing":
        path.write_text(json.dumps(_corrupt(_map({"LlamaModel": ["create_causal_mask"]}).to_json(), how)))
    with pytest.raises(ImpactMapError) as refused:
        ImpactMap.load(path, VERSIONS)
    assert "\n" not in str(refused.value) and str(path) in str(refused.value)
    result = CliRunner().invoke(main, ["impact", "merge", str(path), "-o", str(tmp_path / "out.json")])
    expected_code = 0 if "version" in how else 2  # merge takes any one version; `check` expects its own
    assert result.exit_code == expected_code, result.output


def test_build_usage_errors_exit_2(tmp_path: Path) -> None:
    for args in ([], ["--all", "--models", "llama"], ["--models", "llama", "--no-cache", "--cache-dir", "x"]):
        result = CliRunner().invoke(main, ["impact", "build", *args, "-o", str(tmp_path / "m.json")])
        assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output


def _commands(run: str) -> list[list[str]]:
    """The hfexport command lines of a `run:` script, as argument lists after ``hfexport`` / ``hfexport.cli``."""
    lines = [shlex.split(line) for line in run.splitlines() if "hfexport" in line and "pip install" not in line]
    return [words[next(i for i, w in enumerate(words) if w in ("hfexport", "hfexport.cli")) + 1 :] for words in lines]


def test_the_documented_workflow_builds_merges_and_saves_what_the_action_restores() -> None:
    (workflow,) = [w for w in documented_workflows() if w["name"] == "impact map"]
    steps = [step for job in workflow["jobs"].values() for step in job["steps"]]
    runs = [step["run"].replace("${{ matrix.shard }}", "1") for step in steps if "run" in step]
    commands = [command for run in runs for command in _commands(run)]
    assert [command[:2] for command in commands] == [["impact", "build"], ["impact", "merge"]]
    for args in commands:  # every command and option exists: click parses them (a bad one exits 2)
        context = main.make_context("hfexport", list(args))
        main.get_command(context, args[0]).get_command(context, args[1]).make_context(args[1], args[2:])
    save = next(step for step in steps if step.get("uses", "").startswith("actions/cache/save@"))
    restore = next(step for step in STEPS if step.get("uses", "").startswith("actions/cache/restore@"))
    assert save["with"]["path"] == restore["with"]["path"]  # actions/cache versions an entry by its path
    assert save["with"]["key"].startswith(restore["with"]["restore-keys"].replace("github.base_ref || ", ""))
    merged = commands[1][commands[1].index("-o") + 1]
    check = next(step for step in STEPS if step.get("id") == "check")
    assert merged.replace("$RUNNER_TEMP", "${{ runner.temp }}") == check["env"]["RESTORED_MAP"]


def test_default_map_takes_only_well_formed_records_of_this_version(tmp_path: Path) -> None:
    record = _map({"LlamaModel": ["create_causal_mask"]}).to_json()
    good = {"versions": VERSIONS, "units": record["units"], "modules": record["modules"]}
    entries = {
        "good": ("LlamaModel", good),
        "other version": ("BertModel", {**good, "versions": {**VERSIONS, "transformers": "5.24.0"}}),
        "bad row": ("T5Model", {**good, "units": [["transformers.masking_utils", "f", "x.py", 3, 1]]}),
        "bad class": ("Llama Model", good),
    }
    for name, (model_class, impact) in entries.items():
        folder = tmp_path / name.replace(" ", "-")
        folder.mkdir()
        entry = {"job": {"model_class": model_class}, "result": {"status": "pass", "impact": impact}}
        (folder / "entry.json").write_text(json.dumps(entry))
    outside = tmp_path.parent / "outside.json"  # a good entry, but reached through a link: never followed
    outside.write_text(json.dumps({"job": {"model_class": "ViTModel"}, "result": {"status": "pass", "impact": good}}))
    (tmp_path / "good" / "link.json").symlink_to(outside)
    (tmp_path / "garbage").mkdir()
    (tmp_path / "garbage" / "entry.json").write_bytes(b"\xff")
    found = default_map(tmp_path, VERSIONS)
    assert found is not None and found.model_classes() == {"LlamaModel"}
    assert found.classes_running(CodeUnit("transformers.masking_utils", "create_causal_mask")) == {"LlamaModel"}
    assert default_map(tmp_path / "missing", VERSIONS) is None


PROBED_MODULE = """
import torch

def helper(x):
    return x * 2

def counting(n):
    for i in range(n):
        yield i

class Model(torch.nn.Module):
    def forward(self, x):
        def inner(y):
            return helper(y) + 1
        try:
            z = inner(x)
        except ValueError:
            z = x
        return z + sum(counting(3)) + sum([i for i in range(2)])

def never_called():
    return 0
"""

RUN_PROBED = """
import json, sys, types, torch
import transformers
from hfexport.gate.impact_recorder import ImpactRecorder
module = types.ModuleType("transformers.probed")
module.__file__ = sys.argv[1]
exec(compile(open(sys.argv[1]).read(), sys.argv[1], "exec"), module.__dict__)
sys.modules[module.__name__] = module
recorder = ImpactRecorder(None)
recorder.instrument_loaded()
model, x, seen = module.Model(), torch.ones(2), {}
runs = {
    "eager": lambda: model(x),
    "strict export": lambda: torch.export.export(model, (x,), strict=True).module()(x),
    "non-strict export": lambda: torch.export.export(model, (x,), strict=False).module()(x),
    "compile": lambda: torch.compile(model, fullgraph=True, backend="eager")(x),
}
for name, run in runs.items():
    recorder.reset()
    assert run().tolist() == [7.0, 7.0]
    seen[name] = sorted(row[1] for row in recorder.record([])["units"] if row[0] == module.__name__)
print(json.dumps(seen))
"""


def test_every_way_an_export_runs_python_is_recorded_and_unchanged(tmp_path: Path) -> None:
    """Eager, strict export and torch.compile (dynamo traces the inserted call: it calls the probe while tracing),
    non-strict export: each gives the model's result and records the functions it ran, nested and generators too."""
    source = tmp_path / "probed.py"
    source.write_text(PROBED_MODULE)
    done = subprocess.run(
        [sys.executable, "-c", RUN_PROBED, str(source)], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    expected = ["Model.forward", "Model.forward.<locals>.inner", "counting", "helper"]
    assert seen == dict.fromkeys(["eager", "strict export", "non-strict export", "compile"], expected)
