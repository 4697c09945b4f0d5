"""Preference pairs and groups of completions in one padding-free row.

A *pair* (DPO, reward models: ``prompt_ids``, ``chosen_ids``, ``rejected_ids``, as TRL's
preference datasets hold them) and a *group* (GRPO, RLOO: ``prompt_ids`` with
``completion_ids``, a list of ``k`` completions; one completion, a flat list of ids, is a
group of one as KTO has it) become sequences ``prompt + completion`` laid end to end in one
row of shape ``(1, T)``, without padding:

- unshared (default): every sequence is ``prompt + completion``, its positions restarting at
  0, kept apart as :class:`PackedCollator` keeps any sequences apart (``position_ids`` with
  ``use_cache=False``, flash-attention's ``cu_seq_lens``, or the 4-D block-diagonal mask);
- ``share_prompt=True``: the prompt once, then each of its completions, whose positions
  continue from the prompt's; each completion attends to its prompt and to itself only
  (a tree), which :func:`shared_prompt_mask` (eager, sdpa) or
  :func:`shared_prompt_block_mask` (flex_attention) expresses. Flash-attention's varlen
  kernels read contiguous sequences only and cannot: such a collator refuses
  ``flash_attn_kwargs=True``.

The batch says which sequence and which pair / group every token belongs to, so that
:func:`sequence_logps` returns each sequence's summed completion log-probabilities in TRL's
order: the B chosen, then the B rejected; group-major for groups. Pairs without
``prompt_ids`` (``RewardTrainer``'s data: whole sequences) have an empty prompt. The other
keys of the examples are carried (``_columns.py``); ``max_length`` cuts as TRL does
(``_truncate.py``).
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..._validate import as_bool, as_choice, as_int_array, as_positive_int
from ._columns import carry_columns, loss_keys
from .._lazy import require_torch
from ._masks import additive_mask, mask_dtype
from ._truncate import MODES, dropped_indices, truncate

__all__ = ["shared_prompt_mask", "shared_prompt_block_mask", "model_inputs"]

PAIR_KEYS = ("prompt_ids", "chosen_ids", "rejected_ids")
GROUP_KEYS = ("prompt_ids", "completion_ids")
#: the batch keys a model's forward does not take (:func:`model_inputs` leaves them out)
LOSS_KEYS = ("completion_mask", "sequence_ids", "group_ids", "pair_ids", "prev_index", "tree_end", "tree_index",
             "tree_offsets", "tree_trained")


def is_preference(example) -> bool:
    """Whether ``example`` is a pair or a group (it has ``prompt_ids``, ``chosen_ids``,
    ``rejected_ids`` or ``completion_ids``)."""
    return isinstance(example, Mapping) and any(k in example for k in ("prompt_ids", "chosen_ids", "rejected_ids",
                                                                        "completion_ids"))


def _ids(example, key: str, k: int, where: str | None = None) -> np.ndarray:
    where = where or f"examples[{k}][{key!r}]"
    ids = as_int_array(example[key], where, minimum=0)
    if ids.size == 0:
        raise ValueError(f"{where} is empty: every prompt and every completion needs at least one token "
                         "(a completion's first token is predicted from the prompt's last)")
    return ids


def _group(example, k: int, kind: str, with_prompt: bool = True):
    """``(prompt, [completions])`` of ``examples[k]``, checked (``with_prompt=False``: pairs
    without ``prompt_ids``, an empty prompt)."""
    if not isinstance(example, Mapping):
        raise TypeError(f"examples[{k}] is a {type(example).__name__}, but examples[0] is a preference pair or group: "
                        "give every example of a batch as a dict with the same keys")
    keys = PAIR_KEYS if kind == "pairs" else GROUP_KEYS
    if kind == "pairs" and not with_prompt:  # TRL's reward data: chosen_ids and rejected_ids hold whole sequences
        keys = keys[1:]
        if "prompt_ids" in example:
            raise ValueError(f"examples[{k}] has 'prompt_ids' but examples[0] has none: give every pair of a batch "
                             "a prompt, or none (chosen_ids and rejected_ids then hold whole sequences)")
    missing = [key for key in keys if key not in example]
    if missing:
        raise ValueError(f"examples[{k}] has no {missing[0]!r} (its keys: {sorted(map(str, example))}): a "
                         + ("pair needs 'prompt_ids', 'chosen_ids' and 'rejected_ids'" if kind == "pairs" else
                            "group needs 'prompt_ids' and 'completion_ids' (a list of completions)")
                         + ", as examples[0] has them")
    if "KL_completion_ids" in example:
        raise ValueError(f"examples[{k}] has 'KL_completion_ids' (KTO's mismatched pairs), which one row of groups "
                         "does not carry: collate them as groups of their own (prompt_ids + completion_ids)")
    prompt = _ids(example, "prompt_ids", k) if with_prompt else np.zeros(0, np.int64)
    if kind == "pairs":
        return prompt, [_ids(example, "chosen_ids", k), _ids(example, "rejected_ids", k)]
    comps = example["completion_ids"]
    if isinstance(comps, (str, bytes)) or not hasattr(comps, "__len__"):
        raise TypeError(f"examples[{k}]['completion_ids'] must be a list of completions (lists of token ids), "
                        f"got {type(comps).__name__}")
    if len(comps) == 0:
        raise ValueError(f"examples[{k}]['completion_ids'] is empty: a group needs at least one completion")
    first = comps[0]
    if isinstance(first, (int, np.integer)):  # one completion, as KTO's completion_ids
        return prompt, [_ids(example, "completion_ids", k)]
    return prompt, [_ids({"c": c}, "c", k, f"examples[{k}]['completion_ids'][{j}]") for j, c in enumerate(comps)]


def _kind(example) -> str:
    pair = any(key in example for key in ("chosen_ids", "rejected_ids"))
    group = "completion_ids" in example
    if pair and group:
        raise ValueError("examples[0] has both 'chosen_ids'/'rejected_ids' and 'completion_ids': give a pair "
                         "(prompt_ids, chosen_ids, rejected_ids) or a group (prompt_ids, completion_ids), not both")
    if not pair and not group:
        raise ValueError(f"examples[0] has 'prompt_ids' but no completions (its keys: {sorted(map(str, example))}): "
                         "give 'chosen_ids' and 'rejected_ids' (a pair) or 'completion_ids' (a group)")
    return "pairs" if pair else "groups"


def _output_order(kind: str, sizes: np.ndarray) -> list[np.ndarray]:
    """For each group, the output indices of its sequences (TRL's order)."""
    B = sizes.size
    if kind == "pairs":
        return [np.array([i, B + i]) for i in range(B)]
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    return [np.arange(s, s + n) for s, n in zip(starts.tolist(), sizes.tolist())]


def layout(examples, *, share_prompt: bool, max_sequence_length: int | None = None, ragged_groups: bool = False,
           max_length: int | None = None, truncation_mode: str = "keep_start"):
    """The row of a batch of pairs or groups, as numpy arrays (see :func:`collate_preference`).

    Returns ``(kind, arrays, kept)``: ``arrays`` holds int64 ``input_ids``, ``position_ids``,
    ``completion_mask``, ``sequence_ids`` (-1 on a shared prompt), ``group_ids``,
    ``prev_index`` (the row position whose logits predict this token; -1 where none) and
    ``seq_lengths`` (the contiguous sequences of the unshared layout; the groups' lengths with
    a shared prompt); ``kept`` the indices of the examples laid out (all, unless
    ``max_length`` drops some as TRL does)."""
    kind = _kind(examples[0])
    with_prompt = kind == "groups" or "prompt_ids" in examples[0]
    groups = [_group(e, k, kind, with_prompt) for k, e in enumerate(examples)]
    groups = [(prompt, comps, [prompt] * len(comps)) for prompt, comps in groups]
    kept = list(range(len(groups)))
    if max_length is not None:
        kept, groups = truncate(groups, max_length, truncation_mode)
        if not kept:
            raise ValueError(f"every example of this batch is dropped by max_length = {max_length:,} "
                             f"(truncation_mode={truncation_mode!r}), as TRL drops them from its datasets: filter "
                             "the dataset first, e.g. [e for e in dataset if len(e['prompt_ids']) < max_length]")
    sizes = np.array([len(c) for _, c, _ in groups], np.int64)
    if kind == "groups" and not ragged_groups and (sizes != sizes[0]).any():
        j = int(np.flatnonzero(sizes != sizes[0])[0])
        raise ValueError(f"examples[{kept[j]}] has {sizes[j]} completions but examples[{kept[0]}] has {sizes[0]}: "
                         "groups of one batch must have the same number of completions (so that "
                         "sequence_logps(...).view(groups, k) holds them), or pass ragged_groups=True to allow groups "
                         "of different sizes")
    parts = {key: [] for key in ("input_ids", "position_ids", "completion_mask", "sequence_ids", "group_ids",
                                 "prev_index", "seq_lengths")}
    start = 0
    for g, (group, outs) in enumerate(zip(groups, _output_order(kind, sizes))):
        n_tokens = _lay_out_group(parts, group, outs.tolist(), g, start, share_prompt)
        if max_sequence_length is not None and n_tokens > max_sequence_length:
            what = "pair" if kind == "pairs" else "group"
            raise ValueError(f"examples[{kept[g]}] lays out {n_tokens:,} tokens, over max_sequence_length = "
                             f"{max_sequence_length:,}: a {what} is never split; truncate its prompt or completions "
                             "(max_length), or raise max_sequence_length")
        start += n_tokens
    arrays = {key: np.concatenate(v).astype(np.int64) if key != "seq_lengths" else np.array(v, np.int64)
              for key, v in parts.items()}
    return kind, arrays, kept


def _lay_out_group(parts, group, outs, g, start, share_prompt) -> int:
    """Append group ``g``'s tokens (starting at row position ``start``) to ``parts``; return
    how many."""
    prompt, comps, prompts = group
    p = prompt.size
    at = start
    if share_prompt:
        prev = np.arange(start - 1, start + p - 1)
        prev[:1] = -1
        _append(parts, prompt, np.arange(p), 0, -1, g, prev)
        last_prompt, at = start + p - 1 if p else -1, start + p
        for c, o in zip(comps, outs):
            prev = np.arange(at - 1, at + c.size - 1)
            prev[0] = last_prompt
            _append(parts, c, np.arange(p, p + c.size), 1, o, g, prev)
            at += c.size
        parts["seq_lengths"].append(at - start)
    else:
        for own, c, o in zip(prompts, comps, outs):
            n = own.size + c.size
            prev = np.arange(at - 1, at + n - 1)
            prev[0] = -1
            ids = np.concatenate((own, c))
            comp = np.r_[np.zeros(own.size, np.int64), np.ones(c.size, np.int64)]
            _append(parts, ids, np.arange(n), comp, o, g, prev)
            parts["seq_lengths"].append(n)
            at += n
    return at - start


def _append(parts, ids, pos, comp, seq, g, prev):
    n = ids.size
    parts["input_ids"].append(ids)
    parts["position_ids"].append(pos)
    parts["completion_mask"].append(np.broadcast_to(np.asarray(comp, np.int64), (n,)))
    parts["sequence_ids"].append(np.full(n, seq, np.int64))
    parts["group_ids"].append(np.full(n, g, np.int64))
    parts["prev_index"].append(prev)


def _allowed(group_ids, sequence_ids):
    """``(T, T)`` bool: query ``q`` may attend to key ``k`` (same group, ``k <= q``, and ``k``
    on the shared prompt or in ``q``'s own sequence)."""
    torch = require_torch()
    g = group_ids.reshape(-1)
    s = sequence_ids.reshape(-1)
    T = g.numel()
    same = (g[:, None] == g[None, :]) & ((s[None, :] == -1) | (s[:, None] == s[None, :]))
    return same & torch.ones(T, T, dtype=torch.bool, device=g.device).tril_()


def shared_prompt_mask(batch, *, dtype=None):
    """The additive 4-D attention mask ``(1, 1, T, T)`` of a row of pairs or groups: each
    token sees the earlier tokens of its own sequence and of its group's shared prompt,
    nothing else. What Hugging Face's eager and sdpa attention take as ``attention_mask``
    (a 4-D mask is used as given). It costs ``T² × itemsize`` bytes (256 MiB in float32 at
    ``T = 8192``), plus a few ``T²``-byte bool temporaries while it is built.

    Parameters
    ----------
    batch : dict
        From :class:`PackedCollator` on pairs or groups (``group_ids``, ``sequence_ids``).
    dtype : torch.dtype, optional
        Floating dtype (default float32); give the model's dtype for sdpa.
    """
    dtype = mask_dtype(dtype)
    _need(batch, ("group_ids", "sequence_ids"), "shared_prompt_mask")
    allowed = _allowed(batch["group_ids"], batch["sequence_ids"])
    return additive_mask(allowed, dtype)


def shared_prompt_block_mask(batch, *, device=None, block_size: int = 128):
    """flex_attention's ``BlockMask`` of a row of pairs or groups (the pattern of
    :func:`shared_prompt_mask`, without its ``T²`` tensor): pass it as ``attention_mask`` to a
    model loaded with ``attn_implementation="flex_attention"``. Build it in the training
    process, on the model's device (its mask function reads the batch's ids there).

    Parameters
    ----------
    batch : dict
        From :class:`PackedCollator` on pairs or groups.
    device : torch.device or str, optional
        Where the model runs (default: where the batch's ids are).
    block_size : int, default 128
        flex_attention's block size.
    """
    from ._tree_masks import block_mask_from_ends, chain_ends

    _need(batch, ("group_ids", "sequence_ids"), "shared_prompt_block_mask")
    ends = chain_ends(batch["group_ids"], batch["sequence_ids"])  # the tree of depth one, depth-first
    return block_mask_from_ends(ends, device=device, block_size=block_size)


def _need(batch, keys, who):
    if not isinstance(batch, Mapping) or any(k not in batch for k in keys):
        have = sorted(map(str, batch)) if isinstance(batch, Mapping) else type(batch).__name__
        raise ValueError(f"{who} needs a batch of pairs or groups from PackedCollator (with {', '.join(keys)}); "
                         f"got {have}")


def model_inputs(batch) -> dict:
    """The batch without the keys a model's ``forward`` does not take (``completion_mask``,
    ``sequence_ids``, ``group_ids``, ``pair_ids``, ``prev_index``, the keys carried from the
    examples such as ``ref_*_logps``, ``margin`` or ``label``, and ``carried_keys`` /
    ``dropped``): what to pass as ``model(**model_inputs(batch))``.

    Parameters
    ----------
    batch : dict
        From :class:`PackedCollator`.
    """
    if not isinstance(batch, Mapping):
        raise TypeError(f"batch must be a dict from PackedCollator, got {type(batch).__name__}")
    if "tree_end" in batch and "attention_mask" not in batch:  # positions are depths: the mask is not optional
        raise ValueError("this share_prefix batch has no attention_mask: set batch['attention_mask'] = "
                         "tree_block_mask(batch, device=...) (flex_attention), or collate with attention_mask='4d' "
                         "(sdpa / eager), before model_inputs(batch)")
    drop = set(LOSS_KEYS) | set(loss_keys(batch))
    return {k: v for k, v in batch.items() if k not in drop}


def preference_settings(share_prompt, max_sequence_length, ragged_groups, flash_attn_kwargs):
    """:class:`PackedCollator`'s settings for pairs and groups, checked: ``(share_prompt,
    max_sequence_length, ragged_groups, flash_attn_kwargs)``, the last resolved (``None``:
    unless ``share_prompt``)."""
    share_prompt = as_bool(share_prompt, "share_prompt")
    L = None if max_sequence_length is None else as_positive_int(max_sequence_length, "max_sequence_length")
    ragged_groups = as_bool(ragged_groups, "ragged_groups")
    if flash_attn_kwargs is None:  # flash-attention's kwargs wherever they can isolate the row
        flash_attn_kwargs = not share_prompt
    if share_prompt and flash_attn_kwargs is True:
        raise ValueError("share_prompt=True lays each prompt out once for all its completions, a tree that "
                         "flash-attention's varlen kernels (cu_seq_lens) cannot express: use sdpa or eager "
                         "(the 4-D mask the batch carries), or flex_attention with shared_prompt_block_mask(batch); "
                         "or share_prompt=False to pack each sequence whole for flash-attention")
    return share_prompt, L, ragged_groups, flash_attn_kwargs


def truncation_settings(max_length, truncation_mode, share_prompt):
    """:class:`PackedCollator`'s ``(max_length, truncation_mode)``, checked."""
    max_length = None if max_length is None else as_positive_int(max_length, "max_length")
    truncation_mode = as_choice(truncation_mode, "truncation_mode", MODES)
    if share_prompt and max_length is not None and truncation_mode == "keep_end":
        raise ValueError("truncation_mode='keep_end' cuts each sequence's prompt from its start by a different "
                         "amount, so a group no longer has one prompt to lay out once: use share_prompt=False, or "
                         "truncation_mode='keep_start' (TRL's default)")
    return max_length, truncation_mode


def collate_preference(examples, collator) -> dict:
    """One padding-free row of pairs or groups, with ``collator``'s settings (what
    :class:`PackedCollator` returns for them).

    Keys: ``input_ids``, ``position_ids``, ``completion_mask``, ``sequence_ids``, ``group_ids``
    (and ``pair_ids``, the same tensor, for pairs), ``prev_index`` (all ``(1, T)`` int64),
    ``use_cache``; unshared, the isolation :class:`PackedCollator` gives any packed row
    (``cu_seq_lens_q/k`` and ``max_length_q/k``, or the 4-D block-diagonal mask); with a
    shared prompt, the tree mask of :func:`shared_prompt_mask` as ``attention_mask``. Every
    other key of the examples (``ref_chosen_logps``, ``margin``, KTO's ``label`` and
    ``ref_logps``, ...) one value per example, named in ``carried_keys``; with ``max_length``,
    ``dropped``: the indices of the examples TRL's truncation drops.
    """
    torch = require_torch()
    share = collator.share_prompt
    kind, arr, kept = layout(examples, share_prompt=share, max_sequence_length=collator.max_sequence_length,
                             ragged_groups=collator.ragged_groups, max_length=collator.max_length,
                             truncation_mode=collator.truncation_mode)
    carried = carry_columns(examples, kept)
    out = {k: torch.from_numpy(arr[k])[None] for k in ("input_ids", "position_ids", "completion_mask",
                                                       "sequence_ids", "group_ids", "prev_index")}
    if kind == "pairs":
        out["pair_ids"] = out["group_ids"]
    lens = arr["seq_lengths"]
    if not share and collator.flash_attn_kwargs:
        cu = torch.from_numpy(np.concatenate(([0], np.cumsum(lens))).astype(np.int32))
        m = int(lens.max())
        out.update(cu_seq_lens_q=cu, cu_seq_lens_k=cu.clone(), max_length_q=m, max_length_k=m)
    if share or collator.attention_mask == "4d":
        out["attention_mask"] = shared_prompt_mask(out, dtype=collator.mask_dtype)
    out.update(carried)
    out["carried_keys"] = tuple(carried)
    if collator.max_length is not None:
        out["dropped"] = torch.from_numpy(dropped_indices(len(examples), kept))
    if collator.use_cache is not None:
        out["use_cache"] = collator.use_cache
    return out
