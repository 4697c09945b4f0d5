"""Benchmark: out-of-core packing (``python -m packlib pack-dataset``) against the I/O floor.

    python benchmarks/bench_pipeline.py                 # 3 GB of int32 token lists, 2 workers
    python benchmarks/bench_pipeline.py --size-gb 0.5   # a quick run
    python benchmarks/bench_pipeline.py --no-ray        # local engine only

Generates (once, cached in ``--data``) a Parquet dataset of ``input_ids`` lists (int32,
lognormal lengths, median ~400 tokens, at most ``--seq-length``), then, in one run:

- the **I/O floor**: pyarrow reading every input file once and writing the same table once
  (same Parquet options as the pipeline), in as many processes as the pipeline has workers;
- ``pack_files`` with the local engine (``--workers`` processes), and with Ray;
- the in-memory packer (:func:`packlib.methods.pack`) on the same lengths.

Targets (issue 13): peak memory of all processes <= 40 % of the token bytes (local
engine); wall time <= 2.5x the I/O floor; Ray within 1.5x of local; packs equal to the
in-memory packer. Memory is sampled every 50 ms over the whole process tree (PSS: shared
library pages counted once, as the kernel apportions them); the pipeline's own figure
(sum of each process's peak RSS, counting shared pages in every process) is shown beside.
The machine is shared and noisy: read ratios.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import pathlib
import shutil
import sys
import threading
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import packlib  # noqa: E402
from benchmarks._common import fmt  # noqa: E402


# --------------------------------------------------------------------------------------
# memory of a process tree
# --------------------------------------------------------------------------------------
def _children(pid):
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.extend(int(x) for x in f.read().split())
    except OSError:
        pass
    return out


def _tree(pid):
    todo, seen = [pid], []
    while todo:
        p = todo.pop()
        seen.append(p)
        todo.extend(_children(p))
    return seen


def _pss_rss(pid):
    pss = rss = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    pss = int(line.split()[1]) * 1024
                elif line.startswith("Rss:"):
                    rss = int(line.split()[1]) * 1024
    except OSError:
        pass
    return pss, rss


def _cpu_seconds(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


class TreeMemory:
    """Peak of the summed PSS (and RSS) of this process and all its descendants, and the CPU
    seconds they used (sampled: a process's CPU time as last seen before it exited)."""

    def __init__(self, interval=0.05):
        self.interval, self.peak_pss, self.peak_rss = interval, 0, 0
        self._cpu0, self._cpu = {}, {}
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _sample(self):
        pss = rss = 0
        for p in _tree(os.getpid()):
            a, b = _pss_rss(p)
            pss, rss = pss + a, rss + b
            c = _cpu_seconds(p)
            if c is not None:
                self._cpu0.setdefault(p, c if not self._cpu else 0.0)
                self._cpu[p] = c
        self.peak_pss, self.peak_rss = max(self.peak_pss, pss), max(self.peak_rss, rss)

    def _run(self):
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval)

    @property
    def cpu_seconds(self) -> float:
        return sum(c - self._cpu0.get(p, 0.0) for p, c in self._cpu.items())

    def __enter__(self):
        self._sample()
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()
        self._sample()


# --------------------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------------------
def generate(d: pathlib.Path, size_gb: float, seq_length: int, seed=0, file_mb=128, row_group_rows=4096):
    """Parquet files of ``input_ids`` (list<int32>) holding ``size_gb`` GB of token bytes;
    returns the files and the row lengths (cached beside them)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    marker = d / f"lengths-{size_gb}-{seq_length}-{seed}.npy"
    if marker.exists():
        return sorted(str(p) for p in d.glob("data-*.parquet")), np.load(marker)
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    total_tokens = int(size_gb * 1e9 / 4)
    per_file = file_mb * 2**20 // 4
    all_lens, done, i = [], 0, 0
    while done < total_tokens:
        want = min(per_file, total_tokens - done)
        lens = np.clip(rng.lognormal(6.0, 1.0, int(want / 600) + 16).astype(np.int64), 1, seq_length)
        lens = lens[np.cumsum(lens) <= want]
        if lens.size == 0:
            break
        tokens = rng.integers(0, 50_000, int(lens.sum()), dtype=np.int32)
        offs = np.concatenate(([0], np.cumsum(lens))).astype(np.int32)
        t = pa.table({"input_ids": pa.ListArray.from_arrays(pa.array(offs), pa.array(tokens))})
        pq.write_table(t, d / f"data-{i:05d}.parquet", row_group_size=row_group_rows)
        all_lens.append(lens)
        done += int(lens.sum())
        i += 1
    lengths = np.concatenate(all_lens)
    np.save(marker, lengths)
    return sorted(str(p) for p in d.glob("data-*.parquet")), lengths


def _copy_one(args):
    import pyarrow.parquet as pq

    from packlib.pipeline._tasks import PARQUET_OPTIONS

    src, dst = args
    pq.write_table(pq.read_table(src, use_threads=False), dst, **PARQUET_OPTIONS)
    return os.path.getsize(dst)


def io_floor(files, out: pathlib.Path, workers: int):
    """Seconds (wall, CPU) to read every file once and write it once, in ``workers`` processes."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    jobs = [(f, str(out / os.path.basename(f))) for f in files]
    with TreeMemory() as mem:
        t0 = time.perf_counter()
        if workers > 1:
            with mp.get_context("forkserver").Pool(workers) as pool:
                pool.map(_copy_one, jobs, chunksize=1)
        else:
            for j in jobs:
                _copy_one(j)
        dt = time.perf_counter() - t0
    shutil.rmtree(out)
    return dt, mem.cpu_seconds


