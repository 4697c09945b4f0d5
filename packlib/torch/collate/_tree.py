"""``PackedCollator(share_prefix=True)``: a micro-batch as one prefix-tree row.

Every distinct token prefix of the micro-batch's trajectories is laid out once, depth-first
(``_trie.py``), in one padding-free row. The batch holds:

- ``input_ids``, ``position_ids`` (each token's depth), ``prev_index`` (its parent's row
  position, whose logits predict it; -1 at a root) and ``tree_end`` (its subtree's end: token
  ``j`` sees ``i`` iff ``i <= j < tree_end[i]``), all ``(1, T)`` int64: the ``O(T)`` tree
  metadata :func:`tree_block_mask` and :func:`tree_mask` read;
- ``tree_index`` / ``tree_trained`` (flat, int64) and ``tree_offsets`` (``n + 1``): for each
  trajectory ``t`` (TRL's order), ``tree_index[tree_offsets[t]:tree_offsets[t + 1]]`` are the
  row positions of its completion's tokens and ``tree_trained`` which of them it trains;
  :func:`token_logps` / :func:`sequence_logps` read them;
- each ``token_keys`` key as an ``(n, longest completion)`` tensor laid out as
  :func:`token_logps`' output (zero past a completion's end), every other key of the
  examples one value per example (``carried_keys`` names them), ``use_cache``, and with
  ``attention_mask="4d"`` the dense tree mask.
"""
from __future__ import annotations

import numpy as np

from ..._validate import as_bool
from .._lazy import require_torch
from ._trie import build_trie, read_trajectories, split_trees_of, token_key, tree_sizes_of
from ._tree_masks import tree_mask

__all__ = ["tree_sizes", "split_trees"]

#: the keys of the examples the tree reads (never carried)
READ_KEYS = ("input_ids", "labels", "completion_mask", "assistant_masks", "attention_mask", "position_ids",
             "prompt_ids", "completion_ids", "chosen_ids", "rejected_ids")
#: the keys a tree batch writes itself
TREE_KEYS = ("input_ids", "position_ids", "prev_index", "tree_end", "tree_index", "tree_offsets", "tree_trained",
             "attention_mask", "use_cache", "carried_keys")


def tree_settings(share_prefix, share_prompt, flash_attn_kwargs, max_length, token_keys):
    """``(share_prefix, flash_attn_kwargs, token_keys)`` of :class:`PackedCollator`, checked
    (``flash_attn_kwargs`` resolved to ``False`` with ``share_prefix``)."""
    share_prefix = as_bool(share_prefix, "share_prefix")
    if isinstance(token_keys, str) or not all(isinstance(k, str) for k in token_keys):
        raise TypeError(f"token_keys must be a list of key names (strings), got {token_keys!r}")
    token_keys = tuple(token_keys)
    if not share_prefix:
        if token_keys:
            raise ValueError("token_keys is read with share_prefix=True only (per-token values follow their "
                             "trajectory's tokens through the tree); pass share_prefix=True, or drop token_keys")
        return False, flash_attn_kwargs, token_keys
    if as_bool(share_prompt, "share_prompt"):
        raise ValueError("share_prefix=True and share_prompt=True: share_prefix already lays every shared prefix "
                         "out once (the prompt included, at any depth); pass share_prefix=True alone")
    if flash_attn_kwargs:
        raise ValueError("share_prefix=True lays the batch out as a prefix tree, which flash-attention's varlen "
                         "kernels (cu_seq_lens) cannot express: use flex_attention with tree_block_mask(batch), or "
                         "sdpa / eager with attention_mask='4d' (small rows); or share_prefix=False to pack each "
                         "sequence whole for flash-attention")
    if max_length is not None:
        raise ValueError("share_prefix=True does not truncate (max_length): cut the trajectories before collating, "
                         "or use max_sequence_length to refuse a tree that does not fit a row")
    return True, False, token_keys


