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

Long context (``L > 1024``): the LP has up to ~10**5 rows and each pricing round ~10**10
DP cells, so neither the LP nor NNLSHP is run. The bound is the best of the Martello-Toth
L2 family (a dual-feasible function: long sequences priced 1, short ones 0, the rest by
length), verified exactly, which on real length distributions equals the LP optimum; the
plan comes from the exact-fill packer (:func:`packlib._kernels.optimal.exact_fill`). See
``docs/optimal.md``.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from .packing import PackingPlan, _histogram_args, histogram_signature

__all__ = ["Certificate", "LowerBound", "lower_bound", "optimal_pack"]

_USE_HIGHS_BINDINGS = True  # False: a cold linprog solve per round (tests exercise this path)
_IMPROVE = 1e-9  # a pattern enters when its value exceeds 1 + _IMPROVE
_LONG_CONTEXT = 1024  # above this L: no column generation unless affordable (see _long_context)
_LP_LENGTHS = 1024  # ... affordable: at most this many distinct lengths,
_LP_WORK = 3e8  # ... and about this many pricing-DP steps per LP round
_MAX_ROUNDS = 10_000  # LP rounds per phase of column generation (status 2 when reached)


# --------------------------------------------------------------------------------------
# Result type
# --------------------------------------------------------------------------------------


