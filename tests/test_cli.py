"""The CLI as a user meets it: help, exporting a model, usage mistakes, and lazy imports."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from click.testing import CliRunner

from hfexport.cli import main


def test_import_and_help_load_no_backend_packages():
    code = (
        "import sys, hfexport, hfexport.exporters\n"
        "from click.testing import CliRunner\n"
        "from hfexport.cli import main\n"
        "assert CliRunner().invoke(main, ['--help']).exit_code == 0\n"
        "backends = ('onnx', 'onnxruntime', 'onnxscript', 'executorch')\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in backends)\n"
        "print(heavy)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_help_explains_every_command():
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    for command in ("export", "registry"):
        assert command in result.output


def test_export_tiny_model_prints_where_and_size(tmp_path):
    target = tmp_path / "bert-dynamo"
    result = CliRunner().invoke(main, ["export", "bert", "--format", "dynamo", "-o", str(target)])
    assert result.exit_code == 0, result.output
    assert f"saved {target}" in result.output
    assert "KiB" in result.output or "MiB" in result.output
    manifest = json.loads((target / "export.json").read_text())
    assert manifest["model_class"].endswith("BertForMaskedLM")


def test_export_local_directory(tmp_path):
    from hfexport.tiny_models import tiny_model

    tiny_model("gpt2").save_pretrained(tmp_path / "my-gpt2")
    result = CliRunner().invoke(main, ["export", str(tmp_path / "my-gpt2"), "-o", str(tmp_path / "out"), "--static"])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "out" / "export.json").read_text())["export_config"]["dynamic"] is False


def test_unknown_model_is_a_one_line_usage_error():
    result = CliRunner().invoke(main, ["export", "lamma"])
    assert result.exit_code == 2
    assert "lamma" in result.output
    assert "Traceback" not in result.output


def test_bad_format_is_a_usage_error():
    result = CliRunner().invoke(main, ["export", "llama", "--format", "tflite"])
    assert result.exit_code == 2
    assert "tflite" in result.output


def _hfexport(*args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hfexport.cli", *args], capture_output=True, text=True, timeout=300, **kwargs
    )


def test_registry_cut_short_by_its_reader_exits_0_and_prints_no_library_warnings():
    # `hfexport registry | head`: the reader is gone before the first line is written.
    read, write = os.pipe()
    os.close(read)
    result = subprocess.run(
        [sys.executable, "-m", "hfexport.cli", "registry"], stdout=write, stderr=subprocess.PIPE, text=True, timeout=300
    )
    os.close(write)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # no torchao .so notes, no torch pytree notes, no traceback


def test_export_prints_no_library_warnings(tmp_path):
    result = _hfexport("export", "bert", "--format", "onnx", "-o", str(tmp_path / "bert-onnx"))
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # torch.onnx's "torchvision is not installed", deprecation notes: only with -v
    assert "saved" in result.stdout


def test_a_missing_directory_and_unknown_names_are_said_at_once(tmp_path):
    # At once: none of the three imports torch (each took 8-10 s when they did). A torch that refuses to import
    # stands first on the path, so importing it would end the command with a traceback instead of its message.
    (tmp_path / "torch.py").write_text("raise ImportError('torch imported for a usage mistake')\n")
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    missing = _hfexport("export", "/nonexistent", env=env)
    assert missing.returncode == 2 and "/nonexistent: no such directory" in missing.stderr
    unknown = _hfexport("check", "--models", "nosuchmodel", env=env)
    assert unknown.returncode == 2 and "unknown model type or class 'nosuchmodel'" in unknown.stderr
    assert "did you mean" not in unknown.stderr  # nothing close: no unrelated names
    typo = _hfexport("export", "lamma", env=env)
    assert typo.returncode == 2 and "'lamma' (did you mean llama?)" in typo.stderr
    assert "Traceback" not in missing.stderr + unknown.stderr + typo.stderr
