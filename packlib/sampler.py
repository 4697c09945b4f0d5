"""The former home of :class:`packlib.BalancedBatchSampler`, which lives in
:mod:`packlib.balancing` beside the planner it serves; this path stays importable.

>>> from packlib.sampler import BalancedBatchSampler
>>> BalancedBatchSampler is __import__("packlib").BalancedBatchSampler
True
"""
from __future__ import annotations

from .balancing import BalancedBatchSampler

__all__ = ["BalancedBatchSampler"]
