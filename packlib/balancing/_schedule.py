"""The result of :func:`packlib.balance`: :class:`Schedule`, one epoch of balanced steps."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np

from .._packs import Packs, _html_table
from ._settings import DEFAULT_WINDOW, as_rank


@dataclass(frozen=True, eq=False, repr=False)
class Schedule:
    """One epoch of balanced steps (see :func:`balance`).

    Attributes
    ----------
    packs : Packs
        Pack ``k = (step * world_size + rank) * micro_batches + m`` is micro-batch ``m`` of
        ``rank`` at ``step`` (possibly empty in the last step with ``drop_last=False``).
    num_steps, world_size, micro_batches : int
    dropped : int64 array
        Sample ids in no pack (``drop_last=True``: at most one step's worth, at the end).
    cost : float64 array, shape ``(num_steps, world_size)``
        Each rank's cost at each step (the sum over its micro-batches).
    max_sequence_length : int
    max_sequences_per_pack : int or None
    cost_coefficients : tuple of float
        ``(a, b)``: a sequence of ``l`` tokens costs ``a * l + b * l**2``.
    seed, epoch, window : int
    sample_costs : float64 array or None
        Each sample's cost when samples are groups (2-D lengths) or carry ``extra_costs``;
        ``None``: ``a * l + b * l**2`` of its length. With ``padded``: each sample's share
        of its micro-batch's padded cost (the cost of the micro-batch's longest sequence).
    padded : bool
        Micro-batches of unpacked sequences, one right-padded row each (``balance(...,
        padded=True)``): a micro-batch of ``n`` sequences whose longest has ``m`` tokens lays
        out ``n * m`` of them, at most ``max_sequence_length``.
    """

    packs: Packs
    num_steps: int
    world_size: int
    micro_batches: int
    dropped: np.ndarray
    cost: np.ndarray
    max_sequence_length: int
    max_sequences_per_pack: int | None
    cost_coefficients: tuple
    seed: int = 0
    epoch: int = 0
    window: int = DEFAULT_WINDOW
    sample_costs: np.ndarray | None = None
    padded: bool = False

    @property
    def balance(self) -> float:
        """Total cost / (world_size x the sum over steps of the largest rank cost): the share
        of the ranks' time not spent waiting for the slowest (1.0: perfect)."""
        worst = float(self.cost.max(axis=1).sum()) if self.num_steps else 0.0
        return float(self.cost.sum()) / (self.world_size * worst) if worst > 0 else 1.0

    @property
    def micro_batch_balance(self) -> float:
        """Balance when ranks meet at every micro-batch (FSDP, ZeRO-3: a collective per
        layer, so each micro-batch round waits for its slowest rank): total cost /
        (world_size x the sum over steps and micro-batch rounds ``m`` of the largest cost
        of a rank's micro-batch ``m``). At most :attr:`balance` (1.0: perfect)."""
        if not self.num_steps:
            return 1.0
        a, b = self.cost_coefficients
        ln = self.packs.lengths.astype(np.float64)
        weights = a * ln + b * ln * ln if self.sample_costs is None else self.sample_costs[self.packs.indices]
        sizes = np.diff(self.packs.offsets)
        per_pack = np.bincount(np.repeat(np.arange(sizes.size), sizes), weights=weights, minlength=sizes.size)
        worst = float(per_pack.reshape(self.num_steps, self.world_size, self.micro_batches).max(axis=1).sum())
        return float(per_pack.sum()) / (self.world_size * worst) if worst > 0 else 1.0

    @property
    def efficiency(self) -> float:
        """Tokens / (num_steps x world_size x micro_batches x max_sequence_length)."""
        slots = self.num_steps * self.world_size * self.micro_batches * self.max_sequence_length
        return self.packs.num_tokens / slots if slots else 1.0

    @property
    def computed_tokens(self) -> int:
        """The tokens the micro-batches lay out: with ``padded``, ``sequences x longest`` of
        each; else their tokens (a packed row computes no padding)."""
        if not self.padded:
            return self.packs.num_tokens
        sizes = np.diff(self.packs.offsets)
        full = sizes > 0
        longest = np.maximum.reduceat(self.packs.lengths, self.packs.offsets[:-1][full]) if full.any() else sizes[:0]
        return int((sizes[full] * longest).sum())

    @property
    def num_samples(self) -> int:
        """Samples scheduled (not counting ``dropped``)."""
        return self.packs.num_sequences

    def step_tokens(self) -> np.ndarray:
        """Tokens of each step, int64 ``(num_steps,)``."""
        per_pack = self.packs.pack_tokens
        return per_pack.reshape(self.num_steps, -1).sum(axis=1) if self.num_steps else per_pack[:0]

    def rank(self, r: int) -> Iterator[list[np.ndarray]]:
        """Rank ``r``'s steps, in order: for each, its ``micro_batches`` arrays of sample ids.

        Parameters
        ----------
        r : int
            In ``[0, world_size)``.
        """
        r = as_rank(r, self.world_size)
        W, M, o, ix = self.world_size, self.micro_batches, self.packs.offsets, self.packs.indices
        for step in range(self.num_steps):
            k = (step * W + r) * M
            yield [ix[o[k + m]:o[k + m + 1]] for m in range(M)]

    def to_dict(self) -> dict:
        """A JSON-ready summary (the figures and settings, not the packs)."""
        return {
            "num_steps": self.num_steps, "world_size": self.world_size, "micro_batches": self.micro_batches,
            "num_samples": self.num_samples, "dropped": int(self.dropped.size), "balance": self.balance,
            "micro_batch_balance": self.micro_batch_balance, "efficiency": self.efficiency,
            "max_sequence_length": self.max_sequence_length, "max_sequences_per_pack": self.max_sequences_per_pack, "cost": list(self.cost_coefficients),
            "seed": self.seed, "epoch": self.epoch, "window": self.window, "padded": self.padded,
            "computed_tokens": self.computed_tokens,
        }

    def plot(self, baseline: "Schedule | None" = None, ax=None):
        """Cost per rank per step, as a picture (needs the ``plot`` extra); with ``baseline``
        (e.g. :func:`round_robin` of the same lengths), the two side by side.

        Parameters and return value as for :func:`packlib.plot.schedule`."""
        from ..plot import schedule as plot_schedule

        return plot_schedule(self, baseline=baseline, ax=ax)

    def __repr__(self) -> str:
        return (f"Schedule({self.num_steps:,} steps x {self.world_size} ranks x {self.micro_batches} micro-batches, "
                f"{self.num_samples:,} samples, {self.dropped.size:,} dropped, balance={self.balance:.4f}, "
                f"efficiency={self.efficiency:.4f}{', padded' if self.padded else ''})")

    def _repr_html_(self) -> str:
        rows = [("steps × ranks × micro-batches", f"{self.num_steps:,} × {self.world_size} × {self.micro_batches}"),
                ("samples (dropped)", f"{self.num_samples:,} ({self.dropped.size:,})"),
                ("balance", f"{self.balance:.4f}"), ("balance at every micro-batch", f"{self.micro_batch_balance:.4f}"),
                ("token efficiency", f"{self.efficiency:.4f}"),
                *([("tokens computed (padded rows) / tokens", f"{self.computed_tokens / max(1, self.packs.num_tokens):.3f}")]
                  if self.padded else []),
                ("cost of a sequence", f"{self.cost_coefficients[0]:g}·l + {self.cost_coefficients[1]:.3g}·l²")]
        return _html_table("Schedule", rows)


Schedule.__module__ = "packlib"  # pickles and reprs name the public path, which never moves
