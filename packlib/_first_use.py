"""A call's first use on a machine: the kernels it needs, compiled in two processes at once.

On a new machine (an empty numba cache) a packer's first call spends nearly all its time
compiling, one kernel after another. Where a call needs several kernels that do not call
each other, :func:`compile_first_use` shares them with a helper interpreter when the cache is
cold and the machine has a second core: this process compiles the first unit while the
helper compiles the others into numba's cache, from which this process then loads them
(:mod:`packlib._shared_compile`). The compiled code is the one a plain call compiles: each
unit compiles its kernel for the argument types the call passes (``UNITS`` gives sample
arguments of those types; ``tests/test_first_use.py`` checks they match).

Nothing here is needed for correctness: with one core, a warm cache, a cache that cannot be
written, or a helper that cannot start, the call compiles what it needs itself.
"""
from __future__ import annotations

import sys

import numpy as np

from ._jit import compile_for, is_compiled
from ._shared_compile import compile_in_processes, helper_main, in_helper, usable_cores

__all__ = ["compile_first_use", "NNLS_UNITS", "NNLS_CLASS_UNITS"]


def _i64(*shape):
    return np.zeros(shape, np.int64)


def _f64(*shape):
    return np.zeros(shape, np.float64)


def _readonly(a):
    a.flags.writeable = False
    return a


_N = np.int64(1)

# unit -> (kernel module, kernel name, sample arguments of the types the calls pass)
UNITS = {
    "nnls.nnls_columns": ("nnls", "nnls_columns", lambda: (_f64(1), _f64(1), _N, _N, _N)),
    "greedy.lpfhp": ("greedy", "lpfhp", lambda: (_i64(1), _N, _N)),
    "nnls.settle_dummies": ("nnls", "settle_dummies", lambda: (_i64(1, 1), _i64(1), _i64(1), _i64(2))),
    "nnls_grid.classes_to_lengths": ("nnls_grid", "classes_to_lengths",
                                     lambda: (_i64(1, 1), _i64(1), _i64(1), _N, _N)),
    "greedy.spfhp": ("greedy", "spfhp", lambda: (_i64(1), _N, _N)),
    # the optimal packer's depth repair (packlib.optimal._solver.exchange_passes)
    "exchange.repair_pass": ("exchange", "repair_pass", lambda: (_i64(1), _i64(1), _i64(1), _i64(1), _N, _N, _N, _N)),
    "exchange.pair_pass": ("exchange", "pair_pass",
                           lambda: (_i64(1), _i64(1), _i64(1), _i64(1), _N, _N, _N, _N, _N)),
    # the rest of the optimal packer and the lower bound (packlib.optimal), one unit each, so
    # that `python -m packlib compile` shares them between two processes (packlib._precompile)
    "optimal.exact_fill": ("optimal", "exact_fill", lambda: (_i64(1), _N, _N, _N)),
    "optimal.price": ("optimal", "price", lambda: (_f64(1), _i64(1), _N, _N, 1.0, _N, True)),
    "optimal.round_columns": ("optimal", "round_columns", lambda: (_i64(1, 1), _f64(1), _i64(1))),
    "optimal.max_pack_value": ("optimal", "max_pack_value", lambda: (_i64(1), _f64(1), _N, _N)),
    "optimal.max_pack_value-int64": ("optimal", "max_pack_value", lambda: (_i64(1), _i64(1), _N, _N)),
    "optimal.pack_value_at_most": ("optimal", "pack_value_at_most",
                                   lambda: (_readonly(_i64(1)), _readonly(_i64(1)), np.zeros(1, bool), _N, _N)),
    "exchange.pack_arena": ("exchange", "pack_arena", lambda: (_i64(1), _i64(1), _i64(1))),
    "exchange.kept_rows": ("exchange", "kept_rows", lambda: (_i64(1), _i64(1), _i64(1), _i64(1), _N)),
    "relaxed.expand_bucket_packs": ("relaxed", "expand_bucket_packs",
                                    lambda: (_i64(1, 1), _i64(1), _i64(1), _i64(1), _i64(1))),
}

#: :func:`packlib.nnls_pack`'s kernels, the costliest first.
NNLS_UNITS = ("nnls.nnls_columns", "greedy.lpfhp", "nnls.settle_dummies")
#: The same above its exact range (length classes).
NNLS_CLASS_UNITS = NNLS_UNITS + ("nnls_grid.classes_to_lengths",)


def _kernel(unit: str):
    from importlib import import_module

    module, name, _ = UNITS[unit]
    return getattr(import_module(f"._kernels.{module}", __package__), name)


def run_unit(unit: str) -> None:
    """Compile (or load from the cache) one unit's kernel for its call's argument types."""
    if unit not in UNITS:
        raise ValueError(f"unknown compile unit {unit!r}: expected one of {', '.join(UNITS)}")
    compile_for(_kernel(unit), *UNITS[unit][2]())


def compile_first_use(units) -> None:
    """Compile ``units`` in this process and a helper interpreter at once when two or more of
    them are neither compiled in this process nor in numba's cache; otherwise do nothing
    (each kernel then compiles or loads at its first call, as usual)."""
    if in_helper() or usable_cores() < 2:
        return
    cold = [unit for unit in units if not is_compiled(_kernel(unit))]
    if len(cold) >= 2:
        compile_in_processes(cold, run_unit, 2, __name__)


if __name__ == "__main__":  # a helper of compile_in_processes
    sys.exit(helper_main(sys.argv[1:], run_unit))
