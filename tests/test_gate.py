"""The gate end to end on real git repositories laid out like a transformers checkout.

Each repository is built by ``checkout_fixture.make_checkout``; its modeling_llama.py keeps two model classes.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from checkout_fixture import LLAMA, ONNX_BREAKAGE, commit, git, llama_source, make_checkout
from click.testing import CliRunner
from support import load_script

from hfexport.cli import main
from hfexport.gate import changes, report, schema, views
from hfexport.gate.cells import FAILURE_STATUSES, Cell, Frame
from hfexport.gate.checks.cell import run_cell
from hfexport.gate.checks.comparing import TOLERANCES, compare
from hfexport.gate.checks.engines import engine
from hfexport.gate.checks.second_shape import SECOND_SHAPE
from hfexport.gate.run import run_check
from hfexport.gate.targets import CheckOptions, Target, target_for
from hfexport.github import actions

# Cut after LlamaForCausalLM: two model classes keep the runs short.
LLAMA_CLASSES = ["LlamaModel", "LlamaForCausalLM"]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_checkout(tmp_path / "transformers", heads=1)


def _run(args: list[str], cwd: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    monkeypatch.chdir(cwd)
    result = CliRunner().invoke(main, args)
    return result.exit_code, result.output


# ── What changed ──


def test_change_to_one_model_selects_exactly_its_classes(repo: Path) -> None:
    git(repo, "checkout", "-q", "-b", "feature")
    touched = llama_source(1).replace(
        "@auto_docstring\nclass LlamaModel(", "_UNUSED = 1\n\n\n@auto_docstring\nclass LlamaModel("
    )
    commit(repo, {LLAMA: touched}, "touch llama")
    target = target_for(repo, [], [], False, None, None)
    assert target.base == git(repo, "rev-parse", "main")
    assert target.selection.mode == "diff"
    assert [c.model_class for c in target.selection.classes] == LLAMA_CLASSES
    assert target.selection.model_types == ["llama"]
    assert not target.selection.representative
    line = next(c.line for c in target.selection.classes if c.model_class == "LlamaModel")
    assert (repo / LLAMA).read_text().splitlines()[line - 1].startswith("class LlamaModel(")


def test_hfexport_exporter_code_selects_representative_set(repo: Path) -> None:
    selection = changes.select_from_files(["hfexport/exporters/exporter_dynamo.py"], repo, "files")
    assert selection.representative
    assert {c.model_class for c in selection.classes} == set(changes.REPRESENTATIVE_NAMES)
    assert "hfexport's exporters changed" in selection.reason


def test_a_release_sized_diff_names_a_few_reasons_in_its_line(repo: Path) -> None:
    types = ["bert", "gpt2", "t5", "vit", "opt", "bart", "roberta", "whisper", "clip", "mistral", "qwen2", "llama"]
    files = [f"src/transformers/models/{t}/configuration_{t}.py" for t in types]
    selection = changes.select_from_files(files, repo, "files")
    named = changes.REASONS_NAMED
    assert selection.reason.count(" changed: ") == named
    assert selection.reason.endswith(f"and {len(types) - named} more reasons")
    assert selection.model_types == sorted(types)  # every changed type still selects its classes
    assert selection.reason_counts["configuration_llama.py changed"] == len(LLAMA_CLASSES)


def test_abstract_bases_and_helpers_are_not_candidates(repo: Path) -> None:
    names = [name for name, _ in changes.model_classes_in_file(repo / LLAMA, repo)]
    assert names == LLAMA_CLASSES  # LlamaPreTrainedModel (no forward) and nn.Modules are left out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["check", "--backends", "dynamo,tpu"], "unknown backend(s) tpu"),
        (["check", "--base", "no-such-rev"], "no-such-rev"),
        (["check", "--shard", "3/2"], "--shard"),
    ],
)
def test_usage_errors_exit_2_with_one_line(
    repo: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], message: str
) -> None:
    code, output = _run(args, repo, monkeypatch)
    assert code == 2
    assert message in output
    assert "Traceback" not in output


def test_not_a_git_repository_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, output = _run(["check", "--backends", "dynamo"], tmp_path, monkeypatch)
    assert code == 2
    assert "not a git repository" in output


def test_no_modeling_change_checks_nothing(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    git(repo, "checkout", "-q", "-b", "docs")
    commit(repo, {"README.md": "docs only\n"}, "docs")
    code, output = _run(["check", "--backends", "dynamo"], repo, monkeypatch)
    assert code == 0, output
    assert "checking 0 cell(s)" in output


# ── Regressions against the base revision ──


def test_onnx_breakage_is_new_then_pre_existing(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clean = git(repo, "rev-parse", "HEAD")
    broken_source = llama_source(1).replace(*ONNX_BREAKAGE)
    assert broken_source != llama_source(1)
    broken = commit(repo, {LLAMA: broken_source}, "break onnx export of LlamaForCausalLM")
    touched = commit(repo, {LLAMA: broken_source + "\n_edited = True\n"}, "edit")  # code: a comment selects nothing
    # --only llama: the types whose modular files copy the broken code are selected too (their files lack the change).
    common = ["--backends", "onnx", "--no-generation", "-j", "2", "--only", "llama"]

    # The breakage itself: LlamaForCausalLM fails on ONNX in an exporter stage, which is new.
    out = tmp_path / "new"
    code, output = _run(
        ["check", "--base", clean, "--head", broken, *common, "--report-dir", str(out)], repo, monkeypatch
    )
    assert code == 1, output
    data = json.loads((out / "report.json").read_text())
    assert schema.validate_report(data) == []
    cells = {c["model_class"]: c for c in data["cells"]}
    assert sorted(cells) == sorted(LLAMA_CLASSES)
    failing = cells["LlamaForCausalLM"]
    assert failing["status"] == "fail"
    assert failing["regression"] == "new"
    assert failing["stage"].startswith("onnx · stage ")
    # cumprod decomposes to prims.prod, which has no ONNX translation: the innermost cause is reported.
    assert (failing["error_type"], "prims.prod" in failing["error"]) == ("DispatchError", True)
    assert failing["source"]["file"] == LLAMA
    # No model frame raised it: the line comes from the stack trace torch.export recorded on the failing node.
    assert failing["frame"]["file"] == LLAMA and "torch.cumprod" in failing["frame"]["text"], failing["frame"]
    assert cells["LlamaModel"]["status"] == "pass"
    assert cells["LlamaModel"]["max_abs_diff"] <= cells["LlamaModel"]["tolerance"]
    assert data["summary"]["new_failures"] == 1 and data["exit_code"] == 1
    junit = (out / "junit.xml").read_text()
    assert 'name="LlamaForCausalLM"' in junit and "<failure" in junit
    assert (out / "report.md").read_text().startswith("<!-- hfexport-report -->")
    assert "**What to do:** no translation: onnx cannot express prims.prod." in (out / "report.md").read_text()
    annotations = actions.annotation_commands(views.github_annotations(report.Report.from_dict(data)))
    assert annotations == [a for a in annotations if a.startswith(f"::error file={LLAMA},line=")]

    # A later change to the same model: the failure already happens at base, so the gate passes.
    out = tmp_path / "old"
    code, output = _run(
        ["check", "--base", broken, "--head", touched, *common, "--report-dir", str(out)], repo, monkeypatch
    )
    assert code == 0, output
    data = json.loads((out / "report.json").read_text())
    failing = next(c for c in data["cells"] if c["model_class"] == "LlamaForCausalLM")
    assert (failing["status"], failing["regression"]) == ("fail", "pre-existing")
    assert data["summary"]["pre_existing"] == 1 and data["summary"]["new_failures"] == 0
    assert next(c for c in data["cells"] if c["model_class"] == "LlamaModel")["regression"] is None


# ── The line that broke, and the second shape ──

# A Python branch on a tensor's value in LlamaRMSNorm.forward: torch.export cannot trace it (data-dependent guard).
DATA_DEPENDENT = (
    "        input_dtype = hidden_states.dtype\n",
    "        input_dtype = hidden_states.dtype\n"
    "        if hidden_states.sum() > 1e30:\n"
    "            hidden_states = hidden_states * 2\n",
)
# A Python int of the sequence length (issue 47's second-shape PR): tracing fixes the length to the traced 7 there, so
# the export takes no other length; eager and the traced shape are unchanged.
INT_OF_LENGTH = (
    "            inputs_embeds: torch.Tensor = self.embed_tokens(input_ids)\n",
    "            inputs_embeds: torch.Tensor = self.embed_tokens(input_ids)\n"
    "        sequence_length = int(inputs_embeds.shape[1])\n"
    "        inputs_embeds = inputs_embeds[:, :sequence_length]\n",
)


def _reviewer_view(out: Path) -> str:
    """The PR comment of a check's report directory as GitHub renders it (cmark-gfm)."""
    return load_script("render_comment").to_html((out / "report.md").read_text())


