"""Collating: examples in, one padding-free row out, with what keeps its sequences apart.

:class:`PackedCollator` (text, preference pairs, groups of completions),
:class:`PaddedCollator` (one right-padded row per sequence, for models that cannot pack),
:class:`VisionPackedCollator` (Qwen-VL examples with images), the masks a row needs
(:func:`block_causal_mask`, :func:`shared_prompt_mask`, :func:`shared_prompt_block_mask`, and for
prefix trees :func:`tree_mask`, :func:`tree_block_mask`, with :func:`tree_sizes` and :func:`split_trees` to plan them),
:func:`model_inputs` (a batch without the loss's keys) and :func:`label_tokens` (the tokens
the collator trains of each example).

>>> from packlib.torch.collate import PackedCollator
>>> PackedCollator()([{"input_ids": [5, 6]}, {"input_ids": [7]}])["position_ids"].tolist()
[[0, 1, 0]]
"""
from __future__ import annotations

from ._collator import PackedCollator
from ._examples import label_tokens
from ._masks import block_causal_mask
from ._padded import PaddedCollator
from ._preference import model_inputs, shared_prompt_block_mask, shared_prompt_mask
from ._tree import split_trees, tree_sizes
from ._tree_masks import tree_block_mask, tree_mask
from ._vision import VisionPackedCollator

__all__ = ["PackedCollator", "PaddedCollator", "VisionPackedCollator", "block_causal_mask", "label_tokens", "model_inputs",
           "shared_prompt_mask", "shared_prompt_block_mask", "tree_block_mask", "tree_mask", "tree_sizes",
           "split_trees"]
