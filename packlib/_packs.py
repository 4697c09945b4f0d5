"""The result type of every packer that places sample ids: :class:`Packs`, in CSR form.

Every format adapter reads it; the batches of :mod:`packlib.bucketing` share its read access
(:class:`_GroupedIds`) and the plans of :mod:`packlib._plan` its figures (:class:`_Figures`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np

from ._validate import (
    as_depth,
    as_int_array,
    as_lengths,
    as_nonnegative_int,
    as_positive_int,
    as_seed,
    readonly,
    seed_to_int64,
)

__all__ = ["Packs"]


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


def _html_table(title: str, rows) -> str:
    import html

    body = "".join(f"<tr><th style='text-align:left'>{html.escape(k)}</th><td style='text-align:left'>{html.escape(v)}</td></tr>" for k, v in rows)
    return f"<table><caption style='text-align:left'><b>{html.escape(title)}</b></caption>{body}</table>"



Packs.__module__ = "packlib"  # pickles and reprs name the public path, which never moves
