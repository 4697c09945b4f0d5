"""Histogram packing and per-sequence bin packing: the public API and its result types.

Two result types carry everything the rest of packlib (and its users) read:

- :class:`PackingPlan`: *strategies* (multisets of lengths that fit one pack) and how many
  packs use each. It depends only on the length histogram.
- :class:`Packs`: which sample ids go into which pack, in CSR form (``offsets`` /
  ``indices`` / ``lengths``). Every format adapter reads this.

A histogram ``h`` has length ``L`` = the max sequence length; ``h[i]`` counts sequences of
length ``i + 1``.
"""
from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from ._validate import (
    as_bool,
    as_depth,
    as_histogram,
    as_int_array,
    as_lengths,
    as_nonnegative_int,
    as_positive_int,
    as_seed,
    check_total,
    exact_sum,
    readonly,
    seed_to_int64,
)

__all__ = [
    "histogram",
    "spfhp_pack",
    "lpfhp_pack",
    "nnls_pack",
    "ffd_pack",
    "bfd_pack",
    "PackingPlan",
    "Packs",
]



# Histogram packers build arrays over 1..L; above this capacity they would need gigabytes.
MAX_HISTOGRAM_LENGTH = 2**24
# Per-sequence packers: FFD's tree holds free space in int32, BFD keeps one bucket per value.
MAX_FFD_LENGTH = 2**31 - 1
MAX_BFD_LENGTH = 2**27


# --------------------------------------------------------------------------------------
# Result types
# --------------------------------------------------------------------------------------


class _Figures:
    """Figures shared by plans and packs; subclasses provide num_packs, num_tokens and
    max_sequence_length."""

    @property
    def padding_tokens(self) -> int:
        return self.num_packs * self.max_sequence_length - self.num_tokens

    @property
    def efficiency(self) -> float:
        """Real tokens / (packs x max_sequence_length): the share of compute spent on real
        tokens; 1.0 when there are no packs."""
        slots = self.num_packs * self.max_sequence_length
        return self.num_tokens / slots if slots else 1.0


class _GroupedIds:
    """Read access shared by CSR groupings of sample ids (packs, batches): subclasses have
    ``offsets``, ``indices`` and ``lengths`` and name their unit in ``_unit`` / ``_units``."""

    _unit, _units = "group", "groups"

    @property
    def num_sequences(self) -> int:
        return self.indices.size

    @property
    def num_tokens(self) -> int:
        """Real tokens over all groups."""
        return int(self.lengths.sum())

    def __len__(self) -> int:
        return self.offsets.size - 1

    def __getitem__(self, g):
        """The sample ids in group ``g`` (an int64 array); a slice gives the groups it
        selects, as the same type (``packs[:10]``)."""
        n = self.offsets.size - 1
        if isinstance(g, slice):
            return self.take(np.arange(n, dtype=np.int64)[g])
        if isinstance(g, (bool, np.bool_)) or not hasattr(g, "__index__"):
            raise TypeError(f"{self._unit} index must be an int or a slice, got {type(g).__name__} {g!r}")
        g = int(g.__index__())
        if g < 0:
            g += n
        if not 0 <= g < n:
            raise IndexError(f"{self._unit} index out of range for {n} {self._units}")
        return self.indices[self.offsets[g] : self.offsets[g + 1]]

    def __iter__(self) -> Iterator[np.ndarray]:
        """Iterate over groups, each an int64 array of sample ids."""
        o, ix = self.offsets, self.indices
        for g in range(o.size - 1):
            yield ix[o[g] : o[g + 1]]

    def to_list(self) -> list[list[int]]:
        """The groups as a list of lists of sample ids."""
        ix, o = self.indices.tolist(), self.offsets.tolist()
        return [ix[o[g] : o[g + 1]] for g in range(len(o) - 1)]


