"""Blended-dataset indices: which dataset (and which of its samples) serves each step.

Mixing ``k`` datasets by weight into one stream of ``size`` samples needs two arrays:
``dataset_index[s]`` (which dataset serves global sample ``s``) and
``dataset_sample_index[s]`` (which of that dataset's samples). :func:`blend` builds them
three ways:

``"megatron"``
    Bit-identical to Megatron-Core's ``build_blending_indices`` (weights normalised twice
    in float64 as Megatron's Python does; the greedy "largest deficit ``w_i*max(s,1) -
    c_i``, lowest index on ties"), computed with an exact threshold filter instead of
    scanning every dataset at every step.
``"smooth"``
    A deterministic interleave in which every prefix of length ``s`` holds each dataset
    ``floor(w_i*s)`` or ``ceil(w_i*s)`` times (Megatron's greedy drifts to about ±1.5); the
    index of a size is the first part of the index of any larger size.
``"shuffled"``
    The same totals in a pseudo-random order from ``seed``: position ``s`` is sent through
    a keyed bijection of ``[0, size)`` (a four-round Feistel network over ``Z_a x Z_b``
    with cycle-walking), so any position or slice is computed on its own, without a build.

:func:`blend_exhaustive` is Megatron's exhaustive variant (each dataset exactly
``sizes[i]`` times).

Layout: this module holds the two builders; :mod:`._index` the result type,
:mod:`._cache` its cache-file format, :mod:`._feistel` the shuffled order's set-up and
range builder, :mod:`._smooth` the two-thread smooth build, :mod:`._common` the shared
limits, weight handling (validation is :func:`packlib._validate.as_weights`) and policies.
"""
from __future__ import annotations

import numpy as np

from .._deprecation import deprecate_positional_args
from .._progress import progress_bar
from .._validate import as_bool, as_choice, as_int_array, as_nonnegative_int, as_seed, check_total, exact_sum, readonly
from . import _common, _feistel, _smooth
from ._common import METHODS, largest_remainder
from ._index import BlendedIndex

__all__ = ["BlendedIndex", "blend", "blend_exhaustive"]

# Steps per filter block of method="megatron": each block costs one pass over the k
# datasets plus its steps over a few dozen candidates; 32 measured best from k=100 to 30,000.
_MEGATRON_BLOCK = 32


