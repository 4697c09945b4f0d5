"""MLPerf BERT packing kernels: build packed feature rows, unpack them again, and
fingerprint sequences (to prove the output holds every input sequence exactly once).

Unpacked sequences are ragged (CSR): sequence ``i`` has tokens
``tokens[seq_offsets[i]:seq_offsets[i+1]]`` (and segment ids alike) and masked-LM
predictions ``mlm_pos/mlm_ids[mlm_offsets[i]:mlm_offsets[i+1]]``.

Packed rows use two matrices whose column starts are given by ``icol`` (int features:
input_ids, input_mask, masked_lm_ids, masked_lm_positions, next_sentence_labels,
next_sentence_positions, positions, segment_ids) and ``fcol`` (float features:
masked_lm_weights, next_sentence_weights).
"""
import numpy as np

from .._jit import jit
from .rng import mix64
from .splitmix import GAMMA

I_IDS, I_MASK, I_MLM_IDS, I_MLM_POS, I_NSP_LAB, I_NSP_POS, I_POS, I_SEG = 0, 1, 2, 3, 4, 5, 6, 7
F_MLM_W, F_NSP_W = 0, 1
_GAMMA = np.uint64(GAMMA)

# statuses of build_packed, read by packlib.formats.mlperf_bert
OK = 0
TOO_MANY_TOKENS = 1
TOO_MANY_PREDICTIONS = 2
TOO_MANY_SEQUENCES = 3


@jit
def build_packed(pack_offsets, pack_indices, p0, p1, seq_offsets, tokens, segments,
                 mlm_offsets, mlm_pos, mlm_ids, nsp, L, mlm_slots, depth, icol, fcol, ints, floats):
    """Fill rows ``0 .. p1-p0-1`` of ``ints``/``floats`` (zeroed by the caller) with
    packs ``p0 .. p1-1``. Returns ``(OK, -1)`` or ``(status, pack)``: ``TOO_MANY_TOKENS``,
    ``TOO_MANY_PREDICTIONS`` or ``TOO_MANY_SEQUENCES``."""
    for p in range(p0, p1):
        r = p - p0
        a = pack_offsets[p]
        b = pack_offsets[p + 1]
        if b - a > depth:
            return TOO_MANY_SEQUENCES, p
        start = 0
        m = 0
        for k in range(b - a):
            s = pack_indices[a + k]
            t0 = seq_offsets[s]
            n = seq_offsets[s + 1] - t0
            if start + n > L:
                return TOO_MANY_TOKENS, p
            q0 = mlm_offsets[s]
            nm = mlm_offsets[s + 1] - q0
            if m + nm > mlm_slots:
                return TOO_MANY_PREDICTIONS, p
            for j in range(n):
                ints[r, icol[I_IDS] + start + j] = tokens[t0 + j]
                ints[r, icol[I_SEG] + start + j] = segments[t0 + j]
                ints[r, icol[I_MASK] + start + j] = k + 1
                ints[r, icol[I_POS] + start + j] = j
            for j in range(nm):
                ints[r, icol[I_MLM_POS] + m + j] = mlm_pos[q0 + j] + start
                ints[r, icol[I_MLM_IDS] + m + j] = mlm_ids[q0 + j]
                floats[r, fcol[F_MLM_W] + m + j] = k + 1
            ints[r, icol[I_NSP_POS] + k] = start
            ints[r, icol[I_NSP_LAB] + k] = nsp[s]
            floats[r, fcol[F_NSP_W] + k] = 1.0
            start += n
            m += nm
    return OK, -1