def collate_tree(examples, collator) -> dict:
    """The prefix-tree row of ``examples`` with ``collator``'s settings (see the module)."""
    torch = require_torch()
    trajs = read_trajectories(examples, ragged_groups=collator.ragged_groups)
    trie = build_trie(trajs.sequences)
    T = trie.ids.size
    L = collator.max_sequence_length
    if L is not None and T > L:
        raise ValueError(f"the prefix tree of these {len(examples)} examples lays out {T:,} tokens, over "
                         f"max_sequence_length = {L:,}: plan rows of whole trees (tree_sizes, then balance or "
                         "BalancedBatchSampler), or raise max_sequence_length")
    index = np.concatenate([nodes[s:] for nodes, s in zip(trie.node_of, trajs.starts.tolist())])
    widths = np.array([f.size for f in trajs.trained], np.int64)
    offsets = np.zeros(widths.size + 1, np.int64)
    np.cumsum(widths, out=offsets[1:])
    t = torch.from_numpy
    out = {"input_ids": t(trie.ids)[None], "position_ids": t(trie.depth)[None], "prev_index": t(trie.parent)[None],
           "tree_end": t(trie.end)[None], "tree_index": t(index), "tree_offsets": t(offsets),
           "tree_trained": t(np.concatenate(trajs.trained).astype(np.int64))}
    if collator.attention_mask == "4d":
        out["attention_mask"] = tree_mask(out, dtype=collator.mask_dtype)
    carried = _token_columns(examples, trajs, collator.token_keys, widths)
    carried.update(_example_columns(examples, collator.token_keys))
    out.update(carried)
    out["carried_keys"] = tuple(carried)
    if collator.use_cache is not None:
        out["use_cache"] = collator.use_cache
    return out


def _token_columns(examples, trajs, keys, widths) -> dict:
    """Each ``token_keys`` key as an ``(n, width)`` tensor in :func:`token_logps`' layout."""
    torch = require_torch()
    if not keys:
        return {}
    if trajs.kind == "pairs":
        raise ValueError("token_keys are read for groups (prompt_ids + completion_ids) and trajectories (input_ids), "
                         "not for pairs: give the pairs' per-token values as groups of two completions")
    out = {}
    width = int(widths.max())
    for key in keys:
        rows = [None] * widths.size
        for k, e in enumerate(examples):
            mine = np.flatnonzero(trajs.example == k)
            if trajs.kind == "trajectories":
                lengths, nested = [trajs.sequences[mine[0]].size], False
            else:
                nested = not isinstance(e["completion_ids"][0], (int, np.integer))
                lengths = [trajs.sequences[t].size - int(trajs.starts[t]) for t in mine]
            values = token_key(e, key, k, lengths, nested)
            for t, v in zip(mine.tolist(), values):
                rows[t] = v[int(trajs.starts[t]):] if trajs.kind == "trajectories" else v
        floating = any(r.dtype.kind == "f" for r in rows)
        table = np.zeros((widths.size, width), np.float32 if floating else np.int64)
        for t, r in enumerate(rows):
            table[t, :r.size] = r
        out[key] = torch.from_numpy(table)
    return out


def _example_columns(examples, token_keys) -> dict:
    """The examples' other keys, one value per example (as pairs and groups carry them)."""
    from collections.abc import Mapping

    from ._columns import _column

    if not isinstance(examples[0], Mapping):
        return {}
    skip = set(READ_KEYS) | set(token_keys)
    keys = [key for key in examples[0] if key not in skip]
    for k, e in enumerate(examples):
        extra = {key for key in e if key not in skip}
        if extra != set(keys):
            key = next(iter(extra ^ set(keys)))
            has, lacks = (k, 0) if key in e else (0, k)
            raise ValueError(f"examples[{has}] has the key {key!r} but examples[{lacks}] has not: every example of a "
                             "batch carries the same keys (each reaches the batch as one value per example; name "
                             "per-token keys in token_keys)")
    for key in keys:
        if key in TREE_KEYS or not isinstance(key, str):
            raise ValueError(f"examples[0] has the key {key!r}, which a share_prefix batch writes itself: rename it, "
                             "or remove it from the examples")
    return {key: _column(key, [e[key] for e in examples], list(range(len(examples)))) for key in keys}