@deprecate_positional_args(names=("method", "seed", "progress"))
def blend(weights, size, *, method: str = "megatron", seed: int = 0, progress=None,
          materialize: bool = True) -> BlendedIndex:
    """Blend ``k`` datasets by weight into an index of ``size`` samples.

    Parameters
    ----------
    weights : array_like of float, shape (k,)
        Non-negative, finite, not all zero; normalised here (twice in float64, exactly as
        Megatron-Core does). ``megatron`` needs every weight > 0.
    size : int
        Number of samples, ``>= 0``.
    method : {"megatron", "smooth", "shuffled"}
        ``megatron``: Megatron-Core's greedy, bit-identical. Cost O(size * (k/B + m)) for
        blocks of ``B = 32`` steps and the ``m`` datasets near the top (a few dozen for
        lognormal weights), never more than O(size * k) (the loop's). ``smooth``: every
        prefix within ±1 of its quota; the totals are a quota apportionment, and the index
        of a size is a prefix of the index of any larger size; O(size + k * size / B) for
        blocks of ``B >= 16384``, on two threads for large sizes. ``shuffled``: the
        largest-remainder totals in a seeded pseudo-random order; O(size + k), split over
        the available cores, and any slice on its own in O(len + k). Measured speeds:
        docs/blending.md.
    seed : int
        Seed of ``shuffled`` (ignored, and recorded as 0, otherwise).
    progress : bool or None
        Show a tqdm bar (``None``: only for large builds on a terminal; needs tqdm).
    materialize : bool
        ``shuffled`` only: ``False`` returns a lazy index whose arrays are ``None``;
        :meth:`BlendedIndex.slice` computes any part of it on demand.

        Every option is keyword-only; ``method``, ``seed`` and ``progress`` by position
        (the 0.2 spelling) still work until packlib 0.4, with a ``DeprecationWarning``.

    Returns
    -------
    BlendedIndex

    Raises
    ------
    TypeError
        For weights that are not numbers, a size that is not an int (floats and bools
        included), a method that is not a string.
    ValueError
        For NaN, infinite, negative or all-zero weights, zero weights with ``megatron``,
        a negative size or one that does not fit in memory, an unknown method, or
        ``materialize=False`` with a sequential method.
    RuntimeError
        If ``smooth`` could not keep every prefix within its quota (never observed; see
        docs/blending.md).

    See Also
    --------
    blend_exhaustive : each dataset's samples used once, in full (no size to give).

    Examples
    --------
    >>> import packlib
    >>> idx = packlib.blend([0.5, 0.3, 0.2], 10)
    >>> idx.dataset_index.tolist()
    [0, 1, 2, 0, 1, 0, 2, 0, 1, 0]
    >>> idx.counts.tolist()
    [5, 3, 2]
    """
    method = as_choice(method, "method", METHODS)
    w = _common.weights_for(weights, method)
    n = as_nonnegative_int(size, "size")
    seed = as_seed(seed) if method == "shuffled" else (as_seed(seed) and 0)
    materialize = as_bool(materialize, "materialize")
    _common.progress_wanted(progress, 0.0)  # type check
    k = w.size
    if not materialize and method != "shuffled":
        raise ValueError(f"method={method!r} is built sequentially; materialize=False needs method='shuffled'")
    dtype = _common.index_dtype(k)

    if method == "megatron":
        from .._kernels.blend import THETA_GAP, megatron_fill

        d = _common.alloc(n, dtype, "blend (megatron)")
        s = _common.alloc(n, np.int64, "blend (megatron)")
        counts = np.zeros(k, dtype=np.int64)
        state = np.array([0.0, THETA_GAP])  # filter threshold and its last drop, across chunks
        show = _common.progress_wanted(progress, float(n) * min(k, 100))
        step = _common.CHUNK if show is not False else max(n, 1)
        with progress_bar(n, "blend (megatron)", show, unit="sample") as bar:
            for lo in range(0, n, step):
                hi = min(n, lo + step)
                megatron_fill(w, lo, hi, counts, d[lo:], s[lo:], _MEGATRON_BLOCK, state)
                bar.update(hi - lo)
        return BlendedIndex(readonly(d), readonly(s), readonly(counts), readonly(w), method, 0, n)

    if method == "smooth":
        from .._kernels.blend_smooth import smooth_fill

        if n >= 2**53:
            raise ValueError(f"size must be below 2**53 for method='smooth', got {n}")
        d = _common.alloc(n, dtype, "blend (smooth)")
        s = _common.alloc(n, np.int64, "blend (smooth)")
        counts = np.zeros(k, dtype=np.int64)
        threaded = _common.worker_count(n) >= 2 and n >= _smooth.THREADED_FROM
        show = _common.progress_wanted(progress, 6.0 * n)  # ~6 ns per sample on one core
        if threaded or show is not False:
            with progress_bar(n, "blend (smooth)", show, unit="sample") as bar:
                missed = _smooth.smooth_blocks(w, n, counts, d, s, threaded, bar)
        else:
            missed = smooth_fill(w, n, counts, d, s)
        if missed:  # never observed; kept loud rather than silent
            raise RuntimeError(f"smooth blend missed {missed} quota windows; please report this input")
        return BlendedIndex(readonly(d), readonly(s), readonly(counts), readonly(w), method, 0, n)

    counts = largest_remainder(w, n)
    if not materialize:
        return BlendedIndex(None, None, readonly(counts), readonly(w), method, seed, n)
    d, s = _feistel.shuffled_range(counts, n, seed, 0, n, _common.progress_wanted(progress, 20.0 * n))
    return BlendedIndex(readonly(d), readonly(s), readonly(counts), readonly(w), method, seed, n)


def blend_exhaustive(sizes) -> BlendedIndex:
    """Megatron's exhaustive blend: dataset ``i`` used exactly ``sizes[i]`` times.

    The greedy of :func:`blend` with weights ``sizes / sum(sizes)``, skipping datasets that
    are used up; identical to Megatron-Core's ``build_exhaustive_blending_indices``
    except that a dataset of size 0 is simply never picked (Megatron's crashes on it).
    O(total * k).

    Parameters
    ----------
    sizes : array_like of int, shape (k,)
        Non-negative whole numbers, not all zero, summing to at most ``2**62`` (and to
        what fits in memory).

    Returns
    -------
    BlendedIndex
        ``method="exhaustive"``, ``counts == sizes``, ``size == sum(sizes)``.

    See Also
    --------
    blend : an index of a given size, by weight.
    """
    sz = as_int_array(sizes, "sizes", allow_empty=False, minimum=0)
    total = check_total(exact_sum(sz), "sizes", "total size")  # exact: never wraps in int64
    if total == 0:
        raise ValueError("sizes are all zero: nothing to blend")
    if sz.size > _common.INT32_LIMIT:
        raise ValueError(f"{sz.size} datasets do not fit an int32 dataset index")
    from .._kernels.blend import exhaustive_fill

    hint = "blend smaller datasets, or subsets of them"
    d = _common.alloc(total, _common.index_dtype(sz.size), "blend_exhaustive", hint)
    s = _common.alloc(total, np.int64, "blend_exhaustive", hint)
    exhaustive_fill(sz, d, s)
    w = sz / total
    return BlendedIndex(readonly(d), readonly(s), readonly(sz.copy()), readonly(w), "exhaustive", 0, total)
