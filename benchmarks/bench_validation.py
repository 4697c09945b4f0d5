"""Benchmark: what checking an array once (instead of at every floor) saves, against an
earlier checkout, in one process.

    git archive <commit> | tar -x -C /tmp/old
    python benchmarks/bench_validation.py --against /tmp/old

Both packlibs are loaded side by side (the old one as ``packlib_old``); each row times the
same call on the same input, old and new alternating, best of ``--repeat``, after a warm-up
call of each (numba compile or cache load):

- ``pack_table`` on 400,000 rows of lognormal lengths (median ~245 tokens), capacity 2048,
  with ``bfd`` (the default) and ``optimal``: the route that used to check the lengths five
  times (``methods.pack`` -> ``histogram`` -> ``assign`` -> ``histogram``);
- ``compare`` on the bundled Wikipedia histogram, every histogram method at depths 2 and 3;
- ``pack`` (the registry) on 2 M lengths with ``nnls``.

The peak memory of each call (tracemalloc, a separate call) is printed beside its time.
"""
from __future__ import annotations

import argparse
import importlib.util
import pathlib
import sys
import tracemalloc

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import packlib  # noqa: E402
from benchmarks._common import fmt, interleaved  # noqa: E402


def load_old(root: str):
    """The packlib of another checkout, imported as ``packlib_old``."""
    init = pathlib.Path(root) / "packlib" / "__init__.py"
    spec = importlib.util.spec_from_file_location("packlib_old", init, submodule_search_locations=[str(init.parent)])
    mod = importlib.util.module_from_spec(spec)
    sys.modules["packlib_old"] = mod
    spec.loader.exec_module(mod)
    return mod


def peak(call) -> int:
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def table_of(lengths):
    import pyarrow as pa

    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    values = pa.array(np.arange(int(offsets[-1]), dtype=np.int32) % 50_000)
    return pa.table({"input_ids": pa.LargeListArray.from_arrays(pa.array(offsets), values)})


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", metavar="DIR", required=True, help="an earlier checkout (e.g. from git archive)")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    old = load_old(args.against)
    import packlib_old.formats.arrow as old_arrow

    import packlib.formats.arrow as new_arrow

    rng = np.random.default_rng(0)
    lengths = np.clip(np.rint(rng.lognormal(np.log(245), 0.9, 400_000)), 1, 2048).astype(np.int64)
    table = table_of(lengths)
    wiki = packlib.datasets.wikipedia_512()
    many = np.clip(np.rint(rng.lognormal(4.71, 0.8, 2_000_000)), 3, 512).astype(np.int64)
    overflow = {"overflow": "error"} if "error" in new_arrow._segments._OVERFLOW else {}
    rows = [
        ("pack_table, 400k rows, bfd", lambda m, a: a.pack_table(table, 2048), overflow),
        ("pack_table, 400k rows, optimal", lambda m, a: a.pack_table(table, 2048, method="optimal"), overflow),
        ("compare, Wikipedia, depths 2-3", lambda m, a: m.compare(wiki, max_sequences_per_pack=[2, 3], warmup=False), {}),
        ("pack, 2M lengths, nnls", lambda m, a: m.pack(many, 512, 3, method="nnls"), {}),
    ]
    print(f"# packlib of {args.against} (old) vs this checkout (new); best of {args.repeat}, alternating")
    print(f"{'call':<34} {'old':>10} {'new':>10} {'new/old':>8} {'old peak':>10} {'new peak':>10}")
    for label, call, _ in rows:
        call_old, call_new = (lambda: call(old, old_arrow)), (lambda: call(packlib, new_arrow))
        call_old(), call_new()  # warm-up: compile or load the kernels
        t_old, t_new = interleaved([call_old, call_new], args.repeat)
        m_old, m_new = peak(call_old), peak(call_new)
        print(f"{label:<34} {fmt(t_old):>10} {fmt(t_new):>10} {t_new / t_old:>8.3f} "
              f"{m_old / 2**20:>8.1f} MB {m_new / 2**20:>8.1f} MB")


if __name__ == "__main__":
    main()
