"""Loading an export someone else made: what each backend's loader can run from a hostile file, and the opt-in.

- dynamo: ``torch.export.load`` unpickles parts of a ``.pt2`` (weights and constants marked ``use_pickle``, with
  ``torch.load(weights_only=False)`` and ``pickle.loads``): a crafted archive runs code. ``from_pretrained`` loads
  such an export only when this process saved it, or with ``trust_remote_code=True``.
- onnx: a protobuf graph; onnx_ir and onnxruntime refuse external data outside the model's folder.
- executorch: a flatbuffer the C++ runtime parses with its verifier on; corrupted programs are refused, never run
  (a few abort the process: a denial of service, not code).
"""

from __future__ import annotations

import ast
import json
import pickle
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from hfexport.exporters import DynamoExporter, ExportedModel
from hfexport.exporters.base import UntrustedExportError


class _Payload:
    """Pickles to a call of ``exec``: what a hostile .pt2 can hold."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return exec, (f"open({str(self.marker)!r}, 'w').write('ran')",)


class _Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


def _poison(pt2: Path, marker: Path) -> None:
    """Mark the first weight record of the archive as pickled and put the payload in its place."""
    with zipfile.ZipFile(pt2) as archive:
        entries = {info.filename: archive.read(info) for info in archive.infolist()}
    config_name = next(name for name in entries if name.endswith("data/weights/model_weights_config.json"))
    config = json.loads(entries[config_name])
    target = next(iter(config["config"].values()))["path_name"]
    for entry in config["config"].values():  # every weight stored in that record (tied weights share one)
        if entry["path_name"] == target:
            entry["use_pickle"] = True
    entries[config_name] = json.dumps(config).encode()
    entries[config_name.rsplit("/", 1)[0] + "/" + target] = pickle.dumps(_Payload(marker))
    with zipfile.ZipFile(pt2, "w", zipfile.ZIP_STORED) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    """A real dynamo export of a tiny BERT, saved by this process."""
    from hfexport.tiny_models import sample_inputs, tiny_model

    model = tiny_model("bert")
    return DynamoExporter().export(model, sample_inputs(model)).save_pretrained(tmp_path / "tiny-dynamo")


def test_torch_export_load_runs_code_from_a_crafted_pt2(saved, tmp_path):
    # The evidence: nothing in torch stops it (if this starts failing, torch fixed it and the opt-in can go).
    marker = tmp_path / "ran"
    _poison(saved / "model.pt2", marker)
    with pytest.raises(Exception):  # noqa: B017 - whatever it raises after, the code has run
        torch.export.load(saved / "model.pt2")
    assert marker.read_text() == "ran"


def test_a_dynamo_export_this_process_did_not_save_needs_trust_remote_code(saved, tmp_path):
    assert ExportedModel.from_pretrained(saved).programs["model"] is not None  # its own: no opt-in
    copied = shutil.copytree(saved, tmp_path / "from-elsewhere")  # someone else's (a download, a shared disk)
    marker = tmp_path / "ran"
    _poison(copied / "model.pt2", marker)
    with pytest.raises(UntrustedExportError, match=r"run code when loaded .* trust_remote_code=True"):
        ExportedModel.from_pretrained(copied)
    assert not marker.exists()
    # A file of its own replaced afterwards is someone else's too.
    _poison(saved / "model.pt2", marker)
    with pytest.raises(UntrustedExportError):
        ExportedModel.from_pretrained(saved)
    assert not marker.exists()
    # The opt-in means what it says.
    with pytest.raises(Exception):  # noqa: B017
        ExportedModel.from_pretrained(copied, trust_remote_code=True)
    assert marker.read_text() == "ran"


def test_a_manifest_cannot_reach_outside_the_export_or_import_other_modules(saved, tmp_path):
    copied = shutil.copytree(saved, tmp_path / "copied")
    manifest = json.loads((copied / "export.json").read_text())
    for file in ("../tiny-dynamo/model.pt2", "/etc/passwd", "..", "sub\\model.pt2"):
        manifest["components"]["model"]["file"] = file
        (copied / "export.json").write_text(json.dumps(manifest))
        with pytest.raises(ValueError, match="plain names inside its folder"):
            ExportedModel.from_pretrained(copied, trust_remote_code=True)
    manifest["components"]["model"]["file"] = "model.pt2"
    manifest["components"]["model"]["pytree_types"] = ["antigravity.Anything"]
    (copied / "export.json").write_text(json.dumps(manifest))
    with pytest.raises(UntrustedExportError, match=r"outside transformers .*'antigravity.Anything'"):
        ExportedModel.from_pretrained(copied)
    assert "antigravity" not in sys.modules


def _onnx_export_reading(directory: Path, location: str) -> Path:
    """An onnx export whose one weight is external data at ``location``."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    tensor = numpy_helper.from_array(np.zeros(8, dtype=np.uint8), "w")
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", "8")):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph(
        [helper.make_node("Identity", ["w"], ["y"])],
        "g",
        [],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, [8])],
        initializer=[tensor],
    )
    directory.mkdir()
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), directory / "model.onnx")
    manifest = {
        "schema_version": 2,
        "export_format": "onnx",
        "files": ["model.onnx"],
        "components": {"model": {"file": "model.onnx", "pytree_types": [], "input_names": []}},
    }
    (directory / "export.json").write_text(json.dumps(manifest))
    return directory


