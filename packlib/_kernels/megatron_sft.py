"""Megatron-Bridge packed SFT files: the pickled items of ``np.save``'s object array, written
straight from the token arrays (gather and encode in one pass, no Python object per token).

Each pack becomes the pickle (protocol 3 opcodes) of ``{"input_ids": [...], "loss_mask":
[...], "seq_start_id": [...]}``: ``head`` / ``mid1`` / ``mid2`` / ``tail`` are the constant
bytes around the three lists (the dict, the keys, the list marks); integers are BININT1,
BININT2, BININT or, outside 32 bits, LONG1 of 8 bytes; booleans NEWTRUE / NEWFALSE.

Segment ``s`` (in output order) is tokens ``seg_start[s] : seg_start[s] + seg_len[s] + 1``
of table row ``seg_row[s]``; its rolled loss mask is, with ``use_mask``, the row's mask
(bits of the little-endian bitmap ``mvals`` from ``m_off[row]``) shifted by one with
``False`` last, else true from local position ``thresh[s]`` on.
"""
import numpy as np

from .._jit import jit

_K, _M, _J, _LONG1 = 75, 77, 74, 138      # BININT1, BININT2, BININT, LONG1
_TRUE, _FALSE = 136, 137                  # NEWTRUE, NEWFALSE


@jit
def _int_width(v):
    if 0 <= v < 256:
        return 2
    if 256 <= v < 65536:
        return 3
    if -2147483648 <= v < 2147483648:
        return 5
    return 10


@jit
def _put_int(out, q, v):
    """Write ``v`` at ``q``; returns the next position. May write up to 4 bytes past it
    (the caller leaves room; the next value overwrites them): no branch on the width."""
    if -2147483648 <= v < 2147483648:
        small = 0 <= v < 256
        mid = 256 <= v < 65536
        out[q] = _K if small else (_M if mid else _J)
        for k in range(4):
            out[q + 1 + k] = (v >> (8 * k)) & 255
        return q + (2 if small else (3 if mid else 5))
    out[q] = _LONG1
    out[q + 1] = 8
    for k in range(8):
        out[q + 2 + k] = (v >> (8 * k)) & 255
    return q + 10


@jit
def _put_bytes(out, q, const):
    for k in range(const.size):
        out[q + k] = const[k]
    return q + const.size


@jit
def _pickled_size(ids, ids_off, seg_row, seg_start, seg_len, pack_off, fixed):
    total = np.int64(0)  # typed zeros: a literal 0 passed on compiles the callee once more
    for s in range(seg_row.size):
        base = ids_off[seg_row[s]] + seg_start[s]
        for j in range(seg_len[s] + 1):
            total += _int_width(np.int64(ids[base + j])) + 1       # the token and its mask byte
    for p in range(pack_off.size - 1):
        total += fixed
        pos = np.int64(0)
        for s in range(pack_off[p], pack_off[p + 1]):
            total += _int_width(pos)
            pos += seg_len[s] + 1
    return total


@jit
def pickled_packs(ids, ids_off, mvals, m_off, thresh, use_mask, seg_row, seg_start, seg_len, pack_off,
                  head, mid1, mid2, tail):
    """The pickled dicts of packs ``0 .. len(pack_off) - 2`` (segments ``pack_off[p] : pack_off[p + 1]``), as uint8."""
    fixed = head.size + mid1.size + mid2.size + tail.size
    size = _pickled_size(ids, ids_off, seg_row, seg_start, seg_len, pack_off, fixed)
    out = np.empty(size + 8, np.uint8)              # _put_int may write 4 bytes past the end
    q = np.int64(0)
    for p in range(pack_off.size - 1):
        a = pack_off[p]
        b = pack_off[p + 1]
        q = _put_bytes(out, q, head)
        for s in range(a, b):
            base = ids_off[seg_row[s]] + seg_start[s]
            for j in range(seg_len[s] + 1):
                q = _put_int(out, q, np.int64(ids[base + j]))
        q = _put_bytes(out, q, mid1)
        for s in range(a, b):
            n = seg_len[s] + 1
            if use_mask:
                mb = m_off[seg_row[s]] + seg_start[s]
                for j in range(n - 1):
                    i = mb + j + 1
                    out[q] = _TRUE if (mvals[i >> 3] >> (i & 7)) & 1 else _FALSE
                    q += 1
                out[q] = _FALSE
                q += 1
            else:
                t = thresh[s]
                for j in range(n):
                    out[q] = _TRUE if j >= t else _FALSE
                    q += 1
        q = _put_bytes(out, q, mid2)
        pos = np.int64(0)
        for s in range(a, b):
            q = _put_int(out, q, pos)
            pos += seg_len[s] + 1
        q = _put_bytes(out, q, tail)
    return out[:size]
