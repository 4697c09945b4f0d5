"""Each histogram method's kernels compiled before its first real call, in one process or two.

:func:`warm_method` runs a method on tiny histograms that reach every kernel it calls (so
that :func:`packlib.compare` times steady state, not compilation). :func:`share_first_compile`
does that for several methods on a new machine (an empty numba cache), sharing them with a
helper interpreter where there is a second core (:mod:`packlib._shared_compile`): the units
:func:`run_unit` names are what the two processes share.
"""
from __future__ import annotations

import sys

import numpy as np

from . import methods as _registry
from ._shared_compile import compile_in_processes, helper_main, in_helper, usable_cores

__all__ = ["LP_WARMUPS", "WARMUP_HISTOGRAM", "method_unit", "run_unit", "share_first_compile", "warm_method"]

# small, but the heuristics miss the bound on it at depth 2 (optimal_pack's LP, its rounding
# and the exact fill's exchanges run) and the exact fill's exchanges run at depth 3
WARMUP_HISTOGRAM = (5, 5, 2, 2, 2, 5, 0, 5, 0, 1, 3, 0, 3, 0, 3, 1, 3, 3)
# where the heuristics miss the bound at depth 3 and unlimited, so that optimal_pack solves
# its LP and rounds it there too (the kernels are the same at every depth; which of them run
# is not)
LP_WARMUPS = (
    ((0, 0, 1, 6, 7, 0, 0, 0, 2, 0, 0, 7, 0, 7, 6, 0, 5, 0, 1, 1, 3, 0, 3, 0, 0, 0, 0, 1, 4, 0, 6, 0, 0, 4, 0, 2,
      3, 0, 2, 1, 0, 0, 0, 3, 2, 0, 2, 5, 0, 7, 0, 0, 0, 0, 6, 0, 6, 5, 6, 5, 4, 2, 0), 3),
    ((3, 1, 0, 0, 0, 0, 0, 1, 0, 0, 6, 0, 0, 0, 2, 5, 0, 2, 1, 0, 2, 0, 0, 0, 6, 0, 0, 1, 7, 0, 0, 0, 7, 1, 0, 0,
      2, 0, 0, 0, 0, 0, 0, 3, 0, 0, 1, 4, 0, 0, 0, 0, 0, 5, 4, 7, 2, 6, 3, 0, 0, 0, 0), None),
)


def warm_method(name: str, depth: int | None, L: int | None = None) -> None:
    """Compile (or load) the kernels histogram method ``name`` runs at ``depth`` (and at
    capacity ``L``: NNLSHP's length-class kernels where it runs on classes)."""
    from ._nnls_limits import length_classes

    method = _registry.get(name, kind="histogram")
    tiny = np.asarray(WARMUP_HISTOGRAM, dtype=np.int64)
    method._run(tiny, tiny.size, depth)
    if name == "nnls" and L is not None and length_classes(L)[0] > 1:
        two = np.zeros(L, np.int64)
        two[[0, L - 1]] = 1
        method._run(two, L, depth)
    if name == "optimal":
        for counts, lp_depth in LP_WARMUPS:
            h = np.asarray(counts, dtype=np.int64)
            method._run(h, h.size, lp_depth)


def method_unit(name: str, depth: int | None, kind: str = "method", L: int | None = None) -> str:
    """The unit (:func:`run_unit`) that warms histogram method ``name`` at ``depth`` (and
    capacity ``L``, where NNLSHP runs on length classes)."""
    unit = f"{kind}:{name}:{'none' if depth is None else int(depth)}"
    return unit if L is None else f"{unit}:{int(L)}"


