"""Amortised-doubling growth for kernel-side arrays whose final size is unknown."""
import numpy as np

from .._jit import jit


@jit
def grow1(a, needed, used=-1):
    """``a`` if it holds ``needed`` items, else a copy at least twice as large holding
    ``a[:used]`` (all of ``a`` by default).

    Call it outside hot loops: numba makes every iteration of a loop that reassigns an
    array variable much slower (reference counting on every iteration; ``docs/design.md``).
    """
    if needed <= a.shape[0]:
        return a
    out = np.empty(max(needed, 2 * a.shape[0]), dtype=a.dtype)
    n = a.shape[0] if used < 0 else used
    for i in range(n):  # a loop, not a slice copy: no shape-error path to compile
        out[i] = a[i]
    return out


@jit
def grow2(a, needed):
    """Row-wise :func:`grow1` for a 2-D array (new rows are zero)."""
    if needed <= a.shape[0]:
        return a
    out = np.zeros((max(needed, 2 * a.shape[0]), a.shape[1]), dtype=a.dtype)
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            out[i, j] = a[i, j]
    return out