def run_pipeline(files, out, L, engine, workers, verify):
    from packlib.pipeline import pack_files

    shutil.rmtree(out, ignore_errors=True)
    with TreeMemory() as mem:
        t0 = time.perf_counter()
        res = pack_files(files, L, output=out, engine=engine, workers=workers, overflow="truncate", verify=verify)
        dt = time.perf_counter() - t0
    return res, dt, mem


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-gb", type=float, default=3.0, help="token bytes of the generated dataset (default 3)")
    ap.add_argument("--seq-length", type=int, default=2048)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--data", default="/work/bench_pipeline_data", help="where to generate (and cache) the dataset")
    ap.add_argument("--no-ray", action="store_true")
    ap.add_argument("--no-verify", action="store_true", help="time the pipeline without its verify pass")
    args = ap.parse_args(argv)
    L, W = args.seq_length, args.workers
    data = pathlib.Path(args.data)
    t0 = time.perf_counter()
    files, lengths = generate(data / "input", args.size_gb, L)
    token_bytes = int(lengths.sum()) * 4
    in_bytes = sum(os.path.getsize(f) for f in files)
    print(f"dataset: {len(files)} Parquet files, {lengths.size:,} rows, {lengths.sum():,} tokens "
          f"({token_bytes / 1e9:.2f} GB of int32 tokens, {in_bytes / 1e9:.2f} GB on disk); ready in {time.perf_counter() - t0:.0f} s")

    floor1, fcpu1 = io_floor(files, data / "floor", W)
    print(f"I/O floor ({W} processes: read every file once, write it once): {fmt(floor1)} ({fcpu1:.1f} CPU s)")

    verify = not args.no_verify
    res, dt, mem = run_pipeline(files, data / "out-local", L, "local", W, verify)
    print(res.summary())
    rows = [("local", dt, mem, res)]
    floor2, fcpu2 = io_floor(files, data / "floor", W)
    print(f"I/O floor again: {fmt(floor2)} ({fcpu2:.1f} CPU s)")
    floor, fcpu = (floor1 + floor2) / 2, (fcpu1 + fcpu2) / 2
    ref = packlib.methods.pack(lengths, L, method="bfd")
    same = np.array_equal(ref.offsets, res.packs.offsets) and np.array_equal(ref.indices, res.packs.indices)
    if not args.no_ray:
        try:
            import ray
        except ImportError:
            print("ray not installed: skipping the ray engine")
        else:
            # a shared machine: other processes' memory must not make Ray's OOM killer kill our workers
            os.environ.setdefault("RAY_memory_monitor_refresh_ms", "0")
            with TreeMemory() as init_mem:
                t_init = time.perf_counter()
                ray.init(num_cpus=W, include_dashboard=False, log_to_driver=False,
                         runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})
                ray_start = time.perf_counter() - t_init
            rres, rdt, rmem = run_pipeline(files, data / "out-ray", L, "ray", W, verify)
            rmem.peak_pss = max(rmem.peak_pss, init_mem.peak_pss)
            ray.shutdown()
            rows.append(("ray", rdt, rmem, rres))
            parts_equal = all(open(a, "rb").read() == open(b, "rb").read() for a, b in zip(res.files, rres.files))
            print(rres.summary())
            print(f"ray output identical to local: {parts_equal}; ray.init took {ray_start:.1f} s (not in the ray row)")

    print()
    print(f"| engine | wall | × I/O floor ({fmt(floor)}) | without verify | CPU s (× floor's {fcpu:.0f}) "
          f"| peak memory (PSS, process tree) | % of token bytes | sum of per-process peak RSS |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, t, m, r in rows:
        nv = t - r.seconds.get("verify", 0.0)
        cpu = f"{m.cpu_seconds:.0f} ({m.cpu_seconds / fcpu:.2f}×)" if name == "local" else "—"
        print(f"| {name} | {fmt(t)} | {t / floor:.2f}× | {nv / floor:.2f}× | {cpu} | {m.peak_pss / 2**20:,.0f} MiB "
              f"| {100 * m.peak_pss / token_bytes:.1f} % | {r.peak_memory / 2**20:,.0f} MiB |")
    print()
    print(f"I/O floor: {fmt(floor1)} before, {fmt(floor2)} after the local run (the table uses the mean)")
    print("seconds per pass (local): " + ", ".join(f"{k} {v:.1f}" for k, v in res.seconds.items()))
    if len(rows) > 1:
        print(f"ray / local wall time: {rows[1][1] / rows[0][1]:.2f}×")
    print(f"packs equal to packlib.methods.pack on the same lengths: {same} ({res.num_packs:,} packs)")
    for name in ("out-local", "out-ray"):
        shutil.rmtree(data / name, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
