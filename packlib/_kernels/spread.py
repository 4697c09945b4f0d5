"""The window packing of compute-balanced step planning (:mod:`packlib.balancing`):
:func:`spread_bfd`, best-fit decreasing that spreads the short sequences over the rows
instead of leaving them to rows of their own, over buckets of rows by free space that a
multi-level bitset finds (the best fit is the lowest non-empty bucket at or above a length).
"""
import numpy as np

from .._jit import jit, trailing_zeros
from .binpack import decreasing_order
from .csr import csr_from_assignment


_DENSE_MIN = 16  # plain best-fit decreasing stays when no row holds more sequences than this,
_DENSE_RATIO = 4  # or than this many times the mean
_SURELY_DENSE = 2  # a densest row of this many times the limit: the next window skips the test
_FIRST_GUESS = 0.875  # the reserve tried first (/ the even spread) when no window before found one


_ONE = np.uint64(1)
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)


@jit
def _bitset_levels(n):
    """Word offsets of a hierarchical bitset over ``n`` leaves: level 0 holds a bit per
    leaf, level ``k + 1`` a bit per non-zero word of level ``k``, up to one word."""
    nlev = 1
    w = (n + 63) >> 6
    while w > 1:
        w = (w + 63) >> 6
        nlev += 1
    off = np.zeros(nlev + 1, np.int64)
    w = (n + 63) >> 6
    for k in range(nlev):
        off[k + 1] = off[k] + w
        w = (w + 63) >> 6
    return off


@jit
def _bit_at_or_above(bits, off, i):
    """The smallest set leaf ``>= i``, or -1."""
    nlev = off.size - 1
    k = 0
    while k < nlev:
        w = i >> 6
        if off[k] + w >= off[k + 1]:
            return -1
        word = bits[off[k] + w] & (_ALL << np.uint64(i & 63))
        if word != 0:
            i = (w << 6) + np.int64(trailing_zeros(word))
            while k > 0:  # down to the leaf: the lowest set bit of each word below
                k -= 1
                i = (i << 6) + np.int64(trailing_zeros(bits[off[k] + i]))
            return i
        k += 1
        i = w + 1
    return -1


@jit
def _bit_has(bits, i):
    return (bits[i >> 6] >> np.uint64(i & 63)) & _ONE != 0


@jit
def _bit_set(bits, off, i):
    for k in range(off.size - 1):
        w = i >> 6
        was = bits[off[k] + w]
        bits[off[k] + w] = was | (_ONE << np.uint64(i & 63))
        if was != 0:
            return
        i = w


@jit
def _bit_clear(bits, off, i):
    for k in range(off.size - 1):
        w = i >> 6
        now = bits[off[k] + w] & ~(_ONE << np.uint64(i & 63))
        bits[off[k] + w] = now
        if now != 0:
            return
        i = w


@jit
def _bucket_push(bits, off, head, nxt, f, p):
    """Pack ``p`` on top of the bucket of free space ``f`` (LIFO; an empty bucket's head
    is stale, its bit tells)."""
    if _bit_has(bits, f):
        nxt[p] = head[f]
    else:
        nxt[p] = -1
        _bit_set(bits, off, f)
    head[f] = p


@jit
def _bfd_rounds(lengths, order, L, depth, small, reserve, short_round, pack_of, fill, count, head, nxt, bits, off,
                limit):
    """Best fit, in ``order``: the sequences of at least ``small`` tokens into rows filled
    up to ``L - reserve`` (a longer one alone opens a row); with ``short_round``, then the
    shorter ones into the rows' whole free space. Buckets of rows by free space (``head``,
    ``nxt``), the non-empty ones in the bitset ``bits`` (levels ``off``). Returns the number
    of rows, or, as soon as it passes ``limit``, ``limit + 1`` (the packing unfinished)."""
    n = lengths.size
    bits[:] = 0
    n_packs = 0
    cap = L - reserve
    k = 0
    for phase in range(2 if short_round else 1):
        if phase == 1:  # every row's whole free space, for the short sequences
            bits[:] = 0
            cap = L
            for p in range(n_packs):
                f = L - fill[p]
                if count[p] < depth and f > 0:
                    _bucket_push(bits, off, head, nxt, f, p)
        while k < n and (phase == 1 or lengths[order[k]] >= small):
            l = lengths[order[k]]
            r = _bit_at_or_above(bits, off, l)
            if r < 0:
                p = n_packs
                n_packs += 1
                if n_packs > limit:
                    return n_packs
                fill[p] = 0
                count[p] = 0
            else:
                p = head[r]
                head[r] = nxt[p]
                if head[r] < 0:
                    _bit_clear(bits, off, r)
            pack_of[k] = p
            fill[p] += l
            count[p] += 1
            f = cap - fill[p]
            if count[p] < depth and f > 0:
                _bucket_push(bits, off, head, nxt, f, p)
            k += 1
    return n_packs


