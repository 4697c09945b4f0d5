"""Near-optimal histogram packing with a proven lower bound on the number of packs.

:func:`lower_bound` proves how few packs *any* packing of a histogram can use;
:func:`optimal_pack` returns a plan together with that proof, so ``plan.gap`` says exactly
how many packs (at most) it leaves on the table.

How it works
------------
The bound is the linear-programming relaxation of the cutting-stock model (Gilmore and
Gomory, 1961): one variable per *pattern* (a multiset of at most ``D`` lengths with at most
``L`` tokens, no length more often than the histogram has it), minimise the number of packs
subject to covering every length. There are millions of patterns, so they are generated
on demand (*column generation*): HiGHS (through :func:`scipy.optimize.linprog`) solves the
LP over the patterns found so far, and a dynamic programme (the *pricing* kernel) finds,
for every length, the pattern the current dual prices value most; patterns worth more than
one pack enter. When none does, the LP is solved.

The bound is certified, not read off the solver: any non-negative prices ``y`` with
``max over patterns of sum(y) = v`` prove ``packs >= sum(h * y) / v`` (Farley, 1990). The
prices are rounded down to integers over ``2**48`` so the DP computes ``v`` exactly, and
the quotient is a :class:`fractions.Fraction`, so solver tolerances cannot inflate the bound.
The same argument gives a valid bound when column generation stops early (``time_limit``).

The plan rounds the LP solution down to whole packs and packs the few hundred sequences
left over with NNLSHP and LPFHP; the result is compared with SPFHP, LPFHP, NNLSHP and an
exact-fill packer on the whole histogram and the best plan is returned.

Every bound comes with a :class:`Certificate`: integer prices per length and a
denominator that bounds every pack's price sum, checkable by a plain knapsack DP without
packlib (``tests/naive_certificate.py``).

Long context (``L > 1024``): the LP of the whole histogram has up to ~10**5 rows and each
pricing round ~10**10 DP cells, so it is not run (nor NNLSHP) unless affordable. The bound
is the best of the Martello-Toth L2 family (a dual-feasible function: long sequences priced
1, short ones 0, the rest by length), verified exactly, which on real length distributions
equals the LP optimum; the plan comes from the exact-fill packer
(:func:`packlib._kernels.optimal.exact_fill`). With a depth limit, the LPs of the histogram
coarsened to grids of 1,024 to 8,192 units run in turn while the gap stays open
(:mod:`packlib.optimal._relaxed`): a bound from the grid rounded down, a plan from the grid
rounded up. See ``docs/optimal.md``.
"""
from __future__ import annotations

import math
import time

import numpy as np

from .._plan import PackingPlan
from ..packing import _histogram_args, histogram_signature
from .._validate import as_time_limit
from . import _tuning
from . import _relaxed
from ._certificates import _best_certificate, _l2_certificate, _simple_bounds, _simple_certificates, _verified
from ._results import FINISHED, TIME_LIMIT, Certificate, LowerBound
from ._solver import _dense_to_csr, _Plan, _Solver

__all__ = ["Certificate", "LowerBound", "lower_bound", "optimal_pack"]


@histogram_signature
def lower_bound(histogram, max_sequence_length: int | None = None, max_sequences_per_pack: int | None = 3) -> LowerBound:
    """A proven lower bound on the number of packs any packing of ``histogram`` needs.

    The main bound is the cutting-stock LP relaxation (Gilmore-Gomory), solved by column
    generation with HiGHS and certified from a dual solution whose value is checked
    exactly (see :mod:`packlib.optimal`), so solver tolerances cannot make it too high.
    The simpler bounds are reported too: ``ceil(tokens / L)``, one pack per sequence longer
    than ``L / 2``, and ``ceil(sequences / max_sequences_per_pack)``.

    Parameters
    ----------
    histogram : array_like of int, shape ``(L,)``
        ``histogram[i]`` = number of sequences of length ``i + 1``.
    max_sequence_length : int, optional
        Pack capacity; defaults to ``len(histogram)``.
    max_sequences_per_pack : int or None, default 3
        Depth limit; ``None`` for unlimited. (Histogram packers default to the paper's 3,
        docs/design.md "Defaults": their results compare with the paper's tables there.)

    Returns
    -------
    LowerBound
        ``int(result)`` / ``result.bound`` is the best of the bounds.

    ``result.certificate`` proves ``result.bound`` in integers anyone can check (see
    :class:`Certificate`); ``result.status`` / ``result.message`` say how it stopped.

    Notes
    -----
    Up to ``L = 1024``: a few LP solves over a few thousand patterns. Column generation
    starts from LPFHP's and SPFHP's strategies; if 6 rounds do not solve the LP, NNLSHP runs
    and its strategies (which nearly always contain an optimal basis) are added; the
    pricing DP takes ``O(L^2 * D)`` time and bytes per round. Above ``L = 1024`` (long
    context) the LP is not solved: the bound is the best L2 bound (see the module docs),
    ``O(L)`` plus an exact check of its certificate.

    See Also
    --------
    optimal_pack : a plan within the gap of this bound.

    References
    ----------
    As for :func:`optimal_pack`: Gilmore and Gomory (1961), Martello and Toth (1990).

    Examples
    --------
    >>> import packlib
    >>> packlib.lower_bound([0, 0, 3, 2, 1, 0, 2, 0, 0, 0], max_sequences_per_pack=2)  # doctest: +ELLIPSIS
    LowerBound(4 packs of 10 tokens, max 2 per pack: LP 4 (value 4.000), ...)
    """
    return _lower_bound(*_histogram_args(histogram, max_sequence_length, max_sequences_per_pack))