@dataclass(frozen=True, eq=False, repr=False)
class Packs(_GroupedIds, _Figures):
    """Sample ids grouped into packs, in CSR form.

    Pack ``p`` holds the samples ``indices[offsets[p]:offsets[p + 1]]``, whose lengths are
    ``lengths[offsets[p]:offsets[p + 1]]`` (in the order they are concatenated in the pack).

    Attributes
    ----------
    offsets : int64 array, shape ``(P + 1,)``
        ``offsets[0] == 0``, non-decreasing, ``offsets[-1] == N``.
    indices : int64 array, shape ``(N,)``
        Sample ids (positions in the ``lengths`` the packs were built from).
    lengths : int64 array, shape ``(N,)``
        The length of each entry of ``indices``.
    max_sequence_length : int
        Capacity of a pack in tokens.
    max_sequences_per_pack : int or None
        The depth limit the packs were built under (``None``: unlimited).
    """

    offsets: np.ndarray
    indices: np.ndarray
    lengths: np.ndarray
    max_sequence_length: int
    max_sequences_per_pack: int | None = None
    _unit, _units = "pack", "packs"

    def __post_init__(self):
        offsets = np.ascontiguousarray(self.offsets, dtype=np.int64)
        indices = np.ascontiguousarray(self.indices, dtype=np.int64)
        lengths = np.ascontiguousarray(self.lengths, dtype=np.int64)
        offsets = as_int_array(self.offsets, "offsets", allow_empty=False)
        indices = as_int_array(self.indices, "indices")
        lengths = as_lengths(self.lengths, None)
        if offsets[0] != 0:
            raise ValueError(f"offsets must start at 0, got {offsets[0]}")
        if offsets.size > 1 and (np.diff(offsets) < 0).any():
            p = int(np.flatnonzero(np.diff(offsets) < 0)[0])
            raise ValueError(f"offsets must be non-decreasing: offsets[{p + 1}] = {offsets[p + 1]} < offsets[{p}] = {offsets[p]}")
        if indices.size != lengths.size:
            raise ValueError(f"indices ({indices.size}) and lengths ({lengths.size}) must have one entry each per sequence")
        if offsets[-1] != indices.size:
            raise ValueError(f"offsets[-1] = {offsets[-1]} must equal the number of indices ({indices.size})")
        if indices.size and indices.min() < 0:
            i = int(np.flatnonzero(indices < 0)[0])
            raise ValueError(f"indices must be sample ids >= 0, got {indices[i]} at position {i}")
        for name, value in (("offsets", offsets), ("indices", indices), ("lengths", lengths)):
            object.__setattr__(self, name, readonly(value))
        object.__setattr__(self, "max_sequence_length", as_positive_int(self.max_sequence_length, "max_sequence_length"))
        object.__setattr__(self, "max_sequences_per_pack", as_depth(self.max_sequences_per_pack))

    @classmethod
    def _unchecked(cls, offsets, indices, lengths, max_sequence_length: int, max_sequences_per_pack) -> "Packs":
        """Wrap arrays a kernel built from validated input (skips the O(N) checks)."""
        self = object.__new__(cls)
        for name, value in (("offsets", offsets), ("indices", indices), ("lengths", lengths)):
            object.__setattr__(self, name, readonly(value))
        object.__setattr__(self, "max_sequence_length", int(max_sequence_length))
        object.__setattr__(self, "max_sequences_per_pack", max_sequences_per_pack)
        return self

    @classmethod
    def from_lists(cls, packs, lengths, max_sequence_length: int, max_sequences_per_pack: int | None = None) -> "Packs":
        """Build packs from a list of lists of sample ids and the samples' lengths.

        Parameters
        ----------
        packs : list of list of int
            The sample ids of each pack, in pack order.
        lengths : array_like of int
            The length of every sample (indexed by sample id).
        max_sequence_length : int
            Pack capacity in tokens.
        max_sequences_per_pack : int or None, default None
            The depth limit the packs were built under.

        Examples
        --------
        >>> Packs.from_lists([[0, 2], [1]], lengths=[3, 5, 2], max_sequence_length=5).to_list()
        [[0, 2], [1]]
        """
        lens = as_lengths(lengths, None)
        if isinstance(packs, (str, bytes)) or not hasattr(packs, "__iter__"):
            raise TypeError(f"packs must be a list of lists of sample ids, got {type(packs).__name__}")
        rows = [as_int_array(p, f"packs[{k}]") for k, p in enumerate(packs)]
        sizes = np.array([r.size for r in rows], dtype=np.int64)
        offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
        indices = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
        if indices.size and (indices.min() < 0 or indices.max() >= lens.size):
            bad = int(indices[(indices < 0) | (indices >= lens.size)][0])
            raise IndexError(f"sample id {bad} is out of range: ids index lengths, so they must be in [0, {lens.size})")
        return cls(offsets, indices, lens[indices], max_sequence_length, max_sequences_per_pack)

    # -- sizes and quality -------------------------------------------------------------
    @property
    def num_packs(self) -> int:
        return self.offsets.size - 1

    @property
    def pack_sizes(self) -> np.ndarray:
        """Number of sequences in each pack, int64 ``(P,)``."""
        return np.diff(self.offsets)

    @property
    def pack_tokens(self) -> np.ndarray:
        """Real tokens in each pack, int64 ``(P,)``."""
        csum = np.concatenate(([0], np.cumsum(self.lengths)))
        return csum[self.offsets[1:]] - csum[self.offsets[:-1]]

    def take(self, order) -> "Packs":
        """A new :class:`Packs` with the packs in the given order.

        Parameters
        ----------
        order : array_like of int
            Pack ids (a permutation or a subset, repeats allowed); ``IndexError`` if one is
            out of range.
        """
        from ._kernels.csr import csr_take

        order = as_int_array(order, "order")
        if order.size and (order.min() < 0 or order.max() >= self.num_packs):
            bad = int(order[(order < 0) | (order >= self.num_packs)][0])
            raise IndexError(f"order holds pack id {bad}, out of range for {self.num_packs} packs: ids must be in [0, {self.num_packs})")
        offsets, indices, lengths = csr_take(self.offsets, self.indices, self.lengths, order)
        return Packs._unchecked(offsets, indices, lengths, self.max_sequence_length, self.max_sequences_per_pack)

    def shuffled(self, seed: int = 0) -> "Packs":
        """The same packs in a random order.

        Parameters
        ----------
        seed : int, default 0
            In ``[0, 2**64)``; the same seed gives the same order on every machine.
        """
        from ._kernels.rng import permutation

        return self.take(permutation(self.num_packs, seed_to_int64(as_seed(seed))))

    def validate(self, num_samples: int | None = None) -> None:
        """Raise ``ValueError`` unless every pack fits and every sample appears exactly once.

        Parameters
        ----------
        num_samples : int, optional
            When given, the ids must be exactly ``0 .. num_samples - 1``.
        """
        if self.num_packs and (self.pack_tokens > self.max_sequence_length).any():
            p = int(np.flatnonzero(self.pack_tokens > self.max_sequence_length)[0])
            raise ValueError(f"pack {p} holds {self.pack_tokens[p]} tokens > {self.max_sequence_length}")
        d = self.max_sequences_per_pack
        if d is not None and self.num_packs and self.pack_sizes.max() > d:
            p = int(np.argmax(self.pack_sizes))
            raise ValueError(f"pack {p} holds {self.pack_sizes[p]} sequences > {d}")
        n = self.num_sequences if num_samples is None else as_nonnegative_int(num_samples, "num_samples")
        if self.indices.size != n or (n and (self.indices.min() < 0 or self.indices.max() >= n)):
            raise ValueError(f"indices are not a permutation of 0..{n - 1}")
        seen = np.bincount(self.indices, minlength=n)
        if (seen != 1).any():
            i = int(np.flatnonzero(seen != 1)[0])
            raise ValueError(f"sample {i} appears {seen[i]} times")

    def _repr_html_(self) -> str:
        rows = [
            ("packs", f"{self.num_packs:,}"),
            ("sequences", f"{self.num_sequences:,}"),
            ("max_sequence_length", f"{self.max_sequence_length:,}"),
            ("max_sequences_per_pack", "unlimited" if self.max_sequences_per_pack is None else str(self.max_sequences_per_pack)),
            ("efficiency", f"{100 * self.efficiency:.3f} %"),
        ]
        head = [self.indices[self.offsets[p] : self.offsets[p + 1]].tolist() for p in range(min(3, self.num_packs))]
        if head:
            rows.append(("first packs (sample ids)", "; ".join(map(str, head)) + (" …" if self.num_packs > 3 else "")))
        return _html_table("Packs", rows)

    def __repr__(self) -> str:
        return (
            f"Packs({self.num_packs:,} packs of {self.num_sequences:,} sequences, "
            f"max_sequence_length={self.max_sequence_length}, "
            f"max_sequences_per_pack={self.max_sequences_per_pack}, efficiency={100 * self.efficiency:.3f}%)"
        )


