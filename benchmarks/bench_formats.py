"""Benchmark: MLPerf BERT packing + writing, TFRecord reading with CRC checks.

    python benchmarks/bench_formats.py            # 200,000 sequences (~100,000 packs)
    python benchmarks/bench_formats.py --quick    # 20,000 sequences
    NUMBA_CACHE_DIR=/tmp/nc python benchmarks/bench_formats.py --against /tmp/old   # kernels vs an old checkout

Targets (issue 6): packing and writing MLPerf records >= 50,000 packs/s on one core end to
end from in-memory records; reading with CRC checks >= 500 MB/s with the fast CRC path.

Every row is timed against a straightforward baseline in the same process (the machine is
shared and noisy: compare ratios). Steady-state figures are medians of warm runs; the
first call (numba compile or cache load) is reported separately.
"""
from __future__ import annotations

import argparse
import pathlib
import shutil
import struct
import sys
import tempfile
import time


ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import packlib  # noqa: E402
from benchmarks._common import fmt, lognormal_lengths, timed  # noqa: E402,F401
from packlib.formats import mlperf_bert as mb  # noqa: E402
from packlib.formats import tfrecord as tfr  # noqa: E402




def pack_and_write(seqs, out_dir, seed=12345, per_file=50_000):
    """End to end from in-memory records: histogram -> NNLSHP plan -> assign -> shuffle ->
    build, encode, frame and write every file."""
    plan = packlib.nnls_pack(packlib.histogram(seqs.lengths, 512), max_sequences_per_pack=3)
    packs = plan.assign(seqs.lengths, seed=seed).shuffled(seed)
    for i, a in enumerate(range(0, packs.num_packs, per_file)):
        mb.write_packed(out_dir / f"p{i:05d}.tfrecord", seqs, packs, a, min(packs.num_packs, a + per_file))
    return packs


def baseline_write(seqs, packs, path, count):
    """The straightforward way: a dict of Python lists per pack, the ``tfrecord`` package's
    writer (protobuf Example + C CRC-32C) per record."""
    import tfrecord

    w = tfrecord.TFRecordWriter(str(path))
    so, mo = seqs.seq_offsets, seqs.mlm_offsets
    for p in range(count):
        ids, mask, seg, pos = [0] * 512, [0] * 512, [0] * 512, [0] * 512
        mpos, mids, mw = [0] * 79, [0] * 79, [0.0] * 79
        nsp_p, nsp_l, nsp_w = [0] * 3, [0] * 3, [0.0] * 3
        start = m = 0
        for k, s in enumerate(packs[p].tolist()):
            t = seqs.tokens[so[s]:so[s + 1]].tolist()
            n = len(t)
            ids[start:start + n] = t
            seg[start:start + n] = seqs.segments[so[s]:so[s + 1]].tolist()
            mask[start:start + n] = [k + 1] * n
            pos[start:start + n] = range(n)
            q = seqs.mlm_positions[mo[s]:mo[s + 1]].tolist()
            mpos[m:m + len(q)] = [x + start for x in q]
            mids[m:m + len(q)] = seqs.mlm_ids[mo[s]:mo[s + 1]].tolist()
            mw[m:m + len(q)] = [float(k + 1)] * len(q)
            nsp_p[k], nsp_l[k], nsp_w[k] = start, int(seqs.next_sentence_labels[s]), 1.0
            start += n
            m += len(q)
        w.write({"input_ids": (ids, "int"), "input_mask": (mask, "int"), "segment_ids": (seg, "int"),
                 "positions": (pos, "int"), "masked_lm_positions": (mpos, "int"), "masked_lm_ids": (mids, "int"),
                 "masked_lm_weights": (mw, "float"), "next_sentence_positions": (nsp_p, "int"),
                 "next_sentence_labels": (nsp_l, "int"), "next_sentence_weights": (nsp_w, "float")})
    w.close()


def baseline_read(path):
    """A plain Python reader checking both CRCs with the C ``crc32c`` package."""
    data = pathlib.Path(path).read_bytes()
    mv = memoryview(data)
    pos, n = 0, 0
    while pos < len(data):
        (length,) = struct.unpack_from("<Q", data, pos)
        (lcrc,) = struct.unpack_from("<I", data, pos + 8)
        if tfr.masked_crc32c(mv[pos:pos + 8]) != lcrc:
            raise ValueError("bad length crc")
        body = mv[pos + 12:pos + 12 + length]
        (dcrc,) = struct.unpack_from("<I", data, pos + 12 + length)
        if tfr.masked_crc32c(body) != dcrc:
            raise ValueError("bad data crc")
        pos += 16 + length
        n += 1
    return n


