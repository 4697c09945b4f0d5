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

import numpy as np

from ._certificates import _MAX_DENOMINATOR
from ._results import Certificate, _certificate
from ._solver import DEPTH_MODES, _dense_to_csr, _fill_plan, _Solver

GRIDS = (1024, 2048, 4096, 8192)  # grid sizes tried in turn while the gap stays open (fixed: deterministic)
GRID_WORK = 6.5e8  # ... a grid is skipped when its LPs' work (grid_work) is above this times time_goal(L) / 10 s


def time_goal(L: int) -> float:
    """Issue 30's time goals on a 2-core machine, in seconds: 8k 10, 16k-32k 20, 128k 60
    (64k: 40)."""
    return 10.0 if L <= 8192 else 20.0 if L <= 32768 else 40.0 if L <= 65536 else 60.0


def grid_work(K: int, depth: int, L: int) -> float:
    """A size for the LPs on a grid of ``K`` units: ``K**2 * (depth + 1)`` (the master has
    ``K`` rows, and deeper patterns make it denser and need more of them), twice over
    below ``K = L`` (a bound and a plan: two LPs; at ``K = L`` they are one), times
    ``(L / 8192) ** 0.25`` (the LP at 32,768 takes about twice as long as at 8,192 on the
    same grid). Calibrated so that the grid of 8,192 units at ``L = 8,192``, depth 8, fits
    its time goal (docs/optimal.md has the measurements)."""
    sides = 1 if K >= L else 2
    return float(K) * K * (depth + 1) * sides * (L / 8192) ** 0.25


def grid_affordable(K: int, depth: int, L: int) -> bool:
    """Whether the LPs on a grid of ``K`` units are cheap enough for ``L``: they fit its
    time goal, with the coarser grids' before them."""
    return K <= GRIDS[0] or grid_work(K, depth, L) <= GRID_WORK * time_goal(L) / 10


def grid_schedule(L: int, depth: int) -> list[int]:
    """The grids whose LPs run, in turn: the coarsest of ``GRIDS`` (cheap; often enough),
    then the finest affordable one (at most ``L`` units). The grids between them are
    skipped: the finest grid's LP started from the coarsest one's patterns ends as well
    and sooner (docs/optimal.md, "Long context")."""
    grids = sorted({min(K, L) for K in GRIDS if grid_affordable(min(K, L), depth, L)})
    return grids[:1] + grids[-1:] if len(grids) > 1 else grids


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
    ``seeds`` (patterns of units; not NNLSHP: seconds at ``K = 1024``)."""
    solver = _Solver(hk, K, depth, deadline, nnls=False)
    # seeded as in issue 22: fill 5's packs seed these LPs worse (at L = 8,192, depth 3,
    # 41 pricing rounds instead of 36, 35 % slower)
    solver.fill_modes = DEPTH_MODES[:4]
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


def grid_plan(h: np.ndarray, L: int, depth: int, K: int, deadline, last=None, solved=None):
    """A plan from the coarse (up) LP rounded to whole packs, the rest by the exact fill:
    ``((items, offsets, counts), lp_value, (K, patterns used))`` (CSR; ``lp_value`` bounds
    what a rounding of that LP can reach) or ``(None, nan, None)``. ``last`` and ``solved``
    as for :func:`grid_certificate`."""
    from .._kernels.optimal import round_columns
    from .._kernels.relaxed import expand_bucket_packs

    lp = grid_lp(h, L, depth, K, deadline, last, up=True) if solved is None else solved
    if lp is None:
        return None, float("nan"), None
    solver, lb = lp
    hk = solver.h
    if solver.x is None:
        return None, float("nan"), None
    rows, counts, _ = round_columns(solver.master.rows, np.floor(solver.x + 1e-9), hk)
    b = np.arange(K + 1, dtype=np.int64)
    lo, hi = (b - 1) * L // K + 1, b * L // K  # unit b holds lengths lo[b]..hi[b]
    packs, pack_counts, rest = expand_bucket_packs(rows, counts, h, lo, hi)
    keep = pack_counts > 0
    items, offsets = _dense_to_csr(packs[keep])
    pack_counts = pack_counts[keep]
    if rest.any():
        r_items, r_offsets, r_counts, _ = _fill_plan(rest, L, depth)
        items = np.concatenate([items, r_items])
        offsets = np.concatenate([offsets, r_offsets[1:] + offsets[-1]])
        pack_counts = np.concatenate([pack_counts, r_counts])
    return (items, offsets, pack_counts), lb.lp_value, (K, _used_patterns(solver))


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