@pytest.mark.parametrize("kind", ["parent", "absolute", "symlink"])
def test_onnx_external_data_outside_the_export_is_never_read(tmp_path, kind):
    import onnxruntime

    from hfexport.exporters.runner_onnx import OnnxRunner

    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"SECRET!!")
    location = {"parent": "../secret.bin", "absolute": str(secret), "symlink": "w.bin"}[kind]
    directory = _onnx_export_reading(tmp_path / "export", location)
    if kind == "symlink":
        (directory / "w.bin").symlink_to(secret)
    loaded = ExportedModel.from_pretrained(directory)  # no code runs: no opt-in asked
    with pytest.raises(ValueError, match="outside the base directory"):
        loaded.programs["model"].graph.initializers["w"].const_value.numpy()
    with pytest.raises(onnxruntime.capi.onnxruntime_pybind11_state.Fail, match="External data path"):
        OnnxRunner(loaded).session("model")


# Each corrupted program is loaded in a forked child, so one that kills its process is counted, not fatal.
_EXECUTORCH_FUZZ = """
import os, random, signal, sys
from executorch.runtime import Runtime, Verification
data = open(sys.argv[1], "rb").read()
rng = random.Random(0)
outcomes = {}
for round in range(300):
    mutated = bytearray(data)
    if round % 3 == 0:
        mutated = mutated[: rng.randrange(len(mutated))]
    else:
        for _ in range(rng.randrange(1, 16)):
            mutated[rng.randrange(len(mutated))] = rng.randrange(256)
    pid = os.fork()
    if pid == 0:
        os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
        try:
            program = Runtime.get().load_program(bytes(mutated), verification=Verification.InternalConsistency)
            program.load_method("forward")
            os._exit(0)
        except Exception:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        outcome = signal.Signals(os.WTERMSIG(status)).name
    else:
        outcome = ("loaded", "refused")[os.WEXITSTATUS(status)]
    outcomes[outcome] = outcomes.get(outcome, 0) + 1
print(outcomes)
"""


def test_corrupted_executorch_programs_are_refused_never_run(tmp_path):
    """300 seeded corruptions of a real .pte: the verifier refuses most; none faults memory (the way from a file to
    running code). A few abort the process: ExecuTorch's loader lets a pybind11 UnicodeDecodeError (a method name
    that is not UTF-8) escape as std::terminate. That is a denial of service, which no check here can stop."""
    from executorch.exir import to_edge_transform_and_lower

    program = to_edge_transform_and_lower(torch.export.export(_Tiny(), (torch.randn(2, 4),))).to_executorch()
    (tmp_path / "model.pte").write_bytes(program.buffer)
    result = subprocess.run(
        [sys.executable, "-c", _EXECUTORCH_FUZZ, str(tmp_path / "model.pte")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    outcomes = ast.literal_eval(result.stdout.strip().splitlines()[-1])
    assert sum(outcomes.values()) == 300 and outcomes["refused"] > 250, outcomes
    assert set(outcomes) <= {"refused", "loaded", "SIGABRT"}, outcomes  # no SIGSEGV, SIGBUS, SIGILL
