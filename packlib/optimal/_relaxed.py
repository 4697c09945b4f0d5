"""Long context with a depth limit: the LP of a coarser histogram, on both sides of the truth.

At ``L = 8k-128k`` the cutting-stock LP has one row per distinct length (up to ~10**5):
too big a master. On a grid of ``K`` units (``K = 1024 ... 8192``, :func:`grid_schedule`)
it is the LP packlib solves below ``L = 1024``, and rounding each length to the grid gives
both sides:

- **down** (``floor(l * K / L)`` units, capacity ``K``): any pack that fits ``L`` tokens
  fits ``K`` units (``sum floor <= floor sum``), so the coarse histogram needs at most as
  many packs, and its LP bound, with each length priced by its unit, is a bound for the
  real histogram. The certificate says so (``grid = K``) and is checked on the grid.
- **up** (``ceil(l * K / L)`` units): any pack that fits ``K`` of these units fits ``L``
  tokens, so the coarse LP, rounded to whole packs, is a plan for the real lengths (each
  unit's longest lengths first); what the rounding leaves is packed by the exact fill.

Between the two lies the true LP; the finer the grid, the closer they meet. The LP sees
depth and tokens together, which neither the cardinality nor the L2 bound does.

A third bound, the *slot* bound, costs nothing: a sequence of length ``l`` shares its pack
with at most ``m(l) - 1`` others, where ``m(l) - 1`` is how many of the shortest length
fit in ``L - l`` (at most ``depth - 1``); pricing it ``1 / m(l)`` makes no pack
worth more than 1 (a pack of ``k`` sequences has every ``m >= k``). Its variant for the
sequences longer than ``L / 2`` (at most one per pack) prices them ``depth - m(l) + 1``
and every other sequence 1, over ``depth``: a huge sequence with room for few tiny ones
beside it takes the slots it leaves empty.
"""
from __future__ import annotations

import time

import numpy as np

from ._certificates import _MAX_DENOMINATOR
from ._results import Certificate, _certificate
from . import _tuning
from ._solver import _dense_to_csr, _fill_plan, _Solver

def time_goal(L: int) -> float:
    """The seconds the grid LPs are sized for at capacity ``L`` (on a 2-core machine; the
    battery of docs/optimal.md measures the packer against these goals)."""
    return next((goal for top, goal in _tuning.TIME_GOALS if L <= top), _tuning.LONGEST_TIME_GOAL)


def grid_work(K: int, depth: int, L: int, sides: int | None = None) -> float:
    """A size for the LPs on a grid of ``K`` units: ``K**2 * (depth + 1)`` (the master has
    ``K`` rows, and deeper patterns make it denser and need more of them), times ``sides``
    (the bound's LP and the plan's; by default two below ``K = L``, where they are one),
    times ``(L / 8192) ** 0.25`` (the LP at 32,768 takes about twice as long as at 8,192
    on the same grid). Calibrated so that the grid of 8,192 units at ``L = 8,192``, depth
    8, fits its time goal (docs/optimal.md has the measurements)."""
    if sides is None:
        sides = 1 if K >= L else 2
    return float(K) * K * (depth + 1) * sides * (L / 8192) ** 0.25


def plan_work(K: int, depth: int, L: int) -> float:
    """:func:`grid_work` of the plan side's LP alone, its depth counted up to 8: started
    from a coarser grid's patterns, it is no slower at depth 16 than at depth 8
    (docs/optimal.md has the measurements)."""
    return grid_work(K, min(depth, 8), L, sides=1)


def _budget(L: int) -> float:
    return _tuning.GRID_WORK * time_goal(L) / 10


def grid_affordable(K: int, depth: int, L: int) -> bool:
    """Whether the LPs on a grid of ``K`` units (both sides) are cheap enough for ``L``:
    they fit its time goal, with the coarser grids' before them."""
    return K <= _tuning.GRIDS[0] or grid_work(K, depth, L) <= _budget(L)


