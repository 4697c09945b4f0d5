"""Compiling in several processes at once (packlib/_shared_compile.py, packlib._warmup's units):
every unit runs once across the participants, each waits for the others, and what a helper
compiled loads from numba's cache in the caller."""
import json
import threading

import pytest

from packlib import _warmup
from packlib._shared_compile import compile_claimed
from tests.fuzz import run_isolated


def test_every_unit_runs_once_and_everyone_waits_for_the_others(tmp_path):
    units = [f"u{i}" for i in range(12)]
    ran, finished = [], {}
    slow = threading.Event()

    def run(unit):
        ran.append(unit)
        if unit == "u0":
            slow.wait(5)  # the first participant is still busy while the other takes the rest

    def participant(name):
        finished[name] = (compile_claimed(str(tmp_path), units, run, name, 2), len(ran))

    first = threading.Thread(target=participant, args=("a",))
    first.start()
    while not ran:
        pass
    second = threading.Thread(target=participant, args=("b",))
    second.start()
    second.join(0.5)
    assert second.is_alive()  # done with its units, it waits for the first participant
    slow.set()
    first.join(10)
    second.join(10)
    assert sorted(ran) == sorted(units)  # each unit once
    assert finished["a"][0] == ["u0"] and finished["b"][0] == units[1:]
    assert finished["b"][1] == len(units)  # it returned only after every unit had run


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