def _lower_bound(h: np.ndarray, L: int, depth: int | None) -> LowerBound:
    """:func:`lower_bound` of arguments already checked (``_histogram_args``)."""
    solver = _Solver(h, L, depth, None)
    if solver.long:
        if solver.depth is not None:  # the grid LPs stop by the plans' gap: the same plans as optimal_pack
            solver.run_heuristics(_greedy_names(h, L))
            _close_depth_gap(solver)
        return solver.bound(lp=False)
    if h.any():
        solver.run_heuristics(("lpfhp", "spfhp"))
    return solver.bound()


@histogram_signature
def optimal_pack(
    histogram,
    max_sequence_length: int | None = None,
    max_sequences_per_pack: int | None = 3,
    *,
    time_limit: float | None = None,
) -> PackingPlan:
    """Near-optimal histogram packing, with a proof of how near.

    Computes the certified LP lower bound of :func:`lower_bound`, rounds the LP solution
    down to whole packs, packs the few hundred sequences left over with NNLSHP and LPFHP
    (also after giving back one copy of every LP pattern, which leaves the leftover
    packers more freedom), and returns the best of those plans and of SPFHP, LPFHP,
    NNLSHP and the exact-fill packer on the whole histogram, so it is never worse than
    any of them. Above ``L = 1024`` (long context) the plan is the exact-fill packer's
    (and never worse than SPFHP and LPFHP up to ``L = 2048``) and the bound the L2 bound:
    see :func:`lower_bound`.

    Parameters
    ----------
    histogram, max_sequence_length, max_sequences_per_pack
        As for :func:`packlib.spfhp_pack`.
    time_limit : float, optional
        Seconds. Checked between steps (the LP rounds, the repair attempts, NNLSHP); SPFHP
        and LPFHP always run, so the call may overrun a very small limit by milliseconds to
        a fraction of a second. Stopping early returns the best plan found so far with the
        bound proven so far (still valid, maybe weaker); if time ran out before NNLSHP
        could run, the plan is only guaranteed to be no worse than SPFHP and LPFHP.
        Must be > 0.

    Returns
    -------
    PackingPlan
        ``method == "optimal"``, ``plan.lower_bound`` the proven bound and ``plan.gap``
        the packs above it; ``plan.bound`` the :class:`LowerBound` with its certificate;
        ``plan.status``: ``0`` finished normally (always when ``gap == 0``), ``1``
        stopped by ``time_limit`` with a gap left, ``2`` column generation reached its
        round limit; ``plan.message`` says so in a sentence. ``plan.info`` holds
        ``"bound"`` (the :class:`LowerBound` again), ``"source"`` (which step produced the
        plan: ``"lp-rounding"``, ``"lpfhp"``, ``"spfhp"``, ``"nnls"``, ``"fill"`` (with
        ``info["fill"]``, the exact-fill variant) or ``"grid"`` (long context with a depth
        limit: the rounding of a grid's LP, with ``info["grid"]``)), ``"heuristics"``
        (packs of each heuristic, by registry name), ``"seconds"``.

    See Also
    --------
    lower_bound : the bound alone.
    nnls_pack, lpfhp_pack : the heuristics it starts from.
    compare : every method side by side.

    References
    ----------
    .. [1] P. C. Gilmore, R. E. Gomory, "A linear programming approach to the cutting-stock
       problem", Operations Research 9(6), 1961.
    .. [2] S. Martello, P. Toth, "Lower bounds and reduction procedures for the bin packing
       problem", Discrete Applied Mathematics 28(1), 1990.

    Examples
    --------
    >>> import packlib
    >>> plan = packlib.optimal_pack(packlib.datasets.wikipedia_512(), max_sequences_per_pack=3)  # doctest: +SKIP
    >>> plan.num_packs, plan.lower_bound, plan.gap                         # doctest: +SKIP
    (8143830, 8143829, 1)
    """
    t0 = time.perf_counter()
    h, L, depth = _histogram_args(histogram, max_sequence_length, max_sequences_per_pack)
    return _optimal(h, L, depth, time_limit=as_time_limit(time_limit), started=t0)


