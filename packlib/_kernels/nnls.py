"""NNLSHP: weighted non-negative least squares over packing strategies, and the recipe around it.

The columns of the NNLS matrix ``A`` are the strategies: multisets of at most ``D`` lengths
summing exactly to ``L`` (a length slot doubles as padding). There are 22,102 of them at
``L = 512, D = 3`` and astronomically many for deep packs, so they are never listed: this is
Lawson-Hanson's active-set method with *column generation*. The column it adds is the one
with the largest gradient ``sum_{l in s} rho_l`` (``rho = w^2 (b - A x)``), found by a
dynamic programme over (parts, total length). The least-squares problem on the active set is
solved through a Cholesky factor ``R`` of ``A_P^T W^2 A_P`` (stored transposed) that is
updated when a column enters and downdated by Givens rotations when one leaves: O(p^2) per
step, not O(p^3).
"""
import numpy as np

from .._jit import jit
from .growable import grow1, grow2
from .sorting import sort_ints
from .nnls_price import _price

# ------------------------------------------------------------------- Cholesky updates
# The factor is kept as T = R^T (lower triangular, row-major), so that appending a column
# of R, solving, and deleting a column of R all read contiguous rows of T, not columns of R.


@jit
def _gram(col_len, col_mult, col_n, i, dense):
    """``sum_l dense[l] * a_{l,i}``: column ``i`` against a dense vector."""
    acc = 0.0
    for k in range(col_n[i]):
        acc += dense[col_len[i, k] - 1] * col_mult[i, k]
    return acc


@jit
def _back_solve(T, u, p, z, work):
    """Solve ``T^T z = u`` for the first ``p`` unknowns, column-oriented."""
    for i in range(p):
        work[i] = u[i]
    for i in range(p - 1, -1, -1):
        zi = work[i] / T[i, i]
        z[i] = zi
        for k in range(i):
            work[k] -= T[i, k] * zi


@jit
def _remove(T, p, k, col_len, col_mult, col_n, u, x):
    """Drop active column ``k`` of ``p``: delete row ``k`` of ``T`` and restore its
    triangular shape with Givens rotations, applied to ``u`` as well."""
    for j in range(k, p - 1):
        for c in range(j + 2):
            T[j, c] = T[j + 1, c]
        col_n[j] = col_n[j + 1]
        for i in range(col_len.shape[1]):  # element by element: no shape-error path to compile
            col_len[j, i] = col_len[j + 1, i]
            col_mult[j, i] = col_mult[j + 1, i]
        x[j] = x[j + 1]
    for c in range(p):
        T[p - 1, c] = 0.0
    for j in range(k, p - 1):
        a = T[j, j]
        b = T[j, j + 1]
        h = np.hypot(a, b)
        if h == 0.0:
            continue
        c = a / h
        s = b / h
        for r in range(j, p - 1):
            t1 = T[r, j]
            t2 = T[r, j + 1]
            T[r, j] = c * t1 + s * t2
            T[r, j + 1] = -s * t1 + c * t2
        T[j, j + 1] = 0.0
        t1 = u[j]
        t2 = u[j + 1]
        u[j] = c * t1 + s * t2
        u[j + 1] = -s * t1 + c * t2
    u[p - 1] = 0.0


# ----------------------------------------------------------------------------- NNLS


@jit
def _store_column(parts, n_parts, col_len, col_mult, col_n, p):
    """Column ``p`` from the priced strategy ``parts``: its distinct lengths and multiplicities."""
    sort_ints(parts[:n_parts])
    k = 0
    for t in range(n_parts):
        if k > 0 and col_len[p, k - 1] == parts[t]:
            col_mult[p, k - 1] += 1
        else:
            col_len[p, k] = parts[t]
            col_mult[p, k] = 1
            k += 1
    col_n[p] = k
    return k


