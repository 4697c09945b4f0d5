"""Log-probabilities and scores read from a packed row's logits, one row per sequence in TRL's
layout: :func:`sequence_logps`, :func:`token_logps`, :func:`sequence_scores`."""
from __future__ import annotations

from ._logps import sequence_logps, token_logps
from ._scores import sequence_scores

__all__ = ["sequence_logps", "token_logps", "sequence_scores"]
