"""The search shared by :func:`lower_bound` and :func:`optimal_pack`: heuristics, bound, rounding."""
from __future__ import annotations

import time

import numpy as np

from .._kernels.fill_modes import EVEN_PAIR
from .._plan import PackingPlan, csr_to_dense
from ..packing import _lpfhp, _nnls, _spfhp
from . import _tuning
from ._certificates import (
    _best_certificate,
    _certify,
    _l2_certificate,
    _simple_bounds,
    _simple_certificates,
    _verified,
)
from ._lp import (
    _caps,
    _column_generation,
    _ColumnPool,
    _initial_patterns,
    _Master,
    _max_items,
)
from ._results import FINISHED, ROUND_LIMIT, TIME_LIMIT, LowerBound


def _long_context(h: np.ndarray, L: int, depth: int | None) -> bool:
    """Whether the input takes the long-context route (no LP): ``L > 1024``, unless the
    histogram has few distinct lengths and the pricing DP (``lengths * (depth + 1) * L *
    copies`` steps per round) stays small, where the LP is cheap and the L2 bound weak."""
    if L <= _tuning.LONG_CONTEXT:
        return False
    lens = np.flatnonzero(h) + 1
    if lens.size > _tuning.LP_LENGTHS:
        return True
    copies = np.minimum(L // lens, 255 if depth is None else depth)
    layers = 1 if depth is None else depth + 1
    return float(copies.sum()) * layers * (L + 1) > _tuning.LP_WORK


def _fill_plan(h: np.ndarray, L: int, depth: int | None, modes=None, repair: bool = True):
    """The best of the exact-fill packings (see :func:`packlib._kernels.optimal.exact_fill`)
    as ``(items, offsets, counts, how)`` (CSR: wide packs at long context take the room of
    their items). With a depth limit the candidates are the depth-aware fill, and (with
    ``repair``) the unlimited fill made to respect the limit by exchanges (:func:`_repaired`)."""
    from .._kernels.optimal import exact_fill

    if depth is None:
        out, mode = _best_fill(h, L, 0, _tuning.UNLIMITED_MODES)
        return (*out, f"fill {mode}")
    if modes is None:  # TINY_BESIDE_HUGE at long context only: below, its packs seed the LP worse
        modes = _tuning.DEPTH_MODES if L > _tuning.LONG_CONTEXT else _tuning.SHORT_CONTEXT_DEPTH_MODES
    out, mode = _best_fill(h, L, depth, modes)
    candidates = [(*out, f"fill {mode}")]
    unlimited = exact_fill(h, L, 0, EVEN_PAIR)
    if np.diff(unlimited[1]).max(initial=0) <= depth:
        candidates.append((*unlimited, f"fill {EVEN_PAIR}"))
    elif repair and h.sum() <= _repair_slots(L) * depth * unlimited[2].sum():
        # else the depth binds: (nearly) more sequences than those packs hold
        candidates.append(_repaired(unlimited, L, depth, modes))
    return min(candidates, key=lambda c: int(c[2].sum()))


def _repair_slots(L: int) -> float:
    """The share of the unlimited fill's slots (``depth x`` its packs) the sequences may
    take for the exchanges to run. At long context, above ``REPAIR_SLOTS`` they never made
    the plan on the battery of docs/optimal.md (the grid LPs did), and they cost time the
    grid LPs need."""
    return _tuning.REPAIR_SLOTS if L > _tuning.LONG_CONTEXT else 1.0


def _best_fill(h: np.ndarray, L: int, D: int, modes):
    """The exact fill of the variant in ``modes`` that uses fewest packs: ``((items,
    offsets, counts), mode)``."""
    from .._kernels.optimal import exact_fill

    best = None
    for mode in modes:
        out = exact_fill(h, L, D, mode)
        if best is None or out[2].sum() < best[0][2].sum():
            best = (out, mode)
    return best


def depth_repair(items, offsets, counts, L: int, D: int, rounds: int = 32, passes: int = 8):
    """Make a plan of exactly-full packs respect a depth limit ``D`` by exchanges
    (:mod:`packlib._kernels.exchange`). A pack of ``n > D`` sequences exchanges with roomy
    packs until it holds at most ``D`` (each exchange appends the new pack, which is treated
    again while too deep). What finds no partner is dissolved, packed again by the unlimited
    exact fill (which mixes it anew) and those packs join the next round; up to ``rounds``
    rounds, while each leaves at least 2 % fewer sequences over than the last (fewer rounds
    cost seconds for a few packs where the depth nearly binds). The last round's leftovers
    are returned as a residual histogram, for the caller to pack again.

    ``(items, offsets, counts)`` as returned by :func:`packlib._kernels.optimal.exact_fill`.
    Returns ``(items, offsets, counts, residual)``: the packs left (CSR, each descending),
    their counts, and what was dissolved. (The rounds run here, between the two kernels,
    so that neither is compiled again inside a kernel linking both.)
    """
    from .._kernels.optimal import exact_fill

    L, D, left = int(L), int(D), -1
    residual = np.zeros(L, np.int64)
    for r in range(rounds):
        items, offsets, counts, residual = exchange_passes(items, offsets, counts, L, D, int(passes))
        n_left = int(residual.sum())
        if n_left == 0 or (left >= 0 and 50 * n_left >= 49 * left) or r == rounds - 1:  # shrinks by < 2 %
            break
        left = n_left
        r_items, r_offsets, r_counts = exact_fill(residual, L, 0, 2)
        items = np.concatenate((items, r_items))
        offsets = np.concatenate((offsets, r_offsets[1:] + offsets[-1]))
        counts = np.concatenate((counts, r_counts))
    return items, offsets, counts, residual


def exchange_passes(items, offsets, counts, L: int, D: int, passes: int):
    """Up to ``passes`` passes of exchanges (:func:`packlib._kernels.exchange.repair_pass`,
    then :func:`~packlib._kernels.exchange.pair_pass` where no single sequence matched; each
    starts over with the packs the last one made among the partners), then the packs still
    too deep dissolved: ``(items, offsets, counts, residual)``. One round of
    :func:`depth_repair`."""
    from .._kernels.exchange import PAIR_WIDTH, kept_rows, pack_arena, pair_pass, repair_pass

    for _ in range(passes):
        T = counts.size
        if not (np.diff(offsets) > D).any():
            break
        arena, start, size, cnt = pack_arena(items, offsets, counts)
        arena, start, size, cnt, n_rows, exchanges = repair_pass(arena, start, size, cnt, T, offsets[T], L, D)
        if exchanges == 0:  # no single sequence matches: try pairs
            arena, start, size, cnt, n_rows, exchanges = pair_pass(arena, start, size, cnt, T, offsets[T], L, D,
                                                                   PAIR_WIDTH)
        items, offsets, counts = kept_rows(arena, start, size, cnt, n_rows)
        if exchanges == 0:
            break
    residual = np.zeros(L, np.int64)
    arena, start, size, cnt = pack_arena(items, offsets, counts)
    sizes = np.diff(offsets)
    deep = sizes > D  # no partner left: dissolve
    row_of = np.repeat(np.arange(counts.size), sizes)
    np.add.at(residual, items[deep[row_of]] - 1, counts[row_of[deep[row_of]]])
    cnt[:counts.size][deep] = 0
    items, offsets, counts = kept_rows(arena, start, size, cnt, counts.size)
    return items, offsets, counts, residual


def _repaired(unlimited, L: int, depth: int, modes):
    """The unlimited fill made to respect the depth limit by exchanges
    (:func:`packlib._kernels.exchange.depth_repair`), what no exchange fixed packed again
    by the depth-aware fill: ``(items, offsets, counts, how)``."""
    items, offsets, cnt, residual = depth_repair(*unlimited, L, depth)
    if np.diff(offsets).max(initial=0) > depth:  # pragma: no cover - kernel invariant
        raise RuntimeError("depth_repair left a pack over the depth limit; please report this")
    how = f"fill {EVEN_PAIR} + exchanges"
    if residual.any():
        best = None
        # (where the exchanges leave a tenth of the sequences or more, the depth binds and
        # the grid LPs make the plan; below long context, the LP's rounding does: the mixes
        # would only cost time)
        few = 10 * residual.sum() < cnt @ np.diff(offsets) + residual.sum()
        mixes = _tuning.MIXES if few and L > _tuning.LONG_CONTEXT else _tuning.MIXES[:1]
        for wmin, factor in mixes:
            kept, union = _mixed_residual(items, offsets, cnt, residual, depth, wmin, factor)
            (r_items, r_offsets, r_counts), _ = _best_fill(union, L, depth, modes)
            if best is None or kept.sum() + r_counts.sum() < best[0]:
                best = (kept.sum() + r_counts.sum(), kept, r_items, r_offsets, r_counts, wmin, factor)
        _, kept, r_items, r_offsets, r_counts, wmin, factor = best
        keep = kept > 0
        widths = np.diff(offsets)
        items = np.concatenate([items[np.repeat(keep, widths)], r_items])
        offsets = np.concatenate([[0], np.cumsum(widths[keep]), np.cumsum(np.diff(r_offsets)) + widths[keep].sum()])
        cnt = np.concatenate([kept[keep], r_counts])
        if factor:
            how += f" + residual mixed ({wmin}, {factor})"
    return items, offsets.astype(np.int64), cnt, how


def _mixed_residual(items, offsets, counts, residual, depth, wmin, factor):
    """The sequences the exchanges left (``residual``) with packs of at least ``wmin``
    sequences (fewest first: most free slots) dissolved until they bring ``factor`` free
    slots per such sequence: ``(counts kept, histogram to pack again)``. Packed again
    together by the depth-aware fill, the long sequences of the dissolved packs take the
    leftover short ones into their free slots (alone, the short ones fill packs by count,
    not by tokens)."""
    widths = np.diff(offsets)
    take = np.zeros_like(counts)
    if factor:
        room = depth - widths
        eligible = np.flatnonzero((widths >= wmin) & (room > 0))
        eligible = eligible[np.argsort(widths[eligible], kind="stable")]
        slots = np.cumsum(counts[eligible] * room[eligible])
        need = factor * int(residual.sum())
        last = min(int(np.searchsorted(slots, need)), eligible.size - 1) if eligible.size else -1
        if last >= 0:
            take[eligible[:last]] = counts[eligible[:last]]
            before = slots[last - 1] if last else 0
            t = eligible[last]
            take[t] = min(counts[t], -(-(need - before) // room[t]))
    union = residual.copy()
    np.add.at(union, items - 1, np.repeat(take, widths))
    return counts - take, union


def _dense_to_csr(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Zero-padded rows as CSR ``(items, offsets)``."""
    nonzero = rows > 0
    return rows[nonzero], np.concatenate(([0], np.cumsum(nonzero.sum(axis=1)))).astype(np.int64)


# the heuristics run on the whole histogram, by registry name (arguments checked once by
# the public function that made the solver)
_HEURISTICS = {"spfhp": _spfhp, "lpfhp": _lpfhp, "nnls": _nnls}


class _Plan:
    """Strategies (CSR) and counts of a plan that is not (yet) a :class:`PackingPlan`."""

    def __init__(self, items, offsets, counts, how=""):
        self.strategy_items, self.strategy_offsets, self.counts, self.how = items, offsets, counts, how
        self.num_packs = int(counts.sum())

    @property
    def strategies(self) -> np.ndarray:
        """Zero-padded rows (for the LP's patterns, which only run where packs are narrow)."""
        return csr_to_dense(self.strategy_items, self.strategy_offsets)


class _Solver:
    """State shared by :func:`lower_bound` and :func:`optimal_pack` for one input."""

    def __init__(self, h, L, depth, deadline, nnls=True, known=None):
        # a pack never holds more than L sequences: a larger limit is no limit
        self.user_depth = depth
        depth = None if depth is not None and depth >= L else depth
        self.h, self.L, self.depth, self.deadline = h, L, depth, deadline
        self.caps = _caps(h, L, depth)
        fit = _max_items(self.caps, L)
        self.width = fit if depth is None else min(fit, depth)
        self.heuristics: dict[str, PackingPlan] = {}
        self.master = None
        self.x = None
        self.stopped = False  # a step was skipped because the time limit was reached
        self.long = _long_context(h, L, self.depth)
        self.nnls = nnls  # False: NNLSHP never seeds the LP (the grid LPs of _relaxed)
        self.extra_certificates = []  # proven elsewhere (the grid and slot bounds)
        self.grids = []  # grid sizes whose LPs ran (long context with a depth limit)
        self.interpolated = {}  # id of a certificate drawn between a grid's units -> that grid
        self.seeds = None  # extra starting patterns (rows of lengths), e.g. a coarser grid's
        self.fill_modes = None  # the exact-fill variants of the "fill" heuristic (None: _fill_plan's choice)
        self.repair = True  # ... and whether it repairs the unlimited fill by exchanges
        # heuristic plans already made on this input (name -> (plan, seconds)), taken instead of
        # running that heuristic again; what is taken is removed (its caller sees what was used)
        self.known = {} if known is None else known

    def time_left(self) -> bool:
        if self.deadline is None or time.perf_counter() < self.deadline:
            return True
        self.stopped = True
        return False

    def run_heuristics(self, names=("lpfhp", "spfhp", "nnls")) -> None:
        from .._nnls_limits import nnls_fits

        for name in names:
            if name in self.heuristics:
                continue
            if name == "fill":
                self.heuristics[name] = _Plan(*_fill_plan(self.h, self.L, self.depth, self.fill_modes, self.repair))
            elif name != "nnls" or name in self.known or (self.nnls and self.time_left() and nnls_fits(self.L)
                                                          and self.L <= _tuning.LONG_CONTEXT):
                # the greedy packers take milliseconds; NNLSHP only runs while time is left (a
                # plan the caller already made is taken whatever the time)
                self.heuristics[name] = self._heuristic(name)

    def _heuristic(self, name: str) -> PackingPlan:
        if name in self.known:
            return self.known.pop(name)[0]
        return _HEURISTICS[name](self.h, self.L, self.depth)

    def bound(self, first_rounds: int = 6, lp: bool = True) -> LowerBound:
        """Column generation, then the certificate. Starts from the single-length patterns
        and the heuristics' strategies; if ``first_rounds`` rounds do not solve the LP and
        NNLSHP has not run, runs it and adds its strategies (they nearly always contain an
        optimal basis: on Wikipedia at depth 3, 1 more round instead of ~50)."""
        t0 = time.perf_counter()
        h, L, depth = self.h, self.L, self.depth
        trivial, large, card = _simple_bounds(h, L, self.user_depth)
        lp_value, converged, rounds, columns = float("nan"), False, 0, 0
        proven = False
        timed_out = False
        certs = _simple_certificates(h, L, depth) + [_verified(_l2_certificate(h, L, depth)[0])]
        certs += self.extra_certificates
        if not h.any():
            lp_value, converged = 0.0, True
        if lp and h.any() and self.time_left():
            pool = _ColumnPool(self.width)
            pool.add(_initial_patterns(h, L, depth, self.caps, self.width, self.heuristics.values()))
            if self.seeds is not None and self.seeds.size:
                pool.add(self.seeds[:, : self.width])
            master = _Master(h, L, primal=not self.nnls, deep=(depth or 0) >= _tuning.IPM_DEPTH)
            master.add(pool.rows)
            prices = []

            def run(max_rounds):
                nonlocal x, lp_value, converged, rounds, proven
                x, lp_value, y, converged, r, center, proven = _column_generation(
                    h, L, depth, pool, master, self.deadline, max_rounds)
                rounds += r
                prices.extend(p for p in (y, center) if p is not None)

            x = None
            run(first_rounds)
            if not converged and "nnls" not in self.heuristics and self.time_left():
                self.run_heuristics(("nnls",))
            if not converged and "nnls" in self.heuristics:  # (already in the pool if it ran before)
                if pool.add(_initial_patterns(h, L, depth, self.caps, self.width, [self.heuristics["nnls"]])):
                    master.add(pool.rows[pool.rows.shape[0] - pool.last_added :])
            if not converged and self.time_left():
                run(_tuning.MAX_ROUNDS)
            timed_out = not converged and not self.time_left()
            certs += [_certify(p, h, L, depth) for p in prices]
            columns = pool.rows.shape[0]
            if x is not None and x.size < master.rows.shape[0]:  # stopped by the clock after adding columns
                x = np.concatenate([x, np.zeros(master.rows.shape[0] - x.size)])
            self.master, self.pool, self.x = master, pool, x
        elif lp and h.any():
            timed_out = True
        cert = _best_certificate(certs)
        lp_bound = 0 if cert is None else cert.bound
        if converged or not lp:
            status, message = FINISHED, ("LP solved" if converged and lp else "LP not needed") + "; the bound is proven"
            if not lp and self.long:
                message = ("long context: the bound comes from the L2 dual-feasible prices and the simple bounds "
                           "(the LP is not solved); it is proven")
                if cert is not None and cert.grid is not None:
                    message = (f"long context: the bound is the LP of the histogram on a grid of {cert.grid:,} "
                               "units (its certificate is checked on that grid); it is proven")
                elif cert is not None and id(cert) in self.interpolated:
                    message = (f"long context: the bound is the LP of the histogram on a grid of "
                               f"{self.interpolated[id(cert)]:,} units, its prices drawn as a line between units "
                               "(the certificate is checked over tokens); it is proven")
            if proven:
                message = "column generation stopped once the ceiling of the LP was proven; the bound is proven"
        elif timed_out:
            status, message = TIME_LIMIT, "stopped by the time limit before the LP was solved; the bound is proven but may be weaker"
        else:
            status, message = ROUND_LIMIT, f"stopped after {rounds} LP rounds (the round limit) before the LP was solved; the bound is proven but may be weaker"
        return LowerBound(
            bound=max(lp_bound, trivial, large, card),
            lp_bound=lp_bound,
            lp_value=lp_value,
            lp_converged=converged and lp,
            trivial_bound=trivial,
            large_items_bound=large,
            cardinality_bound=card,
            max_sequence_length=L,
            max_sequences_per_pack=self.user_depth,
            info={"rounds": rounds, "columns": columns, "seconds": time.perf_counter() - t0, "grids": list(self.grids),
                  "lp": ("ceiling proven" if proven else "solved") if converged and lp
                  else (("not solved (long context)" if self.long else "skipped") if not lp else "stopped early")},
            certificate=cert,
            status=status,
            message=message,
        )

    def round_and_repair(self, target: int, best: int):
        """Plans from the LP solution: round down (keeping ``k`` fewer copies of each
        pattern, for a few ``k``), pack the residual with LPFHP and the exact fill, and with
        NNLSHP unless those are within one pack of ``target``. Returns the best
        ``(packs, strategies, counts, k)`` found below ``best``, or None."""
        from .._kernels.optimal import round_columns
        from .._nnls_limits import nnls_fits

        if self.x is None:
            return None
        found = None
        base = np.floor(self.x + 1e-9)
        for k in (0, 1):
            if not self.time_left() or best <= target:
                break
            rows, counts, residual = round_columns(self.master.rows, np.maximum(base - k, 0.0), self.h)
            residual = np.ascontiguousarray(residual, dtype=np.int64)
            plans = [_lpfhp(residual, self.L, self.depth),
                     _Plan(*_fill_plan(residual, self.L, self.depth))]
            # NNLSHP (the slow one) only while the plans so far leave more than one pack of gap
            cheap = min(best, int(counts.sum()) + min(p.num_packs for p in plans))
            if self.time_left() and cheap > target + 1 and nnls_fits(self.L) and self.L <= _tuning.LONG_CONTEXT:
                plans.append(_nnls(residual, self.L, self.depth))
            rest = min(plans, key=lambda p: p.num_packs)
            total = int(counts.sum()) + rest.num_packs
            if total < best:
                width = max(rows.shape[1], rest.strategies.shape[1])
                strategies = np.zeros((rows.shape[0] + rest.strategies.shape[0], width), dtype=np.int64)
                strategies[: rows.shape[0], : rows.shape[1]] = rows
                strategies[rows.shape[0] :, : rest.strategies.shape[1]] = rest.strategies
                found = (total, strategies, np.concatenate([counts, rest.counts]), k)
                best = total
        return found
