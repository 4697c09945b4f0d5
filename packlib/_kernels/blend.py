"""Kernels for blended-dataset indices (see :mod:`packlib.blending`).

- ``megatron_fill``: Megatron-Core's greedy ``build_blending_indices`` bit for bit, with an
  exact threshold filter so each step scans only the datasets that can still win.
- ``smooth_fill`` lives in :mod:`packlib._kernels.blend_smooth`.
- ``shuffled_fill``: a keyed mixed-radix Feistel permutation of ``[0, n)`` with
  cycle-walking, mapped onto the per-dataset blocks, for any range of positions.
"""
import numpy as np

from .._jit import jit

# --------------------------------------------------------------------------- megatron


@jit
def megatron_loop(w, start, stop, counts, out_d, out_s):
    """Megatron's O(n*k) loop over steps ``start..stop-1`` (``counts`` updated in place)."""
    k = w.shape[0]
    for s in range(start, stop):
        t = max(float(s), 1.0)
        best = 0
        best_err = w[0] * t - float(counts[0])
        for i in range(1, k):
            e = w[i] * t - float(counts[i])
            if e > best_err:
                best_err = e
                best = i
        out_d[s - start] = best
        out_s[s - start] = counts[best]
        counts[best] += 1


# The threshold follows the smallest winning deficit of the last block, kept this far below
# it; a block that finds a step below its threshold lowers it by twice the last drop.
THETA_GAP = 0.02
_THETA_RISE = 0.002


@jit
def megatron_fill(w, start, stop, counts, out_d, out_s, block, state):
    """The same picks as :func:`megatron_loop`, ``block`` steps at a time.

    Why it is exact: a dataset's deficit ``fl(w*t) - c`` never falls while it is not picked
    (rounding is monotone in ``t``), so its deficit at the block's last step bounds every
    earlier one. The block scans only the datasets whose bound reaches a threshold
    ``theta``; while each step's best candidate deficit is ``>= theta``, every other dataset
    is strictly below it, so the candidates, scanned in index order, give the loop's pick
    (ties included). A step whose best is below ``theta`` is not taken: the block ends
    there, ``theta`` is lowered and the step is retried with more candidates (``theta``
    falls geometrically, so a few retries at most reach every dataset).

    Why it is fast: Megatron's winning deficit stays in a narrow band (lognormal weights,
    1000 datasets: 0.46 to 0.55), so ``theta`` placed just below the band keeps a few
    dozen candidates where the loop scans all ``k``; the scan uses four independent maxima
    (exact: max does not round) so it is not one long dependency chain.
    ``state`` = ``[theta, drop]`` carries over between calls on consecutive ranges.
    """
    k = w.shape[0]
    if k <= 2 * block:  # too few datasets for a filter to pay
        megatron_loop(w, start, stop, counts, out_d, out_s)
        return
    cf = np.empty(k, np.float64)
    for i in range(k):
        cf[i] = float(counts[i])
    idx = np.empty(k + 1, np.int64)
    cw = np.empty(k, np.float64)
    cc = np.empty(k, np.float64)
    theta = state[0]
    drop = state[1]
    s = start
    while s < stop:
        e = min(stop, s + block)
        t1 = max(float(e - 1), 1.0)
        m = 0
        for i in range(k):  # branch-free compaction: write always, advance on a keep
            idx[m] = i
            m += w[i] * t1 - cf[i] >= theta
        for j in range(m):
            cw[j] = w[idx[j]]
            cc[j] = cf[idx[j]]
        q = s
        low = np.inf  # smallest winning deficit of the block
        while q < e and m > 0:
            t = max(float(q), 1.0)
            m0 = cw[0] * t - cc[0]
            m1 = m0
            m2 = m0
            m3 = m0
            j = 1
            while j + 4 <= m:
                a0 = cw[j] * t - cc[j]
                a1 = cw[j + 1] * t - cc[j + 1]
                a2 = cw[j + 2] * t - cc[j + 2]
                a3 = cw[j + 3] * t - cc[j + 3]
                m0 = a0 if a0 > m0 else m0
                m1 = a1 if a1 > m1 else m1
                m2 = a2 if a2 > m2 else m2
                m3 = a3 if a3 > m3 else m3
                j += 4
            while j < m:
                a0 = cw[j] * t - cc[j]
                m0 = a0 if a0 > m0 else m0
                j += 1
            m0 = m1 if m1 > m0 else m0
            m2 = m3 if m3 > m2 else m2
            mx = m2 if m2 > m0 else m0
            if not mx >= theta:
                break
            low = min(low, mx)
            b = 0
            while cw[b] * t - cc[b] != mx:
                b += 1
            out_d[q - start] = idx[b]
            out_s[q - start] = np.int64(cc[b])
            cc[b] += 1.0
            q += 1
        for j in range(m):
            cf[idx[j]] = cc[j]
        if q < e:  # a step fell below theta: retry it with a lower one
            theta -= drop
            drop *= 2.0
        else:
            theta = min(theta + _THETA_RISE, low - THETA_GAP)
            drop = THETA_GAP
        s = q
    for i in range(k):
        counts[i] = np.int64(cf[i])
    state[0] = theta
    state[1] = drop