def run_unit(unit: str) -> None:
    """Compile (or load) one unit's kernels in this process, the unit named by a string that
    a helper interpreter can be given:

    - ``"method:NAME:DEPTH[:L]"``: histogram method ``NAME`` at ``DEPTH`` (an integer or
      ``none``), as :func:`warm_method` warms it;
    - ``"kernel:MODULE.NAME"``: one kernel, for the types its calls pass
      (:data:`packlib._first_use.UNITS`);
    - ``"optimal-kernels:optimal:DEPTH"``: the same for ``optimal`` (its LP warm-ups
      included), but with a plan of one sequence a pack standing in for the SPFHP, LPFHP and
      NNLSHP plans it also makes, so that another process can compile their kernels at the
      same time.
    """
    kind, name, depth_text, *rest = unit.split(":") + [""] * 2
    if kind == "kernel":
        from ._first_use import run_unit as run_kernel_unit

        run_kernel_unit(name)
        return
    if kind not in ("method", "optimal-kernels") or not name:
        raise ValueError(f"unknown compile unit {unit!r}: expected 'method:NAME:DEPTH' or "
                         "'optimal-kernels:optimal:DEPTH'")
    depth = None if depth_text == "none" else int(depth_text or 0)
    if kind == "method":
        warm_method(name, depth, int(rest[0]) if rest[0] else None)
        return
    from .optimal import _optimal
    from .optimal._solver import _Plan

    for counts, d in ((WARMUP_HISTOGRAM, depth), *LP_WARMUPS):
        h = np.asarray(counts, dtype=np.int64)
        present = np.flatnonzero(h)
        # a plain plan (no PackingPlan, whose canonical form the other process compiles)
        one_a_pack = _Plan(present + 1, np.arange(present.size + 1), h[present])
        _optimal(h, h.size, d, known={n: (one_a_pack, 0.0) for n in ("spfhp", "lpfhp", "nnls")})


# a kernel each method compiles on its first call: where it is compiled (or cached), the
# method's kernels are taken to be
_FIRST_KERNELS = {"optimal": ("optimal", "exact_fill"), "nnls": ("nnls", "nnls_columns"),
                  "lpfhp": ("greedy", "lpfhp"), "spfhp": ("greedy", "spfhp")}


def compile_units(names, depth, L: int) -> list[str]:
    """The units that compile histogram methods ``names`` at ``depth`` and capacity ``L``, in
    the order two processes share them best (each takes the next unit when free): the depth
    repair's two costly kernels and NNLSHP's solver first, one each, then the rest of the
    optimal packer (which by then loads them), LPFHP before it needs it, then the others."""
    from ._nnls_limits import length_classes

    units = []
    if "optimal" in names:
        units += ["kernel:exchange.repair_pass"]
    if "nnls" in names:
        units += ["kernel:nnls.nnls_columns"]
    if "optimal" in names:
        units += ["kernel:exchange.pair_pass", method_unit("optimal", depth, "optimal-kernels")]
    if "lpfhp" in names or "nnls" in names or "optimal" in names:
        units += ["kernel:greedy.lpfhp"]
    if "nnls" in names:
        units += ["kernel:nnls.settle_dummies"] + (["kernel:nnls_grid.classes_to_lengths"] if length_classes(L)[0] > 1
                                                   else [])
    return units + (["kernel:greedy.spfhp"] if "spfhp" in names else [])


def share_first_compile(names, depth, L: int) -> None:
    """Compile the kernels of histogram methods ``names`` (at ``depth`` and capacity ``L``) in
    this process and a helper at once (:func:`compile_units`), where two or more of them have
    nothing compiled or cached yet and the machine has a second core; otherwise do nothing."""
    from importlib import import_module

    from ._jit import is_compiled

    if in_helper() or usable_cores() < 2:
        return
    cold = [name for name in ("optimal", "nnls", "spfhp", "lpfhp") if name in names and not is_compiled(
        getattr(import_module(f"._kernels.{_FIRST_KERNELS[name][0]}", __package__), _FIRST_KERNELS[name][1]))]
    if len(cold) >= 2:
        compile_in_processes(compile_units(cold, depth, L), run_unit, 2, __name__)


if __name__ == "__main__":  # a helper of compile_in_processes
    sys.exit(helper_main(sys.argv[1:], run_unit))
