"""Operations on packs stored as CSR (offsets / indices / lengths)."""
import numpy as np

from .._jit import jit


@jit
def csr_take(offsets, indices, lengths, order):
    """The packs ``order[0], order[1], ...`` as a new CSR triple."""
    new_offsets = np.empty(order.size + 1, np.int64)
    new_offsets[0] = 0
    for k in range(order.size):
        p = order[k]
        new_offsets[k + 1] = new_offsets[k] + offsets[p + 1] - offsets[p]
    n = new_offsets[order.size]
    new_indices = np.empty(n, np.int64)
    new_lengths = np.empty(n, np.int64)
    for k in range(order.size):
        p = order[k]
        src = offsets[p]
        dst = new_offsets[k]
        for t in range(offsets[p + 1] - src):
            new_indices[dst + t] = indices[src + t]
            new_lengths[dst + t] = lengths[src + t]
    return new_offsets, new_indices, new_lengths


@jit
def csr_from_assignment(order, pack_of, n_packs):
    """CSR packs from items visited in ``order`` and the pack each visit went to.

    Within a pack, items keep the visiting order.
    """
    offsets = np.zeros(n_packs + 1, np.int64)
    for k in range(pack_of.size):
        offsets[pack_of[k] + 1] += 1
    for p in range(n_packs):
        offsets[p + 1] += offsets[p]
    cursor = offsets[:-1].copy()
    indices = np.empty(pack_of.size, np.int64)
    for k in range(pack_of.size):
        p = pack_of[k]
        indices[cursor[p]] = order[k]
        cursor[p] += 1
    return offsets, indices
