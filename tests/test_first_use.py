"""A first call on a new machine (packlib/_first_use.py, packlib/_method_warmup.py): the units
compile exactly the kernels and signatures the calls use, a cold call shares them with a
helper process, a warm or a helper process starts none, and a cache that cannot be written
costs a one-line note, never a crash or a wrong result."""
import json

import numpy as np
import pytest

import packlib
from packlib import _first_use, _method_warmup
from packlib._shared_compile import usable_cores
from tests.fuzz import run_isolated


def test_the_units_compile_the_signatures_the_calls_use():
    """In a fresh interpreter, nnls_pack at both ranges, the depth repair and the optimal
    packer compile their kernels; each unit then adds no signature (it compiled what the
    call did, not another specialisation), and a kernel has a unit per signature."""
    code = """
import json, numpy as np, packlib
from packlib import _first_use
packlib.nnls_pack(packlib.datasets.wikipedia_512()[:64], 64)
h = np.zeros(4096, np.int64)
h[[0, 900, 3000, 4095]] = 5
packlib.nnls_pack(h, 4096, None)  # length classes
packlib.spfhp_pack([0, 2, 1, 1, 0, 2])
from packlib.optimal._solver import depth_repair
# six 2s too deep for 4, beside a (5, 3): the single exchanges find nothing, pairs do
depth_repair(np.array([2, 2, 2, 2, 2, 2, 5, 3]), np.array([0, 6, 8]), np.array([1, 1]), 12, 4)
from packlib._warmup import run_unit
run_unit("family:lower bounds and optimal packing")  # the optimal packer's and the lower bound's calls
out = {}
for unit in _first_use.UNITS:
    kernel = _first_use._kernel(unit)
    before = [str(s) for s in kernel.signatures]
    _first_use.run_unit(unit)
    out[unit] = [before, [str(s) for s in kernel.signatures]]
print(json.dumps(out))
"""
    got = json.loads(run_isolated(code, timeout=300).stdout.strip().splitlines()[-1])
    assert set(got) == set(_first_use.UNITS)
    for unit, (before, after) in got.items():
        assert before and after == before, (unit, before, after)
    # each kernel's units together are the signatures the calls compiled
    for kernel in {_first_use.UNITS[unit][:2] for unit in got}:
        units = [unit for unit in got if _first_use.UNITS[unit][:2] == kernel]
        assert len(got[units[0]][0]) == len(units), (kernel, got[units[0]][0])
    with pytest.raises(ValueError, match="unknown compile unit 'x'"):
        _first_use.run_unit("x")


def test_a_warm_kernel_or_a_helper_process_starts_no_helper(monkeypatch):
    started = []
    monkeypatch.setattr(_first_use, "compile_in_processes", lambda *a: started.append(a))
    packlib.nnls_pack([0, 2, 1, 1, 0, 2])  # compiled (or loaded) here: warm now
    _first_use.compile_first_use(_first_use.NNLS_UNITS)
    monkeypatch.setattr(_first_use, "is_compiled", lambda kernel: False)
    monkeypatch.setenv("PACKLIB_COMPILE_HELPER", "1")
    _first_use.compile_first_use(_first_use.NNLS_UNITS)
    assert started == []
    monkeypatch.delenv("PACKLIB_COMPILE_HELPER")
    monkeypatch.setattr(_first_use, "usable_cores", lambda: 2)
    _first_use.compile_first_use(_first_use.NNLS_UNITS)
    assert [a[0] for a in started] == [list(_first_use.NNLS_UNITS)]


@pytest.mark.skipif(usable_cores() < 2, reason="the helper needs a second core")
def test_a_cold_first_call_shares_its_kernels_with_a_helper(tmp_path):
    """With an empty cache, nnls_pack's first call compiles nnls_columns here and loads the
    kernels the helper compiled from the cache (hits, no compile of its own), and packs as a
    warm call does."""
    code = """
import json, packlib
from packlib._kernels import greedy, nnls
plan = packlib.nnls_pack(packlib.datasets.wikipedia_512())
print(json.dumps({"packs": plan.num_packs,
                  "here": sum(sum(k.stats.cache_misses.values()) for k in (nnls.nnls_columns,)),
                  "loaded": sum(sum(k.stats.cache_hits.values()) for k in (greedy.lpfhp, nnls.settle_dummies))}))
"""
    out = run_isolated(code, timeout=300, env={"NUMBA_CACHE_DIR": str(tmp_path)})
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"packs": 8_144_341, "here": 1, "loaded": 2}, got


def test_compares_units_name_each_method_once():
    assert _method_warmup.method_unit("nnls", 3, L=4096) == "method:nnls:3:4096"
    with pytest.raises(ValueError, match="unknown compile unit"):
        _method_warmup.run_unit("family:x")


def test_no_writable_cache_gives_a_one_line_note_and_correct_results():
    """numba finds nowhere to write its cache (every locator refused): kernels compile
    uncached, one line on stderr says so, and the plan is the usual one."""
    code = """
from numba.core import caching
(getattr(caching, "CacheImpl", None) or caching._CacheImpl)._locator_classes = []  # as where NUMBA_CACHE_DIR, the package and ~ are read-only
import packlib
print(packlib.spfhp_pack([0, 2, 1, 1, 0, 2], max_sequences_per_pack=2).num_packs)
print(packlib.bfd_pack([5, 3, 2, 4, 1], 6).to_list())
"""
    out = run_isolated(code, timeout=300)
    assert out.stdout.splitlines() == ["4", "[[0, 4], [3, 2], [1]]"]
    notes = [line for line in out.stderr.splitlines() if line.startswith("packlib:")]
    assert len(notes) == 1 and "NUMBA_CACHE_DIR" in notes[0], out.stderr