@jit
def exhaustive_fill(sizes, out_d, out_s):
    """Megatron's exhaustive blend: greedy by ``sizes/total`` until every dataset is used
    exactly ``sizes[i]`` times; exhausted datasets drop out (zero sizes never enter)."""
    k = sizes.shape[0]
    total = 0
    for i in range(k):
        total += sizes[i]
    w = np.empty(k, np.float64)
    for i in range(k):
        w[i] = sizes[i] / total
    counts = np.zeros(k, np.int64)
    for s in range(total):
        t = max(float(s), 1.0)
        best = -1
        best_err = 0.0
        for i in range(k):
            if counts[i] >= sizes[i]:
                continue
            x = w[i] * t - float(counts[i])
            if best < 0 or x > best_err:
                best_err = x
                best = i
        out_d[s] = best
        out_s[s] = counts[best]
        counts[best] += 1


# --------------------------------------------------------------------------- shuffled

_M32 = np.uint64(0xFFFFFFFF)
_H1 = np.uint64(0x7FEB352D)  # lowbias32 multipliers (C. Wellons' hash prospector)
_H2 = np.uint64(0x846CA68B)
_S15 = np.uint64(15)
_S16 = np.uint64(16)
_S32 = np.uint64(32)
_ONE = np.uint64(1)


@jit
def _f(v, key, m):
    """Round function: a 32-bit keyed hash of ``v`` (lowbias32), scaled to ``[0, m)`` by a
    multiply-high. 32-bit lanes keep the row loop of :func:`shuffled_fill` vectorised."""
    x = (v ^ key) & _M32
    x ^= x >> _S16
    x = (x * _H1) & _M32
    x ^= x >> _S15
    x = (x * _H2) & _M32
    x ^= x >> _S16
    return (x * m) >> _S32


@jit
def _feistel(L, R, a, b, k0, k1, k2, k3):
    """Four rounds over Z_a x Z_b (uint64 ``L < a``, ``R < b``); returns ``L*b + R``."""
    # round 0: (L in Z_a, R in Z_b) -> (R in Z_b, L + f(R) in Z_a); round 1 the reverse
    x = L + _f(R, k0, a)
    x = x - a if x >= a else x
    L = R
    R = x
    x = L + _f(R, k1, b)
    x = x - b if x >= b else x
    L = R
    R = x
    x = L + _f(R, k2, a)
    x = x - a if x >= a else x
    L = R
    R = x
    x = L + _f(R, k3, b)
    x = x - b if x >= b else x
    L = R
    R = x
    return L * b + R


@jit
def _round_keys(keys):
    """The four 32-bit round keys (scalars, so the hot loops pass no array)."""
    return (np.uint64(keys[0]) & _M32, np.uint64(keys[1]) & _M32,
            np.uint64(keys[2]) & _M32, np.uint64(keys[3]) & _M32)


@jit
def permute(x, n, a, b, keys):
    """The permuted position of ``x`` in ``[0, n)`` (cycle-walking over ``[0, a*b)``)."""
    ua = np.uint64(a)
    ub = np.uint64(b)
    k0, k1, k2, k3 = _round_keys(keys)
    y = np.uint64(x)
    y = _feistel(y // ub, y % ub, ua, ub, k0, k1, k2, k3)
    while y >= np.uint64(n):
        y = _feistel(y // ub, y % ub, ua, ub, k0, k1, k2, k3)
    return np.int64(y)


_ROW = 2048  # positions per pass-1 batch: the permuted slots stay in L1 for pass 2


@jit
def shuffled_fill(start, stop, n, a, b, keys, offsets, table, shift, out_d, out_s):
    """Positions ``start..stop-1`` of the shuffled index: position ``s`` holds the
    ``pi(s)``-th slot of the per-dataset layout (dataset ``i`` owns slots
    ``offsets[i]:offsets[i+1]``); ``table`` maps ``slot >> shift`` to the dataset owning
    that bucket's first slot.

    Position ``s`` is the pair ``(s // b, s % b)``; batches of one row (fixed ``L``) are
    permuted first, a loop without branches or carried state that vectorises, then each
    slot is cycle-walked below ``n`` (rare) and looked up. Unsigned indices spare numba's
    negative-index checks (docs/design.md, "Unsigned indices").
    """
    ua = np.uint64(a)
    ub = np.uint64(b)
    k0, k1, k2, k3 = _round_keys(keys)
    un = np.uint64(n)
    ushift = np.uint64(shift)
    buf = np.empty(_ROW, np.uint64)
    s = start
    while s < stop:
        L = s // b
        r0 = s - L * b
        m = min(b - r0, stop - s, _ROW)
        uL = np.uint64(L)
        ur0 = np.uint64(r0)
        for j in range(np.uint64(m)):
            buf[j] = _feistel(uL, ur0 + j, ua, ub, k0, k1, k2, k3)
        o = np.uint64(s - start)
        for j in range(np.uint64(m)):
            y = buf[j]
            while y >= un:
                y = _feistel(y // ub, y % ub, ua, ub, k0, k1, k2, k3)
            d = np.uint64(table[y >> ushift])
            d += np.uint64(np.uint64(offsets[d + _ONE]) <= y)
            while np.uint64(offsets[d + _ONE]) <= y:
                d += _ONE
            out_d[o + j] = d
            out_s[o + j] = np.int64(y) - offsets[d]
        s += m
