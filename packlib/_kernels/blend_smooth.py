"""Kernel of ``blend(..., method="smooth")``: every prefix within its quota.

Jobs: the ``j``-th sample (``j = 1, 2, ...``) of dataset ``i`` has the ideal time
``q = j / w_i`` (exact rational of the float64 weight). It may fill the prefix lengths
``p`` with ``w_i*p > j-1`` (release ``r = floor((j-1)/w_i) + 1``) up to the first ``p`` with
``w_i*p >= j`` (deadline ``d = ceil(j/w_i)``); meeting every window is exactly the quota
property. Jobs due by ``n`` must be placed; a job released by ``n`` and due after it may be
(at most one per dataset). The index of size ``n`` is then the first ``n`` positions of
the same infinite schedule, so it is a prefix of the index of any larger size.

Schedule: earliest-deadline-first, computed in its equivalent "deadline order" form.
Jobs are taken in non-decreasing deadline order (ties: lower dataset index) and each one
goes to the first free position ``>= r``. This is the EDF schedule itself: in EDF the
positions ``r .. t-1`` before a job's slot ``t`` all hold jobs that precede it in that
order, so they are already taken when it is placed, and ``t`` is not. Like EDF it meets
every window whenever any order does (a job placed at ``t`` instead of a feasible
schedule's ``t' >= t`` can swap with the job at ``t`` there, whose deadline is no earlier).
Such an order exists: Tijdeman's chairman-assignment theorem gives one within
``1 - 1/(2k-2)`` of ``w_i*s`` for weights summing to exactly 1, and float64 normalisation
is off by ~1e-16, far below that margin for any feasible size. EDF never idles either: a
prefix of ``s - 1`` samples always leaves some dataset below ``w_i*s``, whose next job is
released.

Cost: the deadlines up to ``n`` are processed in blocks of ``B`` positions. For each
dataset the jobs due in the block are counted with one exact ``floor(w*X)`` and generated
with one float multiply each (``floor``/``ceil`` of ``j/w`` are exact unless the quotient
lies near an integer; only then an error-free product decides), counting-sorted by
deadline (stable: lower index first on ties), and placed with a bitmap of taken positions:
a find-first-zero from ``max(r, first free)``, mostly within one 64-bit word. The at most
``k`` jobs due after ``n`` then fill the free positions, in the same order.
"""
import numpy as np

from .._jit import jit, trailing_zeros  # llvm.cttz; the de Bruijn fallback costs 1.34x here

_SPLIT = 134217729.0  # 2**27 + 1: Dekker's splitter for float64
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)


@jit
def _product_error(a, b, P):
    """``a*b - P`` exactly for ``P = fl(a*b)`` (Dekker's error-free product)."""
    c = _SPLIT * a
    ah = c - (c - a)
    al = a - ah
    c = _SPLIT * b
    bh = c - (c - b)
    bl = b - bh
    return ((ah * bh - P) + ah * bl + al * bh) + al * bl


@jit
def _exact_split(wi, q, j):
    """``(floor(j/w), ceil(j/w))`` exactly when the float quotient ``q`` lies near the
    integer ``mm = round(q)``: the sign of ``w*mm - j`` by an error-free product decides."""
    mf = np.floor(q + 0.5)
    flo = np.int64(mf)
    P = wi * mf
    err = _product_error(wi, mf, P)
    dd = P - float(j)
    if dd > -err:  # w*mm > j: q < mm
        return flo - 1, flo
    if dd < -err:  # q > mm
        return flo, flo + 1
    return flo, flo  # q == mm


@jit
def _generate(w, inv, cnt, fx, D0, Dend, job, hist):
    """The jobs due in deadlines ``D0 .. Dend-1``, dataset by dataset, one row of ``job``
    each: ``(deadline - D0) << 32 | dataset`` and the first allowed slot (release - 1);
    ``hist[b + 1]`` counts deadline ``D0 + b``. Returns (jobs, misses)."""
    k = w.shape[0]
    cap = job.shape[0]
    X = Dend - 1
    Xf = float(X)
    nb = Dend - D0
    for b in range(nb + 1):
        hist[b] = 0
    mj = 0
    missed = 0
    for i in range(k):
        wi = w[i]
        if not wi > 0.0:
            continue
        c = cnt[i]
        # m = floor(w*X) exactly: the jobs with deadline ceil(j/w) <= X
        P = wi * Xf
        f = np.floor(P)
        if P == f and _product_error(wi, Xf, P) < 0.0:  # rounded up onto an integer
            f -= 1.0
        m = np.int64(f)
        if m <= c:
            continue
        if mj + (m - c) > cap:  # cannot happen (see cap in smooth_fill); never overrun
            missed += 1
            m = c + (cap - mj)
        iv = inv[i]
        x = fx[i]
        # q = j/w as j * (1/w): relative error below 2.3e-16, so floor/ceil of q are exact
        # unless q lies within tol (4x that bound) of an integer
        tol = (m * iv) * 8.9e-16
        half = 0.5 - tol
        for j in range(c + 1, m + 1):
            q = j * iv
            f = np.floor(q)
            if abs((q - f) - 0.5) < half:
                flo = np.int64(f)
                d = flo + 1
            else:
                flo, d = _exact_split(wi, q, j)
            loc = d - D0
            if np.uint64(loc) >= np.uint64(nb):  # cannot happen (exact counts): stay in bounds
                missed += 1
                loc = 0 if loc < 0 else nb - 1
            um = np.uint64(mj)
            job[um, 0] = (loc << 32) | i
            job[um, 1] = x
            hist[np.uint64(loc + 1)] += 1
            mj += 1
            x = flo  # the next job may start at prefix floor(q) + 1
        cnt[i] = m
        fx[i] = x
    return mj, missed


