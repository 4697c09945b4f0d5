"""Amortised-doubling growth for kernel-side arrays whose final size is unknown."""
import numpy as np

from .._jit import jit


@jit
def grow1(a, needed):
    """``a`` if it holds ``needed`` items, else a copy at least twice as large."""
    if needed <= a.shape[0]:
        return a
    out = np.empty(max(needed, 2 * a.shape[0]), dtype=a.dtype)
    out[: a.shape[0]] = a
    return out


@jit
def grow2(a, needed):
    """Row-wise :func:`grow1` for a 2-D array (new rows are zero)."""
    if needed <= a.shape[0]:
        return a
    out = np.zeros((max(needed, 2 * a.shape[0]), a.shape[1]), dtype=a.dtype)
    out[: a.shape[0]] = a
    return out