def _optimal(h: np.ndarray, L: int, depth: int | None, *, time_limit: float | None = None,
             started: float | None = None, known: dict | None = None) -> PackingPlan:
    """:func:`optimal_pack` of arguments already checked (``_histogram_args``, a time limit
    in seconds or ``None``). ``known``: heuristic plans already made on the same arguments,
    ``{name: (plan, seconds)}``; those the solver takes are removed from it."""
    t0 = time.perf_counter() if started is None else started
    solver = _Solver(h, L, depth, None if time_limit is None else t0 + time_limit, known=known)
    user_depth, depth = depth, solver.depth
    long = solver.long
    solver.run_heuristics(_greedy_names(h, L))
    if long and solver.depth is not None:
        _close_depth_gap(solver)
    trivial, large, card = _simple_bounds(h, L, user_depth)
    greedy_best = min(p.num_packs for p in solver.heuristics.values())
    # a greedy plan that meets a simple bound is optimal: no LP needed. Otherwise NNLSHP
    # nearly always runs anyway (the guarantee), and its strategies seed the LP
    l2_cert = _verified(_l2_certificate(h, L, depth)[0])
    l2 = 0 if l2_cert is None else l2_cert.bound
    need_lp = greedy_best > max(trivial, large, card, l2) and not long
    if need_lp:
        solver.run_heuristics(("nnls",))
    lb = solver.bound(lp=need_lp)
    found = None
    heuristic_best = min(p.num_packs for p in solver.heuristics.values())
    if heuristic_best > lb.bound and not long:
        found = solver.round_and_repair(lb.bound, heuristic_best)
        best_so_far = heuristic_best if found is None else found[0]
        if best_so_far > lb.bound and "nnls" not in solver.heuristics:
            solver.run_heuristics(("nnls",))  # the guarantee: never worse than NNLSHP
    return _best_plan(solver, found, lb, h, L, user_depth, t0)


def _greedy_names(h: np.ndarray, L: int) -> tuple[str, ...]:
    """The heuristics run first: SPFHP and LPFHP cost up to ``O(L**2 * depth)``, so above
    ``L = 2048`` only the exact fill runs (unless few lengths are present)."""
    few = np.count_nonzero(h) <= _tuning.LP_LENGTHS
    return ("fill",) if L > 2 * _tuning.LONG_CONTEXT and not few else ("lpfhp", "spfhp", "fill")


