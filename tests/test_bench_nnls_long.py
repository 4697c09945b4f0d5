"""benchmarks/bench_nnls_long.py: ``--solves`` reports one row per NNLS solve of the recipe,
as many as ``nnls_pack`` runs, and its input is the documented lognormal histogram."""
import importlib
import pathlib
import sys

import numpy as np
import pytest

import packlib

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT))
    monkeypatch.delitem(sys.modules, "benchmarks.bench_nnls_long", raising=False)
    return importlib.import_module("benchmarks.bench_nnls_long")


def test_one_row_per_solve(bench):
    L, n = 96, 3_000
    h = bench.lognormal_histogram(L, n)
    solves = packlib.nnls_pack(h, L, 3, repair=False).info["iterations"]
    rows = list(bench.solve_rows(L, n))
    assert solves >= 2  # the row count below then tells "every solve" from "the first"
    assert [r.split("|")[2].strip() for r in rows] == [str(k) for k in range(1, solves + 1)]


def test_the_input_is_the_documented_histogram(bench):
    h = bench.lognormal_histogram(512, 1_000, seed=3)
    x = np.random.default_rng(3).lognormal(np.log(128), 0.9, 1_000)
    assert h.sum() == 1_000
    assert np.array_equal(h, packlib.histogram(np.clip(np.rint(x), 1, 512).astype(np.int64), 512))


def test_a_row_per_depth_with_the_exact_recipe_where_it_runs(bench):
    """Each row: the fast plan's packs, its difference from the exact recipe's (up to
    L = 2048, none above), the gap to the lower bound."""
    h = bench.lognormal_histogram(800, 2_000)
    rows = list(bench.rows(800, 2_000, depths=(3, None)))
    assert [r.split("|")[2].strip() for r in rows] == ["3", "unlimited"]
    for row, depth in zip(rows, (3, None)):
        cells = [c.strip() for c in row.split("|")[1:-1]]
        fast, exact = packlib.nnls_pack(h, 800, depth), packlib.nnls_pack(h, 800, depth, exact=True)
        assert cells[2] == "2" and cells[3] == f"{fast.num_packs:,}"
        assert cells[4].startswith(f"{fast.num_packs - exact.num_packs:+,} (")
        assert cells[5].startswith(f"{fast.num_packs - packlib.lower_bound(h, 800, depth).bound:,} (")
    assert "| — |" in next(bench.rows(4096, 300, depths=(3,)))


@pytest.mark.parametrize("shape", ["bimodal", "spiky", "long-tail"])
def test_held_out_shapes_are_histograms_of_their_documented_lengths(bench, shape):
    """``--shape``: n sequences within [1, L], the bimodal one with a fifth from L / 2."""
    h = bench.shape_histogram(shape, 1024, 5_000)
    assert h.size == 1024 and h.sum() == 5_000 and h.min() >= 0
    assert np.array_equal(h, bench.shape_histogram(shape, 1024, 5_000))  # seeded
    if shape == "bimodal":
        assert h[511:].sum() >= 1_000 > h[511:].sum() - 50  # the long fifth, and a few long short ones
    row = next(bench.rows(900, 2_000, depths=(3,), exact=False, shape=shape))
    assert row.split("|")[4].strip() == f"{packlib.nnls_pack(bench.shape_histogram(shape, 900, 2_000), 900, 3).num_packs:,}"