@jit
def _forward(T, p, col_len, col_mult, col_n, dense):
    """Row ``p`` of ``T``: solve ``T[:p, :p] y = A_P^T W^2 a_p`` by forward substitution,
    four rows at a time (four independent sums; each row's terms in the same order as one
    row at a time, so the result is the same to the last bit)."""
    i0 = 0
    while i0 + 4 <= p:
        a0 = _gram(col_len, col_mult, col_n, i0, dense)
        a1 = _gram(col_len, col_mult, col_n, i0 + 1, dense)
        a2 = _gram(col_len, col_mult, col_n, i0 + 2, dense)
        a3 = _gram(col_len, col_mult, col_n, i0 + 3, dense)
        for kk in range(i0):
            y = T[p, kk]
            a0 -= T[i0, kk] * y
            a1 -= T[i0 + 1, kk] * y
            a2 -= T[i0 + 2, kk] * y
            a3 -= T[i0 + 3, kk] * y
        y0 = a0 / T[i0, i0]
        a1 -= T[i0 + 1, i0] * y0
        y1 = a1 / T[i0 + 1, i0 + 1]
        a2 -= T[i0 + 2, i0] * y0
        a2 -= T[i0 + 2, i0 + 1] * y1
        y2 = a2 / T[i0 + 2, i0 + 2]
        a3 -= T[i0 + 3, i0] * y0
        a3 -= T[i0 + 3, i0 + 1] * y1
        a3 -= T[i0 + 3, i0 + 2] * y2
        T[p, i0] = y0
        T[p, i0 + 1] = y1
        T[p, i0 + 2] = y2
        T[p, i0 + 3] = a3 / T[i0 + 3, i0 + 3]
        i0 += 4
    for i in range(i0, p):
        acc = _gram(col_len, col_mult, col_n, i, dense)
        for kk in range(i):
            acc -= T[i, kk] * T[p, kk]
        T[p, i] = acc / T[i, i]


@jit
def _append_factor(T, u, col_len, col_mult, col_n, p, k, w2, wb, dense):
    """Grow the Cholesky factor of ``A_P^T W^2 A_P`` by column ``p`` (row ``p`` of ``T``)
    and ``u = R^-T A_P^T W^2 b`` by one entry; ``False`` if the column is numerically
    dependent on the active ones (nothing left to gain)."""
    for t in range(k):
        dense[col_len[p, t] - 1] = w2[col_len[p, t] - 1] * col_mult[p, t]
    diag = _gram(col_len, col_mult, col_n, p, dense)
    _forward(T, p, col_len, col_mult, col_n, dense)
    for i in range(p):
        diag -= T[p, i] * T[p, i]
    for t in range(k):
        dense[col_len[p, t] - 1] = 0.0
    norm2 = 0.0
    for t in range(k):
        norm2 += w2[col_len[p, t] - 1] * col_mult[p, t] * col_mult[p, t]
    if diag <= 1e-10 * norm2:
        for i in range(p):
            T[p, i] = 0.0
        return False
    T[p, p] = np.sqrt(diag)
    acc = _gram(col_len, col_mult, col_n, p, wb)
    for i in range(p):
        acc -= T[p, i] * u[i]
    u[p] = acc / T[p, p]
    return True


@jit
def _keep_feasible(T, u, x, z, work, p, entered, col_len, col_mult, col_n, scale):
    """Lawson-Hanson's inner loop: move towards the least-squares solution on the active
    set, dropping columns that reach zero. Returns the active count, or ``-p - 1`` when the
    entering column cannot move (converged numerically)."""
    first = True
    while p > 0:
        _back_solve(T, u, p, z, work)
        alpha = 2.0
        arg_min = -1
        for i in range(p):
            if z[i] <= 0.0:
                a = x[i] / (x[i] - z[i])
                if a < alpha:
                    alpha = a
                    arg_min = i
        if arg_min < 0:
            for i in range(p):
                x[i] = z[i]
            return p
        if first and arg_min == entered and alpha <= 0.0:
            return -p - 1
        first = False
        for i in range(p):
            x[i] += alpha * (z[i] - x[i])
        x[arg_min] = 0.0
        i = p - 1
        while i >= 0:
            if x[i] <= 1e-12 * scale:
                _remove(T, p, i, col_len, col_mult, col_n, u, x)
                p -= 1
            i -= 1
    return p


@jit
def _gradient(b, w2, x, col_len, col_mult, col_n, p, dense, rho, L):
    """``rho = W^2 (b - A_P x)``, the gradient that prices the next column."""
    for l in range(L):
        dense[l] = b[l]
    for i in range(p):
        for t in range(col_n[i]):
            dense[col_len[i, t] - 1] -= x[i] * col_mult[i, t]
    for l in range(L):
        rho[l] = w2[l] * dense[l]
        dense[l] = 0.0