def _assert_a_comment_a_reviewer_reads(page: str, head: str, line: int, text: str, checks: int) -> None:
    """Issue 47's 'done means': the verdict names the model line, which the section shows as code and links to at the
    head commit; every grid cell is short; hfexport's own code is not named."""
    verdict = page.split("</p>")[0]
    assert f"{checks} new export failures, 1 cause:</strong>" in verdict and f"modeling_llama.py:{line}" in verdict
    assert f'<pre lang="python"><code>{html.escape(text, quote=False)}\n</code></pre>' in page
    link = f"https://github.com/huggingface/transformers/blob/{head}/{LLAMA}#L{line}"
    assert f'<a href="{link}"><code>{LLAMA}:{line}</code></a>' in page
    widths = [len(re.sub(r"<[^>]+>", "", cell)) for cell in re.findall(r"<td>(.*?)</td>", page, re.S)]
    assert widths and max(widths) <= 40, widths
    assert "hfexport/" not in page and page.count("<details") == 1  # one cause, one section


@pytest.mark.slow  # 50-60 s, three backends end to end: CI keeps the comment's one-cause test above
def test_data_dependent_branch_is_reported_once_at_its_line_with_a_hint(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clean = git(repo, "rev-parse", "HEAD")
    source = llama_source(1).replace(*DATA_DEPENDENT)
    broken = commit(repo, {LLAMA: source}, "branch on a tensor value in LlamaRMSNorm")
    line = source.splitlines().index("        if hidden_states.sum() > 1e30:") + 1
    out = tmp_path / "report"
    monkeypatch.setenv("GITHUB_SERVER_URL", "https://github.com")
    monkeypatch.setenv("GITHUB_REPOSITORY", "huggingface/transformers")
    # The classes by name (what a diff selects is test_onnx_breakage's part); --base still tells new from pre-existing.
    models = ["--models", ",".join(LLAMA_CLASSES), "--base", clean, "--head", broken]
    args = ["check", *models, "--backends", "dynamo,onnx,executorch", "--no-generation"]
    code, output = _run([*args, "-j", "2", "--report-dir", str(out)], repo, monkeypatch)
    assert code == 1, output
    data = json.loads((out / "report.json").read_text())
    assert len(data["cells"]) == 6 and all(c["status"] == "fail" for c in data["cells"])
    for cell in data["cells"]:
        assert cell["stage"] == "dynamo · torch.export trace", cell
        assert cell["regression"] == "new" and cell["error_type"] == "GuardOnDataDependentSymNode"
        frame = cell["frame"]
        assert (frame["file"], frame["line"], frame["text"]) == (LLAMA, line, "if hidden_states.sum() > 1e30:")
    page = _reviewer_view(out)
    _assert_a_comment_a_reviewer_reads(page, broken, line, "if hidden_states.sum() > 1e30:", 6)
    assert "data-dependent at modeling_llama.py" in page and "<code>torch._check(...)</code>" in page
    assert all(f"{name} · dynamo, onnx, executorch" in page for name in LLAMA_CLASSES)
    annotations = actions.annotation_commands(views.github_annotations(report.Report.from_dict(data)))
    assert len(annotations) == 1 and annotations[0].startswith(f"::error file={LLAMA},line={line},title=6 checks")
    assert "torch._check" in annotations[0]
    # Under the terminal's table too (past the progress lines): the cause once, with its line and the hint.
    details = [line for line in output.splitlines() if line.startswith("  ") and "1e30" in line]
    assert details == [line for line in details if line.startswith("  LlamaForCausalLM · dynamo, onnx, executorch; ")]
    assert len(details) == 1 and "what to do: data-dependent" in output


@pytest.mark.slow  # 50-60 s, three backends end to end: CI keeps the comment's one-cause test above
def test_an_int_of_the_sequence_length_fails_at_the_second_shape_naming_its_line(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clean = git(repo, "rev-parse", "HEAD")
    source = llama_source(1).replace(*INT_OF_LENGTH)
    specialized = commit(repo, {LLAMA: source}, "an int of the sequence length")
    line = source.splitlines().index("        sequence_length = int(inputs_embeds.shape[1])") + 1
    out = tmp_path / "report"
    monkeypatch.setenv("GITHUB_SERVER_URL", "https://github.com")
    monkeypatch.setenv("GITHUB_REPOSITORY", "huggingface/transformers")
    models = ["--models", ",".join(LLAMA_CLASSES), "--base", clean, "--head", specialized]
    args = ["check", *models, "--backends", "dynamo,onnx,executorch", "--no-generation"]
    code, output = _run([*args, "-j", "2", "--report-dir", str(out)], repo, monkeypatch)
    assert code == 1, output
    data = json.loads((out / "report.json").read_text())
    assert len(data["cells"]) == 6
    for cell in data["cells"]:
        # The traced shape still matches eager: only the second shape (batch 3, length 11) shows the fixed length.
        assert cell["status"] == "fail" and cell["stage"] == "second shape", cell
        assert cell["max_abs_diff"] <= cell["tolerance"]
        assert "'input_ids' dimension 1 has size 11, but the program accepts only size 7" in cell["error"]
        # Where tracing fixed the length (torch's shape environment recorded it), not the runner's check that found it.
        assert (cell["frame"]["file"], cell["frame"]["line"]) == (LLAMA, line), cell["frame"]
    page = _reviewer_view(out)
    _assert_a_comment_a_reviewer_reads(page, specialized, line, "sequence_length = int(inputs_embeds.shape[1])", 6)
    assert "specialized at modeling_llama.py" in page
    assert "specialized: tracing fixed input input_ids dimension 1 to 7 at" in page
    assert f"specialized: tracing fixed input `input_ids` dimension 1 to 7 at `{LLAMA}:{line}`" in output


def test_the_export_sees_the_model_as_loaded_not_as_eager_left_it(repo: Path) -> None:
    # Eager may grow a model's state (SeamlessM4T's conformer widens its positional table to the longest input it
    # saw); the gate's eager reference and second shape must run on a copy, never on what is exported. (The
    # generation exporter itself reads its cache layout from one eager forward: generation is left out here.)
    # LlamaForCausalLM holds a lock, which deepcopy refuses: its copy is the same seeded model built again.
    patched = llama_source(1) + (
        "\n\nimport functools as _functools\nimport threading as _threading\n\n_forward = LlamaModel.forward\n\n\n"
        "@_functools.wraps(_forward)\n"
        "def _grow_on_eager_calls(self, *args, **kwargs):\n"
        "    if not torch.compiler.is_exporting():\n"
        "        self.eager_calls = getattr(self, 'eager_calls', 0) + 1\n"
        "    elif getattr(self, 'eager_calls', 0):\n"
        "        raise RuntimeError(f'exported after {self.eager_calls} eager calls')\n"
        "    return _forward(self, *args, **kwargs)\n\n\n"
        "LlamaModel.forward = _grow_on_eager_calls\n"
        "_init = LlamaForCausalLM.__init__\n\n\n"
        "def _init_with_lock(self, config):\n"
        "    _init(self, config)\n"
        "    self.weights_lock = _threading.Lock()\n\n\n"
        "LlamaForCausalLM.__init__ = _init_with_lock\n"
    )
    commit(repo, {LLAMA: patched}, "count eager calls")
    selection = changes.Selection(mode="models", names=LLAMA_CLASSES)
    options = CheckOptions(backends=["dynamo", "onnx"], jobs=2, timeout=120, generation=False)
    result = run_check(Target(selection, repo), options, echo=lambda line: None)
    cells = {(c.model_class, c.backend): c for c in result.cells}
    assert len(cells) == 4 and {cell.status for cell in cells.values()} == {"pass"}, cells
    assert {cell.second_shape.status for cell in cells.values()} == {"pass"}


# ── Isolation ──


def test_crash_hang_and_oom_become_cell_results(repo: Path) -> None:
    patched = llama_source(3) + (
        "\n\nimport os as _os\nimport time as _time\n\n\n"
        "def _abort(self, *args, **kwargs):\n    _os.abort()\n\n\n"
        "def _hang(self, *args, **kwargs):\n    _time.sleep(3600)\n\n\n"
        "def _eat(self, *args, **kwargs):\n    return torch.ones(64 * 2**30, dtype=torch.uint8)\n\n\n"
        "LlamaForSequenceClassification.forward = _abort\nLlamaForCausalLM.forward = _hang\n"
        "LlamaForQuestionAnswering.forward = _eat\n"
    )
    commit(repo, {LLAMA: patched}, "crash and hang")
    selection = changes.select_from_files([LLAMA], repo, "files")
    selection.keep_only(["llama"])  # not the types whose modular files copy llama's code: their forwards are intact
    options = CheckOptions(backends=["dynamo"], jobs=3, timeout=40, memory_limit_gib=8, generation=False)
    lines: list[str] = []
    result = run_check(Target(selection, repo), options, echo=lines.append)
    status = {c.model_class: c for c in result.cells}
    assert status["LlamaForSequenceClassification"].status == "crash"
    assert status["LlamaForSequenceClassification"].error_type == "SIGABRT"
    assert status["LlamaForCausalLM"].status == "timeout"
    assert status["LlamaForQuestionAnswering"].status == "oom"
    assert status["LlamaModel"].status == "pass"
    assert result.exit_code == 1
    assert sum(line.startswith("[") for line in lines) == 4  # one progress line per finished job


def test_a_crash_in_dynamo_is_not_the_onnx_cell_sharing_its_job(repo: Path, tmp_path: Path) -> None:
    # A class's dynamo and ONNX cells share one job (one build, one trace): the first trace aborts the process.
    marker = tmp_path / "traced-once"
    patched = llama_source(1) + (
        "\n\nimport functools as _functools\nimport os as _os\n\n_forward = LlamaModel.forward\n\n\n"
        "@_functools.wraps(_forward)\n"
        "def _abort_first_trace(self, *args, **kwargs):\n"
        f"    if torch.compiler.is_exporting() and not _os.path.exists({str(marker)!r}):\n"
        f"        open({str(marker)!r}, 'w').close()\n"
        "        _os.abort()\n"
        "    return _forward(self, *args, **kwargs)\n\n\n"
        "LlamaModel.forward = _abort_first_trace\n"
    )
    commit(repo, {LLAMA: patched}, "abort in the first trace")
    selection = changes.Selection(mode="models", names=["LlamaModel"])
    options = CheckOptions(backends=["dynamo", "onnx"], jobs=1, timeout=120, generation=False)
    lines: list[str] = []
    result = run_check(Target(selection, repo), options, echo=lines.append)
    cells = {c.backend: c for c in result.cells}
    assert cells["dynamo"].status == "crash" and cells["dynamo"].error_type == "SIGABRT", cells["dynamo"]
    # The ONNX cell ran again in a job of its own, traced for itself, and passed there.
    assert cells["onnx"].status == "pass", cells["onnx"]
    assert cells["onnx"].timings["export · torch.export"] > 0
    assert sum(line.startswith("[") for line in lines) == 2


# ── Reports ──


def _cell(model_class: str, backend: str, status: str, regression: str | None = None) -> Cell:
    failing = status in FAILURE_STATUSES
    return Cell(
        "llama",
        model_class,
        backend,
        status=status,
        regression=regression,
        stage="onnx · stage 4 ONNX translations" if failing else None,
        error_type="RuntimeError" if failing else None,
        error="aten.index_put: no translation" if failing else None,
        max_abs_diff=None if failing else 1e-6,
        tolerance=1e-4,
        timings={"total": 1.0},
        source=Frame(LLAMA, 10),
    )


def test_shards_partition_the_cells_and_merge_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hfexport.gate.cells import in_shard

    def shard_of(cells: list[Cell], shard: tuple[int, int]) -> list[Cell]:
        return [c for c in cells if in_shard(c.model_class, c.backend, shard)]

    cells = [_cell(f"Class{i}", b, "pass") for i in range(10) for b in ("dynamo", "onnx")]
    shares = [shard_of(cells, (k, 3)) for k in (1, 2, 3)]
    assert sorted(id(c) for share in shares for c in share) == sorted(id(c) for c in cells)
    assert shard_of(cells, (2, 3)) == shares[1]  # deterministic
    # A class's dynamo and ONNX cells share a shard (and a trace there); its ExecuTorch cell is placed on its own.
    for share in shares:
        assert [c.model_class for c in share[::2]] == [c.model_class for c in share[1::2]]
    placed = {(i, k) for i in range(50) for k in range(1, 8) if in_shard(f"Class{i}", "executorch", (k, 7))}
    assert len(placed) == 50 and {k for _, k in placed} == set(range(1, 8))
    selection = {"mode": "all", "model_types": ["llama"], "representative": False, "reason": "--all"}
    paths = []
    for k, share in enumerate(shares, start=1):
        part = report.new_report(
            "hfexport", ["dynamo", "onnx"], selection, {"root": None, "base": None, "head": None}, (k, 3)
        )
        if k == 2:
            share[0] = _cell(share[0].model_class, share[0].backend, "fail", "new")
        part.cells = share
        part.finalize()
        assert schema.validate_report(part.as_dict()) == []
        paths.append(tmp_path / f"shard{k}.json")
        paths[-1].write_text(views.to_json(part))
    code, output = _run(["merge", *map(str, paths), "--report-dir", str(tmp_path / "merged")], tmp_path, monkeypatch)
    merged = json.loads((tmp_path / "merged" / "report.json").read_text())
    assert code == 1, output
    assert schema.validate_report(merged) == []
    assert merged["summary"]["total"] == 20 and merged["summary"]["new_failures"] == 1


def test_validator_names_what_is_wrong() -> None:
    data = report.new_report("hfexport", ["onnx"], {"mode": "models", "model_types": [], "representative": False}, {})
    data.cells.append(_cell("LlamaModel", "onnx", "exploded"))
    errors = schema.validate_report(data.as_dict())
    assert any("cells[0].status" in e for e in errors)


def test_annotations_escape_and_skip_pre_existing() -> None:
    data = report.new_report("hfexport", ["onnx"], {"mode": "models", "model_types": [], "representative": False}, {})
    data.cells = [_cell("A", "onnx", "fail", "new"), _cell("B", "onnx", "fail", "pre-existing")]
    data.cells[0].error = "line1, with: 100%\nline2"
    lines = actions.annotation_commands(views.github_annotations(data.finalize()))
    assert len(lines) == 1
    assert lines[0].startswith(f"::error file={LLAMA},line=10,title=A does not export to onnx::")
    assert "100%25" in lines[0] and "%0A" in lines[0]


def test_cli_runs_without_importing_torch() -> None:
    # The parent only orchestrates: torch is paid for once, in the warm worker.
    code = "import sys, hfexport.cli, hfexport.gate.run, hfexport.gate.report; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"


def test_compare_lines_up_numbers_with_runtime_tensors() -> None:
    # maskformer-swin returns spatial sizes as ints; onnxruntime returns every output as a tensor.
    hidden = torch.ones(2, 3)
    eager = {"last_hidden_state": hidden, "sizes": ((8, 8), (4, 4))}
    runtime = {"last_hidden_state": hidden.clone(), "sizes": ((torch.tensor(8), torch.tensor(8)), (4, 4))}
    assert compare(eager, runtime, 1e-4) == (0.0, 0.0, None)
    wrong = {"last_hidden_state": hidden.clone(), "sizes": ((torch.tensor(8), torch.tensor(7)), (4, 4))}
    assert compare(eager, wrong, 1e-4)[2] == "sizes.0.1: max abs diff 1 > 0.0001 (relative 0.125)"


def test_compare_scales_the_tolerance_with_large_outputs() -> None:
    # Float error grows with the values: 1.3e-4 on outputs of 30 is a match (relative 4e-6), on outputs of 1 it is not.
    large, small = torch.tensor([30.0, -12.0]), torch.tensor([1.0, -0.5])
    assert compare({"x": large}, {"x": large + 1.3e-4}, 1e-4)[2] is None
    max_abs, max_rel, problem = compare({"x": small}, {"x": small + 1.3e-4}, 1e-4)
    assert problem == f"x: max abs diff {max_abs:.3g} > 0.0001 (relative {max_rel:.3g})"
    # Each output on its own scale: a large one does not excuse a small one.
    assert compare({"a": large, "b": small}, {"a": large, "b": small + 1.3e-4}, 1e-4)[2].startswith("b: ")


def test_compare_passes_nan_and_inf_only_where_eager_has_the_same() -> None:
    nan, inf = float("nan"), float("inf")
    eager = {"logits": torch.tensor([1.0, nan, inf, -inf])}
    same = {"logits": torch.tensor([1.0 + 1e-6, nan, inf, -inf])}
    assert compare(eager, same, 1e-4)[2] is None  # NaN and inf where eager has them: compared elsewhere
    for wrong in ([nan, nan, inf, -inf], [1.0, 2.0, inf, -inf], [1.0, nan, -inf, -inf], [1.0, nan, 5.0, -inf]):
        _, _, problem = compare(eager, {"logits": torch.tensor(wrong)}, 1e-4)
        assert problem and problem.startswith("logits: "), wrong
    all_nan = {"logits": torch.full((3,), nan)}
    assert compare({"logits": torch.zeros(3)}, all_nan, 1e-4)[2] is not None  # a NaN output never passes
    assert compare(all_nan, {"logits": torch.full((3,), nan)}, 1e-4)[2] is None  # unless eager is NaN there


def test_the_base_checkout_leaves_the_users_worktree_records_alone(tmp_path: Path) -> None:
    from hfexport.gate.revisions import worktree

    repo = tmp_path / "repo"
    repo.mkdir()
    for args in (["init", "-q", "-b", "main"], ["config", "user.email", "t@t"], ["config", "user.name", "t"]):
        subprocess.run(["git", "-C", str(repo), *args], check=True)
    (repo / "file.py").write_text("first\n")
    subprocess.run(["git", "-C", str(repo), "add", "file.py"], check=True)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", "first"], check=True)
    base = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    (repo / "file.py").write_text("second\n")
    # The user's own worktree, on a disk that is not mounted now: its folder is absent, its record must stay.
    away = tmp_path / "usb" / "feature"
    subprocess.run(["git", "-C", str(repo), "worktree", "add", "-q", "-b", "feature", str(away)], check=True)
    shutil.rmtree(tmp_path / "usb")
    records = sorted(p.name for p in (repo / ".git" / "worktrees").iterdir())
    with worktree(repo, base) as tree:
        assert (tree / "file.py").read_text() == "first\n"
    assert not tree.exists()
    assert sorted(p.name for p in (repo / ".git" / "worktrees").iterdir()) == records == ["feature"]
    assert (repo / "file.py").read_text() == "second\n"  # the working tree and its index untouched
    status = subprocess.run(["git", "-C", str(repo), "status", "--porcelain"], capture_output=True, text=True).stdout
    assert status.strip() == "M file.py"


def test_a_class_no_tiny_model_runs_is_reported_not_checked_with_its_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hfexport.tiny_models import UNRUNNABLE

    out = tmp_path / "report"
    args = ["check", "--models", "DinatModel", "--backends", "dynamo", "--no-generation"]
    code, output = _run([*args, "--report-dir", str(out)], tmp_path, monkeypatch)
    assert code == 0, output
    (cell,) = json.loads((out / "report.json").read_text())["cells"]
    assert (cell["status"], cell["stage"]) == ("not_checked", "build")
    assert cell["error"] == f"DinatModel: {UNRUNNABLE['DinatModel']}"


def test_a_class_no_auto_mapping_lists_is_built_from_its_own_config_class():
    # A release diff selects every class of a touched modeling file: Kosmos2_5TextModel is in no auto mapping and its
    # model type's directory (kosmos2_5) names no config; T5Gemma2TextEncoder's type config is a composite one.
    jobs = [
        ("kosmos2_5", "Kosmos2_5TextModel", "transformers.models.kosmos2_5.modeling_kosmos2_5"),
        ("t5gemma2", "T5Gemma2TextEncoder", "transformers.models.t5gemma2.modeling_t5gemma2"),
    ]
    for model_type, model_class, module in jobs:
        job = {"model_type": model_type, "model_class": model_class, "module": module, "backend": "dynamo"}
        cell = run_cell({**job, "generation": False}, None)
        assert cell["status"] == "pass", (model_class, cell["stage"], cell["error"])


def test_executorch_cells_plan_memory_for_the_shapes_the_gate_runs() -> None:
    # The default bound (256) planned ~0.9 GiB for a tiny decoder, allocated at every load of the program.
    from hfexport import tiny_models

    model = tiny_models.tiny_model("LlamaModel", seed=0)
    inputs = tiny_models.sample_inputs(model)
    export, _, _ = engine("hfexport")
    exported = export(model, inputs, "executorch", False)
    (component,) = exported.components.values()
    bounds = [upper for dims in component["dynamic_dims"].values() for _, upper in dims.values()]
    assert bounds and set(bounds) == {16}, component["dynamic_dims"]  # batch 2 and length 7 traced: 16 admits 3 and 11
    assert component["planned_memory_bytes"] < 2**20
    second = tiny_models.sample_inputs(model, seed=1, **SECOND_SHAPE)
    with torch.no_grad():
        assert compare(model(**second), exported(**second), TOLERANCES["executorch"])[2] is None
