"""Content hashes of token segments (kernels of :mod:`packlib.pipeline`), for the exactly-once check (input side and output side
hash the same values, so equal multisets of hashes mean every sequence arrived once).

Each segment is hashed in four interleaved lanes (independent multiply-xor chains over
positions ``0, 4, 8, ...``, ``1, 5, 9, ...``, ...), so the loop is not one long dependency
chain; the lanes and the length are then mixed. Any single changed value changes the hash
(every step is a bijection of the lane state); values are taken as 64-bit integers.
"""
import numpy as np

from .._jit import jit
from .splitmix import GAMMA

_MUL = np.uint64(0x100000001B3)
_GOLD = np.uint64(GAMMA)
_M1 = np.uint64(0xFF51AFD7ED558CCD)
_M2 = np.uint64(0xC4CEB9FE1A85EC53)
_K1, _K2, _K3 = np.uint64(0x243F6A8885A308D3), np.uint64(0x13198A2E03707344), np.uint64(0xA4093822299F31D0)
_S29, _S33 = np.uint64(29), np.uint64(33)


@jit
def _fmix(h):  # pragma: no cover - compiled
    h ^= h >> _S33
    h *= _M1
    h ^= h >> _S33
    h *= _M2
    h ^= h >> _S33
    return h


@jit
def _hash_one(values, a, b):  # pragma: no cover - compiled
    h0 = _GOLD ^ (np.uint64(b - a) * _M1)
    h1 = h0 ^ _K1
    h2 = h0 ^ _K2
    h3 = h0 ^ _K3
    j = a
    while j + 4 <= b:
        h0 = (h0 ^ np.uint64(np.int64(values[j]))) * _MUL
        h1 = (h1 ^ np.uint64(np.int64(values[j + 1]))) * _MUL
        h2 = (h2 ^ np.uint64(np.int64(values[j + 2]))) * _MUL
        h3 = (h3 ^ np.uint64(np.int64(values[j + 3]))) * _MUL
        h0 ^= h0 >> _S29
        h1 ^= h1 >> _S29
        h2 ^= h2 >> _S29
        h3 ^= h3 >> _S29
        j += 4
    while j < b:
        h0 = (h0 ^ np.uint64(np.int64(values[j]))) * _MUL
        h0 ^= h0 >> _S29
        j += 1
    return _fmix(_fmix(_fmix(_fmix(h0) + h1) + h2) + h3)


@jit
def hash_segments(starts, stops, values, out):  # pragma: no cover - compiled
    for i in range(out.size):
        out[i] = out[i] * _GOLD + _hash_one(values, starts[i], stops[i])


@jit
def hash_packed(row_offsets, seg_offsets, seg_lengths, values, out):  # pragma: no cover - compiled
    """Hash the segments of packed rows: row ``r`` holds ``values[row_offsets[r]:row_offsets[r+1]]``,
    cut into ``seg_lengths[seg_offsets[r]:seg_offsets[r+1]]``. Returns the first row whose
    segments do not add up to its length, or -1."""
    for r in range(row_offsets.size - 1):
        pos = row_offsets[r]
        for s in range(seg_offsets[r], seg_offsets[r + 1]):
            n = seg_lengths[s]
            if n < 1 or pos + n > row_offsets[r + 1]:
                return r
            out[s] = out[s] * _GOLD + _hash_one(values, pos, pos + n)
            pos += n
        if pos != row_offsets[r + 1]:
            return r
    return -1