@jit
def _probe(lengths, order, L, depth, small, reserve, rows, pack_of, fill, count, head, nxt, bits, off, best):
    """One packing with ``reserve`` (see :func:`_bfd_rounds`); kept in ``best`` if it needs
    at most ``rows`` rows. Returns its rows, or 0 if it needs more."""
    got = _bfd_rounds(lengths, order, L, depth, small, reserve, True, pack_of, fill, count, head, nxt, bits, off, rows)
    if got > rows:
        return 0
    best[:] = pack_of
    return got


@jit
def spread_bfd(lengths, L, depth, small, rows, steps, guess=-1.0, check=True):
    """Best-fit decreasing that spreads the short sequences (under ``small`` tokens) over
    the rows instead of leaving them to rows of their own, where plain best-fit decreasing
    leaves a row of more than 16 sequences and 4 times the mean: the longer ones first, into
    rows filled only up to ``L - reserve``, then the short ones, best fit into the rows'
    whole free space. ``reserve`` is searched up to ``top``, the short sequences' tokens per
    row (of the rows that hold no sequence longer than ``L`` minus it), in steps of ``top /
    2**steps``: from ``guess * top`` (the previous window's ``reserve / top``; 7/8 if it is
    negative: none yet, or that window was packed plainly) up while the packing needs at
    most ``rows`` rows, else down (doubling the step) until it does; so most windows need
    two packings. With ``check`` false the plain packing (and its test for a dense row) is
    skipped. If no reserve fits: plain best-fit decreasing. Returns CSR ``(offsets,
    items)`` over positions in ``lengths``, ``reserve / top`` (-1: packed plainly) and
    whether the next window should test (false when this window's densest row held at
    least twice the dense limit, so a window like it is surely dense; a window that skipped
    the test has the next one make it)."""
    n = lengths.size
    order = decreasing_order(lengths, lengths.max() if n else 0)
    off = _bitset_levels(L + 1)
    bits = np.zeros(off[-1], np.uint64)
    head = np.empty(L + 1, np.int64)
    nxt = np.empty(max(n, 1), np.int64)
    fill = np.zeros(max(n, 1), np.int64)
    count = np.zeros(max(n, 1), np.int64)
    pack_of = np.empty(n, np.int64)
    short = 0
    for i in range(n):
        if lengths[i] < small:
            short += lengths[i]
    reserve = short // max(rows, 1)
    alone = 0
    for i in range(n):
        if lengths[i] > L - reserve:
            alone += 1
    top = min(short // max(rows - alone, 1), L - small)
    best = np.empty(n, np.int64)
    n_plain = 0
    check_next = True
    if check:  # plain best-fit decreasing first: if no row holds many more sequences than the mean, it stays
        n_plain = _bfd_rounds(lengths, order, L, depth, small, np.int64(0), True, best, fill, count, head, nxt, bits, off, n)
        most = 0
        for p in range(n_plain):
            most = max(most, count[p])
        limit = max(_DENSE_MIN, _DENSE_RATIO * n / max(n_plain, 1))
        if most <= limit:
            return csr_from_assignment(order, best, n_plain), -1.0, True
        check_next = most < _SURELY_DENSE * limit
    if guess < 0.0:
        guess = _FIRST_GUESS
    # from the guess: up in steps while it fits, else down, doubling the step
    lo, hi, n_lo = 0, top + 1, 0  # lo: the largest reserve found to fit, hi: the smallest found not to
    delta = max(1, top >> steps)
    mid = min(top, max(1, int(guess * top + 0.5)))
    for attempt in range(2 * steps + 2):
        if top <= 1:
            break
        got = _probe(lengths, order, L, depth, small, mid, rows, pack_of, fill, count, head, nxt, bits, off, best)
        if got:
            lo, n_lo = mid, got
            up = min(mid + delta, top)
            if up >= hi or up == mid:
                break
            mid = up
        else:
            hi = mid
            if lo > 0 or mid <= 1:
                break
            mid = max(1, mid - delta)
            delta *= 2
    if n_lo:
        return csr_from_assignment(order, best, n_lo), lo / top, check_next
    if not n_plain:  # no reserve fits: plain best-fit decreasing (the next window searches afresh)
        n_plain = _bfd_rounds(lengths, order, L, depth, small, np.int64(0), True, best, fill, count, head, nxt, bits, off, n)
    return csr_from_assignment(order, best, n_plain), -1.0, True
