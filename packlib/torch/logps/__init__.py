"""Log-probabilities and scores read from a packed row's logits, one row per sequence in TRL's
layout: :func:`sequence_logps`, :func:`token_logps`, :func:`sequence_scores`.

>>> import torch
>>> from packlib.torch import PackedCollator
>>> from packlib.torch.logps import sequence_logps
>>> batch = PackedCollator()([{"prompt_ids": [1, 2], "completion_ids": [3]}])
>>> sequence_logps(torch.zeros(1, 3, 4), batch).shape
torch.Size([1])
"""
from __future__ import annotations

from ._logps import sequence_logps, token_logps
from ._scores import sequence_scores

__all__ = ["sequence_logps", "token_logps", "sequence_scores"]