def grid_schedule(L: int, depth: int) -> list[tuple[int, bool, bool]]:
    """The grid LPs that run, in turn, as ``(K, bound side, plan side)``: the coarsest of
    ``GRIDS`` (cheap; often enough), then

    - the grid of ``L`` units (the exact LP: both sides in one) where it is affordable;
    - else the plan side on the finest grid whose LP takes at most ``PLAN_SHARE`` of the
      work allowed (:func:`plan_work`), after both sides on the finest grid at most half
      as fine that fits in the rest (drawn as a line between units, the bound side needs
      half the resolution of the plan side: docs/optimal.md).

    The grids between are skipped: a fine grid's LP started from the coarsest one's
    patterns ends as well and sooner."""
    K0 = min(_tuning.GRIDS[0], L)
    steps = [(K0, True, True)]
    budget = _budget(L)
    if L <= _tuning.GRIDS[-1] and grid_work(L, depth, L) <= budget:
        return steps + [(L, True, True)] if L > K0 else steps
    finer = [K for K in _tuning.GRIDS if K0 < K < L]
    plan = max([K for K in finer if plan_work(K, depth, L) <= _tuning.PLAN_SHARE * budget], default=K0)
    both = max([K for K in finer if 2 * K <= plan and grid_work(K, depth, L) <= budget], default=K0)
    if both == K0 and plan > K0 and grid_work(plan, depth, L) <= budget:
        both = plan  # no grid between: both sides on the plan's
    if both > K0:
        steps.append((both, True, plan == both))
    if plan > both:
        steps.append((plan, False, True))
    return steps


