"""The result type of :func:`packlib.blend`: :class:`BlendedIndex`."""
from __future__ import annotations

import pathlib
from dataclasses import dataclass

import numpy as np

from .._validate import (
    as_choice,
    as_float_array,
    as_int_array,
    as_nonnegative_int,
    as_seed,
    exact_sum,
    readonly,
)
from . import _cache, _common, _feistel
from ._common import METHODS

__all__ = ["BlendedIndex"]


@dataclass(frozen=True, repr=False, eq=False)
class BlendedIndex:
    """A blended-dataset index: the stream of ``size`` samples drawn from ``k`` datasets.

    Attributes
    ----------
    dataset_index : ndarray of int16 (int32 from 32,767 datasets on), shape (size,), or None
        ``dataset_index[s]`` is the dataset that serves global sample ``s``. ``None`` for a
        ``shuffled`` index built with ``materialize=False``: use :meth:`slice`.
    dataset_sample_index : ndarray of int64, shape (size,), or None
        Which sample of that dataset: for ``megatron`` and ``smooth`` the number of earlier
        samples of the same dataset (``0, 1, 2, ...`` in order); for ``shuffled`` a random
        bijection onto ``0 .. counts[i]-1`` (each used once, not in increasing order).
    counts : ndarray of int64, shape (k,)
        Samples drawn from each dataset.
    weights : ndarray of float64, shape (k,)
        The weights as normalised (twice, as Megatron does).
    method : str
        ``"megatron"``, ``"smooth"``, ``"shuffled"`` or ``"exhaustive"``.
    seed : int
        The seed of ``shuffled`` (0 and unused otherwise).
    size : int
        Length of the index.

    All arrays are read-only.
    """

    dataset_index: np.ndarray | None
    dataset_sample_index: np.ndarray | None
    counts: np.ndarray
    weights: np.ndarray
    method: str
    seed: int
    size: int

    def __post_init__(self):
        # cheap O(k) checks of every construction; the O(size) ones are validate()/load()
        k_counts = as_int_array(self.counts, "counts", minimum=0)
        w = as_float_array(self.weights, "weights")
        if w.shape != k_counts.shape or w.size == 0:
            raise ValueError(f"weights and counts need one entry per dataset, got {w.size} and {k_counts.size}")
        method = as_choice(self.method, "method", METHODS + ("exhaustive",))
        size = as_nonnegative_int(self.size, "size")
        seed = as_seed(self.seed)
        if exact_sum(k_counts) != size:
            raise ValueError(f"counts sum to {exact_sum(k_counts)}, not size = {size}")
        if (self.dataset_index is None) != (self.dataset_sample_index is None):
            raise ValueError("give both dataset_index and dataset_sample_index, or neither (lazy shuffled)")
        if self.dataset_index is None and method != "shuffled":
            raise ValueError(f"only a shuffled index can be lazy (arrays None), not method={method!r}")
        if self.dataset_index is not None:
            for name, arr, dtype in (
                ("dataset_index", self.dataset_index, np.dtype(_common.index_dtype(k_counts.size))),
                ("dataset_sample_index", self.dataset_sample_index, np.dtype(np.int64)),
            ):
                if not isinstance(arr, np.ndarray):
                    raise TypeError(f"{name} must be a numpy array, got {type(arr).__name__}")
                if arr.shape != (size,) or arr.dtype != dtype:
                    raise ValueError(f"{name} must be {dtype} of shape ({size},), got {arr.dtype} {arr.shape}")
        if k_counts is not self.counts:
            object.__setattr__(self, "counts", readonly(k_counts))
        if w is not self.weights:
            object.__setattr__(self, "weights", readonly(w))
        object.__setattr__(self, "method", method)
        object.__setattr__(self, "size", size)
        object.__setattr__(self, "seed", seed)

    # ------------------------------------------------------------------ basic facts
    @property
    def num_datasets(self) -> int:
        """Number of datasets ``k``."""
        return int(self.counts.size)

    @property
    def materialized(self) -> bool:
        """Whether the two arrays are held in memory (or memory-mapped)."""
        return self.dataset_index is not None

    def slice(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """``(dataset_index[start:stop], dataset_sample_index[start:stop])``.

        For a materialised index these are read-only views (O(1)). For a lazy ``shuffled``
        index they are computed directly: O(stop - start) time plus O(k) set-up, no other
        position is touched, so every rank of a data-parallel job can compute only its own
        part (see docs/blending.md). ``megatron`` and ``smooth`` are sequential
        constructions, so a slice of them costs building the index up to ``stop`` once
        (for ``smooth`` that is ``blend(weights, stop, method="smooth")`` itself, whose index is
        the first part of any larger one); build it once (or :meth:`load` a saved one)
        and slice the result.

        Parameters
        ----------
        start, stop : int
            ``0 <= start <= stop <= size``.
        """
        start = as_nonnegative_int(start, "start")
        stop = as_nonnegative_int(stop, "stop")
        if not start <= stop <= self.size:
            raise ValueError(f"need 0 <= start <= stop <= size = {self.size}, got start={start}, stop={stop}")
        if self.materialized:
            return self.dataset_index[start:stop], self.dataset_sample_index[start:stop]
        return _feistel.shuffled_range(self.counts, self.size, self.seed, start, stop)

    def materialize(self) -> "BlendedIndex":
        """The same index with both arrays computed (itself if they already are)."""
        if self.materialized:
            return self
        d, s = _feistel.shuffled_range(self.counts, self.size, self.seed, 0, self.size)
        return BlendedIndex(readonly(d), readonly(s), self.counts, self.weights, self.method, self.seed, self.size)

    # ------------------------------------------------------------------ cache files
    def description(self) -> dict:
        """The JSON-able description (method, size, seed, weights) that names the cache files."""
        return {
            "class": "BlendedIndex",
            "format": _cache.FORMAT,
            "method": self.method,
            "size": int(self.size),
            "seed": int(self.seed),
            "weights": [float(x) for x in self.weights],
        }

    @property
    def digest(self) -> str:
        """md5 of the description (the ``{hash}`` in the cache file names)."""
        return _cache.digest(self.description())

    def save(self, directory) -> pathlib.Path:
        """Write ``{hash}-BlendedIndex-description.txt``, ``…-dataset_index.npy``,
        ``…-dataset_sample_index.npy`` and ``…-counts.npy`` into ``directory``.

        Like Megatron's cache, ``{hash}`` is the md5 of the JSON description, so indices
        with different weights, sizes, methods or seeds never collide; the description file
        also records a checksum of each array, which :meth:`load` verifies. A lazy
        ``shuffled`` index is materialised first. Returns the description file's path.
        """
        return _cache.save(self, directory)

    @classmethod
    def load(cls, directory, mmap: bool = True, *, weights=None, size=None, method=None, seed=None,
             verify: bool = True) -> "BlendedIndex":
        """Read an index written by :meth:`save`.

        Parameters
        ----------
        directory : path
            The cache directory, or the path of a ``…-description.txt`` file.
        mmap : bool
            Memory-map the arrays (read-only) instead of reading them.
        weights, size, method, seed : optional
            When given, the index for exactly these arguments of :func:`blend` is loaded
            (its file name is computed from them); otherwise ``directory`` must hold exactly
            one index.
        verify : bool, default True
            Check the arrays against the checksums in the description and check their
            contents: dataset ids in range, per-dataset counts equal to ``counts``, every
            sample of every dataset used exactly once (one O(size) pass).
            ``False`` checks only the description, shapes, dtypes and counts.

        Raises
        ------
        ValueError
            If no (or more than one) matching index is found, or a file is unreadable or
            does not match its description: the message names the file and says to delete
            and rebuild the cache.
        """
        return _cache.load(cls, directory, mmap, weights=weights, size=size, method=method, seed=seed, verify=verify)

    def validate(self) -> "BlendedIndex":
        """Check a materialised index in full (as :meth:`load` does with ``verify=True``):
        dataset ids in range, counts equal to the index, every sample used exactly once.
        Returns ``self``; raises ``ValueError`` otherwise."""
        if self.materialized:
            problem = _cache.check_arrays(self.dataset_index, self.dataset_sample_index, self.counts, self.size, self.method)
            if problem:
                raise ValueError(f"invalid BlendedIndex: {problem}")
        return self

    # ------------------------------------------------------------------ display
    def shares(self) -> np.ndarray:
        """``counts / size`` (zeros for an empty index)."""
        return self.counts / self.size if self.size else np.zeros(self.counts.size)

    def to_dict(self) -> dict:
        """Plain-Python summary (not the arrays)."""
        return {
            "method": self.method,
            "size": int(self.size),
            "seed": int(self.seed),
            "num_datasets": self.num_datasets,
            "weights": [float(x) for x in self.weights],
            "counts": [int(x) for x in self.counts],
            "materialized": self.materialized,
            "digest": self.digest,
        }

    def __repr__(self) -> str:
        k = self.num_datasets
        dev = float(np.abs(self.counts - self.weights * self.size).max()) if k else 0.0
        extra = "" if self.materialized else ", lazy"
        seed = f", seed={self.seed}" if self.method == "shuffled" else ""
        return (
            f"BlendedIndex(method={self.method!r}, size={self.size:,}, datasets={k}{seed}, "
            f"max |count - weight*size| = {dev:.3g}{extra})"
        )

    def _repr_html_(self) -> str:
        k = self.num_datasets
        show = range(min(k, 20))
        sh = self.shares()
        rows = "".join(
            f"<tr><td>{i}</td><td>{self.weights[i]:.6g}</td><td>{int(self.counts[i]):,}</td><td>{sh[i]:.6g}</td></tr>"
            for i in show
        )
        if k > 20:
            rows += f"<tr><td colspan='4'>… {k - 20} more datasets</td></tr>"
        seed = f", seed {self.seed}" if self.method == "shuffled" else ""
        return (
            f"<table><caption>BlendedIndex: {self.method}, {self.size:,} samples, {k} datasets{seed}</caption>"
            "<tr><th>dataset</th><th>weight</th><th>count</th><th>share</th></tr>"
            f"{rows}</table>"
        )


BlendedIndex.__module__ = "packlib"  # pickles and reprs name the public path, which never moves
