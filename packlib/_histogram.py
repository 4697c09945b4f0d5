"""Length histograms: ``h[i]`` counts the sequences of length ``i + 1``.

Below the packers and the registry, so that both take it from here.
"""
from __future__ import annotations

import numpy as np

from ._validate import as_lengths, as_positive_int

__all__ = ["histogram", "MAX_HISTOGRAM_LENGTH"]

# Histogram packers build arrays over 1..L; above this capacity they would need gigabytes.
MAX_HISTOGRAM_LENGTH = 2**24


def histogram(lengths, max_sequence_length: int) -> np.ndarray:
    """Histogram of sequence lengths: ``h[i]`` = number of sequences of length ``i + 1``.

    Parameters
    ----------
    lengths : array_like of int
        Sequence lengths, each in ``[1, max_sequence_length]``.
    max_sequence_length : int
        The pack capacity ``L``; the result has length ``L``.

    Returns
    -------
    int64 ndarray of shape ``(max_sequence_length,)``
    """
    L = as_positive_int(max_sequence_length, "max_sequence_length", maximum=MAX_HISTOGRAM_LENGTH,
                        hint="a histogram has one count per length; pack longer sequences with bfd_pack / ffd_pack")
    return _histogram(as_lengths(lengths, L), L)


def _histogram(lengths: np.ndarray, max_sequence_length: int) -> np.ndarray:
    """:func:`histogram` of lengths already checked (int64, each in ``[1, L]``)."""
    return np.bincount(lengths, minlength=max_sequence_length + 1)[1:].astype(np.int64, copy=False)