@dataclass(frozen=True, repr=False)
class Certificate:
    """A proof of a lower bound on the number of packs that anyone can check.

    Every pack of at most ``max_sequences_per_pack`` sequences (any number when ``None``)
    whose lengths add up to at most ``max_sequence_length`` has a price sum of at most
    ``denominator`` (copies of a length count once each; a pack may hold any number of
    copies). So ``packs >= sum(counts * prices) / denominator`` for any packing of the
    histogram (weak LP duality, Farley 1990), and ``bound`` is the ceiling of that.
    Checking it is one knapsack DP over ``(sequences, tokens)``: see
    ``tests/naive_certificate.py`` for a plain-Python checker.

    Attributes
    ----------
    lengths : int64 array, shape ``(n,)``
        The distinct lengths of the histogram, ascending.
    counts : int64 array, shape ``(n,)``
        How many sequences have each length.
    prices : int64 array, shape ``(n,)``
        A price per length, ``>= 0``.
    denominator : int
        ``0 < denominator <= 2**40``: the largest price sum of any pack.
    max_sequence_length : int
    max_sequences_per_pack : int or None
    """

    lengths: np.ndarray
    counts: np.ndarray
    prices: np.ndarray
    denominator: int
    max_sequence_length: int
    max_sequences_per_pack: int | None

    @property
    def bound(self) -> int:
        """``ceil(sum(counts * prices) / denominator)``, in exact integer arithmetic."""
        num = sum(int(c) * int(p) for c, p in zip(self.counts.tolist(), self.prices.tolist()))
        return -(-num // int(self.denominator))

    def to_dict(self) -> dict:
        """The certificate as plain lists and ints (JSON-serialisable)."""
        return {
            "lengths": self.lengths.tolist(),
            "counts": self.counts.tolist(),
            "prices": self.prices.tolist(),
            "denominator": int(self.denominator),
            "max_sequence_length": self.max_sequence_length,
            "max_sequences_per_pack": self.max_sequences_per_pack,
        }

    def __repr__(self) -> str:
        return (f"Certificate({self.lengths.size:,} lengths, denominator {self.denominator:,}, "
                f"bound {self.bound:,})")


def _certificate(lengths, counts, prices, denominator, L, depth) -> Certificate:
    ro = []
    for a in (lengths, counts, prices):
        a = np.array(a, dtype=np.int64)
        a.setflags(write=False)
        ro.append(a)
    return Certificate(ro[0], ro[1], ro[2], int(denominator), int(L), depth)


@dataclass(frozen=True, repr=False)
class LowerBound:
    """Proven lower bounds on the number of packs a histogram needs.

    Attributes
    ----------
    bound : int
        The best of the bounds below: no packing uses fewer packs.
    lp_bound : int
        The best bound certified from the cutting-stock LP's duals, equal to
        ``certificate.bound`` (the simple bounds below are such dual bounds too, so
        ``lp_bound == bound``).
    lp_value : float
        The value of the last LP HiGHS solved: the LP optimum, or slightly above it when
        column generation stopped because the ceiling was already proven (``lp_bound``
        itself comes from a verified dual solution, not from this value). NaN when no
        LP was solved.
    lp_converged : bool
        Whether ``lp_bound`` is the ceiling of the LP optimum: column generation solved
        the LP, or proved that further rounds could not raise the ceiling
        (``info["lp"]`` says which). ``False``: stopped early (the bound is then weaker
        but still valid) or not needed.
    trivial_bound : int
        ``ceil(tokens / L)``.
    large_items_bound : int
        Sequences longer than ``L / 2``: each needs its own pack.
    cardinality_bound : int
        ``ceil(sequences / max_sequences_per_pack)`` (0 when unlimited).
    max_sequence_length : int
    max_sequences_per_pack : int or None
    certificate : Certificate
        Integer prices per length that prove ``bound`` (checkable without packlib).
    status : int
        ``0``: finished (the LP was solved, its ceiling proven, or not needed);
        ``1``: stopped by the time limit; ``2``: stopped by the limit on LP rounds.
        Whatever the status, ``bound`` is proven.
    message : str
        How it stopped, in a sentence.
    info : dict
        ``rounds`` (LP solves), ``columns`` (patterns generated), ``seconds``, ``lp``.
    """

    bound: int
    lp_bound: int
    lp_value: float
    lp_converged: bool
    trivial_bound: int
    large_items_bound: int
    cardinality_bound: int
    max_sequence_length: int
    max_sequences_per_pack: int | None
    info: dict = field(default_factory=dict, compare=False)
    certificate: Certificate | None = field(default=None, compare=False)
    status: int = 0
    message: str = ""

    @property
    def success(self) -> bool:
        """``status == 0``."""
        return self.status == 0

    def __int__(self) -> int:
        return self.bound

    def to_dict(self) -> dict:
        """The bounds as a plain dict (JSON-serialisable)."""
        return {
            "bound": self.bound,
            "lp_bound": self.lp_bound,
            "lp_value": self.lp_value,
            "lp_converged": self.lp_converged,
            "trivial_bound": self.trivial_bound,
            "large_items_bound": self.large_items_bound,
            "cardinality_bound": self.cardinality_bound,
            "max_sequence_length": self.max_sequence_length,
            "max_sequences_per_pack": self.max_sequences_per_pack,
            "status": self.status,
            "message": self.message,
            "certificate": None if self.certificate is None else self.certificate.to_dict(),
            "info": dict(self.info),
        }

    def __repr__(self) -> str:
        depth = "unlimited" if self.max_sequences_per_pack is None else self.max_sequences_per_pack
        status = self.info.get("lp", "solved")
        if status == "skipped":
            lp = "LP not needed"
        elif status.startswith("not solved"):
            lp = f"L2 bound {self.lp_bound:,}"
        elif math.isnan(self.lp_value):
            lp = "LP not run (time limit)"
        else:
            lp = f"LP {self.lp_bound:,} (value {self.lp_value:,.3f}{'' if self.lp_converged else ', stopped early'})"
        return (
            f"LowerBound({self.bound:,} packs of {self.max_sequence_length} tokens, max {depth} per pack: "
            f"{lp}, tokens {self.trivial_bound:,}, long sequences {self.large_items_bound:,}, "
            f"sequences/depth {self.cardinality_bound:,})"
        )


# --------------------------------------------------------------------------------------
# Column generation
# --------------------------------------------------------------------------------------


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


def _kernel_depth(depth: int | None, fit: int) -> int:
    """The pricing kernel's depth argument: 0 (unlimited) when the depth cannot bind, i.e.
    no pack can hold more than ``depth`` sequences anyway (``fit`` from :func:`_max_items`)."""
    return 0 if depth is None or depth >= fit else depth


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
    """

    def __init__(self, b: np.ndarray, L: int):
        self.L = L
        self.present = np.flatnonzero(b) + 1
        self.row_of = np.full(L + 1, -1, dtype=np.int64)
        self.row_of[self.present] = np.arange(self.present.size)
        self.b = b[self.present - 1].astype(np.float64)
        self.rows = np.zeros((0, 1), dtype=np.int64)
        self.n_cols = 0
        self.n_exchange = 0
        self.highs = None
        try:
            if not _USE_HIGHS_BINDINGS:
                raise ImportError("HiGHS bindings disabled")
            from scipy.optimize._highspy import _core

            H = _core._Highs()
            H.setOptionValue("output_flag", False)
            m = self.present.size
            H.addRows(m, self.b, np.full(m, H.getInfinity()), 0,
                      np.zeros(m, np.int32), np.zeros(0, np.int32), np.zeros(0))
            self.highs, self._inf = H, H.getInfinity()
            # dual-optimal inequalities y[l] <= y[next longer l] as zero-cost "exchange"
            # columns (a slot of a longer length may hold a shorter one): same LP optimum
            # when no cap binds, far fewer rounds (Ben Amor, Desrosiers and Valerio de
            # Carvalho, 2006); switched off (upper bound 0) before the final rounds
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

    def drop_exchanges(self) -> None:
        """Switch the exchange columns off, so the LP solution uses real patterns only."""
        if self.n_exchange:
            n = self.n_exchange
            self.highs.changeColsBounds(n, np.arange(n, dtype=np.int32), np.zeros(n), np.zeros(n))

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
        starts, idx, val = [], [], []
        for r in rows:
            starts.append(len(idx))
            ls, ks = np.unique(r[r > 0], return_counts=True)
            for l, k in zip(ls, ks):
                i = self.row_of[l]
                if i >= 0:
                    idx.append(i)
                    val.append(float(k))
        self.highs.addCols(S, np.ones(S), np.zeros(S), np.full(S, self._inf), len(idx),
                           np.array(starts, np.int32), np.array(idx, np.int32), np.array(val, np.float64))

    def solve(self):
        """Returns ``(x, value, y)``: pattern multiplicities, LP value, and the duals as
        prices per length (``(L,)``, clipped to ``[0, 1]``, 0 for absent lengths)."""
        y = np.zeros(self.L, dtype=np.float64)
        if self.highs is not None:
            H = self.highs
            H.run()
            status = H.getModelStatus()
            if status != type(status).kOptimal:  # pragma: no cover
                raise RuntimeError(f"LP solve failed: {H.modelStatusToString(status)}")
            sol = H.getSolution()
            x = np.asarray(sol.col_value, dtype=np.float64)[self.n_exchange :]
            y[self.present - 1] = np.clip(np.asarray(sol.row_dual, dtype=np.float64), 0.0, 1.0)
            return x, float(H.getObjectiveValue()), y
        from scipy.optimize import linprog

        A = _coverage_matrix(self.rows, self.present, self.L)
        res = linprog(np.ones(self.n_cols), A_ub=-A, b_ub=-self.b, bounds=(0, None), method="highs")
        if res.status != 0:  # pragma: no cover - the single-length patterns keep it feasible
            raise RuntimeError(f"LP solve failed: {res.message}")
        y[self.present - 1] = np.clip(-res.ineqlin.marginals, 0.0, 1.0)
        return res.x, float(res.fun), y


_MAX_DENOMINATOR = 2**40


def _certify(y: np.ndarray, h: np.ndarray, L: int, depth: int | None) -> Certificate | None:
    """A :class:`Certificate` from prices ``y`` (float, one per length ``1..L``): the
    prices are scaled and rounded down to integers whose best pack is worth at most
    ``2**40``, and that best pack is computed exactly (integer DP); it is the denominator."""
    from ._kernels.optimal import max_pack_value

    lens = np.flatnonzero(h) + 1
    y = np.clip(np.nan_to_num(np.asarray(y, dtype=np.float64)[lens - 1]), 0.0, None)
    if not lens.size or not (y > 0).any():
        return None
    D = 0 if depth is None or depth >= L // int(lens[0]) else depth
    v = float(max_pack_value(lens, y, L, D))
    scale = _MAX_DENOMINATOR / v * (1.0 - 1e-9)
    while True:
        yi = np.floor(y * scale).astype(np.int64)
        vi = int(max_pack_value(lens, yi, L, D))
        if 0 < vi <= _MAX_DENOMINATOR or vi == 0:
            break
        scale *= 0.5  # pragma: no cover - float max off by more than the margin
    if vi == 0:
        return None
    return _certificate(lens, h[lens - 1], yi, vi, L, depth)


def _simple_certificates(h: np.ndarray, L: int, depth: int | None) -> list[Certificate]:
    """Certificates of the three simple bounds (each is a dual solution of the LP):
    price = length over ``L`` (tokens); 1 per sequence longer than ``L / 2``;
    1 per sequence over ``depth``."""
    lens = np.flatnonzero(h) + 1
    if not lens.size:
        return []
    counts = h[lens - 1]
    out = [_certificate(lens, counts, lens, L, L, depth)]
    large = (2 * lens > L).astype(np.int64)
    if large.any():
        out.append(_certificate(lens, counts, large, 1, L, depth))
    if depth is not None:
        out.append(_certificate(lens, counts, np.ones(lens.size, np.int64), depth, L, depth))
    return out


def _l2_certificate(h: np.ndarray, L: int, depth: int | None):
    """The best certificate of the Martello-Toth L2 family: for a threshold ``k <= L/2``,
    a sequence longer than ``L - k`` is priced ``L`` (only sequences shorter than ``k``
    fit beside it, and they are priced 0), one of length ``k..L-k`` its length, a
    shorter one 0; the denominator is ``L``. Any pack is worth at most ``L``: either it
    holds a long sequence and nothing else priced, or its priced lengths add up to at most
    ``L``. ``k`` maximises ``long sequences * L + tokens in k..L-k``, in ``O(L)``.
    Returns ``(certificate, k)`` or ``(None, 0)``."""
    if not h.any() or L < 2:
        return None, 0
    lengths = np.arange(1, L + 1, dtype=np.int64)
    tok = np.concatenate([[0], np.cumsum(h * lengths)])  # tok[j]: tokens of lengths <= j
    cnt = np.concatenate([[0], np.cumsum(h)])
    k = np.arange(1, L // 2 + 1)
    value = (cnt[L] - cnt[L - k]) * L + (tok[L - k] - tok[k - 1])  # exact: < 2**63 for real inputs
    best = int(k[int(np.argmax(value))])
    lens = np.flatnonzero(h) + 1
    prices = np.where(lens > L - best, L, np.where(lens >= best, lens, 0)).astype(np.int64)
    return _certificate(lens, h[lens - 1], prices, L, L, depth), best


def _verified(cert: Certificate | None) -> Certificate | None:
    """``cert`` if an exact check proves every pack worth at most its denominator (without
    the depth limit, which can only lower a pack's worth), else None."""
    from ._kernels.optimal import pack_value_at_most

    if cert is None:
        return None
    L, den = cert.max_sequence_length, cert.denominator
    dear = np.array([int(p) * L > den * int(l) for p, l in zip(cert.prices.tolist(), cert.lengths.tolist())], dtype=np.bool_)
    ok = pack_value_at_most(cert.lengths, cert.prices, dear, L, np.int64(den))
    return cert if ok else None


def _long_context(h: np.ndarray, L: int, depth: int | None) -> bool:
    """Whether the input takes the long-context route (no LP): ``L > 1024``, unless the
    histogram has few distinct lengths and the pricing DP (``lengths * (depth + 1) * L *
    copies`` steps per round) stays small, where the LP is cheap and the L2 bound weak."""
    if L <= _LONG_CONTEXT:
        return False
    lens = np.flatnonzero(h) + 1
    if lens.size > _LP_LENGTHS:
        return True
    copies = np.minimum(L // lens, 255 if depth is None else depth)
    layers = 1 if depth is None else depth + 1
    return float(copies.sum()) * layers * (L + 1) > _LP_WORK


def _fill_plan(h: np.ndarray, L: int, depth: int | None):
    """The best of the exact-fill packings (see :func:`packlib._kernels.optimal.exact_fill`)
    as ``(strategies, counts, how)``. With a depth limit the candidates are the
    depth-aware fill, and the unlimited fill made to respect the limit by exchanges
    (:func:`packlib._kernels.optimal.depth_repair`) with what no exchange fixed packed
    again."""
    from ._kernels.optimal import depth_repair, exact_fill

    def as_rows(items, offsets, counts):
        sizes = np.diff(offsets)
        width = int(sizes.max()) if sizes.size else 1
        strategies = np.zeros((counts.size, width), dtype=np.int64)
        rows = np.repeat(np.arange(counts.size), sizes)
        cols = np.arange(items.size) - np.repeat(offsets[:-1], sizes)
        strategies[rows, cols] = items
        return strategies, counts

    def best_fill(hist, D, modes):
        best = None
        for mode in modes:
            out = exact_fill(hist, L, D, mode)
            if best is None or out[2].sum() < best[0][2].sum():
                best = (out, mode)
        return best

    if depth is None:
        (items, offsets, counts), mode = best_fill(h, 0, (2, 0))
        return (*as_rows(items, offsets, counts), f"fill {mode}")
    (items, offsets, counts), mode = best_fill(h, depth, (3, 2, 0, 4))
    candidates = [(*as_rows(items, offsets, counts), f"fill {mode}")]
    unlimited = exact_fill(h, L, 0, 2)
    if np.diff(unlimited[1]).max(initial=0) > depth:
        rows, cnt, residual = depth_repair(*unlimited, L, depth)
        keep = cnt > 0
        rows, cnt = rows[keep], cnt[keep]
        if rows.size and (rows[:, depth:] != 0).any():  # pragma: no cover - kernel invariant
            raise RuntimeError("depth_repair left a pack over the depth limit; please report this")
        rows = rows[:, :depth]
        if residual.any():
            (items, offsets, counts), _ = best_fill(residual, depth, (3, 2, 0, 4))
            rest, rest_counts = as_rows(items, offsets, counts)
            width = max(rows.shape[1], rest.shape[1])
            both = np.zeros((rows.shape[0] + rest.shape[0], width), np.int64)
            both[: rows.shape[0], : rows.shape[1]] = rows
            both[rows.shape[0] :, : rest.shape[1]] = rest
            rows, cnt = both, np.concatenate([cnt, rest_counts])
        candidates.append((rows, cnt, "fill 2 + exchanges"))
    else:
        candidates.append((*as_rows(*unlimited), "fill 2"))
    return min(candidates, key=lambda c: int(c[1].sum()))


def _best_certificate(certs):
    """The certificate proving the highest fraction ``sum(counts*prices)/denominator``."""
    certs = [c for c in certs if c is not None]
    if not certs:
        return None

    def value(c):
        num = sum(int(a) * int(b) for a, b in zip(c.counts.tolist(), c.prices.tolist()))
        return Fraction(num, c.denominator)

    return max(certs, key=value)


def _column_generation(h, L, depth, pool: _ColumnPool, master: _Master, deadline, max_rounds: int = 1000):
    """Solve the cutting-stock LP for demand ``h`` by column generation: each round solves
    the master LP and adds every pattern the pricing DP finds worth more than one pack at
    the duals (up to one per longest length). Also tracks the prices with the best Farley
    bound ``h.y / max_pattern(y)``, valid at any round, and stops as soon as its ceiling
    reaches the ceiling of the master's value (the LP optimum lies between the two, so more
    rounds cannot raise the integer bound). Returns ``(x, value, y, converged, rounds,
    center, proven)`` (``center``: those best prices; ``proven``: stopped that way).
    """
    from ._kernels.optimal import price

    caps = _caps(h, L, depth)
    kdepth = _kernel_depth(depth, _max_items(caps, L))
    hf = h.astype(np.float64)
    rounds, converged = 0, False
    center, center_bound = None, -np.inf
    proven = False
    while True:
        x, value, y = master.solve()
        rounds += 1
        best, _, rows = price(y, caps, L, kdepth, 1.0 + _IMPROVE, pool.width, True)
        if best > 0:
            farley = float(hf @ y) / max(best, 1.0)
            if farley > center_bound:
                center, center_bound = y, farley
        if best <= 1.0 + _IMPROVE or pool.add(rows) == 0:
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


# --------------------------------------------------------------------------------------
# Public functions
# --------------------------------------------------------------------------------------


def _as_time_limit(time_limit) -> float | None:
    if time_limit is None:
        return None
    import numbers

    if isinstance(time_limit, bool) or not isinstance(time_limit, numbers.Real):
        raise ValueError(f"time_limit must be a number of seconds > 0 or None, got {time_limit!r}")
    t = float(time_limit)
    if not t > 0:  # also catches NaN
        raise ValueError(f"time_limit must be > 0 seconds (or None for no limit), got {time_limit!r}")
    return t


def _simple_bounds(h: np.ndarray, L: int, depth: int | None) -> tuple[int, int, int]:
    lengths = np.arange(1, L + 1, dtype=np.int64)
    tokens = int((h * lengths).sum())
    n = int(h.sum())
    trivial = -(-tokens // L)
    large = int(h[lengths * 2 > L].sum())
    card = -(-n // depth) if depth is not None else 0
    return trivial, large, card


class _Plan:
    """Strategies and counts of a plan that is not (yet) a :class:`PackingPlan`."""

    def __init__(self, strategies, counts, how=""):
        self.strategies, self.counts, self.how = strategies, counts, how
        self.num_packs = int(counts.sum())


class _Solver:
    """State shared by :func:`lower_bound` and :func:`optimal_pack` for one input."""

    def __init__(self, h, L, depth, deadline):
        # a pack never holds more than L sequences: a larger limit is no limit
        self.user_depth = depth
        depth = None if depth is not None and depth >= L else depth
        self.h, self.L, self.depth, self.deadline = h, L, depth, deadline
        self.caps = _caps(h, L, depth)
        fit = _max_items(self.caps, L)
        self.kdepth = _kernel_depth(depth, fit)
        self.width = fit if depth is None else min(fit, depth)
        self.heuristics: dict[str, PackingPlan] = {}
        self.master = None
        self.x = None
        self.stopped = False  # a step was skipped because the time limit was reached
        self.long = _long_context(h, L, self.depth)

    def time_left(self) -> bool:
        if self.deadline is None or time.perf_counter() < self.deadline:
            return True
        self.stopped = True
        return False

    def run_heuristics(self, names=("lpfhp", "spfhp", "nnls")) -> None:
        from ._nnls_limits import nnls_fits
        from .methods import get

        for name in names:
            if name in self.heuristics:
                continue
            if name == "fill":
                self.heuristics[name] = _Plan(*_fill_plan(self.h, self.L, self.depth))
            elif name != "nnls" or (self.time_left() and nnls_fits(self.L) and self.L <= _LONG_CONTEXT):
                # the greedy packers take milliseconds; NNLSHP only runs while time is left
                self.heuristics[name] = get(name).function(self.h, max_sequence_length=self.L, max_sequences_per_pack=self.depth)

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
        if not h.any():
            lp_value, converged = 0.0, True
        if lp and h.any() and self.time_left():
            pool = _ColumnPool(self.width)
            pool.add(_initial_patterns(h, L, depth, self.caps, self.width, self.heuristics.values()))
            master = _Master(h, L)
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
                run(_MAX_ROUNDS)
            if master.n_exchange and not proven:
                master.drop_exchanges()  # phase 2: real patterns only
                if self.time_left():
                    run(_MAX_ROUNDS)
                else:
                    converged = False
            timed_out = not converged and not self.time_left()
            certs += [_certify(p, h, L, depth) for p in prices]
            columns = pool.rows.shape[0]
            self.master, self.pool, self.x = master, pool, x
        elif lp and h.any():
            timed_out = True
        cert = _best_certificate(certs)
        lp_bound = 0 if cert is None else cert.bound
        if converged or not lp:
            status, message = 0, ("LP solved" if converged and lp else "LP not needed") + "; the bound is proven"
            if not lp and self.long:
                message = ("long context: the bound comes from the L2 dual-feasible prices and the simple bounds "
                           "(the LP is not solved); it is proven")
            if proven:
                message = "column generation stopped once the ceiling of the LP was proven; the bound is proven"
        elif timed_out:
            status, message = 1, "stopped by the time limit before the LP was solved; the bound is proven but may be weaker"
        else:
            status, message = 2, f"stopped after {rounds} LP rounds (the round limit) before the LP was solved; the bound is proven but may be weaker"
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
            info={"rounds": rounds, "columns": columns, "seconds": time.perf_counter() - t0,
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
        from ._kernels.optimal import round_columns
        from ._nnls_limits import nnls_fits
        from .methods import get

        lpfhp_pack, nnls_pack = get("lpfhp").function, get("nnls").function

        if self.x is None:
            return None
        found = None
        base = np.floor(self.x + 1e-9)
        for k in (0, 1):
            if not self.time_left() or best <= target:
                break
            rows, counts, residual = round_columns(self.master.rows, np.maximum(base - k, 0.0), self.h)
            plans = [lpfhp_pack(residual, max_sequence_length=self.L, max_sequences_per_pack=self.depth),
                     _Plan(*_fill_plan(residual, self.L, self.depth))]
            # NNLSHP (the slow one) only while the plans so far leave more than one pack of gap
            cheap = min(best, int(counts.sum()) + min(p.num_packs for p in plans))
            if self.time_left() and cheap > target + 1 and nnls_fits(self.L) and self.L <= _LONG_CONTEXT:
                plans.append(nnls_pack(residual, max_sequence_length=self.L, max_sequences_per_pack=self.depth))
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
        Depth limit; ``None`` for unlimited.

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

    Examples
    --------
    >>> import packlib
    >>> packlib.lower_bound([0, 0, 3, 2, 1, 0, 2, 0, 0, 0], max_sequences_per_pack=2)  # doctest: +ELLIPSIS
    LowerBound(4 packs of 10 tokens, max 2 per pack: LP 4 (value 4.000), ...)
    """
    h, L, depth = _histogram_args(histogram, max_sequence_length, max_sequences_per_pack)
    solver = _Solver(h, L, depth, None)
    if solver.long:
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
        ``"bound"`` (the :class:`LowerBound` again),
        ``"source"`` (which step produced the plan: ``"lp-rounding"``, ``"lpfhp"``,
        ``"spfhp"``, ``"nnls"`` or ``"fill"``), ``"heuristics"`` (packs of each heuristic, by registry
        name),
        ``"seconds"``.

    Examples
    --------
    >>> import packlib
    >>> plan = packlib.optimal_pack(packlib.datasets.wikipedia_512(), max_sequences_per_pack=3)  # doctest: +SKIP
    >>> plan.num_packs, plan.lower_bound, plan.gap                         # doctest: +SKIP
    (8143830, 8143829, 1)
    """
    t0 = time.perf_counter()
    h, L, depth = _histogram_args(histogram, max_sequence_length, max_sequences_per_pack)
    limit = _as_time_limit(time_limit)
    solver = _Solver(h, L, depth, None if limit is None else t0 + limit)
    user_depth, depth = depth, solver.depth
    long = solver.long
    # SPFHP and LPFHP cost up to O(L**2 * depth): skipped at long context
    few = np.count_nonzero(h) <= _LP_LENGTHS
    solver.run_heuristics(("fill",) if L > 2 * _LONG_CONTEXT and not few else ("lpfhp", "spfhp", "fill"))
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
    source, best = min(solver.heuristics.items(), key=lambda kv: kv[1].num_packs)
    strategies, counts = best.strategies, best.counts
    info = {}
    if source == "fill":
        info["fill"] = best.how  # which exact-fill variant
    if found is not None and found[0] < best.num_packs:
        _, strategies, counts, k = found
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
        status, message = 0, f"{summary}: optimal"
    elif lb.status == 1 or solver.stopped:
        status, message = 1, f"{summary}; stopped by the time limit (a longer run may close the gap)"
    elif lb.status != 0:
        status, message = lb.status, f"{summary}; {lb.message}"
    else:
        status, message = 0, f"{summary}"
    plan = PackingPlan(strategies, counts, L, user_depth, method="optimal", lower_bound=lb.bound, info=info,
                       bound=lb, status=status, message=message)
    if not np.array_equal(plan.histogram(), h):  # pragma: no cover - internal consistency
        raise RuntimeError("optimal_pack built a plan that does not match the histogram; please report this")
    return plan