def compare_kernels(old_root: str, n: int = 4000, repeat: int = 60) -> None:
    """The format kernels of another checkout (``old_root``, e.g. from ``git archive``)
    against this one's, in one process, interleaved, best of ``repeat``: the way to see
    what a kernel change costs on a shared, noisy machine."""
    import importlib.util
    import types

    import numpy as np

    from packlib._kernels import formats as new
    from packlib._kernels.crc32c import TABLES
    from packlib.formats.example import Schema

    pkg = types.ModuleType("old_kernels")
    pkg.__path__ = [f"{old_root}/packlib/_kernels"]
    sys.modules["old_kernels"] = pkg
    for name in ("crc32c", "formats"):
        origin = f"{old_root}/packlib/_kernels/{name}.py"
        mod = types.ModuleType(f"old_kernels.{name}")
        mod.__file__, mod.__package__ = origin, "old_kernels"
        sys.modules[mod.__name__] = mod
        src = open(origin).read().replace("from .._jit import jit", "from packlib._jit import jit")
        exec(compile(src, origin, "exec"), mod.__dict__)
    old = sys.modules["old_kernels.formats"]
    schema = Schema.of({"input_ids": ("int64", 512), "input_mask": ("int64", 512), "segment_ids": ("int64", 512),
                        "positions": ("int64", 512), "masked_lm_positions": ("int64", 79),
                        "masked_lm_ids": ("int64", 79), "masked_lm_weights": ("float", 79),
                        "next_sentence_positions": ("int64", 3), "next_sentence_labels": ("int64", 3),
                        "next_sentence_weights": ("float", 3)})
    rng = np.random.default_rng(0)
    data, offsets = schema.encode(rng.integers(0, 30000, size=(n, schema.int_width)),
                                  rng.random((n, schema.float_width)).astype(np.float32))
    framed = tfr.frame_records(data, offsets)
    keys, ko, kinds, widths, cols, ni, nf = schema._arrays()
    st, sp = offsets[:-1].copy(), offsets[1:].copy()
    calls = {
        "decode_examples": lambda m: m.decode_examples(data, st, sp, keys, ko, kinds, widths, cols, ni, nf),
        "scan_frames": lambda m: m.scan_frames(framed, TABLES),
    }
    print(f"# kernels of {old_root} (old) vs this checkout (new): {n:,} MLPerf-shaped records, "
          f"{data.nbytes / 1e6:.0f} MB; best of {repeat}, interleaved")
    for name, call in calls.items():
        a, b = call(old), call(new)
        same = all(np.array_equal(x, y) for x, y in zip(a, b))
        to, tn = [], []
        for _ in range(repeat):
            t0 = time.perf_counter()
            call(old)
            to.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            call(new)
            tn.append(time.perf_counter() - t0)
        print(f"{name:16s} old {fmt(min(to))}  new {fmt(min(tn))}  new/old {min(tn) / min(to):.3f}  same results: {same}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--sequences", type=int, default=None)
    ap.add_argument("--against", metavar="DIR", default=None,
                    help="only compare the format kernels with those of another checkout in DIR "
                         "(run with NUMBA_CACHE_DIR set to a scratch directory)")
    args = ap.parse_args()
    if args.against:
        compare_kernels(args.against)
        return
    n = args.sequences or (20_000 if args.quick else 200_000)
    crc_name = tfr.crc_backend("auto")[0]
    print(f"# bench_formats: {n:,} synthetic MLPerf BERT sequences (Wikipedia length distribution); CRC fast path: {crc_name}")
    seqs = mb.synthetic_sequences(n, seed=0)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="bench_formats_"))
    rows = []
    try:
        t0 = time.perf_counter()
        d0 = tmp / "first"
        d0.mkdir()
        packs = pack_and_write(seqs, d0)
        first = time.perf_counter() - t0
        P = packs.num_packs

        def steady():
            d = tmp / "steady"
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir()
            return pack_and_write(seqs, d)

        t, _ = timed(steady)
        nb = min(P, 2000)
        tb, _ = timed(lambda: baseline_write(seqs, packs, tmp / "baseline.tfrecord", nb), repeat=1)
        rows.append(("pack + write MLPerf (end to end)", f"{P / t:,.0f} packs/s", f"{nb / tb:,.0f} packs/s",
                     f"{(P / t) / (nb / tb):.1f}x", f"first call {first:.2f} s for {P:,} packs"))

        files = sorted((tmp / "steady").glob("*.tfrecord"))
        nbytes = sum(f.stat().st_size for f in files)
        for f in files:  # page cache warm, and dirty pages flushed, before timing reads
            tfr.read_tfrecord(f)
        time.sleep(1.0)
        for crc in ("auto", "numba"):
            tfr.read_tfrecord(files[0], crc=crc)
            tr, _ = timed(lambda: [tfr.read_tfrecord(f, crc=crc) for f in files])
            tbr, _ = timed(lambda: [baseline_read(f) for f in files], repeat=1) if crc == "auto" else (tbr, None)
            rows.append((f"read TFRecord + CRCs ({'C' if crc == 'auto' and crc_name == 'c' else 'numba'} CRC)",
                         f"{nbytes / tr / 1e6:,.0f} MB/s", f"{nbytes / tbr / 1e6:,.0f} MB/s",
                         f"{tbr / tr:.1f}x", f"{nbytes / 1e6:,.0f} MB in {len(files)} files"))
        tp, _ = timed(lambda: mb.read_packed(files))
        rows.append(("read + decode + unpack packed", f"{P / tp:,.0f} packs/s", "", "", "verification pass of the CLI"))
        up = tmp / "unpacked.tfrecord"
        mb.write_unpacked(up, seqs)
        tu, _ = timed(lambda: mb.read_unpacked([up]))
        rows.append(("read + decode unpacked", f"{n / tu:,.0f} seq/s", "", "", f"{up.stat().st_size / tu / 1e6:,.0f} MB/s"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print("\n| task | packlib | baseline | ratio | note |\n|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    print("\nbaselines: pack+write = Python lists per pack + `tfrecord` package writer (protobuf, C CRC), "
          "on the first 2,000 packs; read = Python loop with struct + C CRC per record")


if __name__ == "__main__":
    main()