@jit
def unpack_packed(ints, floats, L, mlm_slots, depth, icol, fcol):
    """Split packed rows back into sequences (the inverse of :func:`build_packed`),
    checking the packed layout. Returns ``(seq_offsets, tokens, segments, mlm_offsets,
    mlm_pos, mlm_ids, nsp, error_row)`` with ``error_row = -1`` when every row is well formed."""
    P = ints.shape[0]
    nseq = 0
    ntok = 0
    nmlm = 0
    for r in range(P):
        for j in range(L):
            v = ints[r, icol[I_MASK] + j]
            if v > 0:
                ntok += 1
                if j == 0 or ints[r, icol[I_MASK] + j - 1] != v:
                    nseq += 1
        for j in range(mlm_slots):
            if floats[r, fcol[F_MLM_W] + j] != 0:
                nmlm += 1
    seq_offsets = np.zeros(nseq + 1, dtype=np.int64)
    mlm_offsets = np.zeros(nseq + 1, dtype=np.int64)
    tokens = np.empty(ntok, dtype=np.int64)
    segments = np.empty(ntok, dtype=np.int64)
    mpos = np.empty(nmlm, dtype=np.int64)
    mids = np.empty(nmlm, dtype=np.int64)
    nsp = np.empty(nseq, dtype=np.int64)
    s = 0
    t = 0
    q = 0
    for r in range(P):
        k = 0
        start = 0
        j = 0
        while j < L and ints[r, icol[I_MASK] + j] > 0:
            v = ints[r, icol[I_MASK] + j]
            if v != k + 1 or k >= depth:
                return seq_offsets, tokens, segments, mlm_offsets, mpos, mids, nsp, r
            # one sequence: indices start .. e-1
            e = j
            while e < L and ints[r, icol[I_MASK] + e] == v:
                e += 1
            if ints[r, icol[I_NSP_POS] + k] != start or floats[r, fcol[F_NSP_W] + k] != 1.0:
                return seq_offsets, tokens, segments, mlm_offsets, mpos, mids, nsp, r
            for i in range(start, e):
                if ints[r, icol[I_POS] + i] != i - start:
                    return seq_offsets, tokens, segments, mlm_offsets, mpos, mids, nsp, r
                tokens[t] = ints[r, icol[I_IDS] + i]
                segments[t] = ints[r, icol[I_SEG] + i]
                t += 1
            nsp[s] = ints[r, icol[I_NSP_LAB] + k]
            seq_offsets[s + 1] = t
            for i in range(mlm_slots):
                if floats[r, fcol[F_MLM_W] + i] == k + 1:
                    mp = ints[r, icol[I_MLM_POS] + i] - start
                    if mp < 0 or mp >= e - start:
                        return seq_offsets, tokens, segments, mlm_offsets, mpos, mids, nsp, r
                    mpos[q] = mp
                    mids[q] = ints[r, icol[I_MLM_IDS] + i]
                    q += 1
            mlm_offsets[s + 1] = q
            s += 1
            k += 1
            start = e
            j = e
        for i in range(j, L):  # padding must be all zero
            if (ints[r, icol[I_MASK] + i] != 0 or ints[r, icol[I_IDS] + i] != 0
                    or ints[r, icol[I_POS] + i] != 0 or ints[r, icol[I_SEG] + i] != 0):
                return seq_offsets, tokens, segments, mlm_offsets, mpos, mids, nsp, r
        for i in range(k, depth):
            if floats[r, fcol[F_NSP_W] + i] != 0 or ints[r, icol[I_NSP_POS] + i] != 0 or ints[r, icol[I_NSP_LAB] + i] != 0:
                return seq_offsets, tokens, segments, mlm_offsets, mpos, mids, nsp, r
    if q != nmlm:  # a weight that is not a sequence index 1..k
        return seq_offsets, tokens, segments, mlm_offsets, mpos, mids, nsp, P - 1
    return seq_offsets, tokens, segments, mlm_offsets, mpos, mids, nsp, -1


@jit
def _feed(h, v):
    return mix64(h ^ np.uint64(v)) + _GAMMA


@jit
def fingerprints(seq_offsets, tokens, segments, mlm_offsets, mlm_pos, mlm_ids, nsp):
    """A 64-bit hash of each sequence's content (tokens, segments, predictions, label)."""
    n = seq_offsets.size - 1
    out = np.empty(n, dtype=np.uint64)
    for s in range(n):
        h = np.uint64(0x243F6A8885A308D3)
        a = seq_offsets[s]
        b = seq_offsets[s + 1]
        h = _feed(h, b - a)
        for i in range(a, b):
            h = _feed(h, (np.int64(tokens[i]) << 8) ^ np.int64(segments[i]))
        a = mlm_offsets[s]
        b = mlm_offsets[s + 1]
        h = _feed(h, b - a)
        for i in range(a, b):
            h = _feed(h, (np.int64(mlm_ids[i]) << 20) ^ np.int64(mlm_pos[i]))
        out[s] = _feed(h, nsp[s])
    return out
