"""Benchmark: the out-of-core pipeline carrying images (``pack_files(..., carry=[...])``).

    python benchmarks/bench_pipeline_carry.py                # 2 GB of pixel_values, 2 workers
    python benchmarks/bench_pipeline_carry.py --size-gb 0.3  # a quick run

Generates (once, cached in ``--data``) Parquet files of processed vision-language rows as
Qwen2-VL's processor makes them: text of 20-500 tokens and 0-4 images of 64-1,300 tokens
(``image_grid_thw`` (1, h, w), four patches a token, ``pixel_values`` of 1,176 float32 per
patch: 3 channels x 2 frames x 14 x 14), then runs, in one process:

- the I/O floor: pyarrow reading every input file once and writing it once (bench_pipeline.py's);
- ``pack_files`` carrying ``pixel_values`` and ``image_grid_thw``, with and without verify.

It reports wall time against the floor and the peak memory of the whole process tree
(PSS) against the input's bytes: each worker holds one input batch or one output row group
(at least one pack, with its images) at a time, never the dataset, so the peak stays the
same as the dataset grows. The machine is shared and noisy: read ratios.
"""
from __future__ import annotations

import argparse
import pathlib
import shutil
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_pipeline import TreeMemory, io_floor  # noqa: E402

PATCH = 1176  # Qwen2-VL: 3 channels x temporal patch 2 x 14 x 14


def generate(d: pathlib.Path, size_gb: float, seed=0, rows_per_file=8):
    """Parquet files of vision rows until the pixel values reach ``size_gb``; their paths."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = sorted(d.glob("*.parquet"))
    if files:
        return [str(f) for f in files]
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    total, k = 0, 0
    pool = 24000  # patches drawn once (4 images of at most 5,200 patches fit), sliced per row
    patch_values = rng.random(PATCH * pool, dtype=np.float32)
    while total < size_gb * 2**30:
        ids, grids, pixels = [], [], []
        for _ in range(rows_per_file):
            g = [[1, 2 * int(rng.integers(4, 37)), 2 * int(rng.integers(4, 37))] for _ in range(rng.integers(0, 5))]
            g = [[t, h, w] for t, h, w in g if 64 <= h * w // 4 <= 1300]
            patches = sum(h * w for _, h, w in g)
            ids.append(np.concatenate([np.full(patches // 4, 151655, np.int32),
                                       rng.integers(0, 150000, int(rng.integers(20, 501))).astype(np.int32)]))
            grids.append(g)
            start = int(rng.integers(0, pool - patches + 1)) * PATCH
            pixels.append(patch_values[start:start + patches * PATCH].reshape(patches, PATCH) if patches else
                          np.zeros((0, PATCH), np.float32))
            total += patches * PATCH * 4
        flat = np.concatenate([p.reshape(-1) for p in pixels])
        inner = pa.ListArray.from_arrays(pa.array(np.arange(0, flat.size + 1, PATCH, dtype=np.int32)), pa.array(flat))
        outer = np.concatenate(([0], np.cumsum([p.shape[0] for p in pixels]))).astype(np.int32)
        table = pa.table({"input_ids": pa.array(ids, pa.list_(pa.int32())),
                          "image_grid_thw": pa.array(grids, pa.list_(pa.list_(pa.int64()))),
                          "pixel_values": pa.ListArray.from_arrays(pa.array(outer), inner)})
        pq.write_table(table, d / f"vision-{k:03d}.parquet", row_group_size=4)
        k += 1
    return [str(f) for f in sorted(d.glob("*.parquet"))]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size-gb", type=float, default=2.0, help="pixel_values bytes to generate (float32; an "
                   "image is 1.2-24 MB, a row ~15 MB on average)")
    p.add_argument("--seq-length", type=int, default=16384)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--data", default="/tmp/packlib-bench-vision")
    args = p.parse_args(argv)
    from packlib.pipeline import pack_files

    data = pathlib.Path(args.data) / f"{args.size_gb:g}gb"
    files = generate(data, args.size_gb)
    out = pathlib.Path(args.data) / "out"
    floor, floor_cpu = io_floor(files, out, args.workers)
    disk = sum(pathlib.Path(f).stat().st_size for f in files)  # float32 noise: about the pixel bytes
    print(f"{len(files)} files, {disk / 2**30:.2f} GiB on disk; "
          f"I/O floor {floor:.1f} s ({floor_cpu:.0f} CPU s)")
    for verify in (True, False):
        shutil.rmtree(out, ignore_errors=True)
        with TreeMemory() as mem:
            t0 = time.perf_counter()
            res = pack_files(files, args.seq_length, output=out, carry=["pixel_values", "image_grid_thw"],
                             workers=args.workers, verify=verify)
            dt = time.perf_counter() - t0
        largest = max(pathlib.Path(f).stat().st_size for f in res.files)
        print(f"verify={verify}: {res.num_sequences:,} rows -> {res.num_packs:,} packs in {len(res.files)} files "
              f"(the largest {largest / 2**20:,.0f} MiB), "
              f"{dt:.1f} s ({dt / floor:.2f}x the floor), peak memory {mem.peak_pss / 2**20:,.0f} MiB PSS "
              f"({100 * mem.peak_pss / disk:.1f} % of the input's bytes); seconds {res.seconds}")
    shutil.rmtree(out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