@jit
def _sort(job, hist, mj, nb, srt):
    """Counting sort of the block's jobs (rows of ``job``) by deadline into ``srt``
    (stable: lower dataset first on equal deadlines)."""
    for b in range(1, nb + 1):
        hist[b] += hist[b - 1]
    for t in range(mj):
        pk = job[t, 0]
        b = np.uint64(pk >> 32)
        pos = hist[b]
        hist[b] = pos + 1
        up = np.uint64(pos)
        srt[up, 0] = pk
        srt[up, 1] = job[t, 1]


@jit
def _place(srt, mj, D0, occ, lw, cur, done, out_d, out_s):
    """Each job, in deadline order, to the first free slot >= its release.

    ``occ`` marks taken slots (its last word is a zero sentinel). ``lw`` is the word of the
    first free slot and ``cur`` its bits, kept in a register: a job released at or before
    the first free slot takes it (``cur``), a later one searches ``occ`` from its release.
    Branch-free but for the rare word changes. Returns (lw, cur, misses).
    """
    nw = occ.shape[0]
    lo32 = np.int64(0xFFFFFFFF)
    Dm1 = D0 - 1
    missed = 0
    for u in range(mj):
        pk = srt[u, 0]
        x = srt[u, 1]
        hw = x >> 6
        later = hw > lw
        ow = occ[np.uint64(hw)]
        mask = _ALL if hw < lw else (_ALL << np.uint64(x & 63))
        word = ow if later else cur
        bits = ~word & mask
        wd = hw if later else lw
        if bits == 0:  # the rest of the word is taken: search on (words above lw)
            wd += 1
            while occ[np.uint64(wd)] == _ALL:
                wd += 1
            bits = ~occ[np.uint64(wd)]
            if wd == nw - 1:  # no free slot from the release on: a miss
                missed += 1
                wd = lw
                bits = ~cur
        low = bits & (np.uint64(0) - bits)
        slot = (wd << 6) + np.int64(trailing_zeros(bits))
        occ[np.uint64(wd)] |= low
        cur |= low if wd == lw else np.uint64(0)
        i = pk & lo32
        out_d[np.uint64(slot)] = i
        out_s[np.uint64(slot)] = done[np.uint64(i)]
        done[np.uint64(i)] += 1
        missed += slot > Dm1 + (pk >> 32)
        if cur == _ALL:
            lw += 1
            while occ[np.uint64(lw)] == _ALL:
                lw += 1
            cur = occ[np.uint64(lw)]
    return lw, cur, missed


@jit
def _fill_tail(w, inv, n, cnt, fx, occ, out_d, out_s):
    """The free positions left once every job due by ``n`` is placed: each dataset's next
    job (due after ``n``), if released by ``n``, in (deadline, index) order to the first
    free slot from its release; one that finds none is not in this prefix. Returns the
    number of slots still free (0 when the schedule is complete)."""
    k = w.shape[0]
    due = np.empty(k, np.float64)  # deadlines; float so that huge ones (1/w) still order
    who = np.empty(k, np.int64)
    m = 0
    for i in range(k):
        if w[i] > 0.0 and fx[i] < n:
            j = cnt[i] + 1
            q = j * inv[i]
            f = np.floor(q)
            if q < 9.0e15 and not abs((q - f) - 0.5) < 0.5 - q * 8.9e-16:
                d = float(_exact_split(w[i], q, j)[1])
            else:
                d = np.ceil(q)
            due[m] = d
            who[m] = i
            m += 1
    order = np.argsort(due[:m], kind="mergesort")  # stable: lower index first on ties
    free = n
    for i in range(k):
        free -= cnt[i]
    one = np.uint64(1)
    for t in range(m):
        if free == 0:
            break
        i = who[order[t]]
        b = fx[i]
        wd = b >> 6
        word = occ[wd] | ((one << np.uint64(b & 63)) - one)  # slots below b count as taken
        while word == _ALL:
            wd += 1
            word = occ[wd]
        b = (wd << 6) + np.int64(trailing_zeros(~word))
        if b < n:
            occ[wd] |= one << np.uint64(b & 63)
            out_d[b] = i
            out_s[b] = cnt[i]
            cnt[i] += 1
            free -= 1
    return free


