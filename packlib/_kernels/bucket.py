"""Readahead bucketing kernels: stable descending sort per window, batch cutting, and a
bit-exact reproduction of CPython's ``random.Random.shuffle`` (Mersenne Twister MT19937).

The shuffle must match infinibatch, which calls ``Random(seed).shuffle(batches)`` once per
window on one generator that lives across windows. ``Random.shuffle`` walks ``i`` from
``n - 1`` down to 1 and swaps ``x[i]`` with ``x[_randbelow(i + 1)]``; ``_randbelow(n)`` draws
``getrandbits(n.bit_length())`` until the draw is below ``n``, and ``getrandbits(k)`` for
``k <= 32`` is one tempered MT output shifted right by ``32 - k``. The generator state is
CPython's: 624 32-bit words and a position (``Random.getstate()[1]``).
"""
import numpy as np

from .._jit import jit

_N = 624
_M = 397
_MATRIX_A = np.uint64(0x9908B0DF)
_UPPER = np.uint64(0x80000000)
_LOWER = np.uint64(0x7FFFFFFF)
_MASK32 = np.uint64(0xFFFFFFFF)


@jit
def _mt_next(mt, pos):
    """Next tempered 32-bit output of MT19937; ``mt`` uint64[624], ``pos`` int64[1]."""
    if pos[0] >= 624:
        for kk in range(624):
            y = (mt[kk] & _UPPER) | (mt[(kk + 1) % 624] & _LOWER)
            v = mt[(kk + 397) % 624] ^ (y >> np.uint64(1))
            if y & np.uint64(1):
                v ^= _MATRIX_A
            mt[kk] = v
        pos[0] = 0
    y = mt[pos[0]]
    pos[0] += 1
    y ^= y >> np.uint64(11)
    y ^= (y << np.uint64(7)) & np.uint64(0x9D2C5680)
    y ^= (y << np.uint64(15)) & np.uint64(0xEFC60000)
    y ^= y >> np.uint64(18)
    return y & _MASK32


@jit
def mt_shuffle(a, mt, pos):
    """Shuffle ``a`` in place exactly as ``random.Random.shuffle`` would (``len(a) < 2**32``)."""
    for i in range(a.size - 1, 0, -1):
        n = i + 1
        k = 0
        while (n >> k) > 0:
            k += 1
        shift = np.uint64(32 - k)
        r = np.int64(_mt_next(mt, pos) >> shift)
        while r >= n:
            r = np.int64(_mt_next(mt, pos) >> shift)
        t = a[i]
        a[i] = a[r]
        a[r] = t


@jit
def sort_desc(keys, lo, hi, counts):
    """Stable descending order of ``keys`` (ties keep input order; ``lo <= keys <= hi``).

    A counting sort over ``[lo, hi]`` when ``counts`` (scratch) has room for the span
    (``hi - lo + 2`` entries), else a stable merge sort. The span is computed in unsigned
    arithmetic, so any ``lo <= hi`` in int64 is safe (``hi - lo + 1`` would wrap in int64
    for keys spanning more than ``2**63``, e.g. hashes).
    """
    n = keys.size
    d = np.uint64(hi) - np.uint64(lo)  # exact: 0 <= hi - lo < 2**64
    if counts.size > 1 and d < np.uint64(counts.size - 1):
        span = np.int64(d) + 1
        order = np.empty(n, dtype=np.int64)
        counts[: span + 1] = 0
        for i in range(n):
            counts[hi - keys[i] + 1] += 1  # bucket 0 = largest key
        for v in range(span):
            counts[v + 1] += counts[v]
        for i in range(n):
            b = hi - keys[i]
            order[counts[b]] = i
            counts[b] += 1
        return order
    inv = np.empty(n, dtype=np.int64)
    for i in range(n):
        inv[i] = ~keys[i]  # -k - 1: order-reversing and never overflows (unlike -k)
    return np.argsort(inv, kind="mergesort")


def counting_scratch(lo: int, hi: int, n: int) -> np.ndarray:
    """Scratch for :func:`sort_desc`'s counting sort when the key span ``hi - lo + 1`` (exact
    Python ints) is at most ``4 n + 4096``; an empty array (merge sort) otherwise."""
    span = hi - lo + 1
    return np.empty(span + 1 if 0 < span <= 4 * n + 4096 else 0, dtype=np.int64)


@jit
def cut(sorted_keys, batch_size, max_tokens, offsets):
    """Cut a window sorted longest first into batches; write ``offsets`` (size >= n + 1) and
    return the number of batches. Batch size is ``max_tokens // first key`` when
    ``max_tokens > 0``, else ``batch_size``."""
    n = sorted_keys.size
    nb = 0
    p = 0
    offsets[0] = 0
    while p < n:
        if max_tokens > 0:
            size = max_tokens // sorted_keys[p]
        else:
            size = batch_size
        p = min(n, p + size)
        nb += 1
        offsets[nb] = p
    return nb


@jit
def bucket_all(lengths, read_ahead, batch_size, max_tokens, lo, hi, counts, shuffle, mt, pos):
    """Bucket a whole array window by window, as infinibatch would on ``len``-keyed items.

    Returns ``(offsets, indices, window_batches)``: batches in CSR form over positions in
    ``lengths`` and the number of batches each window produced. ``counts`` is the counting
    sort's scratch (:func:`counting_scratch`). ``mt``/``pos`` (the shuffle generator) are
    advanced in place.
    """
    n = lengths.size
    indices = np.empty(n, dtype=np.int64)
    offsets = np.empty(n + 1, dtype=np.int64)
    nwin = (n + read_ahead - 1) // read_ahead
    window_batches = np.zeros(nwin, dtype=np.int64)
    w_off = np.empty(min(n, read_ahead) + 1, dtype=np.int64)
    total = 0
    offsets[0] = 0
    for w in range(nwin):
        start = w * read_ahead
        stop = min(n, start + read_ahead)
        keys = lengths[start:stop]
        order = sort_desc(keys, lo, hi, counts)
        sk = np.empty(order.size, dtype=np.int64)
        for i in range(order.size):
            sk[i] = keys[order[i]]
        nb = cut(sk, batch_size, max_tokens, w_off)
        perm = np.arange(nb)
        if shuffle:
            mt_shuffle(perm, mt, pos)
        q = start
        for b in range(nb):
            s = w_off[perm[b]]
            e = w_off[perm[b] + 1]
            for i in range(s, e):
                indices[q] = start + order[i]
                q += 1
            total += 1
            offsets[total] = q
        window_batches[w] = nb
    return offsets[: total + 1].copy(), indices, window_batches
