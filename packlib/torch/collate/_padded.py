"""The collator for models that cannot pack: :class:`PaddedCollator` lays a micro-batch's
sequences out unpacked, one right-padded row each, so that no sequence shares a row."""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..._validate import as_bool, as_int
from .._lazy import require_torch
from ._examples import read_example


class PaddedCollator:
    """Collate a micro-batch into one right-padded row per sequence: for models whose layers
    carry state along a row (Mamba / Mamba2 mixers, short convolutions, RG-LRU recurrences,
    linear attention), which packed rows would leak across (:func:`packlib.torch.check_packing`).

    Takes the examples :class:`PackedCollator` takes (text: ``input_ids`` with optional
    ``labels``, ``completion_mask``, ``assistant_masks``, ``attention_mask``; a packed row's
    ``seq_lengths`` or ``position_ids`` split it into its sequences) and trains the same tokens
    (:func:`packlib.torch.label_tokens`). Each sequence is its own row of shape
    ``(sequences, longest)``: ``input_ids`` padded with ``pad_token_id`` on the right,
    ``attention_mask`` (1 on tokens, 0 on padding), ``labels`` (-100 on padding and on each
    sequence's first token), ``position_ids`` from 0 in every row, and ``use_cache``. Padding
    on the right comes after every token of a row, so a causal model computes each token as
    if its sequence were alone, recurrent layers included.

    With :class:`packlib.BalancedBatchSampler` built with ``padded=True`` and
    :func:`packlib.torch.balance_trainer`, micro-batches are planned for this layout and
    balanced by packlib: sequences of similar lengths, ``sequences × longest`` tokens at most
    ``max_sequence_length`` (docs/training.md, "Models that cannot pack: unpacked rows, still
    balanced", with what it costs against packing).

    Parameters
    ----------
    pad_token_id : int, default 0
        The id that fills the padding (never trained, never attended to).
    use_cache : bool or None, default False
        The ``use_cache`` put into the batch; ``None`` leaves the key out.
    """

    def __init__(self, *, pad_token_id: int = 0, use_cache: bool | None = False):
        self.pad_token_id = as_int(pad_token_id, "pad_token_id", minimum=0, maximum=2**63 - 1)
        self.use_cache = None if use_cache is None else as_bool(use_cache, "use_cache")

    def __repr__(self) -> str:
        return f"PaddedCollator(pad_token_id={self.pad_token_id}, use_cache={self.use_cache})"

    def __call__(self, examples) -> dict:
        torch = require_torch()
        if isinstance(examples, (Mapping, str, bytes)) or not hasattr(examples, "__len__") or len(examples) == 0:
            raise ValueError("examples must be a non-empty list of samples (dicts with 'input_ids', or token id lists)")
        rows = []
        for k, example in enumerate(examples):
            if isinstance(example, Mapping) and any(key in example for key in ("prompt_ids", "chosen_ids")):
                raise ValueError(f"examples[{k}] is a preference pair or group (keys {sorted(map(str, example))}): "
                                 "PaddedCollator takes text examples (input_ids); train pairs with TRL's own "
                                 "padding collator")
            ids, lens, labels = read_example(example, k)
            starts = np.cumsum(lens) - lens
            labels = labels.copy()
            labels[starts] = -100
            rows.extend((ids[s:s + n], labels[s:s + n]) for s, n in zip(starts.tolist(), lens.tolist()))
        if not rows:
            raise ValueError("every token of this micro-batch is padding (attention_mask 0): nothing to train on")
        width = max(r[0].size for r in rows)
        ids = np.full((len(rows), width), self.pad_token_id, np.int64)
        labels = np.full((len(rows), width), -100, np.int64)
        mask = np.zeros((len(rows), width), np.int64)
        for i, (tokens, labs) in enumerate(rows):
            ids[i, :tokens.size], labels[i, :tokens.size], mask[i, :tokens.size] = tokens, labs, 1
        positions = np.tile(np.arange(width, dtype=np.int64), (len(rows), 1))  # writable, one row or many
        out = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask),
               "labels": torch.from_numpy(labels), "position_ids": torch.from_numpy(positions)}
        if self.use_cache is not None:
            out["use_cache"] = self.use_cache
        return out


PaddedCollator.__module__ = "packlib.torch"