@jit
def block_deadlines(k, n, threaded):
    """Deadlines per block: enough that the per-dataset work (k steps a block) stays
    small; twice as many when blocks are handed between threads (the hand-over costs)."""
    B = 1 << (15 if threaded else 14)
    while B < 16 * k and B < (1 << 26):
        B <<= 1
    return max(1, min(B, n))


@jit
def smooth_setup(w, n, B):
    """Per-dataset reciprocals, the bitmap of taken slots (slots ``n..`` of its last real
    word marked taken, then a zero sentinel word), the placement cursor ``pos`` = [word of
    the first free slot, that word's bits], and the job buffers of a block of ``B``
    deadlines: per dataset ``floor(w*X1) - floor(w*X0) <= w*B + 1``, so at most
    ``B*sum(w) + k`` jobs (``sum(w)`` exceeds 1 by float rounding at most)."""
    k = w.shape[0]
    inv = np.zeros(k, np.float64)
    for i in range(k):
        if w[i] > 0.0:
            inv[i] = 1.0 / w[i]
    nw = (n >> 6) + 2
    occ = np.zeros(nw, np.uint64)
    for b in range(n, (nw - 1) << 6):
        occ[b >> 6] |= np.uint64(1) << np.uint64(b & 63)
    pos = np.zeros(2, np.uint64)
    pos[1] = occ[0]
    cap = B + 2 * k + 64
    return inv, occ, pos, cap


@jit
def block_jobs(w, inv, cnt, fx, D0, Dend, job, hist, srt):
    """The jobs due in deadlines ``D0 .. Dend-1`` sorted by deadline into ``srt``
    (``cnt``/``fx``: per-dataset jobs generated so far and next first slot, updated).
    Returns (jobs, misses)."""
    mj, missed = _generate(w, inv, cnt, fx, D0, Dend, job, hist)
    _sort(job, hist, mj, Dend - D0, srt)
    return mj, missed


@jit
def place_block(srt, mj, D0, occ, pos, done, out_d, out_s):
    """Place a block's sorted jobs; ``pos`` carries the cursor between blocks."""
    lw, cur, missed = _place(srt, mj, D0, occ, np.int64(pos[0]), pos[1], done, out_d, out_s)
    pos[0] = np.uint64(lw)
    pos[1] = cur
    return missed


@jit
def finish(w, inv, n, cnt, fx, occ, out_d, out_s):
    """The jobs due after ``n`` into the positions still free (see :func:`_fill_tail`)."""
    return _fill_tail(w, inv, n, cnt, fx, occ, out_d, out_s)


@jit
def smooth_fill(w, n, counts, out_d, out_s):
    """Fill ``out_d[:n]`` (dataset of each sample) and ``out_s[:n]`` (its number within the
    dataset) so that every prefix of length ``s`` holds dataset ``i`` ``floor(w_i*s)`` or
    ``ceil(w_i*s)`` times (exactly); ``counts`` (int64, length k) receives the totals.

    ``w``: float64 weights (``>= 0``, sum 1 up to float rounding; zeros are never picked).
    Returns the number of missed windows plus unfilled positions (0 when the property
    holds, as it does whenever such an order exists). ``packlib.blending`` runs the same
    phases on two threads (jobs of the next block while this one is placed).
    """
    # The phases are separate kernels called once per block (their loops compile with
    # fewer live values, so fewer spills); inside them everything is written inline, and
    # indices known to be >= 0 are cast to uint64 so numba skips the wraparound code.
    k = w.shape[0]
    for i in range(k):
        counts[i] = 0
    if n <= 0:
        return 0
    B = block_deadlines(k, n, np.bool_(False))  # the type Python's calls have
    inv, occ, pos, cap = smooth_setup(w, n, B)
    job = np.empty((cap, 2), np.int64)  # rows: (deadline-D0) << 32 | dataset, first slot
    srt = np.empty((cap, 2), np.int64)  # the same rows sorted by deadline
    hist = np.zeros(B + 1, np.int64)
    fx = np.zeros(k, np.int64)  # first allowed slot of each dataset's next job
    done = np.zeros(k, np.int64)  # samples placed per dataset (they are placed in order)
    missed = 0
    D0 = np.int64(1)  # typed: a literal 1 passed on compiles the block kernels once more
    while D0 <= n:
        Dend = min(D0 + B, n + 1)
        mj, m1 = block_jobs(w, inv, counts, fx, D0, Dend, job, hist, srt)
        missed += m1 + place_block(srt, mj, D0, occ, pos, done, out_d, out_s)
        D0 = Dend
    return missed + finish(w, inv, n, counts, fx, occ, out_d, out_s)
