"""Cutting rows into segments of at most the capacity (``overflow``)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..._validate import as_int_array, as_positive_int

_OVERFLOW = ("error", "truncate", "split")


@dataclass(frozen=True, eq=False)
class Segments:
    """Rows cut into packable segments (see :func:`make_segments`).

    Segment ``k`` is values ``start[k] : start[k] + length[k]`` of row ``row[k]``.

    Attributes
    ----------
    row, start, length : int64 arrays, one entry per segment, in row order (a split row's
        fragments in order); empty rows have no segment.
    dropped_rows : int
        Empty (or null) rows, which get no segment.
    truncated_tokens : int
        Tokens cut off by ``overflow="truncate"`` (0 for ``"split"``).
    """

    row: np.ndarray
    start: np.ndarray
    length: np.ndarray
    dropped_rows: int
    truncated_tokens: int

    def __post_init__(self):
        for name in ("row", "start", "length"):
            a = np.ascontiguousarray(getattr(self, name), dtype=np.int64)
            a.setflags(write=False)
            object.__setattr__(self, name, a)

    @property
    def num_segments(self) -> int:
        return self.row.size

    @property
    def num_tokens(self) -> int:
        return int(self.length.sum())


def _as_overflow(overflow) -> str:
    if not isinstance(overflow, str):
        raise TypeError(f"overflow must be 'error', 'truncate' or 'split', got {type(overflow).__name__} {overflow!r}")
    if overflow not in _OVERFLOW:
        hint = ""
        if overflow in ("bfd", "bfd_split"):
            hint = f" (TRL's strategy={overflow!r} is overflow={'truncate' if overflow == 'bfd' else 'split'!r} here)"
        raise ValueError(f"overflow must be 'error', 'truncate' or 'split', got {overflow!r}{hint}")
    return overflow


def make_segments(lengths, max_sequence_length, *, overflow="error") -> Segments:
    """Cut rows of the given lengths into segments of at most ``max_sequence_length``.

    Parameters
    ----------
    lengths : array_like of int
        Tokens per row (>= 0), e.g. from :func:`row_lengths`.
    max_sequence_length : int
        Pack capacity in tokens.
    overflow : {"error", "truncate", "split"}, default "error"
        What to do with a longer row: ``"error"`` refuses it (``ValueError`` naming the
        row), so no token is lost unless asked; ``"truncate"`` (TRL's ``bfd``) keeps its
        first ``max_sequence_length`` tokens; ``"split"`` (TRL's ``bfd_split``) cuts it into
        fragments of ``max_sequence_length`` (the last one shorter), losing nothing.

    Returns
    -------
    Segments
        In row order; empty rows are dropped and counted in ``dropped_rows``.
    """
    L = as_positive_int(max_sequence_length, "max_sequence_length")
    overflow = _as_overflow(overflow)
    lens = as_int_array(lengths, "lengths", minimum=0)
    nonempty = lens > 0
    dropped = int(lens.size - np.count_nonzero(nonempty))
    if overflow == "error" and lens.size and lens.max() > L:
        i = int(np.flatnonzero(lens > L)[0])
        raise ValueError(f"row {i} holds {lens[i]:,} tokens > max_sequence_length = {L:,}; pass "
                         f"overflow='truncate' to keep its first {L:,} tokens (TRL's bfd) or overflow='split' "
                         "to cut it into pieces (TRL's bfd_split), or raise max_sequence_length")
    if overflow in ("error", "truncate"):
        row = np.flatnonzero(nonempty).astype(np.int64)
        full = lens[row]
        length = np.minimum(full, L)
        return Segments(row, np.zeros(row.size, np.int64), length, dropped, int((full - length).sum()))
    nfrag = -(-lens // L)                                   # 0 for empty rows
    row = np.repeat(np.arange(lens.size, dtype=np.int64), nfrag)
    first = np.cumsum(nfrag) - nfrag                         # first fragment of each row
    k = np.arange(row.size, dtype=np.int64) - first[row]     # fragment number within its row
    start = k * L
    length = np.minimum(L, lens[row] - start)
    return Segments(row, start, length, dropped, 0)


Segments.__module__ = "packlib.formats.arrow"  # pickles and reprs name the public path, which never moves