def tree_sizes(examples, *, tree_ids=None):
    """Each tree's tokens and attention pairs, to plan rows of whole trees.

    A tree is the examples that share a ``tree_ids`` value (a step-wise agent's samples of one
    trajectory, a search's branches; default: each example alone, e.g. a GRPO group). Its
    tokens are its prefix tree's (what :class:`PackedCollator` with ``share_prefix=True`` lays
    out for it alone) and its attention pairs the sum over them of ``depth + 1`` (the keys
    each token attends to). Give them to :func:`packlib.balance` or
    :class:`packlib.BalancedBatchSampler` as ``lengths`` and ``attention_pairs``, with
    ``tree_ids``' trees as the samples; a row of several trees lays out at most the sum of
    their tokens (shared system prompts across trees are shared too).

    Parameters
    ----------
    examples : sequence of examples
        What :class:`PackedCollator` with ``share_prefix=True`` takes (each example's kind
        that of ``examples[0]``).
    tree_ids : array_like of int, optional
        Each example's tree (``>= 0``); trees are numbered by their sorted ids.

    Returns
    -------
    tokens, pairs : numpy.ndarray
        int64, one value per tree.

    Examples
    --------
    >>> from packlib.torch import tree_sizes
    >>> turns = [{"input_ids": [1, 2, 3, 4], "completion_mask": [0, 0, 1, 1]},
    ...          {"input_ids": [1, 2, 3, 4, 5, 6], "completion_mask": [0, 0, 0, 0, 1, 1]}]
    >>> tree_sizes(turns, tree_ids=[0, 0])
    (array([6]), array([21]))
    """
    if isinstance(examples, (str, bytes)) or not hasattr(examples, "__len__") or len(examples) == 0:
        raise ValueError("examples must be a non-empty list of examples")
    return tree_sizes_of(examples, tree_ids)


def split_trees(examples, max_sequence_length, *, tree_ids=None):
    """Tree ids under which every tree fits a row: a tree larger than ``max_sequence_length``
    is cut at nodes into parts that do.

    A tree's examples are taken in the order of their token sequences (siblings next to each
    other) and a part closes before the example that would take it over the capacity: the cut
    is at the node that example shares with the one before it, and the next part repeats the
    path to that node (a few tokens laid out twice, to keep every example whole). A part's
    prefix tree is at most ``max_sequence_length`` tokens (computed from each example's own
    trie and what it shares with its predecessor, a bound its real trie never exceeds). Trees
    that fit keep one id. An example is never cut: one whose own trie is over the capacity is
    refused, naming it.

    Parameters
    ----------
    examples : sequence of examples
        What :class:`PackedCollator` with ``share_prefix=True`` takes.
    max_sequence_length : int
        Tokens per row.
    tree_ids : array_like of int, optional
        Each example's tree (default: each example alone).

    Returns
    -------
    numpy.ndarray
        int64, each example's new tree id (``0, 1, ...``; a tree's parts are consecutive), for
        :func:`tree_sizes`' ``tree_ids``.

    Examples
    --------
    >>> from packlib.torch import split_trees, tree_sizes
    >>> branches = [{"input_ids": [1, 2, 3, 4, 5]}, {"input_ids": [1, 2, 3, 6, 7]}, {"input_ids": [1, 2, 8, 9]}]
    >>> tree_sizes(branches, tree_ids=[0, 0, 0])[0]
    array([9])
    >>> ids = split_trees(branches, 7, tree_ids=[0, 0, 0])
    >>> ids, tree_sizes(branches, tree_ids=ids)[0]
    (array([0, 0, 1]), array([7, 4]))
    """
    if isinstance(examples, (str, bytes)) or not hasattr(examples, "__len__") or len(examples) == 0:
        raise ValueError("examples must be a non-empty list of examples")
    return split_trees_of(examples, max_sequence_length, tree_ids)