def _close_enough(packs: int, bound: int) -> bool:
    """Within 0.01 % of the bound, or one pack."""
    return packs - bound <= max(1, bound // _tuning.CLOSE_ENOUGH)


def _close_depth_gap(solver: _Solver) -> None:
    """Long context with a depth limit: the slot bound, then the grid LPs (a bound from
    the coarse histogram rounded down, a plan from it rounded up; see
    :mod:`packlib.optimal._relaxed`) on the grids of ``grid_schedule`` in turn, while the best
    plan is not within 0.01 % (or one pack) of the best bound, the grid is affordable and
    time is left (``grid_schedule`` says which side runs on which grid). Adds to
    ``solver.extra_certificates`` and ``solver.heuristics["grid"]``. Deterministic: the
    grids are fixed. The bound side is skipped once the plan side's LP
    (above the true LP, which is above every bound side) has a ceiling the bound already
    reaches; then no finer grid can raise the bound."""
    h, L, depth = solver.h, solver.L, solver.depth
    solver.extra_certificates.append(_relaxed.slot_certificate(h, L, depth))
    solver.extra_certificates.append(_relaxed.large_slot_certificate(h, L, depth))
    base = _simple_certificates(h, L, depth) + [_verified(_l2_certificate(h, L, depth)[0])]
    up = math.inf  # the plan side's last LP value
    last_down = last_up = None  # the last LPs' patterns (with their grid), to start the next from
    steps = _relaxed.grid_schedule(L, depth)
    # the LPs stop a little before the deadline: what follows a stopped LP (its rounding,
    # the fill of its rest, the certificates) then fits in the time limit as well
    lp_deadline = solver.deadline
    if lp_deadline is not None:
        lp_deadline -= _tuning.LP_MARGIN * max(lp_deadline - time.perf_counter(), 0.0)
    last_plan = max((i for i, step in enumerate(steps) if step[2]), default=-1)
    for i, (K, bound_side, plan_side) in enumerate(steps):
        bound = _best_certificate(base + solver.extra_certificates).bound
        packs = min(p.num_packs for p in solver.heuristics.values())
        if _close_enough(packs, bound) or not solver.time_left():
            break
        if lp_deadline is not None and time.perf_counter() >= lp_deadline:
            solver.stopped = True  # (the time left is the margin)
            break
        # on a grid of L units both sides are the LP of the lengths themselves: solved once
        exact = _relaxed.grid_lp(h, L, depth, K, lp_deadline, last_down or last_up) if K == L else None
        ran = False
        if bound_side and up - 1e-6 > bound:  # (the bound is whole: the plan side's ceiling is above it)
            last_down = _grid_bound(solver, K, last_down, exact, lp_deadline)
            ran = True
        if plan_side and solver.time_left():
            # the rest of the rounding is solved again only on the last plan side (a finer
            # grid's plan follows the others)
            again = i == last_plan
            target = _best_certificate(base + solver.extra_certificates).bound if again else 0
            plan, value, last_up = _relaxed.grid_plan(h, L, depth, K, lp_deadline, last_up, exact, target,
                                                      None if again else 0)
            if math.isfinite(value):
                up = min(up, value)
            if plan is not None and plan[2].sum() < packs:
                solver.heuristics["grid"] = _Plan(*plan, how=f"grid {K}")
            ran = True
        if ran:
            solver.grids.append(K)


def _grid_bound(solver: _Solver, K: int, last, exact, deadline):
    """The bound side on a grid of ``K`` units: its certificate and, below ``K = L``, the
    same prices drawn as a line between units (``_relaxed.interpolated_certificate``), added
    to ``solver.extra_certificates``. Returns the patterns its LP used (to start the next)."""
    h, L, depth = solver.h, solver.L, solver.depth
    cert, used = _relaxed.grid_certificate(h, L, depth, K, deadline, last, exact)
    solver.extra_certificates.append(cert)
    line = _relaxed.interpolated_certificate(h, L, depth, cert) if K < L else None
    if line is not None:
        solver.extra_certificates.append(line)
        solver.interpolated[id(line)] = K
    return used


def _best_plan(solver, found, lb, h, L, user_depth, t0) -> PackingPlan:
    """The best of the heuristics' plans and the LP rounding's, with its proof and status."""
    source, best = min(solver.heuristics.items(), key=lambda kv: kv[1].num_packs)
    items, offsets, counts = best.strategy_items, best.strategy_offsets, best.counts
    info = {}
    if source in ("fill", "grid"):
        info[source] = best.how  # which exact-fill variant, or grid
    if found is not None and found[0] < best.num_packs:
        _, strategies, counts, k = found
        items, offsets = _dense_to_csr(np.asarray(strategies))
        source = "lp-rounding"
        info["rounding_slack"] = k
    info.update(
        bound=lb,
        source=source,
        heuristics={name: p.num_packs for name, p in solver.heuristics.items()},
        seconds=time.perf_counter() - t0,
    )
    packs = int(np.asarray(counts).sum())
    gap = packs - lb.bound
    summary = f"{packs:,} packs, {gap:,} above the proven lower bound {lb.bound:,}"
    if gap == 0:
        status, message = FINISHED, f"{summary}: optimal"
    elif lb.status == TIME_LIMIT or solver.stopped:
        status, message = TIME_LIMIT, f"{summary}; stopped by the time limit (a longer run may close the gap)"
    elif lb.status != FINISHED:
        status, message = lb.status, f"{summary}; {lb.message}"
    else:
        status, message = FINISHED, f"{summary}"
    plan = PackingPlan.from_ragged(items, offsets, counts, L, user_depth, method="optimal", lower_bound=lb.bound,
                                   info=info, bound=lb, status=status, message=message)
    if not np.array_equal(plan.histogram(), h):  # pragma: no cover - internal consistency
        raise RuntimeError("optimal_pack built a plan that does not match the histogram; please report this")
    return plan
