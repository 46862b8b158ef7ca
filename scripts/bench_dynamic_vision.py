"""Time the static and the dynamic export of tiny vision models, per backend, and print their ratio.

Run by hand, not by the tests: ``python scripts/bench_dynamic_vision.py [--models swin vit ...]
[--backends dynamo onnx executorch] [--timeout 900] [--without WORKAROUND ...]``. Each (model, backend) pair runs
in a child process of its own that exports the same freshly built model static (untimed, to pay the process's
one-time costs), static again, then dynamic, back to back (a shared machine slows both alike, so the ratio holds when
the seconds do not); a pair still running after ``--timeout``
seconds is reported as such. Prints wall seconds, the dynamic/static ratio and the dynamic dimensions the program
kept. ``--without`` takes registered workarounds out (``_static_image_size_of_window_partition``, say) to time the
exports as they were before them.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SWIN_FAMILY = ("swin", "swinv2", "donut-swin", "maskformer-swin", "swin2sr")
DEFAULT_MODELS = (*SWIN_FAMILY, "vit")
BACKENDS = ("dynamo", "onnx", "executorch")


def export_pair(name: str, backend: str, without: list[str]) -> dict:
    """Seconds of the static then the dynamic export of a freshly built tiny ``name``; the kept dynamic dims."""
    from hfexport.exporters import AutoExportConfig, AutoHfExporter, registry
    from hfexport.exporters.backends import import_backend_modules
    from hfexport.tiny_models import sample_inputs, tiny_model

    import_backend_modules(backend)
    for key, workarounds in registry._REGISTRY.items():
        registry._REGISTRY[key] = [w for w in workarounds if w.name not in without]

    model = tiny_model(name, seed=0)
    inputs = sample_inputs(model)
    result: dict = {}
    # The first export of a process also pays its one-time costs (torch.export's first trace, torch.onnx's registry):
    # an untimed static export takes them, so that neither timed export carries them.
    for timed, dynamic in ((None, False), ("static", False), ("dynamic", True)):
        config = AutoExportConfig.from_dict({"export_format": backend, "dynamic": dynamic})
        started = time.perf_counter()
        exported = AutoHfExporter.from_config(config).export(model, inputs, config)
        if timed:
            result[timed] = time.perf_counter() - started
    result["dynamic_dims"] = {n: c.get("dynamic_dims") for n, c in exported.components.items()}
    return result


def run_child(name: str, backend: str, timeout: float, without: list[str]) -> dict:
    """``export_pair`` in a child process: an error or a timeout is a result, not the end of the run."""
    command = [sys.executable, __file__, "--child", name, backend, "--without", *without]
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
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds allowed to one (model, backend) pair")
    parser.add_argument("--without", nargs="*", default=[], help="registered workarounds to take out")
    parser.add_argument("--child", nargs=2, metavar=("MODEL", "BACKEND"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(export_pair(*args.child, args.without)), flush=True)
        return

    print(f"{'model':<24} {'backend':<11} {'static s':>9} {'dynamic s':>10} {'ratio':>7}  dynamic dims", flush=True)
    for name in args.models:
        for backend in args.backends:
            result = run_child(name, backend, args.timeout, args.without)
            if "error" in result:
                print(f"{name:<24} {backend:<11} {result['error']}", flush=True)
                continue
            static, dynamic = result["static"], result["dynamic"]
            dims = json.dumps(result["dynamic_dims"], separators=(",", ":"))
            row = f"{name:<24} {backend:<11} {static:>9.1f} {dynamic:>10.1f} {dynamic / static:>7.1f}"
            print(f"{row}  {dims}", flush=True)


if __name__ == "__main__":
    main()
