"""Validate once at the door (docs/design.md, "Validation"): a public entry point checks an
array once, then the internals it calls take the checked array as it is.

The counter wraps every array check of ``packlib._validate`` wherever a module bound it,
and counts the outermost calls (a check calling another counts once) whose first argument
is an array of the size of the lengths (or histogram) under test.
"""
import sys

import numpy as np
import pytest

import packlib
from packlib import _validate

ARRAY_CHECKS = ("as_int_array", "as_lengths", "as_histogram", "check_lengths_positive", "as_float_array",
                "as_weights", "as_matrix")


def _import_all():
    import importlib
    import pkgutil

    for info in pkgutil.walk_packages(packlib.__path__, "packlib."):
        if info.name.endswith("__main__"):
            continue
        try:
            importlib.import_module(info.name)
        except ImportError:  # an optional dependency is missing
            pass


@pytest.fixture
def checks():
    """``checks(size)``: how many outermost array checks saw an array of ``size`` entries."""
    _import_all()  # every module that binds a check, bound now
    seen = []
    depth = [0]
    originals = {name: getattr(_validate, name) for name in ARRAY_CHECKS}

    def counting(fn):
        def wrapper(values, *args, **kwargs):
            if depth[0] == 0:
                seen.append((fn.__name__, int(np.size(values)) if not np.isscalar(values) else 1))
            depth[0] += 1
            try:
                return fn(values, *args, **kwargs)
            finally:
                depth[0] -= 1
        return wrapper

    by_original = {fn: counting(fn) for fn in originals.values()}
    replaced = []
    for modname, module in list(sys.modules.items()):
        if modname == "packlib" or modname.startswith("packlib."):
            for attr, value in list(vars(module).items()):
                if any(value is fn for fn in originals.values()):
                    replaced.append((module, attr, value))
                    setattr(module, attr, by_original[value])

    def count(size):
        return sum(1 for _, n in seen if n == size)

    count.seen = seen
    try:
        yield count
    finally:
        for module, attr, value in replaced:
            setattr(module, attr, value)


def _lengths(n=5000, L=512, seed=0):
    return np.random.default_rng(seed).integers(1, L + 1, n)


def test_nnls_plan_then_assign_checks_histogram_and_lengths_once(checks):
    lengths = _lengths()
    h = packlib.histogram(lengths, 512)
    before = len(checks.seen)
    plan = packlib.nnls_pack(h, max_sequences_per_pack=3)
    packs = plan.assign(lengths, seed=1)
    after = checks.seen[before:]
    assert sum(1 for _, n in after if n == 512) == 1, after      # the histogram, by nnls_pack
    assert sum(1 for _, n in after if n == lengths.size) == 1, after  # the lengths, by assign
    packs.validate(lengths.size)


@pytest.mark.parametrize("method", ["bfd", "nnls", "optimal"])
def test_pack_checks_lengths_once(checks, method):
    lengths = _lengths()
    packlib.pack(lengths, 512, 4, method=method)
    assert checks(lengths.size) == 1, checks.seen


def test_pack_table_checks_row_lengths_once(checks):
    pa = pytest.importorskip("pyarrow")
    from packlib.formats.arrow import pack_table

    lengths = _lengths(3000, 300)
    values = np.arange(int(lengths.sum()), dtype=np.int32)
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int32)
    table = pa.table({"input_ids": pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))})
    for method in ("bfd", "optimal"):
        before = len(checks.seen)
        pack_table(table, 512, method=method)
        assert sum(1 for _, n in checks.seen[before:] if n == lengths.size) == 1, checks.seen[before:]


def test_pack_files_plan_checks_lengths_once(checks, tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from packlib.pipeline import pack_files

    lengths = _lengths(2000, 100)
    values = np.arange(int(lengths.sum()), dtype=np.int32)
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int32)
    pq.write_table(pa.table({"input_ids": pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))}),
                   tmp_path / "a.parquet")
    pack_files(tmp_path / "a.parquet", 256, output=tmp_path / "out", workers=1)
    assert checks(lengths.size) == 1, checks.seen


def test_compare_checks_the_histogram_once(checks):
    h = packlib.histogram(_lengths(), 512)
    before = len(checks.seen)
    table = packlib.compare(h, max_sequences_per_pack=[2, 3], methods=["spfhp", "lpfhp", "optimal"], warmup=False)
    assert len(table) == 6
    assert sum(1 for _, n in checks.seen[before:] if n == 512) == 1, checks.seen[before:]


def test_the_counter_counts(checks):
    """The counter is not blind: a public function called twice checks twice."""
    lengths = _lengths(777)
    packlib.bfd_pack(lengths, 512)
    packlib.bfd_pack(lengths, 512)
    assert checks(777) == 2, checks.seen
