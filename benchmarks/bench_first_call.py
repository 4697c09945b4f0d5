"""Benchmark: a newcomer's first calls, each in a fresh interpreter.

    python benchmarks/bench_first_call.py

- the demo's kernels from a cold numba cache (a new ``NUMBA_CACHE_DIR``), compiled in one
  process (the baseline) and shared by two (``packlib._warmup.warm_in_processes``, as
  ``python -m packlib demo`` does on a machine with two cores);
- ``packlib.compare`` on 20,000 lognormal lengths (median 200, sigma 0.9) at L = 1,024,
  every histogram method at depths 2, 3 and unlimited, the first call of a fresh process
  with the cache warm: its depths one after the other (the baseline: one usable core) and
  in threads.

Each row is a separate interpreter; its peak resident memory is printed beside its time.
"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]

_DEMO = """
import json, resource, sys, time
from packlib.cli import _demo_units
from packlib._warmup import run_unit, warm_in_processes
units = _demo_units(["spfhp", "lpfhp", "nnls", "optimal"], [3, None])
t0 = time.perf_counter()
warm_in_processes(units, int(sys.argv[1]))
for unit in units:
    run_unit(unit)
print(json.dumps([time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss]))
"""

_COMPARE = """
import json, resource, sys, time
import numpy as np
import packlib
from packlib import comparison
if sys.argv[1] == "1":
    comparison.usable_cores = lambda: 1
rng = np.random.default_rng(0)
lengths = np.clip(np.rint(rng.lognormal(np.log(200), 0.9, 20000)), 1, 1024).astype(int)
h = np.bincount(lengths - 1, minlength=1024)
t0 = time.perf_counter()
packlib.compare(h, 1024)
print(json.dumps([time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss]))
"""


def _run(code: str, arg: str, cache: str) -> tuple[float, float]:
    env = dict(os.environ, NUMBA_CACHE_DIR=cache, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code, arg], env=env, capture_output=True, text=True, check=True)
    seconds, peak_kib = json.loads(out.stdout.strip().splitlines()[-1])
    return seconds, peak_kib / 1024


def main() -> None:
    rows = []
    for processes in ("1", "2"):
        with tempfile.TemporaryDirectory() as cold:
            rows.append((f"demo kernels, cold cache, {processes} process(es)", *_run(_DEMO, processes, cold)))
    with tempfile.TemporaryDirectory() as cache:
        _run(_COMPARE, "2", cache)  # fills the cache
        for threads in ("1", "2"):
            label = "one depth at a time" if threads == "1" else "depths in threads"
            rows.append((f"compare, 20,000 lengths at L = 1,024, warm cache, {label}", *_run(_COMPARE, threads, cache)))
    print("| first call (fresh interpreter) | seconds | peak memory |")
    print("|---|---:|---:|")
    for label, seconds, peak in rows:
        print(f"| {label} | {seconds:.1f} | {peak:,.0f} MiB |")
    print(f"\ndemo: two processes {rows[0][1] / rows[1][1]:.2f}x faster; compare: threads {rows[2][1] / rows[3][1]:.2f}x faster")


if __name__ == "__main__":
    main()
