"""The collator of packed micro-batches: :class:`PackedCollator` lays a micro-batch's
sequences end to end in one padding-free row, with what the model needs to keep them apart."""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..._validate import as_bool, as_choice, as_int
from ...formats.varlen import hf_flattening_batch
from ._examples import label_tokens, read_example
from .._lazy import require_torch
from ._masks import block_causal_mask
from ._preference import collate_preference, is_preference, preference_settings, truncation_settings
from ._tree import collate_tree, tree_settings

_MASKS = ("4d",)  # besides None: no mask
#: set on packlib's trainer classes that read packed rows of pairs (packlib.torch.trainers)
PACKED_TRAINER_FLAG = "_packlib_packed_rows"
#: TRL's trainers that read a batch of pairs as a padded batch, and packlib's class that does not
PADDED_READERS = {"DPOTrainer": "PackedDPOTrainer", "RewardTrainer": "PackedRewardTrainer",
                   "KTOTrainer": "PackedKTOTrainer"}


class PackedCollator:
    """Collate a micro-batch into one packed row whose sequences the model keeps apart.

    Every example is one sequence (``{"input_ids": ...}``, or the ids themselves) or one
    row that :func:`packlib.formats.arrow.pack_table` / ``pack_dataset`` packed: its
    ``seq_lengths``, or else its ``position_ids`` restarting at 0 (all that
    ``transformers.Trainer`` keeps of a packed row by default), split its ``input_ids``
    into sequences; a row with neither is one sequence. An example may carry ``labels``
    (-100: not trained), ``completion_mask`` and ``assistant_masks`` (TRL's; 0: not
    trained) and ``attention_mask`` (0: padding, dropped from the row): a token is trained
    only where every one of them given allows it (``docs/training.md``). All of them are
    laid end to end in one row of shape ``(1, T)``, with no padding. The batch holds torch
    tensors ``input_ids``, ``labels`` (each sequence's first label ``separator_id``, so no
    sequence predicts the next one's first token), ``position_ids`` (restarting at 0 for
    every sequence) and:

    - ``use_cache=False``: Hugging Face models (transformers 5) build a block-diagonal mask
      from ``position_ids`` for eager, sdpa and flex attention only when no KV cache is made,
      and a training forward makes one unless told not to. Without it the row's sequences
      attend to each other. Costs nothing.
    - ``cu_seq_lens_q/k`` and ``max_length_q/k`` (``flash_attn_kwargs=True``): what
      flash-attention's varlen kernels read; ignored by other attentions. Costs nothing.
    - ``attention_mask`` (``attention_mask="4d"``): the block-diagonal causal mask of
      :func:`block_causal_mask`, for eager and sdpa in models that do not detect packed rows
      from ``position_ids``; ``T² × itemsize`` bytes per row. Not for flash-attention.

    ``loss = model(**batch).loss`` is then the token-weighted mean of the sequences' own
    losses. Use it as a ``DataLoader``'s ``collate_fn`` (it pickles, so worker processes work).

    Preference pairs (``prompt_ids``, ``chosen_ids``, ``rejected_ids``; or ``chosen_ids`` and
    ``rejected_ids`` alone, as reward data holds them) and groups (``prompt_ids``,
    ``completion_ids``) become one row too, each sequence ``prompt + completion`` or each
    prompt laid out once (``share_prompt``), with what :func:`sequence_logps`,
    :func:`token_logps` and :func:`sequence_scores` read; every other key of the examples
    comes through, one value per example, or is refused by name; TRL's truncation is opt-in
    (``max_length``; docs/preference.md). TRL's ``DPOTrainer``, ``RewardTrainer`` and
    ``KTOTrainer`` read a batch as their padded batch and cannot read this row: train pairs
    with ``packlib.torch.PackedDPOTrainer`` (``PackedRewardTrainer``, ``PackedKTOTrainer``),
    which read it (:func:`packlib.torch.balance_trainer` refuses TRL's own, naming them).

    Parameters
    ----------
    flash_attn_kwargs : bool or None, default None
        Add ``cu_seq_lens_q/k`` (int32) and ``max_length_q/k`` (int); ``None``: unless
        ``share_prompt`` (whose tree they cannot express: ``True`` with it is refused).
    attention_mask : {None, "4d"}, default None
        ``"4d"`` adds the ``(1, 1, T, T)`` block-diagonal causal mask.
    mask_dtype : torch.dtype, optional
        The mask's floating dtype (default float32); the model's dtype for sdpa.
    use_cache : bool or None, default False
        The ``use_cache`` put into the batch; ``None`` leaves the key out (for a model whose
        ``forward`` takes no ``use_cache``; isolation is then the model's business).
    separator_id : int, default -100
        The label of each sequence's first token (ignored by the loss).
    share_prompt : bool, default False
        Pairs and groups: each prompt laid out once, its completions attending to it and to
        themselves only (the batch carries the 4-D tree mask).
    max_sequence_length : int, optional
        Pairs and groups: refuse one that lays out more tokens (a plan's row capacity).
    ragged_groups : bool, default False
        Groups: allow groups of different sizes in one batch.
    max_length : int, optional
        Pairs and groups: cut each sequence ``prompt + completion`` to this many tokens and
        drop the examples TRL drops, as TRL's ``max_length`` (``DPOConfig`` defaults to 1,024;
        here ``None``: nothing cut, an over-long row refused by ``max_sequence_length``).
    truncation_mode : {"keep_start", "keep_end", "drop"}, default "keep_start"
        How ``max_length`` cuts: TRL's ``keep_start`` / ``keep_end``, or ``drop``
        (``RewardTrainer``'s filter: a pair with a sequence over ``max_length`` is dropped).
    share_prefix : bool, default False
        Lay the micro-batch out as its prefix tree: every distinct token prefix of its
        trajectories once, at any depth (groups, pairs, or whole multi-turn sequences with
        ``completion_mask`` / ``labels`` / ``assistant_masks``); positions are depths and the
        batch carries ``O(T)`` tree metadata for :func:`tree_block_mask` (flex_attention) or,
        with ``attention_mask="4d"``, the dense tree mask (docs/prefix-trees.md).
    token_keys : sequence of str, default ()
        With ``share_prefix``: the examples' per-token keys (advantages, old log-probs), one
        value per token of ``input_ids`` (trajectories) or of each completion (groups); each
        comes back laid out as :func:`token_logps`' rows.
    """

    def __init__(self, *, flash_attn_kwargs: bool | None = None, attention_mask: str | None = None, mask_dtype=None,
                 use_cache: bool | None = False, separator_id: int = -100, share_prompt: bool = False,
                 max_sequence_length: int | None = None, ragged_groups: bool = False, max_length: int | None = None,
                 truncation_mode: str = "keep_start", share_prefix: bool = False, token_keys=()):
        self.share_prefix, flash_attn_kwargs, self.token_keys = tree_settings(share_prefix, share_prompt,
                                                                             flash_attn_kwargs, max_length, token_keys)
        self.share_prompt, self.max_sequence_length, self.ragged_groups, flash_attn_kwargs = preference_settings(
            share_prompt, max_sequence_length, ragged_groups, flash_attn_kwargs)
        self.max_length, self.truncation_mode = truncation_settings(max_length, truncation_mode, self.share_prompt)
        self.flash_attn_kwargs = as_bool(flash_attn_kwargs, "flash_attn_kwargs")
        self.attention_mask = None if attention_mask is None else as_choice(attention_mask, "attention_mask", _MASKS)
        if mask_dtype is not None:
            torch = require_torch()
            if not (isinstance(mask_dtype, torch.dtype) and mask_dtype.is_floating_point):
                raise TypeError(f"mask_dtype must be a floating torch.dtype such as torch.bfloat16, got {mask_dtype!r}")
        self.mask_dtype = mask_dtype
        self.use_cache = None if use_cache is None else as_bool(use_cache, "use_cache")
        self.separator_id = as_int(separator_id, "separator_id", minimum=-(2**63), maximum=2**63 - 1)

    def __repr__(self) -> str:
        return (f"PackedCollator(flash_attn_kwargs={self.flash_attn_kwargs}, attention_mask={self.attention_mask!r}, "
                f"mask_dtype={self.mask_dtype}, use_cache={self.use_cache}, separator_id={self.separator_id}, "
                f"share_prompt={self.share_prompt}, max_sequence_length={self.max_sequence_length}, "
                f"ragged_groups={self.ragged_groups}, max_length={self.max_length}, "
                f"truncation_mode={self.truncation_mode!r}, share_prefix={self.share_prefix}, "
                f"token_keys={self.token_keys!r})")

    def __call__(self, examples) -> dict:
        torch = require_torch()
        if isinstance(examples, (Mapping, str, bytes)) or not hasattr(examples, "__len__") or len(examples) == 0:
            raise ValueError("examples must be a non-empty list of samples (dicts with 'input_ids', or token id lists)")
        if self.share_prefix:  # the micro-batch's prefix tree
            return collate_tree(examples, self)
        if is_preference(examples[0]):  # pairs or groups of completions
            return collate_preference(examples, self)
        parts = [read_example(e, k) for k, e in enumerate(examples)]
        tokens = np.concatenate([p[0] for p in parts])
        if tokens.size == 0:
            raise ValueError("every token of this micro-batch is padding (attention_mask 0): nothing to train on")
        lens = np.concatenate([p[1] for p in parts])
        batch = hf_flattening_batch(tokens, lens, return_flash_attn_kwargs=self.flash_attn_kwargs,
                                    separator_id=self.separator_id)
        labels = np.concatenate([p[2] for p in parts])
        labels[np.cumsum(lens) - lens] = self.separator_id
        batch["labels"] = labels[None, :]
        out = {k: torch.from_numpy(np.ascontiguousarray(v)) if isinstance(v, np.ndarray) else v
               for k, v in batch.items()}
        if self.attention_mask == "4d":
            out["attention_mask"] = block_causal_mask(lens, dtype=self.mask_dtype)
        if self.use_cache is not None:
            out["use_cache"] = self.use_cache
        return out

    def label_tokens(self, dataset):
        """How many tokens of each example of ``dataset`` this collator trains
        (:func:`packlib.torch.label_tokens`). A :class:`packlib.BalancedBatchSampler` drawn
        by a ``DataLoader`` with this collator (declared with ``drawn_by``) counts its steps'
        trained tokens by it.

        Parameters
        ----------
        dataset : sequence of examples
            As for :func:`packlib.torch.label_tokens`.

        Returns
        -------
        numpy.ndarray
            int64, one count per example.
        """
        return label_tokens(dataset)


PackedCollator.__module__ = "packlib.torch"  # pickles and reprs name the public path, which never moves
