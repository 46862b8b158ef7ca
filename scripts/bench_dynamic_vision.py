"""Time the static and the dynamic export of tiny vision models, per backend, the way the gate runs them, and print
their ratio.

Run by hand, not by the tests: ``python scripts/bench_dynamic_vision.py [--models swin vit ...]
[--backends dynamo onnx executorch] [--repeat 3] [--timeout 900] [--without WORKAROUND ...]``. Each (model, backend)
pair runs in a child process of its own that does what the gate's worker does before it forks its jobs (imports the
backend and runs its ``preload``), then times each export in a child forked from it, as the gate runs each job: a
fresh fork builds the model (untimed) and exports it once, static or dynamic. Each is the median of ``--repeat`` forks.
A pair still running after ``--timeout`` seconds is reported as such. Prints wall seconds, the dynamic/static ratio
and the dynamic dimensions the program kept. ``--without`` takes registered workarounds out
(``_static_image_size_of_window_partition``, say) to time the exports as they were before them.

Why forks: exporting the same model twice in one process makes the second export cheap (fake-tensor and sympy
caches keyed on that model's ops and shapes), which no gate job ever sees; and a process's first export pays one-time
imports that the gate's preload pays once for all jobs.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SWIN_FAMILY = ("swin", "swinv2", "donut-swin", "maskformer-swin", "swin2sr")
DEFAULT_MODELS = (*SWIN_FAMILY, "vit")
BACKENDS = ("dynamo", "onnx", "executorch")


def export_pair(name: str, backend: str, without: list[str], repeat: int) -> dict:
    """Median seconds of the static and of the dynamic export of a tiny ``name``, each in a fresh fork of a process
    prepared as the gate's worker is; the kept dynamic dims."""
    from hfexport.exporters import registry
    from hfexport.exporters.backends import get_exporter_class, import_backend_modules

    import_backend_modules(backend)
    for key, workarounds in registry._REGISTRY.items():
        registry._REGISTRY[key] = [w for w in workarounds if w.name not in without]
    get_exporter_class(backend).preload()
    result: dict = {}
    for label, dynamic in (("static", False), ("dynamic", True)):
        runs = [_export_in_a_fork(name, backend, dynamic) for _ in range(repeat)]
        result[label] = statistics.median(run["seconds"] for run in runs)
        result["dynamic_dims"] = runs[-1]["dynamic_dims"]
    return result


def _export_in_a_fork(name: str, backend: str, dynamic: bool) -> dict:
    """One export timed in a child forked from this process, as the gate's worker runs a job."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        gc.freeze()  # as the gate's worker does: the child never walks the objects it inherited
        try:
            payload = _timed_export(name, backend, dynamic)
        except Exception as error:  # reported by the parent
            payload = {"error": f"{type(error).__name__}: {error}"}
        os.write(write_fd, json.dumps(payload).encode())
        os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd) as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    payload = json.loads(data) if data else {"error": "the forked export died without a result"}
    if "error" in payload:
        raise RuntimeError(payload["error"][:200])
    return payload


def _timed_export(name: str, backend: str, dynamic: bool) -> dict:
    from hfexport.exporters import AutoExportConfig, AutoHfExporter
    from hfexport.tiny_models import sample_inputs, tiny_model

    model = tiny_model(name, seed=0)
    inputs = sample_inputs(model)
    config = AutoExportConfig.from_dict({"export_format": backend, "dynamic": dynamic})
    started = time.perf_counter()
    exported = AutoHfExporter.from_config(config).export(model, inputs, config)
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "dynamic_dims": {n: c.get("dynamic_dims") for n, c in exported.components.items()}}


def run_child(name: str, backend: str, timeout: float, without: list[str], repeat: int) -> dict:
    """``export_pair`` in a child process: an error or a timeout is a result, not the end of the run."""
    command = [sys.executable, __file__, "--child", name, backend, "--repeat", str(repeat), "--without", *without]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=ROOT, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"> {timeout:.0f} s (timed out)"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        errors = [line for line in done.stderr.splitlines() if "Error" in line] or ["no result"]
        return {"error": errors[-1][:120]}
    return json.loads(lines[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS), help="model types or class names")
    parser.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=BACKENDS)
    parser.add_argument("--repeat", type=int, default=3, help="forks timed per export; the median is printed")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds allowed to one (model, backend) pair")
    parser.add_argument("--without", nargs="*", default=[], help="registered workarounds to take out")
    parser.add_argument("--child", nargs=2, metavar=("MODEL", "BACKEND"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(export_pair(*args.child, args.without, args.repeat)), flush=True)
        return

    print(f"{'model':<24} {'backend':<11} {'static s':>9} {'dynamic s':>10} {'ratio':>7}  dynamic dims", flush=True)
    for name in args.models:
        for backend in args.backends:
            result = run_child(name, backend, args.timeout, args.without, args.repeat)
            if "error" in result:
                print(f"{name:<24} {backend:<11} {result['error']}", flush=True)
                continue
            static, dynamic = result["static"], result["dynamic"]
            dims = json.dumps(result["dynamic_dims"], separators=(",", ":"))
            row = f"{name:<24} {backend:<11} {static:>9.2f} {dynamic:>10.2f} {dynamic / static:>7.1f}"
            print(f"{row}  {dims}", flush=True)


if __name__ == "__main__":
    main()
