"""An independent checker of :class:`packlib.optimal.Certificate` (imports nothing from packlib).

A certificate claims: every pack of at most ``depth`` sequences (any number when ``depth`` is
None) whose lengths add up to at most ``L`` has a price sum of at most ``denominator``; then
any packing of the histogram needs at least ``ceil(sum(counts * prices) / denominator)``
packs. Checking the claim is a knapsack problem: the most valuable pack, with any number of
copies of each length.

- :func:`check`: plain Python, a dynamic programme over (sequences, tokens). For the tests.
- :func:`check_fast`: the same with numpy rows (for the benchmark's long-context inputs). It
  also uses two exact shortcuts: a length whose price does not exceed a shorter length's
  can be swapped for it in any pack (so only the strictly rising prices matter), and
  lengths whose price per token is at most ``denominator / L`` can be priced by the tokens
  they fill (see :func:`check_fast`).

A certificate with ``grid = K`` makes its claim on a grid of ``K`` units: each length ``l``
is ``floor(l * K / L)`` units, its price must depend on its unit only (unit 0: price 0), and
every pack of at most ``depth`` units of the present lengths adding up to at most ``K`` must
be worth at most ``denominator``. Both checkers check exactly that (the same DP, over ``K``
instead of ``L``); it implies the claim over tokens, because the units of lengths that add
up to at most ``L`` add up to at most ``K`` (a sum of floors is at most the floor of the
sum). The tests also check the claim over tokens directly on small inputs.
"""
from __future__ import annotations


import numpy as np

MAX_DENOMINATOR = 2**40


def _fields(cert):
    if isinstance(cert, dict):
        d = cert
    else:
        d = {k: getattr(cert, k) for k in ("lengths", "counts", "prices", "denominator",
                                             "max_sequence_length", "max_sequences_per_pack")}
    lengths = [int(v) for v in d["lengths"]]
    counts = [int(v) for v in d["counts"]]
    prices = [int(v) for v in d["prices"]]
    L, depth = int(d["max_sequence_length"]), d["max_sequences_per_pack"]
    if depth is not None and int(depth) >= L:  # no pack holds more than L sequences
        depth = None
    return lengths, counts, prices, int(d["denominator"]), L, None if depth is None else int(depth)


def _grid(cert):
    grid = cert.get("grid") if isinstance(cert, dict) else getattr(cert, "grid", None)
    return None if grid is None else int(grid)


def grid_claim(lengths, prices, L, K, depth):
    """The claim of a ``grid = K`` certificate as a plain one: ``(units, prices, K,
    depth)``, the present units ``>= 1`` ascending and one price each. Raises
    AssertionError if a price is not a function of the unit or unit 0 is priced."""
    if not (1 <= K <= L):
        raise AssertionError(f"grid {K} not in [1, L]")
    per_unit = {}
    for l, p in zip(lengths, prices):
        u = l * K // L
        if per_unit.setdefault(u, p) != p:
            raise AssertionError(f"lengths of grid unit {u} have different prices")
    if per_unit.get(0, 0) != 0:
        raise AssertionError("lengths below one grid unit must be priced 0")
    units = sorted(u for u in per_unit if u > 0)
    return units, [per_unit[u] for u in units], K, None if depth is None or depth >= K else depth


def _validate(lengths, counts, prices, den, L):
    if not (0 < den <= MAX_DENOMINATOR):
        raise AssertionError(f"denominator {den} not in (0, 2**40]")
    if not (len(lengths) == len(counts) == len(prices)):
        raise AssertionError("lengths, counts, prices differ in size")
    if any(p < 0 for p in prices):
        raise AssertionError("negative price")
    if any(not (1 <= l <= L) for l in lengths) or len(set(lengths)) != len(lengths):
        raise AssertionError("lengths must be distinct and in [1, L]")


