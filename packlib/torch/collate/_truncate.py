"""TRL's truncation of pairs and groups, opt-in (:class:`PackedCollator`'s ``max_length``).

Each sequence ``prompt + completion`` is cut to ``max_length`` tokens, as TRL's collators cut
it, and the examples TRL drops from its datasets are dropped (their indices go to the batch's
``dropped``):

- ``"keep_start"`` (TRL's ``DPOConfig`` and ``KTOConfig`` default): the first ``max_length``
  tokens; an example whose prompt alone fills ``max_length`` is dropped (it would keep no
  completion token), as ``DPOTrainer`` and ``KTOTrainer`` drop it;
- ``"keep_end"`` (DPO's deprecated mode): the last ``max_length`` tokens, so the prompt's start
  goes first, differently for each sequence; nothing is dropped. The prompt is then not one
  prompt for the group, so the prompt cannot be laid out once;
- ``"drop"`` (``RewardTrainer``): nothing cut; a pair with a sequence over ``max_length`` is
  dropped.
"""
from __future__ import annotations

import numpy as np

MODES = ("keep_start", "keep_end", "drop")


def truncate(groups, max_length: int, mode: str):
    """``(kept, groups)``: the indices kept and their groups ``(prompt, completions,
    prompts)`` cut to ``max_length`` (``prompts``: each sequence's own prompt, which differs
    from the group's only under ``keep_end``)."""
    kept, out = [], []
    for g, (prompt, comps, prompts) in enumerate(groups):
        p = prompt.size
        if mode == "keep_start":
            if p >= max_length:
                continue
            comps = [c[:max_length - p] for c in comps]
            prompts = [prompt] * len(comps)
        elif mode == "keep_end":
            prompts = [prompt[max(0, p + c.size - max_length):] if c.size < max_length else prompt[:0] for c in comps]
            comps = [c[max(0, c.size - max_length):] for c in comps]
        elif any(p + c.size > max_length for c in comps):
            continue
        kept.append(g)
        out.append((prompt, comps, prompts))
    return kept, out


def dropped_indices(n: int, kept: list[int]) -> np.ndarray:
    """The indices of ``range(n)`` not in ``kept``."""
    mask = np.ones(n, bool)
    mask[kept] = False
    return np.flatnonzero(mask).astype(np.int64)
