"""Log-probabilities of a prefix-tree row (``PackedCollator(share_prefix=True)``), one row per
trajectory in TRL's layout.

A trained token's logits are its parent's in the trie (the previous token of its own
trajectory, ``prev_index``), not the previous position of the row. A token that several
trajectories train is computed once and its value handed to each: the gradient through it
(and through every shared ancestor) is the sum of theirs, as in the unpacked batch.
"""
from __future__ import annotations

from .._lazy import require_torch


def _targets(batch, T: int, device):
    """``(src, tok, inverse, rows, cols, n, width)``: the distinct trained tokens' parents and
    ids, and for every (trajectory, column) trained slot, its distinct token, row, column."""
    torch = require_torch()
    ids, prev = batch["input_ids"].reshape(-1), batch["prev_index"].reshape(-1)
    if ids.numel() != T:
        raise ValueError(f"the logits hold {T} positions but the batch {ids.numel()} tokens: give the logits of this "
                         "batch's row (shape (1, T, vocab))")
    index, offsets = batch["tree_index"].to(device), batch["tree_offsets"].to(device)
    trained = batch["tree_trained"].to(device) != 0
    ids, prev = ids.to(device), prev.to(device)
    n = offsets.numel() - 1
    widths = offsets[1:] - offsets[:-1]
    width = int(widths.max()) if n else 0
    rows = torch.repeat_interleave(torch.arange(n, device=device), widths)
    cols = torch.arange(index.numel(), device=device) - torch.repeat_interleave(offsets[:-1], widths)
    sel = trained & (prev[index] >= 0)
    distinct, inverse = torch.unique(index[sel], return_inverse=True)
    return prev[distinct], ids[distinct], inverse, rows[sel], cols[sel], n, width


def tree_token_logps(batch, T: int, device, apply):
    """``(logps, mask)`` of :func:`packlib.torch.token_logps` on a tree batch; ``apply(src,
    tok)`` computes the log-probabilities of tokens ``tok`` from the logits at ``src``."""
    torch = require_torch()
    src, tok, inverse, rows, cols, n, width = _targets(batch, T, device)
    per_token = apply(src, tok)[inverse]
    logps = torch.zeros(n, width, dtype=torch.float32, device=device).index_put((rows, cols), per_token)
    mask = torch.zeros(n, width, dtype=torch.int64, device=device)
    mask[rows, cols] = 1
    return logps, mask


def tree_sequence_logps(batch, T: int, device, apply):
    """Each trajectory's summed trained log-probabilities (:func:`packlib.torch.sequence_logps`)."""
    torch = require_torch()
    src, tok, inverse, rows, _, n, _ = _targets(batch, T, device)
    per_token = apply(src, tok)[inverse]
    return torch.zeros(n, dtype=torch.float64, device=device).index_add(0, rows, per_token.double()).float()
