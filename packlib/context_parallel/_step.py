"""The result of :func:`packlib.plan_cp_step`: :class:`CPStep`, one step laid out over
data-parallel × context-parallel GPUs."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._packs import _html_table
from ._cost import as_cp_cost, seq_cost


@dataclass(frozen=True, eq=False, repr=False)
class CPStep:
    """One step over ``world_size`` GPUs (DP × CP ranks): for each sequence its CP size, its
    micro-batch and the first of its aligned block of ranks (see :func:`plan_cp_step`).

    Attributes
    ----------
    lengths, cp, micro_batch, first_rank : int64 arrays, one entry per sequence
        Sequence ``i`` runs in micro-batch ``micro_batch[i]`` on ranks ``first_rank[i] ..
        first_rank[i] + cp[i] - 1``, each holding ``lengths[i] / cp[i]`` of its tokens.
    num_micro_batches, world_size, max_sequence_length : int
        ``max_sequence_length`` is the memory cap: tokens per GPU per micro-batch.
    max_sequences_per_pack : int or None
        At most this many sequences on a GPU in a micro-batch.
    cost_coefficients : tuple of float
        ``(a, b, e)``: a sequence of ``l`` tokens on ``c`` GPUs costs each of them
        ``(a·l + b·l²) / c + e·l·(c − 1) / c``.
    lower_bound, simple_bound : float
        Lower bounds of any layout's critical path under that cost (docs/context-parallel.md).
    """

    lengths: np.ndarray
    cp: np.ndarray
    micro_batch: np.ndarray
    first_rank: np.ndarray
    num_micro_batches: int
    world_size: int
    max_sequence_length: int
    max_sequences_per_pack: int | None
    cost_coefficients: tuple
    lower_bound: float
    simple_bound: float

    def rank_costs(self, cost=None) -> np.ndarray:
        """Each GPU's cost in each micro-batch, float64 ``(num_micro_batches, world_size)``.

        Parameters
        ----------
        cost : tuple of float, optional
            ``(a, b)`` or ``(a, b, e)``; default :attr:`cost_coefficients`.
        """
        cost = self.cost_coefficients if cost is None else as_cp_cost(cost)
        return self._spread(seq_cost(self.lengths, self.cp, cost))

    def rank_tokens(self) -> np.ndarray:
        """Tokens on each GPU in each micro-batch (``l / c`` per sequence), float64
        ``(num_micro_batches, world_size)``; never above ``max_sequence_length``."""
        return self._spread(self.lengths / self.cp)

    def rank_counts(self) -> np.ndarray:
        """Sequences on each GPU in each micro-batch, int64 ``(num_micro_batches, world_size)``."""
        return np.rint(self._spread(np.ones(self.lengths.size))).astype(np.int64)

    def _spread(self, per_gpu: np.ndarray) -> np.ndarray:
        out = np.zeros((self.num_micro_batches, self.world_size + 1))
        np.add.at(out, (self.micro_batch, self.first_rank), per_gpu)
        np.add.at(out, (self.micro_batch, self.first_rank + self.cp), -per_gpu)
        return np.cumsum(out, axis=1)[:, :-1]

    def critical_path(self, cost=None) -> float:
        """The step's time when the GPUs of a CP group start a micro-batch together: a
        group starts when the last of its GPUs has finished the micro-batch before, and
        takes the cost of its sequences (:meth:`rank_costs`).

        Parameters
        ----------
        cost : tuple of float, optional
            ``(a, b)`` or ``(a, b, e)``; default :attr:`cost_coefficients`.
        """
        x = self.rank_costs(cost)
        finish = np.zeros(self.world_size)
        for m in range(self.num_micro_batches):
            here = self.micro_batch == m
            blocks = np.unique(np.stack([self.first_rank[here], self.cp[here]], axis=1), axis=0)
            start = finish.copy()
            for f, c in blocks:
                start[f:f + c] = finish[f:f + c].max()
            finish = start + x[m]
        return float(finish.max()) if finish.size else 0.0

    @property
    def balance(self) -> float:
        """Balance under Megatron's own cost (``l² / cp`` per GPU): ``Σ l² / world_size``
        over the critical path under that cost (1.0: no GPU ever waits)."""
        path = self.critical_path((0.0, 1.0, 0.0))
        work = float((self.lengths.astype(np.float64) ** 2).sum()) / self.world_size
        return work / path if path > 0 else 1.0

    @property
    def efficiency(self) -> float:
        """:attr:`lower_bound` over the critical path under :attr:`cost_coefficients` (1.0: optimal)."""
        path = self.critical_path()
        return self.lower_bound / path if path > 0 else 1.0

    def sample_id_groups(self, sample_ids=None) -> list:
        """Megatron's ``sample_id_groups``: one list per micro-batch, in order, each a list of
        ``world_size`` lists of sample ids (a sequence on ``c`` GPUs is in the lists of all
        ``c``; each list longest first).

        Parameters
        ----------
        sample_ids : sequence of int, optional
            The id of each sequence; default its position.
        """
        ids = np.arange(self.lengths.size) if sample_ids is None else np.asarray(sample_ids)
        order = np.lexsort((np.arange(self.lengths.size), -self.lengths))
        groups = [[[] for _ in range(self.world_size)] for _ in range(self.num_micro_batches)]
        for i in order:
            rows = groups[self.micro_batch[i]]
            for r in range(self.first_rank[i], self.first_rank[i] + self.cp[i]):
                rows[r].append(ids[i].item())
        return groups

    def to_dict(self) -> dict:
        """A JSON-ready summary (the figures and settings, not the layout)."""
        return {"num_sequences": int(self.lengths.size), "num_micro_batches": self.num_micro_batches,
                "world_size": self.world_size, "max_sequence_length": self.max_sequence_length,
                "max_sequences_per_pack": self.max_sequences_per_pack, "cost": list(self.cost_coefficients),
                "critical_path": self.critical_path(), "lower_bound": self.lower_bound,
                "simple_bound": self.simple_bound, "efficiency": self.efficiency, "balance": self.balance}

    def __repr__(self) -> str:
        return (f"CPStep({self.lengths.size:,} sequences on {self.world_size} GPUs x {self.num_micro_batches} "
                f"micro-batches, efficiency={self.efficiency:.4f}, balance={self.balance:.4f})")

    def _repr_html_(self) -> str:
        rows = [("sequences", f"{self.lengths.size:,}"),
                ("GPUs × micro-batches", f"{self.world_size} × {self.num_micro_batches}"),
                ("critical path / lower bound", f"{self.critical_path():.4g} / {self.lower_bound:.4g}"),
                ("efficiency (bound / path)", f"{self.efficiency:.4f}"), ("balance under l²/cp", f"{self.balance:.4f}")]
        return _html_table("CPStep", rows)


CPStep.__module__ = "packlib"  # pickles and reprs name the public path, which never moves
