"""CI's run on a newer torch than the pin: torch 2.14.1, whose wheel and CUDA wheels this machine's package index
holds, in a virtual environment of its own (``scripts/compat_check.py``'s ``torch_python``: that torch, hfexport and
the rest of ``constraints.txt``, with timm and the index's torchvision for that torch; built on first use, about 2
minutes, and reused after). 2.15.0 is a 3 GB download: its results are recorded by hand in docs/compatibility.md.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from packaging.version import Version
from support import load_script

ROOT = Path(__file__).resolve().parent.parent
TORCH = "2.14.1"
REPRESENTATIVE = {"BertForMaskedLM", "LlamaForCausalLM", "T5ForConditionalGeneration", "ViTForImageClassification"}
# The timm-backed classes build where timm and a torchvision of the running torch import: the index has one for 2.14.1.
TIMM_PACKAGES = ("timm", "torchvision")
TIMM_CLASS = "TimmWrapperForImageClassification"  # one for the rest (tiny_models.NEEDS_PACKAGES), on dynamo


def test_representative_set_passes_on_torch_2_14_1_and_installing_hfexport_keeps_that_torch(tmp_path: Path) -> None:
    compat = load_script("compat_check")
    python = compat.torch_python(TORCH, compat.DEFAULT_VENV_DIR, extras=TIMM_PACKAGES)
    assert Version(compat.package_versions_of(python)["torch"]).public == TORCH

    # A contributor's environment holding that torch: pip's resolver (dry run, no constraint at all) keeps it.
    plan = tmp_path / "pip-report.json"
    dry_run = [python, "-m", "pip", "install", "--dry-run", "--quiet", "--report", str(plan), "-e", f"{ROOT}[all]"]
    subprocess.run(dry_run, env={**os.environ, "PIP_CONSTRAINT": os.devnull}, check=True, capture_output=True)
    assert "torch" not in {item["metadata"]["name"] for item in json.loads(plan.read_text())["install"]}

    report_dir = tmp_path / "report"
    models = f"representative,{TIMM_CLASS}"
    check = ["-m", "hfexport.cli", "check", "--models", models, "--backends", "dynamo,onnx", "-j", "2"]
    gate = subprocess.run(
        [python, *check, "--report-dir", str(report_dir)], cwd=tmp_path, capture_output=True, text=True
    )
    assert gate.returncode == 0, gate.stdout[-3000:] + gate.stderr[-3000:]
    cells = json.loads((report_dir / "report.json").read_text())["cells"]
    assert {(c["model_class"], c["backend"]) for c in cells} == {
        (m, b) for m in {*REPRESENTATIVE, TIMM_CLASS} for b in ("dynamo", "onnx")
    }
    assert {c["status"] for c in cells} == {"pass"}, [(c["model_class"], c["backend"], c["error"]) for c in cells]
