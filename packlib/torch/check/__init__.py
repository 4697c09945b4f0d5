"""Checking the user's own model: :func:`check_packing` runs a packed batch and each of its
sequences alone and compares every trained token's log-probability, and
:func:`add_packing_check` makes a ``transformers.Trainer`` run it before its first step.

>>> from packlib.torch.check import check_packing
>>> check_packing.__name__
'check_packing'
"""
from __future__ import annotations

from ._check import PackingCheck, check_packing
from ._trainer import add_packing_check

__all__ = ["check_packing", "PackingCheck", "add_packing_check"]