@jit
def nnls_columns(b, w2, L, D, max_outer):
    """Weighted NNLS ``min ||W (A x - b)||, x >= 0`` over all strategies.

    Returns the active columns as ``(col_len, col_mult, col_n)`` (distinct lengths and their
    multiplicities per column), their values ``x`` and the number of active columns ``p``.
    """
    Dp = min(D, L)
    kmax = 1  # distinct lengths a strategy can hold
    while (kmax + 1) * (kmax + 2) // 2 <= L:
        kmax += 1
    kmax = min(kmax, Dp)
    pmax = L  # an active set is linearly independent: at most L columns
    T = np.zeros((pmax + 1, pmax + 1))
    col_len = np.zeros((pmax + 1, kmax), np.int64)
    col_mult = np.zeros((pmax + 1, kmax), np.int64)
    col_n = np.zeros(pmax + 1, np.int64)
    x = np.zeros(pmax + 1)
    z = np.zeros(pmax + 1)
    u = np.zeros(pmax + 1)
    work = np.zeros(pmax + 1)
    rows = 1 if D >= L else D + 1
    f = np.empty((rows, L + 1))
    parts = np.empty(L, np.int64)
    dense = np.zeros(L)
    wb = w2 * b
    rho = wb.copy()
    scale = 1.0
    for l in range(L):
        scale = max(scale, abs(wb[l]))
    tol = 1e-9 * scale
    p = np.int64(0)  # not a literal 0, which numba would compile the callees for as well
    for _ in range(max_outer):
        value, n_parts = _price(rho, L, D, f, parts)
        if value <= tol or p >= pmax:
            break
        k = _store_column(parts, n_parts, col_len, col_mult, col_n, p)
        if not _append_factor(T, u, col_len, col_mult, col_n, p, k, w2, wb, dense):
            break
        x[p] = 0.0
        p += 1
        p = _keep_feasible(T, u, x, z, work, p, p - 1, col_len, col_mult, col_n, scale)
        if p < 0:
            p = -p - 1
            _remove(T, p, p - 1, col_len, col_mult, col_n, u, x)
            p -= 1
            break
        _gradient(b, w2, x, col_len, col_mult, col_n, p, dense, rho, L)
    return col_len[:p].copy(), col_mult[:p].copy(), col_n[:p].copy(), x[:p].copy()


# --------------------------------------------------------------------------- recipe


@jit
def _replace_in_row(rows, g, old, new):
    """Replace one ``old`` in row ``g`` by ``new`` (0 removes it); keep it sorted descending."""
    width = rows.shape[1]
    j = 0
    while rows[g, j] != old:
        j += 1
    rows[g, j] = new
    while j + 1 < width and rows[g, j + 1] > rows[g, j]:  # new < old: bubble right
        t = rows[g, j]
        rows[g, j] = rows[g, j + 1]
        rows[g, j + 1] = t
        j += 1


@jit
def _row_has(rows, g, value):
    for j in range(rows.shape[1]):
        if rows[g, j] == value:
            return True
        if rows[g, j] == 0:
            return False
    return False


@jit
def _edit_slots(rows, counts, n_rows, old, new, k):
    """In ``k`` packs that hold length ``old``, turn one such slot into ``new`` (0: drop it).

    Packs consisting of a single slot are edited first, so removing padding also removes
    packs that held nothing else. Groups are split when only part of them is edited.
    """
    for pass_ in range(2):
        while k > 0:
            done = True
            for g in range(n_rows):
                if k == 0:
                    break
                if counts[g] == 0 or not _row_has(rows, g, old):
                    continue
                if pass_ == 0 and (rows.shape[1] > 1 and rows[g, 1] != 0):
                    continue
                done = False
                if counts[g] <= k:
                    _replace_in_row(rows, g, old, new)
                    k -= counts[g]
                else:
                    rows = grow2(rows, n_rows + 1)
                    counts = grow1(counts, n_rows + 1, n_rows)
                    for w in range(rows.shape[1]):  # element by element: no shape-error path to compile
                        rows[n_rows, w] = rows[g, w]
                    counts[n_rows] = k
                    counts[g] -= k
                    _replace_in_row(rows, n_rows, old, new)
                    n_rows += 1
                    k = 0
            if done:
                break
    return rows, counts, n_rows


@jit
def settle_dummies(rows, counts, b, padding):
    """The recipe's last step on its rounded solves: left-over sequences (``b``, by length,
    updated in place) first take over dummy slots at least as long (best fit), then the
    remaining dummies (``padding[l]`` slots of length ``l``) are removed from the plan
    (``rows``, descending, zero-padded; ``counts``; both edited in place). Returns the plan's
    rows and counts."""
    L = b.size
    n_rows = np.int64(counts.size)
    for m in range(L, 0, -1):
        l = m
        while b[m - 1] > 0 and l <= L:
            if padding[l] > 0:
                k = min(padding[l], b[m - 1])
                rows, counts, n_rows = _edit_slots(rows, counts, n_rows, l, m, k)
                padding[l] -= k
                b[m - 1] -= k
            l += 1
    for l in range(L, 0, -1):
        if padding[l] > 0:
            rows, counts, n_rows = _edit_slots(rows, counts, n_rows, l, np.int64(0), padding[l])
    return rows[:n_rows].copy(), counts[:n_rows].copy()