@dataclass(frozen=True, eq=False, repr=False)
class PackingPlan(_Figures):
    """A histogram packing: strategies and how many packs use each.

    Attributes
    ----------
    strategies : int64 array, shape ``(S, D)``
        One strategy per row: the lengths of the sequences in one pack, in descending
        order, zero-padded to the widest strategy. Rows are distinct.
    counts : int64 array, shape ``(S,)``
        How many packs use each strategy (all > 0).
    max_sequence_length : int
        Capacity of a pack in tokens (``L``).
    max_sequences_per_pack : int or None
        Depth limit (``None``: unlimited).
    method : str
        Which packer produced the plan.
    lower_bound : int or None
        A proven lower bound on the number of packs for this histogram and depth, when the
        packer computed one (see :func:`packlib.optimal_pack`); ``gap`` is then
        ``num_packs - lower_bound``.
    bound : LowerBound or None
        The full proof behind ``lower_bound`` (with its checkable certificate), when the
        packer computed one.
    status : int
        How the packer stopped, in the manner of :class:`scipy.optimize.OptimizeResult`:
        ``0`` finished normally; other codes are documented by the packer that sets them
        (e.g. ``1``: stopped by ``time_limit``). ``success`` is ``status == 0``.
    message : str
        A sentence saying how the packer stopped (empty for packers that always finish).

    A plan holds only real sequences, so ``plan.histogram()`` equals the histogram it was
    built from, exactly.
    """

    strategies: np.ndarray
    counts: np.ndarray
    max_sequence_length: int
    max_sequences_per_pack: int | None = None
    method: str = ""
    lower_bound: int | None = None
    info: dict = field(default_factory=dict)
    bound: object = None
    status: int = 0
    message: str = ""

    def __post_init__(self):
        L = as_positive_int(self.max_sequence_length, "max_sequence_length")
        s = _as_strategies(self.strategies)
        c = as_int_array(self.counts, "counts", minimum=0)
        if s.shape[0] != c.shape[0]:
            raise ValueError(f"strategies has {s.shape[0]} rows but counts has {c.shape[0]} entries: give one count per strategy")
        if s.size and ((s < 0).any() or (s > L).any() or (s.sum(axis=1) > L).any()):
            raise ValueError("every strategy must hold lengths in [1, max_sequence_length] summing to at most it (0 pads a row)")
        per_row = (s > 0).sum(axis=1)
        check_total(exact_sum(c), "counts", "number of packs")
        check_total(exact_sum(c, per_row), "counts", "number of sequences")
        check_total(exact_sum(c, s.sum(axis=1)), "counts", "number of tokens")
        s, c = _canonical_plan(s, c)
        object.__setattr__(self, "max_sequences_per_pack", as_depth(self.max_sequences_per_pack))
        if self.lower_bound is not None:
            object.__setattr__(self, "lower_bound", as_nonnegative_int(self.lower_bound, "lower_bound", maximum=None))
        if not isinstance(self.method, str):
            raise TypeError(f"method must be a str, got {type(self.method).__name__}")
        d = self.max_sequences_per_pack
        if d is not None and s.shape[1] > d:
            raise ValueError(f"a strategy holds {s.shape[1]} sequences > max_sequences_per_pack = {d}")
        object.__setattr__(self, "strategies", readonly(s))
        object.__setattr__(self, "counts", readonly(c))
        object.__setattr__(self, "max_sequence_length", L)

    # -- derived figures ---------------------------------------------------------------
    @property
    def num_strategies(self) -> int:
        return self.counts.size

    @property
    def num_packs(self) -> int:
        return int(self.counts.sum())

    @property
    def num_sequences(self) -> int:
        return int(((self.strategies > 0).sum(axis=1) * self.counts).sum())

    @property
    def num_tokens(self) -> int:
        return int((self.strategies.sum(axis=1) * self.counts).sum())

    @property
    def speedup(self) -> float:
        """Sequences per pack: the speed-up over one padded sequence per row."""
        return self.num_sequences / self.num_packs if self.num_packs else 1.0

    @property
    def speedup_limit(self) -> float:
        """``n * L / tokens``: the speed-up of a packing with no padding at all."""
        t = self.num_tokens
        return self.num_sequences * self.max_sequence_length / t if t else 1.0

    @property
    def success(self) -> bool:
        """Whether the packer finished normally (``status == 0``)."""
        return self.status == 0

    @property
    def gap(self) -> int | None:
        """Packs above the proven lower bound (``None`` when no bound was computed)."""
        return None if self.lower_bound is None else self.num_packs - int(self.lower_bound)

    @property
    def max_pack_size(self) -> int:
        """The most sequences any pack of the plan holds (at most ``max_sequences_per_pack``)."""
        return self.strategies.shape[1]

    @property
    def depth(self) -> int:
        """Deprecated: the most sequences any pack holds; use :attr:`max_pack_size`.
        ("Depth" elsewhere in packlib means the limit, ``max_sequences_per_pack``.)"""
        warnings.warn("PackingPlan.depth is deprecated: it is the widest strategy, not the depth limit; "
                      "use plan.max_pack_size (or plan.max_sequences_per_pack for the limit)",
                      DeprecationWarning, stacklevel=2)
        return self.max_pack_size

    def histogram(self) -> np.ndarray:
        """The length histogram this plan packs (int64, length ``L``)."""
        flat = self.strategies.ravel()
        weights = np.repeat(self.counts, self.strategies.shape[1])
        keep = flat > 0
        return _weighted_bincount(flat[keep] - 1, weights[keep], self.max_sequence_length)

    # -- plan -> packs ------------------------------------------------------------------
    def assign(self, lengths, seed: int = 0) -> Packs:
        """Turn the plan into packs of real sample ids.

        Sample ``i`` has length ``lengths[i]``. Packs come out in plan order (strategy by
        strategy); among samples of equal length, which pack gets which sample is a random
        permutation drawn from ``seed``: the same lengths and seed give the same packs on
        every run and machine. Call :meth:`Packs.shuffled` to shuffle the pack order.

        Parameters
        ----------
        lengths : array_like of int
            The length of every sample; their histogram must equal ``plan.histogram()``
            (``ValueError`` otherwise, naming the first lengths that differ).
        seed : int, default 0
            In ``[0, 2**64)``.

        Returns
        -------
        Packs
            Memory: the output (2.5 int64 per sequence) and O(L) scratch.
        """
        from ._kernels.assign import assign_plan

        L = self.max_sequence_length
        lens = as_lengths(lengths, L)
        got = histogram(lens, L)
        want = self.histogram()
        if not np.array_equal(got, want):
            diff = np.flatnonzero(got != want)
            shown = ", ".join(f"length {i + 1}: {got[i]} given vs {want[i]} planned" for i in diff[:5])
            more = f" (and {diff.size - 5} more lengths)" if diff.size > 5 else ""
            raise ValueError(
                f"lengths do not match the plan's histogram: {shown}{more}; "
                "build the plan from histogram(lengths, max_sequence_length)"
            )
        offsets, indices, out_lengths = assign_plan(self.strategies, self.counts, lens, L, seed_to_int64(as_seed(seed)))
        return Packs._unchecked(offsets, indices, out_lengths, L, self.max_sequences_per_pack)

    # -- export -------------------------------------------------------------------------
    def top_strategies(self, k: int = 8) -> list[tuple[list[int], int]]:
        """The ``k`` most used strategies as ``(lengths, count)``, most used first.

        Parameters
        ----------
        k : int, default 8
        """
        k = as_nonnegative_int(k, "k")
        order = np.lexsort((np.arange(self.num_strategies), -self.counts))[:k]
        return [([int(x) for x in self.strategies[i] if x], int(self.counts[i])) for i in order]

    def to_dict(self) -> dict:
        """A JSON-ready summary using the MLPerf BERT packing-metadata keys.

        The MLPerf keys (``sequences_dropped``, ``num_strategies_utilized``,
        ``new_number_of_samples``, ``original_number_of_samples``, ``compression_ratio``,
        ``expected_speedup``, ``theoretical_speedup``, ``avg_seq_per_sample``,
        ``padding_tokens_original_dataset``, ``padding_tokens_packed_dataset``,
        ``packing_efficiency``, ``top_8_strategies``) are followed by the plan itself
        (``strategies``, ``repeat_counts``, ...), so :meth:`from_dict` can rebuild it.
        """
        n, p, L = self.num_sequences, self.num_packs, self.max_sequence_length
        d = {
            "sequences_dropped": 0,
            "num_strategies_utilized": self.num_strategies,
            "new_number_of_samples": p,
            "original_number_of_samples": n,
            "compression_ratio": 1.0 - p / n if n else 0.0,
            "expected_speedup": self.speedup,
            "theoretical_speedup": self.speedup_limit,
            "avg_seq_per_sample": self.speedup,
            "padding_tokens_original_dataset": n * L - self.num_tokens,
            "padding_tokens_packed_dataset": self.padding_tokens,
            "packing_efficiency": self.efficiency,
            "top_8_strategies": [s for s, _ in self.top_strategies(8)],
            "method": self.method,
            "max_sequence_length": L,
            "max_sequences_per_pack": self.max_sequences_per_pack,
            "lower_bound": self.lower_bound,
            "strategies": [[int(x) for x in row if x] for row in self.strategies],
            "repeat_counts": self.counts.tolist(),
        }
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "PackingPlan":
        """Rebuild a plan from a dict.

        Parameters
        ----------
        d : dict
            :meth:`to_dict` output, or any dict with ``max_sequence_length``, ``strategies``
            and ``repeat_counts`` (such as the reference packers' JSON outputs).
        """
        if not isinstance(d, dict):
            raise TypeError(f"from_dict takes a dict (e.g. json.load of to_dict's output), got {type(d).__name__}")
        missing = [k for k in ("max_sequence_length", "strategies", "repeat_counts") if k not in d]
        if missing:
            raise ValueError(f"plan dict lacks {', '.join(missing)}: give to_dict()'s output or the reference packers' JSON")
        L = as_positive_int(d["max_sequence_length"], "max_sequence_length")
        depth = d.get("max_sequences_per_pack")
        depth = None if depth in (None, "max") else as_positive_int(depth, "max_sequences_per_pack")
        strategies = _pad_rows(d["strategies"])
        method = d.get("method", d.get("algo", ""))
        return cls(strategies, as_int_array(d["repeat_counts"], "repeat_counts"), L, depth,
                   method=_registry_name(method), lower_bound=d.get("lower_bound"))

    def report(self, top: int = 5) -> str:
        """The packing report: efficiency, speed-up against its limit, top strategies.

        Parameters
        ----------
        top : int, default 5
            How many of the most used strategies to list.
        """
        depth = "unlimited" if self.max_sequences_per_pack is None else self.max_sequences_per_pack
        lines = [
            f"PackingPlan[{self.method or 'custom'}]: {self.num_sequences:,} sequences -> {self.num_packs:,} packs "
            f"of {self.max_sequence_length} tokens (max {depth} per pack, {self.num_strategies:,} strategies)",
            f"  efficiency   {100 * self.efficiency:.3f} %   ({self.padding_tokens:,} padding tokens)",
            f"  speed-up     {self.speedup:.4f}x of a limit of {self.speedup_limit:.4f}x "
            f"({100 * self.speedup / self.speedup_limit:.2f} % of the limit)",
        ]
        if self.lower_bound is not None:
            lines.append(f"  lower bound  {int(self.lower_bound):,} packs (gap {self.gap:,} packs)")
        if self.num_strategies:
            lines.append("  top strategies:")
            for lens, cnt in self.top_strategies(top):
                lines.append(f"    {cnt:>12,} x {lens}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.report()

    def _repr_html_(self) -> str:
        depth = "unlimited" if self.max_sequences_per_pack is None else str(self.max_sequences_per_pack)
        rows = [
            ("method", self.method or "custom"),
            ("sequences → packs", f"{self.num_sequences:,} → {self.num_packs:,}"),
            ("max_sequence_length / per pack", f"{self.max_sequence_length:,} / {depth}"),
            ("efficiency", f"{100 * self.efficiency:.3f} % ({self.padding_tokens:,} padding tokens)"),
            ("speed-up", f"{self.speedup:.4f}x of {self.speedup_limit:.4f}x"),
        ]
        if self.lower_bound is not None:
            rows.append(("lower bound (gap)", f"{int(self.lower_bound):,} ({self.gap:,})"))
        rows += [(f"{count:,} ×", str(lengths)) for lengths, count in self.top_strategies(5)]
        return _html_table(f"PackingPlan: {self.num_strategies:,} strategies", rows)

    def plot(self, ax=None, **kwargs):
        """Plot the histogram and how the plan packs it (needs the ``plot`` extra).

        Parameters and return value as for :func:`packlib.plot.plan`."""
        from .plot import plan as plot_plan

        return plot_plan(self, ax=ax, **kwargs)


def _html_table(title: str, rows) -> str:
    import html

    body = "".join(f"<tr><th style='text-align:left'>{html.escape(k)}</th><td style='text-align:left'>{html.escape(v)}</td></tr>" for k, v in rows)
    return f"<table><caption style='text-align:left'><b>{html.escape(title)}</b></caption>{body}</table>"


def _weighted_bincount(values: np.ndarray, weights: np.ndarray, size: int) -> np.ndarray:
    out = np.zeros(size, dtype=np.int64)
    np.add.at(out, values, weights)
    return out


def _registry_name(method) -> str:
    """A stored method name, in the registry's spelling when it has one ("nnlshp" -> "nnls")."""
    if not isinstance(method, str):
        raise TypeError(f"method must be a str, got {type(method).__name__}")
    from . import methods

    try:
        return methods.get(method).name
    except ValueError:
        return method  # a custom or foreign packer's name is kept as given


def _as_strategies(strategies) -> np.ndarray:
    """A 2-D int64 array of strategies (rows zero-padded), exact integers only."""
    arr = np.asarray(strategies) if not isinstance(strategies, np.ndarray) else strategies
    if arr.ndim != 2:
        raise ValueError(f"strategies must be 2-D (one zero-padded row per strategy), got shape {arr.shape}")
    flat = as_int_array(arr.reshape(-1), "strategies")
    return flat.reshape(arr.shape)


def _pad_rows(rows) -> np.ndarray:
    if isinstance(rows, (str, bytes)) or not hasattr(rows, "__iter__"):
        raise TypeError(f"strategies must be a list of lists of lengths, got {type(rows).__name__}")
    rows = [as_int_array(r, f"strategies[{k}]", minimum=0) for k, r in enumerate(rows)]
    rows = [sorted((int(x) for x in r if x > 0), reverse=True) for r in rows]
    width = max((len(r) for r in rows), default=0)
    out = np.zeros((len(rows), width), dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def _canonical_plan(strategies: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sort each row descending, trim empty columns, merge equal rows, drop zero counts, and
    order rows by strategy (lexicographically descending) so equal plans are equal arrays."""
    s = -np.sort(-strategies, axis=1) if strategies.size else strategies.reshape(strategies.shape[0], 0)
    keep = counts > 0
    if s.shape[1]:
        keep &= s[:, 0] > 0
    s, c = s[keep], counts[keep]
    width = int((s > 0).sum(axis=1).max()) if s.shape[0] else 0
    s = np.ascontiguousarray(s[:, :width])
    if s.shape[0] == 0:
        return np.zeros((0, width), dtype=np.int64), np.zeros(0, dtype=np.int64)
    # lexicographically descending rows; equal rows become neighbours and are merged
    order = np.lexsort(tuple(-s[:, j] for j in range(width - 1, -1, -1)))
    s, c = s[order], c[order]
    starts = np.flatnonzero(np.concatenate(([True], (s[1:] != s[:-1]).any(axis=1))))
    return np.ascontiguousarray(s[starts]), np.add.reduceat(c, starts)


# --------------------------------------------------------------------------------------
# Public functions
# --------------------------------------------------------------------------------------


def histogram(lengths, max_sequence_length: int) -> np.ndarray:
    """Histogram of sequence lengths: ``h[i]`` = number of sequences of length ``i + 1``.

    Parameters
    ----------
    lengths : array_like of int
        Sequence lengths, each in ``[1, max_sequence_length]``.
    max_sequence_length : int
        The pack capacity ``L``; the result has length ``L``.

    Returns
    -------
    int64 ndarray of shape ``(max_sequence_length,)``
    """
    L = as_positive_int(max_sequence_length, "max_sequence_length", maximum=MAX_HISTOGRAM_LENGTH,
                        hint="a histogram has one count per length; pack longer sequences with bfd_pack / ffd_pack")
    lens = as_lengths(lengths, L)
    return np.bincount(lens, minlength=L + 1)[1:].astype(np.int64, copy=False)


def histogram_signature(packer):
    """Give a histogram packer the house signature ``(histogram, max_sequence_length=None,
    max_sequences_per_pack=3, *, ...)`` while keeping the 0.1 spelling working for one
    release: ``packer(h, 3)`` and ``packer(h, None)`` passed the depth second. A lone second
    positional argument that is ``None`` or shorter than the histogram cannot be a capacity,
    so it is read as that old depth, with a ``DeprecationWarning``."""

    @functools.wraps(packer)
    def wrapper(histogram, *args, **kwargs):
        if len(args) == 1 and "max_sequences_per_pack" not in kwargs:
            second = args[0]
            size = np.shape(histogram)[0] if np.ndim(histogram) == 1 else None
            # with max_sequence_length also given by keyword, the positional one can only be the depth
            if "max_sequence_length" in kwargs or second is None or (
                isinstance(second, (int, np.integer)) and not isinstance(second, bool) and size is not None and second < size
            ):
                warnings.warn(
                    f"{packer.__name__}(histogram, {second!r}) passes the depth limit second, the 0.1 spelling; "
                    f"the second argument is now max_sequence_length: write "
                    f"{packer.__name__}(histogram, max_sequences_per_pack={second!r})",
                    DeprecationWarning,
                    stacklevel=2,
                )
                return packer(histogram, max_sequences_per_pack=second, **kwargs)
        return packer(histogram, *args, **kwargs)

    return wrapper


def _histogram_args(hist, max_sequence_length, max_sequences_per_pack):
    h = as_histogram(hist)
    if h.size > MAX_HISTOGRAM_LENGTH:
        raise ValueError(f"histogram has {h.size:,} lengths, above the supported {MAX_HISTOGRAM_LENGTH:,}; "
                         "pack sequences that long per sequence (bfd_pack / ffd_pack)")
    L = h.size if max_sequence_length is None else as_positive_int(
        max_sequence_length, "max_sequence_length", maximum=MAX_HISTOGRAM_LENGTH,
        hint="histogram packers work over every length up to it; pack longer sequences with bfd_pack / ffd_pack")
    if L < h.size:
        nz = np.flatnonzero(h[L:])
        if nz.size:
            raise ValueError(
                f"histogram counts {h[L + nz[0]]} sequences of length {L + nz[0] + 1} > "
                f"max_sequence_length = {L}; truncate or split them first"
            )
        h = h[:L]
    elif L > h.size:
        h = np.concatenate([h, np.zeros(L - h.size, dtype=np.int64)])
    return np.ascontiguousarray(h), L, as_depth(max_sequences_per_pack)


def _plan_from_kernel(strategies, counts, L, depth, method, **info) -> PackingPlan:
    return PackingPlan(strategies, counts, L, depth, method=method, info=info)


@histogram_signature
def spfhp_pack(histogram, max_sequence_length: int | None = None, max_sequences_per_pack: int | None = 3) -> PackingPlan:
    """Shortest-pack-first histogram packing (SPFHP; Krell et al., 2021).

    Lengths are placed longest first; each goes into the open pack with the *most* room
    that still fits it (worst fit), whole groups of identical packs at a time, so the cost
    depends on the histogram's length, not on the number of sequences. Reproduces the
    reference implementation's plan exactly.

    Parameters
    ----------
    histogram : array_like of int, shape ``(L,)``
        ``histogram[i]`` = number of sequences of length ``i + 1``.
    max_sequence_length : int, optional
        Pack capacity; defaults to ``len(histogram)``.
    max_sequences_per_pack : int or None, default 3
        Depth limit; ``None`` for unlimited. (Histogram packers default to the paper's 3:
        NNLSHP's work grows with the depth, and attention cost with sequences per row.)

    Returns
    -------
    PackingPlan

    Examples
    --------
    >>> import packlib
    >>> plan = packlib.spfhp_pack([0, 2, 1, 1, 0, 2], max_sequences_per_pack=2)
    >>> plan.num_packs, plan.top_strategies(2)
    (4, [([6], 2), ([4, 2], 1)])
    """
    from ._kernels.greedy import spfhp

    h, L, depth = _histogram_args(histogram, max_sequence_length, max_sequences_per_pack)
    strategies, counts = spfhp(h, L, L if depth is None else depth)
    return _plan_from_kernel(strategies, counts, L, depth, "spfhp")


@histogram_signature
def lpfhp_pack(histogram, max_sequence_length: int | None = None, max_sequences_per_pack: int | None = 3) -> PackingPlan:
    """Longest-pack-first histogram packing (LPFHP; Krell et al., 2021).

    Like :func:`spfhp_pack`, but each length goes into the open pack with the *least*
    room that fits it (best fit), and as many copies as fit go in at once. Reproduces the
    reference implementation's plan exactly; better than SPFHP at every depth on real data.

    Parameters and return value as for :func:`spfhp_pack`.
    """
    from ._kernels.greedy import lpfhp

    h, L, depth = _histogram_args(histogram, max_sequence_length, max_sequences_per_pack)
    strategies, counts = lpfhp(h, L, L if depth is None else depth)
    return _plan_from_kernel(strategies, counts, L, depth, "lpfhp")


@histogram_signature
def nnls_pack(
    histogram,
    max_sequence_length: int | None = None,
    max_sequences_per_pack: int | None = 3,
    *,
    max_iterations: int = 20,
    short_length_cutoff: int = 8,
    repair: bool = True,
) -> PackingPlan:
    """Non-negative least-squares histogram packing (NNLSHP; Krell et al., 2021).

    The recipe of the paper and the MLPerf scripts: strategies are multisets of at most
    ``max_sequences_per_pack`` lengths summing *exactly* to ``L`` (padding counts as a
    pseudo-length); a weighted NNLS ``min ||w * (A x - h)||`` (the ``short_length_cutoff``
    shortest lengths weighted ``sqrt(cutoff / 2L)``, being cheap to pad) picks how often to
    use each; the solution is rounded (``rint`` below 2, ``floor`` above), over-allocated
    slots become padding, and the solve repeats on the remainder (up to ``max_iterations``
    times, until fewer than 100 sequences are left).

    Differences from the reference, all improvements in robustness or packs:

    - the NNLS is an active-set (Lawson-Hanson) solver that exploits the matrix's sparsity
      and, for deep or unlimited packs, prices strategies by dynamic programming instead of
      enumerating them all (``docs/design.md`` and ``benchmarks/bench_packing.py`` measure
      what that buys);
    - the last few left-over sequences are packed by LPFHP instead of one pack each with a
      dummy partner, so depth 1 and leftovers at length ``L`` work too;
    - the returned plan holds only real sequences (dummy padding partners are removed);
    - with ``repair=True`` (the default), the packs that removing the dummies left
      under-filled are repacked by LPFHP when that takes fewer packs (on Wikipedia at
      depth 3: 8,144,341 packs instead of 8,152,494). ``repair=False`` gives the recipe's
      plan as is;
    - above ``max_sequence_length = 2048`` it refuses (its cost grows as ``L**3``) and
      names the packers to use instead (``optimal``, ``lpfhp``, ``bfd``).

    Parameters
    ----------
    histogram, max_sequence_length, max_sequences_per_pack
        As for :func:`spfhp_pack`.
    max_iterations : int, default 20
        Most NNLS solves (the MLPerf scripts' limit); iteration stops earlier when fewer
        than 100 sequences are left or rounding leaves nothing to add.
    short_length_cutoff : int, default 8
        How many of the shortest lengths get the low residual weight.
    repair : bool, default True
        Repack under-filled packs (see above).

    Returns
    -------
    PackingPlan
        ``plan.info["iterations"]`` is the number of NNLS solves.
    """
    from ._kernels.nnls import nnls_histogram_pack, repack_underfilled
    from ._nnls_limits import check_nnls_size

    h, L, depth = _histogram_args(histogram, max_sequence_length, max_sequences_per_pack)
    check_nnls_size(h, L, depth)
    max_iterations = as_positive_int(max_iterations, "max_iterations", maximum=10**6)
    cutoff = min(as_nonnegative_int(short_length_cutoff, "short_length_cutoff"), L)
    repair = as_bool(repair, "repair")
    weights = np.ones(L)
    weights[:cutoff] = cutoff / (2.0 * L)
    kernel_depth = L if depth is None else depth
    strategies, counts, iterations = nnls_histogram_pack(h, L, kernel_depth, np.sqrt(weights), max_iterations)
    if repair:
        strategies, counts = repack_underfilled(strategies, counts, L, kernel_depth)
    return _plan_from_kernel(strategies, counts, L, depth, "nnls", iterations=int(iterations))


def _per_sequence(lengths, max_sequence_length, max_sequences_per_pack, kernel_name: str) -> Packs:
    from ._kernels import binpack

    L = as_positive_int(max_sequence_length, "max_sequence_length")
    lens = as_lengths(lengths, L)
    depth = as_depth(max_sequences_per_pack)
    # A capacity above the total never binds: both packers then place exactly as they would
    # with capacity = total, so the kernels get that (their structures are O(capacity)).
    kernel_L = max(1, min(L, exact_sum(lens)))
    limit = MAX_FFD_LENGTH if kernel_name == "ffd" else MAX_BFD_LENGTH
    if kernel_L > limit:
        raise ValueError(
            f"max_sequence_length = {L:,} with {exact_sum(lens):,} tokens is above what {kernel_name}_pack supports "
            f"({limit:,}); " + ("use ffd_pack" if kernel_name == "bfd" else "split the sequences")
        )
    kernel_depth = kernel_L if depth is None else min(depth, kernel_L)
    offsets, indices = getattr(binpack, kernel_name)(lens, kernel_L, kernel_depth)
    return Packs._unchecked(offsets, indices, lens[indices], L, depth)


def ffd_pack(lengths, max_sequence_length: int, max_sequences_per_pack: int | None = None) -> Packs:
    """First-fit-decreasing bin packing of individual sequences.

    Sequences are taken longest first (ties in input order) and each goes into the
    lowest-numbered pack with room for it (and fewer than ``max_sequences_per_pack``
    sequences); a max-segment tree over the packs' free space finds it in O(log packs).

    Parameters
    ----------
    lengths : array_like of int
        Length of each sample, in ``[1, max_sequence_length]``; sample ids are positions.
    max_sequence_length : int
        Pack capacity in tokens.
    max_sequences_per_pack : int or None, default None
        Depth limit; ``None`` for unlimited.

    Returns
    -------
    Packs
        Packs in the order they were opened; within a pack, longest first.
    """
    return _per_sequence(lengths, max_sequence_length, max_sequences_per_pack, "ffd")


def bfd_pack(lengths, max_sequence_length: int, max_sequences_per_pack: int | None = None) -> Packs:
    """Best-fit-decreasing bin packing of individual sequences.

    Sequences are taken longest first (ties in input order) and each goes into the open
    pack with the *least* free space that still fits it (ties: the most recently filled such
    pack), found in O(1) words of a bitset over free-space values (at most ``L`` of them).

    Parameters and return value as for :func:`ffd_pack`.
    """
    return _per_sequence(lengths, max_sequence_length, max_sequences_per_pack, "bfd")
