"""What a lower floor calls and a higher one provides (set by ``packlib/__init__.py``).

A :class:`packlib.PackingPlan` (results floor) answers ``plan.bound`` with
:func:`packlib.lower_bound` (packers floor) where its packer computed none; the package's
entry point wires the one to the other, so the floors' imports still only go down.
"""
from __future__ import annotations


def lower_bound(histogram, max_sequence_length, max_sequences_per_pack):
    """:func:`packlib.lower_bound` (replaced when ``packlib`` is imported)."""
    raise RuntimeError("packlib._hooks.lower_bound is set when packlib is imported")
