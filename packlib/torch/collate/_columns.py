"""The per-example keys of pairs and groups that are not token ids (``margin``,
``ref_chosen_logps``, KTO's ``label`` and ``ref_logps``, an ``idx``, a text ``prompt``, ...):
each reaches the batch in TRL's order, one value per example, or is refused by name.

Numbers become one tensor (bools ``torch.bool``, integers ``int64``, floats ``float32``, as
``torch.tensor`` makes TRL's ``margin`` and ``ref_*_logps``); lists and arrays of numbers of
one shape become one stacked tensor; any other values (text, ``None``, dicts) one list. A key
whose values mix numbers with other values, numbers of different shapes, or a key some
examples lack, is refused, naming the key and the example.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .._lazy import require_torch

#: the keys the preference layout reads (token ids)
ID_KEYS = ("prompt_ids", "chosen_ids", "rejected_ids", "completion_ids")
#: the keys a preference batch writes itself: an example holding one is refused
BATCH_KEYS = ("input_ids", "position_ids", "attention_mask", "labels", "completion_mask", "sequence_ids",
              "group_ids", "pair_ids", "prev_index", "cu_seq_lens_q", "cu_seq_lens_k", "max_length_q",
              "max_length_k", "use_cache", "carried_keys", "dropped")


def _kind_of(value):
    """``("number", dtype kind, shape)`` for numbers, bools and numeric arrays; ``("other",)``
    for anything else; ``("ragged", None, None)`` for a list whose numbers are of uneven shape."""
    torch = require_torch()
    if isinstance(value, torch.Tensor):
        kind = "b" if value.dtype == torch.bool else ("f" if value.is_floating_point() else "i")
        return "number", kind, tuple(value.shape)
    if isinstance(value, (bool, np.bool_)):
        return "number", "b", ()
    if isinstance(value, (int, float, np.integer, np.floating)):
        return "number", ("f" if isinstance(value, (float, np.floating)) else "i"), ()
    if isinstance(value, (list, tuple, np.ndarray)):
        try:
            arr = np.asarray(value)
        except ValueError:  # numpy refuses an inhomogeneous nesting
            return "ragged", None, None
        if arr.dtype.kind in "biuf" and arr.size:
            return "number", ("i" if arr.dtype.kind == "u" else arr.dtype.kind), arr.shape
        if arr.dtype == object and _holds_numbers(value):
            return "ragged", None, None
    return ("other",)


def _holds_numbers(value) -> bool:
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, (list, tuple, np.ndarray)):
            stack.extend(v)
        elif isinstance(v, (bool, int, float, np.number, np.bool_)):
            return True
    return False


def _describe(kind) -> str:
    if kind[0] == "number":
        what = {"b": "a bool", "i": "an integer", "f": "a float"}[kind[1]]
        return what if kind[2] == () else f"{what} array of shape {kind[2]}"
    return "numbers of uneven shape" if kind[0] == "ragged" else "not a number"


def _column(key: str, values: list, where: list[int]):
    torch = require_torch()
    kinds = [_kind_of(v) for v in values]
    for k, kind in zip(where, kinds):
        if kind[0] == "ragged":
            raise ValueError(f"examples[{k}][{key!r}] holds numbers of uneven shape: a per-example key becomes one "
                             "tensor, so give every example's value one shape (pad it), or remove the key")
    first = kinds[0]
    for k, kind in zip(where, kinds):
        same = kind[0] == first[0] and (kind[0] == "other" or (kind[2] == first[2] and (kind[1] == "b") == (
            first[1] == "b")))
        if not same:
            raise ValueError(f"examples[{k}][{key!r}] is {_describe(kind)} but examples[{where[0]}][{key!r}] is "
                             f"{_describe(first)}: a per-example key becomes one tensor (numbers of one shape) or "
                             "one list (other values); give every example the same kind of value, or remove the key")
    if first[0] == "other":
        return list(values)
    letters = {kind[1] for kind in kinds}
    dtype = torch.bool if letters == {"b"} else (torch.float32 if "f" in letters else torch.int64)
    return torch.stack([torch.as_tensor(np.asarray(v) if not isinstance(v, torch.Tensor) else v).to(dtype)
                        for v in values])


def carry_columns(examples, kept: list[int]) -> dict:
    """The per-example keys of ``examples[k]`` for ``k`` in ``kept`` (the examples laid out),
    one value per example in that order; refused by name if they cannot be batched."""
    keys = [key for key in examples[kept[0]] if key not in ID_KEYS]
    for k in kept:
        e = examples[k]
        extra = [key for key in e if key not in ID_KEYS]
        if set(extra) != set(keys):
            key = next(iter(set(extra) ^ set(keys)))
            has, lacks = (k, kept[0]) if key in e else (kept[0], k)
            raise ValueError(f"examples[{has}] has the key {key!r} but examples[{lacks}] has not: every example of a "
                             "batch carries the same keys (each reaches the batch as one value per example)")
    for key in keys:
        if key in BATCH_KEYS or not isinstance(key, str):
            raise ValueError(f"examples[{kept[0]}] has the key {key!r}, which a batch of pairs or groups writes "
                             "itself: rename it, or remove it from the examples")
    return {key: _column(key, [examples[k][key] for k in kept], kept) for key in keys}


def loss_keys(batch: Mapping) -> tuple:
    """The keys the preference batch carried from its examples (not a model's inputs)."""
    carried = batch.get("carried_keys", ())
    return tuple(carried) + ("carried_keys", "dropped")
