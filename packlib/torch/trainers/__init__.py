"""Trainers: balanced, packed steps in ``transformers.Trainer`` and TRL's trainers
(:func:`balance_trainer`).

>>> from packlib.torch.trainers import balance_trainer
>>> balance_trainer.__name__
'balance_trainer'
"""
from __future__ import annotations

from ._trainer import balance_trainer

__all__ = ["balance_trainer"]
