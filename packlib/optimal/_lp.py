"""The cutting-stock LP: pattern pool, master problem (HiGHS) and column generation."""
from __future__ import annotations

import math
import time

import numpy as np

from . import _tuning


def _caps(h: np.ndarray, L: int, depth: int | None) -> np.ndarray:
    """Most copies of each length one pack can hold (0 for lengths not in ``h``). The
    histogram's counts do not cap them: the LP (and its certificate) is over all packs of
    the present lengths, which keeps the certificate checkable by a plain knapsack DP."""
    lengths = np.arange(1, L + 1)
    caps = np.where(h > 0, L // lengths, 0)
    if depth is not None:
        caps = np.minimum(caps, depth)
    return np.ascontiguousarray(caps, dtype=np.int64)


def _max_items(caps: np.ndarray, L: int) -> int:
    """Most sequences any pack can hold regardless of depth: shortest lengths first, as
    many copies as allowed."""
    total, room = 0, L
    for l in np.flatnonzero(caps) + 1:
        k = min(int(caps[l - 1]), room // int(l))
        total += k
        room -= k * int(l)
        if k < caps[l - 1]:
            break
    return max(1, total)


class _ColumnPool:
    """Patterns generated so far, as rows of lengths (descending, zero-padded)."""

    def __init__(self, width: int):
        self.width = width
        self.rows = np.zeros((0, width), dtype=np.int64)
        self._seen: set[bytes] = set()
        self.last_added = 0

    def add(self, rows: np.ndarray) -> int:
        rows = np.asarray(rows, dtype=np.int64)
        if rows.shape[1] < self.width:
            rows = np.pad(rows, ((0, 0), (0, self.width - rows.shape[1])))
        rows = -np.sort(-rows[:, : self.width], axis=1)
        new = []
        for r in rows:
            key = r.tobytes()
            if r[0] > 0 and key not in self._seen:
                self._seen.add(key)
                new.append(r)
        if new:
            self.rows = np.concatenate([self.rows, np.array(new, dtype=np.int64)])
        self.last_added = len(new)
        return len(new)


def _kernel_depth(h: np.ndarray, L: int, depth: int | None) -> int:
    """The pricing kernel's depth argument: 0 (unlimited) when the depth cannot bind, i.e.
    no pack can hold more than ``depth`` sequences anyway (the kernel packs any number of
    copies of a length: the depth is its only limit on them)."""
    return 0 if depth is None or depth >= _max_items(_caps(h, L, None), L) else depth


def _coverage_matrix(rows: np.ndarray, present: np.ndarray, L: int):
    """Sparse ``(len(present), len(rows))`` matrix: copies of each present length per pattern."""
    from scipy.sparse import csc_matrix

    row_of = np.full(L + 1, -1, dtype=np.int64)
    row_of[present] = np.arange(present.size)
    S, W = rows.shape
    cols = np.repeat(np.arange(S), W)
    lens = rows.ravel()
    keep = lens > 0
    r, c = row_of[lens[keep]], cols[keep]
    keep2 = r >= 0  # lengths already fully covered do not constrain anything
    return csc_matrix((np.ones(int(keep2.sum())), (r[keep2], c[keep2])), shape=(present.size, S))


class _Master:
    """The restricted master LP ``min sum(x) s.t. A x >= b, x >= 0`` over a growing set of
    patterns, one row per present length.

    Kept alive in HiGHS between rounds (through the ``highspy`` bindings scipy ships), so
    adding patterns re-solves from the previous basis; falls back to a
    cold :func:`scipy.optimize.linprog` solve per round if those bindings are missing.
    ``primal``: re-solve by primal simplex (the grid LPs); ``deep``: its patterns hold many
    sequences (see :meth:`solve`).
    """

    def __init__(self, b: np.ndarray, L: int, primal: bool = False, deep: bool = False):
        self.L = L
        self.present = np.flatnonzero(b) + 1
        self.row_of = np.full(L + 1, -1, dtype=np.int64)
        self.row_of[self.present] = np.arange(self.present.size)
        self.b = b[self.present - 1].astype(np.float64)
        self.rows = np.zeros((0, 1), dtype=np.int64)
        self.n_cols = 0
        self.n_exchange = 0
        self.highs = None
        self.primal, self.deep, self.solves = primal, deep, 0
        try:
            if not _tuning.USE_HIGHS_BINDINGS:
                raise ImportError("HiGHS bindings disabled")
            from scipy.optimize._highspy import _core

            H = _core._Highs()
            H.setOptionValue("output_flag", False)
            if primal:  # new columns keep the basis primal feasible, so primal simplex restarts from it
                H.setOptionValue("simplex_strategy", 4)
            m = self.present.size
            H.addRows(m, self.b, np.full(m, H.getInfinity()), 0,
                      np.zeros(m, np.int32), np.zeros(0, np.int32), np.zeros(0))
            self.highs, self._inf = H, H.getInfinity()
            # dual-optimal inequalities y[l] <= y[next longer l] as zero-cost "exchange"
            # columns (a slot of a longer length may hold a shorter one): the same LP
            # optimum, as the caps are only physical limits, and far fewer rounds (Ben Amor,
            # Desrosiers and Valerio de Carvalho, 2006). The solution's patterns may then
            # cover a length more often than the histogram and a shorter one less:
            # round_columns swaps the surplus for the shorter lengths when it makes packs
            n_ex = max(m - 1, 0)
            idx = np.empty(2 * n_ex, np.int32)
            idx[0::2] = np.arange(n_ex)
            idx[1::2] = np.arange(1, n_ex + 1)
            val = np.tile(np.array([1.0, -1.0]), n_ex)
            H.addCols(n_ex, np.zeros(n_ex), np.zeros(n_ex), np.full(n_ex, H.getInfinity()), 2 * n_ex,
                      np.arange(0, 2 * n_ex, 2, dtype=np.int32), idx, val)
            self.n_exchange = n_ex
        except Exception:  # pragma: no cover - depends on scipy's private layout
            self.highs = None

    def add(self, rows: np.ndarray) -> None:
        S, W = rows.shape
        if self.rows.shape[1] < W:
            self.rows = np.pad(self.rows, ((0, 0), (0, W - self.rows.shape[1])))
        elif W < self.rows.shape[1]:
            rows = np.pad(rows, ((0, 0), (0, self.rows.shape[1] - W)))
        self.rows = np.concatenate([self.rows, rows])
        self.n_cols += S
        if self.highs is None or S == 0:
            return
        # one entry per (pattern, length): the copies of the length in the pattern
        col = np.repeat(np.arange(S, dtype=np.int64), W)
        flat = rows.ravel()
        key = col[flat > 0] * (self.L + 1) + flat[flat > 0]
        key, copies = np.unique(key, return_counts=True)  # sorted by pattern, then length
        col, row = key // (self.L + 1), self.row_of[key % (self.L + 1)]
        keep = row >= 0
        col, row, copies = col[keep], row[keep], copies[keep]
        starts = np.searchsorted(col, np.arange(S))
        self.highs.addCols(S, np.ones(S), np.zeros(S), np.full(S, self._inf), int(row.size),
                           starts.astype(np.int32), row.astype(np.int32), copies.astype(np.float64))

    def solve(self, deadline: float | None = None):
        """Returns ``(x, value, y, done)``: pattern multiplicities, LP value, the duals as
        prices per length (``(L,)``, clipped to ``[0, 1]``, 0 for absent lengths), and
        False when HiGHS stopped at ``deadline`` (a ``perf_counter`` time) before the
        optimum: then ``x`` is None (``value`` NaN) unless it is feasible (``value`` is then
        above the optimum), and ``y`` is only some prices (any prices give a valid Farley
        bound)."""
        y = np.zeros(self.L, dtype=np.float64)
        if self.highs is not None:
            H = self.highs
            # HiGHS 1.x measures its time limit over all the runs of a model, so it is
            # set from the run time so far (https://github.com/ERGO-Code/HiGHS/issues/1477)
            left = np.inf if deadline is None else max(deadline - time.perf_counter(), 1e-3)
            H.setOptionValue("time_limit", float(H.getRunTime() + left) if np.isfinite(left) else np.inf)
            # a big seeded master of deep patterns (the finest grid's LP at depth >= 16) is
            # solved first by interior point, with crossover to a basis the later rounds'
            # primal simplex starts from (faster there; at depth 3-8 simplex is as fast or
            # faster: docs/optimal.md)
            ipm = self.primal and self.deep and self.solves == 0 and self.n_cols >= _tuning.IPM_COLUMNS
            H.setOptionValue("solver", "ipm" if ipm else "simplex")
            H.run()
            self.solves += 1
            status = H.getModelStatus()
            done = status == type(status).kOptimal
            if not done and status != type(status).kTimeLimit:  # pragma: no cover
                raise RuntimeError(f"LP solve failed: {H.modelStatusToString(status)}")
            sol = H.getSolution()
            x = np.asarray(sol.col_value, dtype=np.float64)[self.n_exchange :]
            y[self.present - 1] = np.clip(np.nan_to_num(np.asarray(sol.row_dual, dtype=np.float64)), 0.0, 1.0)
            if not done and (H.getInfo().primal_solution_status != 2 or x.size != self.n_cols):
                return None, np.nan, y, False  # (2: a feasible primal solution)
            return x, float(H.getObjectiveValue()), y, done
        from scipy.optimize import linprog

        A = _coverage_matrix(self.rows, self.present, self.L)
        res = linprog(np.ones(self.n_cols), A_ub=-A, b_ub=-self.b, bounds=(0, None), method="highs")
        if res.status != 0:  # pragma: no cover - the single-length patterns keep it feasible
            raise RuntimeError(f"LP solve failed: {res.message}")
        y[self.present - 1] = np.clip(-res.ineqlin.marginals, 0.0, 1.0)
        return res.x, float(res.fun), y, True


def _column_generation(h, L, depth, pool: _ColumnPool, master: _Master, deadline, max_rounds: int = 1000):
    """Solve the cutting-stock LP for demand ``h`` by column generation: each round solves
    the master LP and adds every pattern the pricing DP finds worth more than one pack at
    the duals (up to one per longest length). Also tracks the prices with the best Farley
    bound ``h.y / max_pattern(y)``, valid at any round, and stops as soon as its ceiling
    reaches the ceiling of the master's value (the LP optimum lies between the two, so more
    rounds cannot raise the integer bound). Returns ``(x, value, y, converged, rounds,
    center, proven)`` (``center``: those best prices; ``proven``: stopped that way).
    """
    from .._kernels.optimal import price

    caps = _caps(h, L, depth)
    kdepth = _kernel_depth(h, L, depth)
    hf = h.astype(np.float64)
    rounds, converged = 0, False
    center, center_bound = None, -np.inf
    proven = False
    x = value = None
    while True:
        x_new, value_new, y, done = master.solve(deadline)
        if x_new is not None or x is None:
            x, value = x_new, value_new  # (a stopped solve's infeasible point: the last one stays)
        rounds += 1
        best, _, rows = price(y, caps, L, kdepth, 1.0 + _tuning.IMPROVE, pool.width, True)
        if best > 0:
            farley = float(hf @ y) / max(best, 1.0)
            if farley > center_bound:
                center, center_bound = y, farley
        if not done:  # stopped by the deadline inside HiGHS
            break
        if best <= 1.0 + _tuning.IMPROVE or pool.add(rows) == 0:
            converged = True
            break
        if math.ceil(center_bound - 1e-6) >= math.ceil(value - 1e-6):
            converged = proven = True
            break
        master.add(pool.rows[pool.rows.shape[0] - pool.last_added :])
        if rounds >= max_rounds or (deadline is not None and time.perf_counter() > deadline):
            break
    return x, value, y, converged, rounds, center, proven


def _initial_patterns(h, L, depth, caps, width, fallbacks) -> np.ndarray:
    """Single-length patterns (keep every restricted LP feasible) and the heuristics' plans'
    strategies (NNLSHP's nearly always contain an optimal LP basis)."""
    present = np.flatnonzero(h) + 1
    singles = np.zeros((present.size, width), dtype=np.int64)
    for i, l in enumerate(present):
        singles[i, : int(caps[l - 1])] = l
    parts = [singles] + [p.strategies for p in fallbacks if p.strategies.shape[1] <= width]
    out = np.zeros((sum(p.shape[0] for p in parts), width), dtype=np.int64)
    i = 0
    for p in parts:
        out[i : i + p.shape[0], : p.shape[1]] = p
        i += p.shape[0]
    return out
