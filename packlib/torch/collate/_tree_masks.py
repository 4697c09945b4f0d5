"""The masks of a row laid out depth-first (a prefix tree, or any forest of causal chains),
from each token's subtree end alone: O(T) metadata, no ``T × T`` tensor for flex_attention.

Row position ``i`` is token ``i``'s depth-first pre-order index and ``end[i]`` the end of its
subtree, so query ``q`` sees key ``k`` iff ``k <= q < end[k]``: causal attention cut at each
key's subtree end (FlashMask's column-wise form). For flex_attention's blocks of ``B``
tokens that gives, without looking at any pair, for a key block ``K`` below the diagonal and
the query block ``Q = [q0, q1)``: empty iff ``max(end[K]) <= q0``, full iff
``min(end[K]) >= q1``, partial otherwise; the diagonal block is partial (its mask function
decides each pair). :func:`tree_block_mask` builds the ``BlockMask`` from those ``(T / B)²``
flags and the mask function reads ``end`` only inside partial blocks.
"""
from __future__ import annotations

from collections.abc import Mapping

from .._lazy import require_torch
from ._masks import additive_mask, mask_dtype

__all__ = ["tree_block_mask", "tree_mask"]


def block_mask_from_ends(end, *, device=None, block_size: int = 128):
    """flex_attention's ``BlockMask`` of a depth-first row whose token ``i``'s subtree ends
    at ``end[i]`` (int tensor of shape ``(T,)`` or ``(1, T)``)."""
    torch = require_torch()
    from torch.nn.attention.flex_attention import BlockMask

    from ..._validate import as_positive_int

    bs = as_positive_int(block_size, "block_size")
    dev = end.device if device is None else torch.device(device)
    end = end.reshape(-1).to(device=dev, dtype=torch.int64)
    T = end.numel()
    nb = -(-T // bs)
    padded = torch.arange(nb * bs, device=dev)  # a padding key ends where it starts: no query sees it
    padded[:T] = end
    blocks = padded.view(nb, bs)
    hi, lo = blocks.amax(1), blocks.amin(1)
    idx = torch.arange(nb, device=dev)
    below = idx[None, :] < idx[:, None]  # [q block, kv block]
    nonempty = (below & (hi[None, :] > (idx * bs)[:, None])) | (idx[None, :] == idx[:, None])
    full = below & (lo[None, :] >= ((idx + 1) * bs)[:, None])
    partial = nonempty & ~full

    def as_blocks(flags):
        num = flags.sum(1, dtype=torch.int32)
        order = torch.sort((~flags).to(torch.uint8), dim=1, stable=True).indices.to(torch.int32)
        return num[None, None], order[None, None]

    kv_num, kv_idx = as_blocks(partial)
    full_num, full_idx = as_blocks(full)

    def mask_mod(b, h, q, kv):  # evaluated in partial blocks only
        return (kv <= q) & (q < padded[kv])

    return BlockMask.from_kv_blocks(kv_num, kv_idx, full_num, full_idx, BLOCK_SIZE=bs, mask_mod=mask_mod,
                                    seq_lengths=(T, T))


def _ends(batch, who: str):
    if not isinstance(batch, Mapping) or "tree_end" not in batch:
        have = sorted(map(str, batch)) if isinstance(batch, Mapping) else type(batch).__name__
        raise ValueError(f"{who} needs a batch from PackedCollator(share_prefix=True) (with 'tree_end', each token's "
                         f"subtree end); got {have}. For pairs and groups with share_prompt=True use "
                         "shared_prompt_block_mask / shared_prompt_mask")
    return batch["tree_end"]


def tree_block_mask(batch, *, device=None, block_size: int = 128):
    """flex_attention's ``BlockMask`` of a prefix-tree row, built from its ``O(T)`` metadata.

    Each token attends to its ancestors and itself (``k <= q < tree_end[k]``). The block
    structure (which ``block_size × block_size`` tiles are empty, full or partial) comes from
    each key block's largest and smallest subtree end: no ``T × T`` tensor, and the mask
    function is evaluated by the kernel inside partial tiles only, where it reads
    ``tree_end``. Pass it as ``attention_mask`` to a model loaded with
    ``attn_implementation="flex_attention"``; build it in the training process, on the
    model's device.

    Parameters
    ----------
    batch : dict
        From :class:`PackedCollator` with ``share_prefix=True``.
    device : torch.device or str, optional
        Where the model runs (default: where ``tree_end`` is).
    block_size : int, default 128
        flex_attention's block size.

    Examples
    --------
    >>> from packlib.torch import PackedCollator, tree_block_mask
    >>> batch = PackedCollator(share_prefix=True)([{"prompt_ids": [1, 2], "completion_ids": [[3, 4], [3, 5]]}])
    >>> batch["input_ids"].tolist(), batch["tree_end"].tolist()
    ([[1, 2, 3, 4, 5]], [[5, 5, 5, 4, 5]])
    >>> tree_block_mask(batch).shape
    (1, 1, 5, 5)
    """
    return block_mask_from_ends(_ends(batch, "tree_block_mask"), device=device, block_size=block_size)


def tree_mask(batch, *, dtype=None):
    """The additive 4-D attention mask ``(1, 1, T, T)`` of a prefix-tree row (each token sees
    its ancestors and itself): what eager and sdpa attention take. ``T² × itemsize`` bytes,
    so for small rows; :func:`tree_block_mask` for long ones.

    Parameters
    ----------
    batch : dict
        From :class:`PackedCollator` with ``share_prefix=True``.
    dtype : torch.dtype, optional
        Floating dtype (default float32); give the model's dtype for sdpa.
    """
    torch = require_torch()
    dtype = mask_dtype(dtype)
    end = _ends(batch, "tree_mask").reshape(-1)
    pos = torch.arange(end.numel(), device=end.device)
    allowed = (pos[None, :] <= pos[:, None]) & (pos[:, None] < end[None, :])
    return additive_mask(allowed, dtype)


def chain_ends(group_ids, sequence_ids):
    """``tree_end`` of a row of pairs or groups (each group's shared prompt, if any, then its
    sequences, each contiguous; ``sequence_ids`` -1 on a shared prompt)."""
    torch = require_torch()
    g, s = group_ids.reshape(-1), sequence_ids.reshape(-1)
    T = g.numel()
    pos = torch.arange(T, device=g.device)

    def run_ends(change):  # each position's run end, runs cut where `change` (T - 1 flags) is set
        cut = torch.nonzero(change).reshape(-1) + 1
        ends = torch.cat((cut, torch.tensor([T], device=g.device)))
        return ends[torch.searchsorted(cut, pos, right=True)]

    group_change = g[1:] != g[:-1]
    group_end = run_ends(group_change)
    seq_end = run_ends(group_change | (s[1:] != s[:-1]))
    return torch.where(s == -1, group_end, seq_end)
