"""What impact recording adds to a check: the same jobs on a job worker that records and on one that does not.

Each repeat starts a plain worker and a recording one (alternating which goes first), times its start and warm-up
(the recording one instruments every loaded transformers function then), and runs every class's job (all its
backends) on it; a job's time is the wall time from the previous job's last cell to its own (fork, cells, record),
as the gate waits for it. Medians over the repeats are compared.

    python scripts/bench_impact_overhead.py --models LlamaForCausalLM,BertModel,T5Model --backends dynamo,onnx
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from hfexport.gate.worker_parent import JobOptions, WorkerProcess


def run_worker(
    names: list[str], backends: list[str], impact: bool
) -> tuple[float, dict[str, tuple[float, int]], float]:
    """Seconds to start and warm a worker; per class, seconds for its job and how many units its record holds; the
    CPU seconds of the worker and all its jobs (what load from other processes barely changes)."""
    began = time.perf_counter()
    worker = WorkerProcess(None, JobOptions(backends=tuple(backends), impact=impact))
    try:
        classes = worker.resolve(names)["classes"]
        worker.warm(sorted({entry["module"] for entry in classes}))
        started = time.perf_counter()
        jobs = [
            {key: entry[key] for key in ("model_type", "model_class", "module")}
            | {"backend": backends[0], "backends": backends, "generation": True}
            for entry in classes
        ]
        left = {index: len(backends) for index in range(len(jobs))}
        done, last = {}, started
        for index, _, cell in worker.run(jobs):
            left[index] -= 1
            units = len((cell.get("impact") or {}).get("units", []))
            name = jobs[index]["model_class"]
            done[name] = (done.get(name, (0.0, 0))[0], max(units, done.get(name, (0.0, 0))[1]))
            if cell["status"] not in ("pass", "fail", "not_checked"):
                print(f"  {name}: {cell['status']} {cell.get('error')}")
            if not left[index]:
                now = time.perf_counter()
                done[name] = (now - last, done[name][1])
                last = now
        _, _, usage = os.wait4(worker.process.pid, 0)  # the worker exits once its jobs are done; they were its children
    finally:
        worker.close()
    return started - began, done, usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="LlamaForCausalLM,BertModel,T5Model")
    parser.add_argument("--backends", default="dynamo,onnx")
    parser.add_argument("--repeats", type=int, default=3)
    options = parser.parse_args()
    names, backends = options.models.split(","), options.backends.split(",")
    starts: dict[bool, list[float]] = {False: [], True: []}
    cpu: dict[bool, list[float]] = {False: [], True: []}
    jobs: dict[tuple[str, bool], list[float]] = {}
    for repeat in range(options.repeats):
        for impact in (False, True) if repeat % 2 == 0 else (True, False):
            took, done, cpu_seconds = run_worker(names, backends, impact)
            starts[impact].append(took)
            cpu[impact].append(cpu_seconds)
            for name, (seconds, units) in done.items():
                jobs.setdefault((name, impact), []).append(seconds)
                print(f"  {'recording' if impact else 'plain'} {name}: {seconds:.2f} s, {units} units", flush=True)
    # Medians, and minimums: on a shared machine another process's load only ever adds time.
    header = ("plain s", "recording s", "overhead", "min plain", "min rec.", "min ovh.")
    print(f"{'class':32}" + "".join(f"{h:>12}" for h in header))
    totals = [0.0, 0.0, 0.0, 0.0]
    for name in dict.fromkeys(name for name, _ in jobs):
        row = [statistics.median(jobs[(name, False)]), statistics.median(jobs[(name, True)])]
        row += [min(jobs[(name, False)]), min(jobs[(name, True)])]
        totals = [a + b for a, b in zip(totals, row, strict=True)]
        print(_row(name, *row))
    print(_row("all jobs", *totals))
    start_off, start_on = statistics.median(starts[False]), statistics.median(starts[True])
    share = 100 * (start_on - start_off) / totals[0]  # against the jobs' median time
    print(f"worker start + warm: {start_off:.2f} s plain, {start_on:.2f} s recording ({share:+.1f}% of the jobs' time)")
    cpu_off, cpu_on = statistics.median(cpu[False]), statistics.median(cpu[True])
    cpu_share = 100 * (cpu_on / cpu_off - 1)
    print(f"CPU of worker and jobs: {cpu_off:.2f} s plain, {cpu_on:.2f} s recording ({cpu_share:+.1f}%)")


def _row(name: str, off: float, on: float, low_off: float, low_on: float) -> str:
    overheads = [f"{100 * (after / before - 1):+11.1f}%" for before, after in ((off, on), (low_off, low_on))]
    return f"{name:32}{off:12.2f}{on:12.2f}{overheads[0]}{low_off:12.2f}{low_on:12.2f}{overheads[1]}"


if __name__ == "__main__":
    main()
