"""Kernels of the Arrow adapter (:mod:`packlib.formats.arrow`): arrays in, arrays out.

Tokens are copied once, segment by segment, from the list columns' value buffers into the
packed value buffer. Fixed-width values are copied as bytes (a copy does not care what the
bits mean), so one specialisation covers every numeric, temporal, decimal and fixed-size
binary type.
"""
import numpy as np

from .._jit import jit


@jit
def order_by_row(row, num_rows):
    """The permutation that sorts segments by row, stably (a counting sort, O(n + rows)).

    Copying segments in row order reads every value buffer front to back (sequential
    reads, friendly to memory-mapped files) and scatters runs into the output."""
    start = np.zeros(num_rows + 1, np.int64)
    for k in range(row.size):
        start[row[k] + 1] += 1
    for i in range(num_rows):
        start[i + 1] += start[i]
    perm = np.empty(row.size, np.int64)
    for k in range(row.size):
        r = row[k]
        perm[start[r]] = k
        start[r] += 1
    return perm


# Indices are cast to uint64 (all are non-negative, checked by the callers): numba then
# skips negative-index wraparound, and the copy loops vectorise.


@jit
def gather_values(values, src_pos, length, out_pos, out, width):
    """Copy segment ``k``: ``length[k]`` values of ``width`` bytes from value position
    ``src_pos[k]`` of ``values`` to value position ``out_pos[k]`` of ``out``.

    ``values`` and ``out`` are byte (uint8) views, so one specialisation copies every
    fixed-width value type (as fast as typed copies). The source positions are computed
    outside (``offsets[row] + start``) so columns with equal offsets share them."""
    w = np.uint64(width)
    for k in range(src_pos.size):
        src = np.uint64(src_pos[k]) * w
        dst = np.uint64(out_pos[k]) * w
        for j in range(np.uint64(length[k]) * w):
            out[dst + j] = values[src + j]


@jit
def segment_positions(length, out):
    """Fill ``out`` with positions ``0 .. length[k] - 1`` of every segment, laid end to end."""
    o = np.uint64(0)
    for k in range(length.size):
        n = np.uint64(length[k])
        for j in range(n):
            out[o + j] = j
        o += n


@jit
def token_index(row_value_start, row, start, length, total):
    """The index of every output token in the concatenated value arrays (for ``take``)."""
    out = np.empty(total, np.int64)
    o = np.uint64(0)
    for k in range(row.size):
        src = row_value_start[np.uint64(row[k])] + start[k]
        n = np.uint64(length[k])
        for j in range(n):
            out[o + j] = src + np.int64(j)
        o += n
    return out
