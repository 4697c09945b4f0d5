"""Compiling in several processes at once (packlib/_shared_compile.py, packlib._warmup's units):
every unit runs once across the participants, each waits for the others, and what a helper
compiled loads from numba's cache in the caller."""
import json
import threading
import time

import pytest

from packlib import _warmup
from packlib._shared_compile import compile_claimed
from tests.fuzz import run_isolated


def test_every_unit_runs_once_and_the_caller_waits_for_the_others(tmp_path):
    units = [f"u{i}" for i in range(12)]
    ran, finished = [], {}
    slow = threading.Event()
    helper_alive = threading.Event()
    helper_alive.set()

    def run(unit):
        ran.append(unit)
        if unit == "u0":
            slow.wait(5)  # the helper is still busy with its first unit while the caller takes the rest

    def helper():
        finished["helper"] = compile_claimed(str(tmp_path), units, run)
        helper_alive.clear()

    def caller():
        finished["caller"] = (compile_claimed(str(tmp_path), units, run, others_alive=helper_alive.is_set), len(ran))

    first = threading.Thread(target=helper)
    first.start()
    while not ran:
        pass
    second = threading.Thread(target=caller)
    second.start()
    second.join(0.5)
    assert second.is_alive()  # done with its units, it waits for the helper's
    slow.set()
    first.join(10)
    second.join(10)
    assert sorted(ran) == sorted(units)  # each unit once
    assert finished["helper"] == ["u0"] and finished["caller"][0] == units[1:]
    assert finished["caller"][1] == len(units)  # it returned only after every unit had run


def test_the_caller_stops_waiting_for_a_helper_that_died(tmp_path):
    """A helper that claimed a unit and died (never marking it done): the caller returns once
    it sees no helper alive, and the unit is left to run where it is used."""
    compile_claimed(str(tmp_path), ["u0"], lambda unit: None)  # claim and finish u0
    (tmp_path / "claim-u1").touch()  # claimed by a helper that then died
    t0 = time.monotonic()
    assert compile_claimed(str(tmp_path), ["u0", "u1", "u2"], lambda unit: None, others_alive=lambda: False, timeout=30) == ["u2"]
    assert time.monotonic() - t0 < 5


def test_a_helpers_kernels_load_from_the_cache_in_the_caller(tmp_path):
    """Two families compiled in two processes: the caller compiled one, and loads the other
    from numba's cache (a cache hit, no compilation of its own)."""
    code = """
import json
from numba.core.dispatcher import Dispatcher
from packlib import _warmup
from packlib._kernels import binpack, segment_hash
units = ["family:per-sequence packing", "family:pipeline"]
_warmup.warm_in_processes(units, 2)
for unit in units:
    _warmup.run_unit(unit)
kernels = [k for m in (binpack, segment_hash) for k in vars(m).values() if isinstance(k, Dispatcher)]
print(json.dumps({"hits": sum(sum(k.stats.cache_hits.values()) for k in kernels),
                  "misses": sum(sum(k.stats.cache_misses.values()) for k in kernels)}))
"""
    out = run_isolated(code, timeout=300, env={"NUMBA_CACHE_DIR": str(tmp_path)})
    counts = json.loads(out.stdout.strip().splitlines()[-1])
    assert counts["hits"] > 0 and counts["misses"] > 0, counts  # one family loaded, one compiled here


def test_units_are_named_plainly():
    assert _warmup.method_unit("nnls", None) == "method:nnls:none"
    assert _warmup.method_unit("optimal", 3, "optimal-kernels") == "optimal-kernels:optimal:3"
    with pytest.raises(ValueError, match="unknown compile unit 'fam:x'"):
        _warmup.run_unit("fam:x")
    with pytest.raises(ValueError, match="processes"):
        _warmup.warmup(processes=0)