def _units(L: int, K: int, up: bool) -> np.ndarray:
    """The grid unit of each length ``1..L`` (int64)."""
    lengths = np.arange(1, L + 1, dtype=np.int64)
    return -(-lengths * K // L) if up else lengths * K // L


def _coarse_histogram(h: np.ndarray, units: np.ndarray, K: int) -> np.ndarray:
    """Sequences per unit ``1..K`` (unit 0 left out), exact int64."""
    out = np.zeros(K + 1, dtype=np.int64)
    np.add.at(out, units, h)
    return out[1:]


def _coarse_solver(hk: np.ndarray, K: int, depth: int, deadline, seeds=None):
    """The LP of the coarse histogram, seeded by the greedy packers, the exact fill and
    ``seeds`` (patterns of units; not NNLSHP, too slow on grids this fine)."""
    solver = _Solver(hk, K, depth, deadline, nnls=False)
    # seeded without the last fill mode: its packs seed these LPs worse (more pricing
    # rounds; docs/optimal.md)
    solver.fill_modes = _tuning.SHORT_CONTEXT_DEPTH_MODES
    # without the exchanges' repair: it only seeds these LPs, and cost more than the LP at
    # L = 32,768, depth 16 (docs/optimal.md)
    solver.repair = False
    solver.run_heuristics(("lpfhp", "spfhp", "fill"))
    solver.seeds = seeds
    return solver, solver.bound()


def _used_patterns(solver) -> np.ndarray:
    """The patterns the LP solution uses (rows of units), to seed a finer grid's LP."""
    if solver.x is None:
        return np.zeros((0, 1), np.int64)
    return solver.master.rows[solver.x > 1e-9]


def finer_patterns(rows: np.ndarray, K: int, K2: int, hk2: np.ndarray, up: bool) -> np.ndarray:
    """Patterns of a grid of ``K`` units as patterns of one of ``K2 = r * K`` units (``r``
    whole) that fit it: a unit ``b`` of the coarse grid covers the fine units ``r*b - r +
    1 .. r*b`` (up) or ``r*b .. r*b + r - 1`` (down); it becomes the present one of them
    nearest ``r*b`` from below (up: ``sum r*b <= K2``) or from above (down; patterns then
    over ``K2`` are dropped)."""
    if K2 % K or not rows.size:
        return np.zeros((0, 1), np.int64)
    r = K2 // K
    present = np.concatenate([[False], hk2 > 0])
    out = np.where(rows > 0, r * rows, 0)
    for shift in range(1, r):  # move to a present unit of the same coarse unit
        step = -1 if up else 1
        missing = (rows > 0) & ~present[np.clip(out, 0, K2)]
        out = np.where(missing, out + step, out)
    ok = (rows == 0) | present[np.clip(out, 0, K2)]
    keep = ok.all(axis=1) & (out.sum(axis=1) <= K2)
    return out[keep]


def grid_lp(h: np.ndarray, L: int, depth: int, K: int, deadline, last=None, up: bool = False):
    """The LP of the histogram on a grid of ``K`` units, lengths rounded ``up`` or down:
    ``(solver, bound)`` (:func:`_coarse_solver`), or None when no length reaches one unit.
    ``last``: ``(K, patterns)`` of a coarser grid's LP, to start from. With ``K == L`` the
    grid is the lengths themselves, and both sides are this one LP."""
    hk = _coarse_histogram(h, _units(L, K, up=up), K)
    if not hk.any():
        return None
    seeds = None if last is None else finer_patterns(last[1], last[0], K, hk, up=up)
    return _coarse_solver(hk, K, depth, deadline, seeds)


def grid_certificate(h: np.ndarray, L: int, depth: int, K: int, deadline, last=None, solved=None):
    """The coarse (down) LP's certificate, each length priced by its unit; verified on
    the grid (:func:`verified_grid`). ``last`` as for :func:`grid_lp`; ``solved``: that
    LP, already solved. Returns ``(certificate or None, (K, patterns used))``."""
    units = _units(L, K, up=False)
    lp = grid_lp(h, L, depth, K, deadline, last) if solved is None else solved
    if lp is None:
        return None, None
    solver, lb = lp
    c = lb.certificate
    if c is None:  # pragma: no cover - the simple certificates always exist
        return None, None
    # a unit priced below a smaller present unit takes its price: a pack may swap the
    # larger unit for the smaller one, so no pack gains (and the bound can only rise)
    price_of = np.zeros(K + 1, dtype=np.int64)
    price_of[c.lengths] = c.prices
    price_of = np.maximum.accumulate(price_of)
    lens = np.flatnonzero(h) + 1
    prices = price_of[units[lens - 1]]
    cert = verified_grid(_certificate(lens, h[lens - 1], prices, c.denominator, L, depth, grid=K))
    return cert, (K, _used_patterns(solver))


def interpolated_certificate(h: np.ndarray, L: int, depth: int, cert: Certificate | None) -> Certificate | None:
    """The grid certificate ``cert``'s prices drawn as a line between units: a length
    ``l``, ``t = l * K / L - u`` of the way from unit ``u = floor(l * K / L)`` to ``u + 1``,
    is priced ``(1 - t) * p[u] + t * p[u + 1]`` instead of ``p[u]``. Every length is priced
    at least as before, and the best pack over tokens is worth the same on the grid's LP
    duals (a pack that gains on the line pays for it in tokens, at the rate the prices rise
    between units), so the bound rises by what the grid rounded away: on the battery's rows,
    half to all of the way to the plan side's LP (docs/optimal.md). The claim is over tokens
    (no grid), its denominator the exact DP (``_certify``), which only runs when it is cheap:
    only the lengths priced above every shorter one enter it. None when not affordable."""
    from ._certificates import _certify

    if cert is None or cert.grid is None:
        return None
    K = cert.grid
    u = _units(L, K, up=False)  # of each length 1..L
    unit_price = np.zeros(K + 2, dtype=np.float64)
    unit_price[u[cert.lengths - 1]] = cert.prices / cert.denominator
    unit_price = np.maximum.accumulate(unit_price)
    t = (np.arange(1, L + 1, dtype=np.int64) * K - u * L) / L
    y = (1.0 - t) * unit_price[u] + t * unit_price[u + 1]
    present = y[h > 0]
    rising = int(np.count_nonzero(present > np.maximum.accumulate(np.concatenate([[0.0], present]))[:-1]))
    if float(rising) * (depth + 1) * L > _tuning.INTERPOLATION_WORK * time_goal(L):
        return None
    return _certify(y, h, L, depth)


def verified_grid(cert: Certificate | None) -> Certificate | None:
    """``cert`` (with a ``grid``) if its prices are a function of the unit and an exact DP
    on the grid proves every pack of units worth at most its denominator, else None."""
    from .._kernels.optimal import max_pack_value

    if cert is None:
        return None
    K, L, D = cert.grid, cert.max_sequence_length, cert.max_sequences_per_pack
    units = cert.lengths * K // L
    sizes, first = np.unique(units, return_index=True)
    price = cert.prices[first]
    if (cert.prices != price[np.searchsorted(sizes, units)]).any() or (price[sizes == 0] != 0).any():
        return None
    keep = sizes > 0
    value = int(max_pack_value(sizes[keep], price[keep], K, 0 if D is None or D >= K else D))
    return cert if value <= cert.denominator else None


def grid_plan(h: np.ndarray, L: int, depth: int, K: int, deadline, last=None, solved=None, target: int = 0,
              roundings: int | None = None):
    """A plan from the coarse (up) LP rounded down to whole packs; what that leaves is
    packed by the LP of its own histogram (on at most ``REST_GRID`` units), rounded again
    (up to ``roundings`` times, by default ``ROUNDINGS``, while time is left and the plan
    has more than ``target`` packs, a proven bound), and the last rest by the exact fill;
    the best of those stopping points. Returns ``((items, offsets, counts), lp_value, (K,
    patterns used))`` (CSR; ``lp_value`` bounds what a rounding of that LP can reach) or
    ``(None, nan, None)``. ``last`` and ``solved`` as for :func:`grid_certificate`."""
    lp = grid_lp(h, L, depth, K, deadline, last, up=True) if solved is None else solved
    if lp is None or lp[0].x is None:
        return None, float("nan"), None
    solver, lb = lp
    used = (K, _used_patterns(solver))
    parts, rest = [], h
    best = None
    k = K
    for i in range((_tuning.ROUNDINGS if roundings is None else roundings) + 1):
        if i:
            # the rest's own LP, on a grid of at most _tuning.REST_GRID units: it needs a few
            # thousand packs, which a coarser grid rounds as well, and sooner (the same
            # master restarted from its basis with the rest as demand spreads it over
            # thousands of patterns, each below one copy: nothing to round)
            k = min(K, _tuning.REST_GRID)
            again = grid_lp(rest, L, depth, k, deadline, used if k == K else None, up=True)
            if again is None or again[0].x is None:
                break
            solver = again[0]
        packs, rest = _rounded_packs(solver.master.rows, solver.x, solver.h, k, rest, L)
        parts.append(packs)
        filled = _fill_plan(rest, L, depth)[:3] if rest.any() else None
        total = sum(int(p[2].sum()) for p in parts) + (0 if filled is None else int(filled[2].sum()))
        if best is None or total < best[0]:
            best = (total, _joined(parts + ([] if filled is None else [filled])))
        if best[0] <= target or rest.sum() <= 2 * depth or (deadline is not None and time.perf_counter() > deadline):
            break
    return best[1], lb.lp_value, used


def _rounded_packs(rows: np.ndarray, x: np.ndarray, hk: np.ndarray, K: int, h: np.ndarray, L: int):
    """The up LP's solution ``x`` over patterns ``rows`` (of units, demand ``hk``) rounded
    down to whole patterns, as packs of the real lengths ``h`` (CSR ``(items, offsets,
    counts)``), and the histogram of what they leave."""
    from .._kernels.optimal import round_columns
    from .._kernels.relaxed import expand_bucket_packs

    rows, counts, _ = round_columns(rows, np.floor(x[: rows.shape[0]] + 1e-9), hk)
    b = np.arange(K + 1, dtype=np.int64)
    lo, hi = (b - 1) * L // K + 1, b * L // K  # unit b holds lengths lo[b]..hi[b]
    packs, pack_counts, rest = expand_bucket_packs(rows, counts, h, lo, hi)
    keep = pack_counts > 0
    items, offsets = _dense_to_csr(packs[keep])
    return (items, offsets, pack_counts[keep]), rest


def _joined(parts):
    """CSR plans ``(items, offsets, counts)`` as one."""
    items = np.concatenate([p[0] for p in parts])
    widths = np.concatenate([np.diff(p[1]) for p in parts])
    offsets = np.concatenate([[0], np.cumsum(widths)]).astype(np.int64)
    return items, offsets, np.concatenate([p[2] for p in parts])


def large_slot_certificate(h: np.ndarray, L: int, depth: int) -> Certificate | None:
    """The slot bound of the sequences longer than ``L / 2`` (module docs): every sequence
    is priced 1, except that one longer than ``L / 2`` beside which only ``m`` others fit
    (``m = min(depth - 1, (L - l) // shortest)``) is priced ``depth - m``; the denominator
    is ``depth``. A pack holds at most one such sequence, and then at most ``m`` others,
    so no pack is worth more than ``depth``: many tiny sequences beside huge ones, where a
    huge one with little room leaves its pack's other slots empty (``None`` when no long
    sequence has fewer than ``depth - 1`` slots beside it). The denominator is the exact
    DP's (fast: only the shortest length of each price counts), so the bound holds whatever
    the argument above."""
    from .._kernels.optimal import max_pack_value

    lens = np.flatnonzero(h) + 1
    if not lens.size or depth is None or depth < 2:
        return None
    m = np.minimum(depth - 1, (L - lens) // lens[0])
    prices = np.where(2 * lens > L, depth - m, 1).astype(np.int64)
    if (prices == 1).all():
        return None
    den = int(max_pack_value(lens, prices, L, 0 if depth >= L else depth))
    if den <= 0:  # pragma: no cover - every price is at least 1
        return None
    return _certificate(lens, h[lens - 1], prices, den, L, depth)


def slot_certificate(h: np.ndarray, L: int, depth: int) -> Certificate | None:
    """The slot bound (module docs): a length ``l`` priced ``floor(2**40 / m(l))``; the
    denominator is the exact best pack (a DP over at most ``depth`` distinct prices)."""
    from .._kernels.optimal import max_pack_value

    lens = np.flatnonzero(h) + 1
    if not lens.size or depth is None:
        return None
    counts = h[lens - 1]
    # the claim is over packs with any number of copies of each length, so the others in a
    # pack of l are at least the shortest length each
    m = 1 + np.minimum(depth - 1, (L - lens) // lens[0])
    prices = _MAX_DENOMINATOR // m
    den = int(max_pack_value(lens, prices, L, 0 if depth >= L else depth))
    if den <= 0 or den > _MAX_DENOMINATOR:  # pragma: no cover - m(l) >= k on every pack of k
        return None
    return _certificate(lens, counts, prices, den, L, depth)
