"""Plan -> packs: give each slot of each planned pack a real sample id of that length."""
import numpy as np

from .._jit import jit
from .rng import shuffle_range, stream_seed


@jit
def assign_plan(items, offsets, counts, lengths, L, seed):
    """Fill the plan's packs (in plan order) with sample ids; strategy ``s`` is
    ``items[offsets[s]:offsets[s + 1]]`` (CSR: wide plans take no more room than their items).

    Samples of each length are taken in a random order drawn from ``seed`` (one independent
    stream per length, so adding samples of one length never changes the others). The
    ``out_lengths`` output doubles as the scratch array for ids grouped by length, so the
    kernel needs no memory beyond its outputs and O(L).
    """
    n = lengths.size
    starts = np.zeros(L + 2, np.int64)
    for i in range(n):
        starts[lengths[i] + 1] += 1
    for l in range(1, L + 2):
        starts[l] += starts[l - 1]
    # counting sort of ids by length, into the out_lengths array
    by_length = np.empty(n, np.int64)
    cursor = starts.copy()
    for i in range(n):
        l = lengths[i]
        by_length[cursor[l]] = i
        cursor[l] += 1
    state = np.empty(1, np.uint64)
    for l in range(1, L + 1):
        if starts[l + 1] - starts[l] > 1:
            state[0] = stream_seed(seed, l)
            shuffle_range(by_length, starts[l], starts[l + 1], state)
    n_packs = 0
    for s in range(counts.size):
        n_packs += counts[s]
    pack_offsets = np.empty(n_packs + 1, np.int64)
    pack_offsets[0] = 0
    indices = np.empty(n, np.int64)
    for s in range(starts.size):  # loops, not slice copies: no shape-error path to compile
        cursor[s] = starts[s]
    t = 0
    p = 0
    for s in range(counts.size):
        for _ in range(counts[s]):
            for j in range(offsets[s], offsets[s + 1]):
                l = items[j]
                indices[t] = by_length[cursor[l]]
                cursor[l] += 1
                t += 1
            p += 1
            pack_offsets[p] = t
    # second pass: the lengths in plan order overwrite the scratch
    t = 0
    for s in range(counts.size):
        for _ in range(counts[s]):
            for j in range(offsets[s], offsets[s + 1]):
                by_length[t] = items[j]
                t += 1
    return pack_offsets, indices, by_length
