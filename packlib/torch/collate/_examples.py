"""Reading one example of a micro-batch: its tokens, where its sequences start, and which of
its tokens are trained.

The rule (``docs/training.md``): a token carries a loss term only where every signal the
example gives allows it:

- it is not the first token of its sequence (nothing in the sequence predicts it);
- its ``labels`` value, when ``labels`` is given, is not -100 (the label is the token id
  otherwise);
- ``completion_mask`` (TRL's completion-only loss) and ``assistant_masks`` (TRL's
  assistant-only loss), when given, are non-zero there;
- ``attention_mask``, when given, is non-zero there: a zero marks padding, which is dropped
  from the row altogether (it is in no sequence, takes no attention and no compute).

A row holds several sequences when it says so: ``seq_lengths`` (TRL's and
:func:`packlib.formats.arrow.pack_table`'s column) or ``position_ids`` counting 0, 1, ... from
every sequence's start (the column ``transformers.Trainer`` keeps with its default
``remove_unused_columns=True``); with neither, the row is one sequence.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..._validate import as_int_array

#: Per-token columns an example may carry besides input_ids and labels.
MASK_KEYS = ("attention_mask", "completion_mask", "assistant_masks")
_KINDS = {"f": "floats", "U": "strings", "S": "bytes", "c": "complex numbers", "b": "booleans"}


def _shown(values) -> str:
    text = repr(values)
    return text if len(text) <= 60 else text[:57] + "..."


def _ints(values, where: str, *, flags: bool = False) -> np.ndarray:
    """``values`` as int64, refusing strings and floats (even whole ones: a float token list is
    mistyped data) with a ``TypeError`` naming the example and column; booleans only for
    ``flags`` (masks)."""
    if hasattr(values, "detach"):  # a torch tensor
        values = values.detach().cpu().numpy()
    arr = np.asarray(values)
    kind = arr.dtype.kind
    if arr.ndim != 1:
        raise ValueError(f"{where} must be a flat list (one value per token), got shape {arr.shape}")
    if arr.size == 0 or kind in "iuO":   # mixed Python objects: exact integers only
        return as_int_array(arr, where)
    if flags and kind == "b":
        return arr.astype(np.int64)
    want = "integers or booleans (one per token)" if flags else "integer token ids"
    raise TypeError(f"{where} holds {_KINDS.get(kind, arr.dtype)} ({_shown(arr[:3].tolist())} first) but must hold "
                    f"{want}; tokenize the text first, or convert the list to integers")


def _positions(lens: np.ndarray) -> np.ndarray:
    """0, 1, ... restarting at every sequence."""
    out = np.arange(int(lens.sum()), dtype=np.int64)
    return out - np.repeat(np.cumsum(lens) - lens, lens)


def _sequence_lengths(ids: np.ndarray, example: Mapping, k: int) -> np.ndarray:
    """The lengths of the sequences of a row: from ``seq_lengths``, else from ``position_ids``
    restarting at 0, else the whole row (checked against each other when both are given)."""
    seq_lengths, pos = example.get("seq_lengths"), example.get("position_ids")
    lens = None
    if seq_lengths is not None:
        lens = as_int_array(seq_lengths, f"examples[{k}]['seq_lengths']", allow_empty=False, minimum=1)
        if int(lens.sum()) > ids.size:  # the tokens were cut after packing
            raise ValueError(
                f"examples[{k}]['seq_lengths'] sum to {int(lens.sum())} but its input_ids hold {ids.size} tokens: the "
                f"row was truncated after it was packed. TRL's SFTTrainer cuts every row to SFTConfig's max_length "
                f"(1024 by default): pass max_length=None (or at least {int(lens.sum())}, the packed length) with "
                "packed rows, or pack them to at most max_length")
        if int(lens.sum()) != ids.size:
            raise ValueError(
                f"examples[{k}]['seq_lengths'] sum to {int(lens.sum())} but its input_ids hold {ids.size} tokens: "
                "seq_lengths must split the row's tokens exactly (as pack_table writes them)")
    if pos is not None:
        pos = _ints(pos, f"examples[{k}]['position_ids']")
        if pos.size != ids.size:
            raise ValueError(f"examples[{k}]['position_ids'] holds {pos.size} values for {ids.size} input_ids: "
                             "one position per token")
        starts = np.flatnonzero(pos == 0)
        from_pos = np.diff(np.append(starts, ids.size))
        if starts.size == 0 or starts[0] != 0 or not np.array_equal(pos, _positions(from_pos)):
            raise ValueError(f"examples[{k}]['position_ids'] must count 0, 1, 2, ... from the start of every "
                             f"sequence of the row (as pack_dataset writes them), got {_shown(pos.tolist())}")
        if lens is not None and not np.array_equal(lens, from_pos):
            raise ValueError(f"examples[{k}]['seq_lengths'] and its position_ids split the row differently: give "
                             "one of them, or both from the same packing")
        lens = from_pos
    return np.array([ids.size], np.int64) if lens is None else lens


def _token_ids(values, where: str) -> np.ndarray:
    ids = _ints(values, where)
    if ids.size == 0:
        raise ValueError(f"{where} is empty: every sequence needs at least one token")
    if ids.min() < 0:
        i = int(np.flatnonzero(ids < 0)[0])
        raise ValueError(f"{where}[{i}] = {ids[i]}: token ids are >= 0")
    return ids


def read_example(example, k: int):
    """``(tokens, sequence lengths, labels)`` of ``examples[k]``, checked, with the rule of
    this module applied (padding dropped, untrained tokens' labels -100; the first label of
    each sequence is left for the caller to set)."""
    if not isinstance(example, Mapping):
        ids = _token_ids(example, f"examples[{k}]")
        return ids, np.array([ids.size], np.int64), ids.copy()
    if "input_ids" not in example:
        raise ValueError(
            f"examples[{k}] has no 'input_ids' (its keys: {sorted(map(str, example))}): give each example "
            "its token ids under 'input_ids', or the ids themselves")
    ids = _token_ids(example["input_ids"], f"examples[{k}]['input_ids']")
    lens = _sequence_lengths(ids, example, k)
    labels = ids.copy()
    if example.get("labels") is not None:
        labels = _ints(example["labels"], f"examples[{k}]['labels']")
        if labels.size != ids.size:
            raise ValueError(f"examples[{k}]['labels'] holds {labels.size} values for {ids.size} input_ids: "
                             "one label per token")
    masks = {}
    for name in MASK_KEYS:
        if example.get(name) is not None:
            m = _ints(example[name], f"examples[{k}][{name!r}]", flags=True)
            if m.size != ids.size:
                raise ValueError(f"examples[{k}][{name!r}] holds {m.size} values for {ids.size} input_ids: "
                                 "one value per token")
            masks[name] = m != 0
    for name in ("completion_mask", "assistant_masks"):
        if name in masks:
            labels = np.where(masks[name], labels, -100)
    keep = masks.get("attention_mask")
    if keep is not None and not keep.all():  # padding: in no sequence
        lens = np.bincount(np.repeat(np.arange(lens.size), lens)[keep], minlength=lens.size)
        ids, labels, lens = ids[keep], labels[keep], lens[lens > 0]
    return ids, lens.astype(np.int64), labels


def label_tokens(dataset) -> np.ndarray:
    """How many tokens of each example :class:`PackedCollator` trains (its labels that are
    not -100 after its masks, each sequence's first token excluded): the ``label_tokens``
    of :class:`packlib.BalancedBatchSampler` for data with ``labels`` or masks.

    Parameters
    ----------
    dataset : sequence of examples
        Anything indexable with a ``len()`` whose items :class:`PackedCollator` takes (a list
        of dicts, a ``datasets.Dataset``, ...); read once, in order.

    Returns
    -------
    numpy.ndarray
        int64, one count per example.

    >>> label_tokens([{"input_ids": [5, 6, 7]}, {"input_ids": [8, 9, 4], "completion_mask": [0, 0, 1]}])
    array([2, 1])
    """
    out = np.empty(len(dataset), np.int64)
    for k in range(len(dataset)):
        _, lens, labels = read_example(dataset[k], k)
        labels = labels.copy()  # may be the caller's own array
        labels[np.cumsum(lens) - lens] = -100
        out[k] = np.count_nonzero(labels != -100)
    return out
