"""The CLI as a user meets it: help, exporting a model, usage mistakes, and lazy imports."""

from __future__ import annotations

import json
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
