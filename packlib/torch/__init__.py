"""PyTorch adapter: packed rows a model cannot see across, and checkpointable iteration.

Needs the ``torch`` extra (``pip install packlib[torch]``); torch is imported only when an
object here is used, so ``import packlib.torch`` works without it.

The package is grouped by capability: ``collate/`` (the collators and masks), ``logps/``
(log-probs and scores), ``trainers/`` (the trainer integrations), ``cost/`` (cost models
measured on the model).

- :class:`PackedCollator` turns a micro-batch (the samples one pack holds, or rows that
  :func:`packlib.formats.arrow.pack_table` packed) into one padding-free row of torch tensors
  **plus what the model needs to keep its sequences apart**: ``use_cache=False`` (Hugging Face
  models tell packed sequences apart from ``position_ids`` only when no KV cache is built,
  and a training forward builds one by default), flash-attention's ``cu_seq_lens_q/k``, and on
  request a 4-D block-diagonal causal mask. ``loss = model(**batch).loss`` is then the
  token-weighted loss of the row's sequences, each computed as if alone.
- :func:`block_causal_mask` is that mask on its own.
- :func:`check_packing` checks that a model computes a packed row as each of its sequences
  alone (layers that carry state along the row, such as Mamba mixers, short convolutions
  and recurrences, do not): ``balance_trainer`` and packlib's TRL trainers run it before
  their first step. :class:`PaddedCollator` lays each sequence out in its own right-padded
  row, for the models it refuses, over a :class:`packlib.BalancedBatchSampler` built with
  ``padded=True`` (micro-batches of similar lengths; docs/training.md, "Which models pack
  exactly").
- :func:`label_tokens` counts the tokens the collator trains of each example (the
  ``label_tokens`` of :class:`packlib.BalancedBatchSampler` for data with labels or masks).
- Preference pairs and groups of completions (TRL's ``prompt_ids`` with ``chosen_ids`` /
  ``rejected_ids``, or ``completion_ids``) collate into one padding-free row too, the prompt
  per sequence or laid out once (``share_prompt=True``); :func:`sequence_logps` reads each
  sequence's summed completion log-probabilities from the logits, in TRL's order,
  :func:`token_logps` each completion token's (GRPO's ``per_token_logps``) and
  :func:`sequence_scores` a reward model's score of each sequence;
  :func:`shared_prompt_mask` / :func:`shared_prompt_block_mask` are the tree's masks and
  :func:`model_inputs` the batch without the loss's keys (docs/preference.md).
- ``PackedCollator(share_prefix=True)`` lays a micro-batch out as its prefix tree (multi-turn
  and agentic RL: every shared history once, at any depth); :func:`tree_block_mask` /
  :func:`tree_mask` are its masks and :func:`tree_sizes` each tree's size and cost for
  planning (:func:`split_trees` cuts a tree larger than a row at nodes) (docs/prefix-trees.md).
- :class:`VisionPackedCollator` packs Qwen2-VL / Qwen2.5-VL / Qwen3-VL examples with images
  into one row the model computes as each example alone (mRoPE positions per example);
  :func:`image_grid_thw` gives an image's grid from its size before processing and
  :func:`calibrate_vision_cost` the vision tower's cost per image (docs/multimodal.md).
- :class:`CheckpointableDataset` wraps a checkpointable iterator as an ``IterableDataset``.
- :func:`balance_trainer` makes a ``transformers.Trainer`` (or TRL's) train the balanced
  steps of a :class:`packlib.BalancedBatchSampler` through :class:`BalancedTrainerMixin`,
  its ``get_train_dataloader`` (docs/training.md).
- ``PackedDPOTrainer``, ``PackedRewardTrainer`` and ``PackedKTOTrainer`` are TRL's
  ``DPOTrainer``, ``RewardTrainer`` and ``KTOTrainer`` on packed rows: the same arguments,
  loss code and defaults, :class:`PackedCollator` by default (built on first import, which
  needs TRL; docs/preference.md). TRL's own classes cannot read ``PackedCollator``'s rows of
  pairs (they fail before a step).
- ``PackedGRPOTrainer`` (:class:`PackedGRPOMixin`) is TRL's ``GRPOTrainer`` computing its
  log-probs on packed rows, each prompt once (docs/preference.md).

>>> from packlib.torch import PackedCollator
>>> batch = PackedCollator()([{"input_ids": [5, 6, 7]}, {"input_ids": [8, 9]}])
>>> batch["position_ids"].tolist(), batch["labels"].tolist(), batch["use_cache"]
([[0, 1, 2, 0, 1]], [[-100, 6, 7, -100, 9]], False)
>>> batch["cu_seq_lens_q"].tolist(), batch["max_length_q"]
([0, 3, 5], 3)
>>> from packlib.torch import CheckpointableDataset            # doctest: +SKIP
>>> ds = CheckpointableDataset(packlib.BucketedReadaheadBatchIterator(...))  # doctest: +SKIP
>>> loader = torch.utils.data.DataLoader(ds, batch_size=None)  # doctest: +SKIP
>>> checkpoint["data"] = ds.state_dict()                       # doctest: +SKIP
"""
from __future__ import annotations

from ._checkpoint import ITERABLE_NAME, CheckpointableDataset, iterable_dataset_class
from .check import PackingCheck, check_packing
from .collate import (PackedCollator, PaddedCollator, VisionPackedCollator, block_causal_mask, label_tokens,
                      model_inputs, shared_prompt_block_mask, shared_prompt_mask, split_trees, tree_block_mask, tree_mask,
                      tree_sizes)
from .cost import CostFit, calibrate_cost, calibrate_vision_cost, calibration_rows, image_grid_thw
from .logps import sequence_logps, sequence_scores, token_logps
from .trainers import TRL_TRAINERS, BalancedTrainerMixin, PackedGRPOMixin, balance_trainer, public_class

__all__ = ["PackedCollator", "PaddedCollator", "check_packing", "PackingCheck", "block_causal_mask",
           "CheckpointableDataset", "label_tokens", "sequence_logps", "token_logps", "sequence_scores",
           "model_inputs", "shared_prompt_mask", "shared_prompt_block_mask", "calibrate_cost", "calibration_rows",
           "CostFit", "VisionPackedCollator", "calibrate_vision_cost", "image_grid_thw", "balance_trainer",
           "BalancedTrainerMixin", "PackedGRPOMixin", "tree_block_mask", "tree_mask", "tree_sizes", "split_trees"]


def __getattr__(name):
    if name == ITERABLE_NAME:  # unpickling in a fresh process
        return iterable_dataset_class()
    if name in TRL_TRAINERS:  # TRL's classes, subclassed on first use
        from . import trainers

        return getattr(trainers, name)
    made = public_class(name)  # unpickling a balanced trainer (or its callback) in a fresh process
    if made is not None:
        return made
    raise AttributeError(f"module 'packlib.torch' has no attribute {name!r}")