def best_pack_value(lengths, prices, L, depth) -> int:
    """Max price sum of a pack: plain unbounded knapsack over (sequences, tokens)."""
    layers = 1 if depth is None else depth + 1
    # f[c][s]: best price sum with at most c sequences (c ignored if unlimited), s tokens
    f = [[0] * (L + 1) for _ in range(layers)]
    for c in range(layers):
        for s in range(L + 1):
            best = f[c][s - 1] if s > 0 else 0
            if c > 0:
                best = max(best, f[c - 1][s])
            if depth is None or c > 0:
                prev = f[c] if depth is None else f[c - 1]
                for l, p in zip(lengths, prices):
                    if l <= s:
                        best = max(best, prev[s - l] + p)
            f[c][s] = best
    return f[layers - 1][L]


def certified_bound(cert) -> int:
    """The bound the certificate proves, after checking it with :func:`best_pack_value`.
    Raises AssertionError if it is invalid."""
    lengths, counts, prices, den, L, depth = _fields(cert)
    _validate(lengths, counts, prices, den, L)
    if _grid(cert) is None:
        v = best_pack_value(lengths, prices, L, depth)
    else:  # the claim on the grid
        v = best_pack_value(*grid_claim(lengths, prices, L, _grid(cert), depth))
    if v > den:
        raise AssertionError(f"a pack is worth {v} > denominator {den}")
    return -(-sum(c * p for c, p in zip(counts, prices)) // den)


def check(cert, histogram=None) -> int:
    """Check ``cert`` (plain Python); with ``histogram`` (counts of lengths 1..L) also that
    its lengths and counts are that histogram's. Returns the proven bound."""
    if histogram is not None:
        _check_histogram(cert, histogram)
    return certified_bound(cert)


def _check_histogram(cert, histogram):
    lengths, counts, _, _, _, _ = _fields(cert)
    h = [int(v) for v in histogram]
    present = [(i + 1, c) for i, c in enumerate(h) if c]
    if present != list(zip(lengths, counts)):
        raise AssertionError("the certificate's lengths and counts are not the histogram's")


def best_pack_value_fast(lengths, prices, L, depth) -> int:
    """:func:`best_pack_value` with numpy (exact int64 arithmetic; prices sum below 2**62).

    Only lengths whose price exceeds every shorter length's can be in a best pack (swap
    the longer for the shorter otherwise). Unlimited depth: ``f[s]`` for ``s`` ascending,
    one vectorised max over those lengths per ``s``; a depth limit: one vectorised row
    update per (length, layer)."""
    order = np.argsort(np.asarray(lengths, dtype=np.int64), kind="stable")
    lens = np.asarray(lengths, dtype=np.int64)[order]
    pr = np.asarray(prices, dtype=np.int64)[order]
    running = np.maximum.accumulate(np.concatenate([[0], pr]))[:-1]
    keep = pr > running
    lens, pr = lens[keep], pr[keep]
    if depth is None or depth >= L:
        f = np.zeros(L + 1, np.int64)
        for s in range(1, L + 1):
            k = np.searchsorted(lens, s, side="right")
            best = f[s - 1]
            if k:
                best = max(best, int((f[s - lens[:k]] + pr[:k]).max()))
            f[s] = best
        return int(f[L])
    f = np.zeros((depth + 1, L + 1), np.int64)
    for l, p in zip(lens.tolist(), pr.tolist()):
        for c in range(1, depth + 1):
            np.maximum(f[c, l:], f[c - 1, : L + 1 - l] + p, out=f[c, l:])
    return int(f[depth, L])


def _split_check(lens, pr, L, den) -> bool:
    """True if every pack of any number of sequences (so also of at most ``depth``) is
    worth at most ``den``; False if that is not proven this way.

    Call a length *dear* if it is worth more than ``den / L`` per token. A pack's cheap
    sequences in ``c`` tokens are worth at most ``F(c) <= den * c / L``. So a pack whose
    dear sequences take exactly ``s`` tokens and are worth ``G(s)`` (the best such value,
    a knapsack over the dear lengths only) is worth at most ``G(s) + F(L - s)``. Where the
    estimate ``den * c / L`` does not settle it, ``F`` is computed exactly (a knapsack over
    the cheap lengths, for capacities up to the largest such ``c``)."""
    order = np.argsort(lens, kind="stable")
    lens, pr = lens[order], pr[order]
    if (pr > den).any():
        return False
    # only lengths priced above every shorter length matter (swap the longer for the shorter)
    running = np.maximum.accumulate(np.concatenate([[0], pr]))[:-1]
    keep = pr > running
    lens, pr = lens[keep], pr[keep]
    dear = pr.astype(object) * L > lens.astype(object) * den
    if not dear.any():
        return True  # no pack of at most L tokens exceeds den
    G = np.full(L + 1, -1, np.int64)  # best price of dear sequences of exactly s tokens
    G[0] = 0
    for l, p in zip(lens[dear].tolist(), pr[dear].tolist()):
        for _ in range(L // l):  # one more copy of l per pass
            prev = G[: L + 1 - l].copy()
            ok = prev >= 0
            cand = np.where(ok, prev + p, -1)
            np.maximum(G[l:], cand, out=G[l:])
    s = np.flatnonzero(G >= 0)
    s = s[s > 0]
    c = L - s
    estimate = G[s].astype(object) + (c.astype(object) * den) // L
    need = estimate > den
    if not need.any():
        return True
    C = int(c[need].max())
    F = np.zeros(C + 1, np.int64)  # exact best cheap fill of c tokens
    cl, cp = lens[~dear], pr[~dear]
    for cap in range(1, C + 1):
        k = np.searchsorted(cl, cap, side="right")
        best = F[cap - 1]
        if k:
            best = max(best, int((F[cap - cl[:k]] + cp[:k]).max()))
        F[cap] = best
    return bool((G[s[need]] + F[c[need]] <= den).all())


def check_fast(cert, histogram=None) -> int:
    """:func:`check` with numpy: first the exact split of :func:`_split_check` (dear
    lengths by a knapsack, the rest by tokens; enough whenever few lengths are dear or
    they are long), then, if that does not prove it, the full DP of
    :func:`best_pack_value_fast`."""
    lengths, counts, prices, den, L, depth = _fields(cert)
    _validate(lengths, counts, prices, den, L)
    if histogram is not None:
        _check_histogram(cert, histogram)
    claim_lengths, claim_prices = lengths, prices
    if _grid(cert) is not None:
        claim_lengths, claim_prices, L, depth = grid_claim(lengths, prices, L, _grid(cert), depth)
    lens = np.asarray(claim_lengths, dtype=np.int64)
    pr = np.asarray(claim_prices, dtype=np.int64)
    if not _split_check(lens, pr, L, den):
        # not proven without the depth limit: the exact DP with it decides
        v = best_pack_value_fast(lens, pr, L, depth)
        if v > den:
            raise AssertionError(f"a pack is worth {v} > denominator {den}")
    num = sum(c * p for c, p in zip(counts, prices))
    return -(-num // den)


def broken(cert, index=None):
    """A copy of ``cert`` (as a dict) with one price raised by one above what is valid:
    the best pack holding that length is then worth ``denominator + 1``. On a grid, every
    length of that length's unit is raised (so the prices stay a function of the unit, and
    it is the claim that fails, not the form)."""
    lengths, counts, prices, den, L, depth = _fields(cert)
    grid = _grid(cert)
    if index is None:  # the longest length
        index = len(lengths) - 1
    units, unit_prices, cap, d = (lengths, prices, L, depth) if grid is None else grid_claim(lengths, prices, L, grid, depth)
    size = lengths[index] if grid is None else lengths[index] * grid // L
    own = prices[index]
    rest = 0 if d == 1 else (best_pack_value if cap <= 4096 else best_pack_value_fast)(
        units, unit_prices, cap - size, None if d is None else d - 1)
    raise_by = den - (own + rest) + 1 if own + rest <= den else 1
    prices = list(prices)
    same = [index] if grid is None else [i for i, l in enumerate(lengths) if l * grid // L == size]
    for i in same:
        prices[i] += raise_by
    return {"lengths": lengths, "counts": counts, "prices": prices, "denominator": den,
            "max_sequence_length": L, "max_sequences_per_pack": depth, "grid": grid}
