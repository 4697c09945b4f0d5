"""The result of every histogram packer: :class:`PackingPlan`, strategies and their counts."""
from __future__ import annotations

import numpy as np

from . import _hooks
from ._deprecation import DEPRECATED_IN_0_2, warn_deprecated
from ._histogram import _histogram
from ._names import registry_name
from ._packs import Packs, _Figures, _html_table
from ._canonical import canonical_rows, csr_to_dense  # noqa: F401 (csr_to_dense: optimal's name for it)
from ._validate import (
    as_depth,
    as_int_array,
    as_lengths,
    as_nonnegative_int,
    as_positive_int,
    as_seed,
    check_total,
    exact_sum,
    readonly,
    readonly_view,
    seed_to_int64,
)

__all__ = ["PackingPlan"]

#: The share of a plan's efficiency above which its depth limit's cost is reported (``depth_note``).
DEPTH_NOTE_COST = 0.03


class PackingPlan(_Figures):
    """A histogram packing: strategies and how many packs use each.

    Attributes
    ----------
    strategies : int64 array, shape ``(S, D)``
        One strategy per row: the lengths of the sequences in one pack, in descending
        order, zero-padded to the widest strategy. Rows are distinct. Built on first use:
        the plan itself is stored raggedly (``strategy_items``, ``strategy_offsets``), so a
        plan whose widest pack holds thousands of sequences takes the room of its items.
    strategy_items, strategy_offsets : int64 arrays
        The same strategies in CSR form: strategy ``s`` is
        ``strategy_items[strategy_offsets[s]:strategy_offsets[s + 1]]``.
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
        packer computed one (see :func:`packlib.optimal_pack`) or ``bound`` was asked for;
        ``None`` until then.
    bound : LowerBound
        The full proof behind ``lower_bound``, with its checkable certificate: the packer's,
        or :func:`packlib.lower_bound`'s, computed when first asked for (a plan of SPFHP,
        LPFHP or NNLSHP) and kept. ``gap`` is ``num_packs - lower_bound``, computed likewise.
    status : int
        How the packer stopped, in the manner of :class:`scipy.optimize.OptimizeResult`:
        ``0`` finished normally; other codes are documented by the packer that sets them
        (e.g. ``1``: stopped by ``time_limit``). ``success`` is ``status == 0``.
    message : str
        A sentence saying how the packer stopped (empty for packers that always finish).

    A plan holds only real sequences, so ``plan.histogram()`` equals the histogram it was
    built from, exactly.
    """


    __slots__ = ("strategy_items", "strategy_offsets", "counts", "max_sequence_length", "max_sequences_per_pack",
                 "method", "lower_bound", "info", "_bound", "status", "message", "_dense")

    def __init__(self, strategies, counts, max_sequence_length, max_sequences_per_pack=None, method="",
                 lower_bound=None, info=None, bound=None, status=0, message=""):
        L = as_positive_int(max_sequence_length, "max_sequence_length")
        s = _as_strategies(strategies)
        c = as_int_array(counts, "counts", minimum=0)
        if s.shape[0] != c.shape[0]:
            raise ValueError(f"strategies has {s.shape[0]} rows but counts has {c.shape[0]} entries: give one count per strategy")
        if s.size and ((s < 0).any() or (s > L).any() or (s.sum(axis=1) > L).any()):
            raise ValueError("every strategy must hold lengths in [1, max_sequence_length] summing to at most it (0 pads a row)")
        offsets = np.arange(s.shape[0] + 1, dtype=np.int64) * s.shape[1]
        self._init(np.ascontiguousarray(s).reshape(-1), offsets, c, L, max_sequences_per_pack, method, lower_bound,
                   info, bound, status, message)

    @classmethod
    def from_ragged(cls, items, offsets, counts, max_sequence_length, max_sequences_per_pack=None, **kwargs):
        """A plan from strategies in CSR form: strategy ``s`` is ``items[offsets[s]:offsets[s + 1]]``
        (any order within a strategy; zeros are ignored), used ``counts[s]`` times.

        Parameters
        ----------
        items, offsets, counts : array_like of int
        max_sequence_length : int
        max_sequences_per_pack : int or None, default None
        **kwargs
            ``method``, ``lower_bound``, ``info``, ``bound``, ``status``, ``message``, as for
            the constructor.

        Examples
        --------
        >>> PackingPlan.from_ragged([5, 1, 6], [0, 2, 3], [2, 1], 6).strategies.tolist()
        [[6, 0], [5, 1]]
        """
        L = as_positive_int(max_sequence_length, "max_sequence_length")
        it = as_int_array(items, "items", minimum=0, maximum=L)
        off = as_int_array(offsets, "offsets", allow_empty=False)
        c = as_int_array(counts, "counts", minimum=0)
        if off[0] != 0 or off[-1] != it.size or (np.diff(off) < 0).any() or off.size != c.size + 1:
            raise ValueError(f"offsets must run from 0 to len(items) = {it.size}, non-decreasing, with one more "
                             f"entry than counts ({c.size})")
        csum = np.concatenate(([0], np.cumsum(it)))
        if c.size and (csum[off[1:]] - csum[off[:-1]] > L).any():
            raise ValueError("every strategy must hold lengths in [1, max_sequence_length] summing to at most it")
        self = object.__new__(cls)
        self._init(it, off, c, L, max_sequences_per_pack, **kwargs)
        return self

    def _init(self, items, offsets, counts, L, depth, method="", lower_bound=None, info=None, bound=None, status=0,
              message=""):
        sizes = np.diff(offsets)
        row_of = np.repeat(np.arange(counts.size), sizes)
        nonzero = items > 0
        per_row = np.bincount(row_of[nonzero], minlength=counts.size).astype(np.int64)
        tokens = np.bincount(row_of, weights=items, minlength=counts.size).astype(np.int64) if items.size else per_row
        check_total(exact_sum(counts), "counts", "number of packs")
        check_total(exact_sum(counts, per_row), "counts", "number of sequences")
        check_total(exact_sum(counts, tokens), "counts", "number of tokens")
        it, off, c = canonical_rows(np.ascontiguousarray(items, dtype=np.int64), offsets, counts)
        depth = as_depth(depth)
        if lower_bound is not None:
            lower_bound = as_nonnegative_int(lower_bound, "lower_bound", maximum=None)
        if not isinstance(method, str):
            raise TypeError(f"method must be a str, got {type(method).__name__}")
        widest = int(np.diff(off).max()) if c.size else 0
        if depth is not None and widest > depth:
            raise ValueError(f"a strategy holds {widest} sequences > max_sequences_per_pack = {depth}")
        for name, value in (("strategy_items", readonly(it)), ("strategy_offsets", readonly(off)),
                            ("counts", readonly(c)), ("max_sequence_length", L), ("max_sequences_per_pack", depth),
                            ("method", method), ("lower_bound", lower_bound), ("info", {} if info is None else info),
                            ("_bound", bound), ("status", status), ("message", message), ("_dense", None)):
            object.__setattr__(self, name, value)

    def __setattr__(self, name, value):
        raise AttributeError(f"PackingPlan is read-only: cannot set {name!r}")

    def __reduce__(self):
        kwargs = {k: getattr(self, k) for k in ("method", "lower_bound", "info", "status", "message")}
        kwargs["bound"] = self._bound  # as it stands: pickling never computes it
        return (_from_ragged, (self.strategy_items, self.strategy_offsets, self.counts, self.max_sequence_length,
                               self.max_sequences_per_pack, kwargs))

    @property
    def strategies(self) -> np.ndarray:
        """The strategies as a zero-padded ``(S, widest)`` array (built on first use)."""
        if self._dense is None:
            object.__setattr__(self, "_dense", readonly(csr_to_dense(self.strategy_items, self.strategy_offsets)))
        return self._dense

    def strategy(self, s: int) -> np.ndarray:
        """The lengths of strategy ``s`` (descending).

        Parameters
        ----------
        s : int
        """
        o = self.strategy_offsets
        return self.strategy_items[o[s]:o[s + 1]]

    def strategy_tokens(self) -> np.ndarray:
        """Tokens of each strategy, int64 ``(S,)``."""
        csum = np.concatenate(([0], np.cumsum(self.strategy_items)))
        return csum[self.strategy_offsets[1:]] - csum[self.strategy_offsets[:-1]]

    # -- derived figures ---------------------------------------------------------------
    @property
    def num_strategies(self) -> int:
        return self.counts.size

    @property
    def num_packs(self) -> int:
        return int(self.counts.sum())

    @property
    def num_sequences(self) -> int:
        return int((np.diff(self.strategy_offsets) * self.counts).sum())

    @property
    def num_tokens(self) -> int:
        return int((self.strategy_tokens() * self.counts).sum())

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
    def bound(self):
        """The proven lower bound on the packs of this histogram at this depth, with its
        certificate (:class:`packlib.LowerBound`): the packer's, or computed now by
        :func:`packlib.lower_bound` (once; ``lower_bound`` then holds it too)."""
        if self._bound is None:
            bound = _hooks.lower_bound(self.histogram(), self.max_sequence_length, self.max_sequences_per_pack)
            object.__setattr__(self, "_bound", bound)
            if self.lower_bound is None:
                object.__setattr__(self, "lower_bound", int(bound.bound))
        return self._bound

    @property
    def gap(self) -> int:
        """Packs above the proven lower bound (``num_packs - lower_bound``); where the packer
        computed no bound, :attr:`bound` computes it first."""
        if self.lower_bound is None:
            self.bound  # noqa: B018 - computes and keeps lower_bound
        return self.num_packs - int(self.lower_bound)

    @property
    def depth_note(self) -> str:
        """A sentence where the depth limit may cost this plan more than
        :data:`DEPTH_NOTE_COST` of its efficiency, else ``""``: the padding in its packs that
        hold the most sequences allowed (no further sequence could join them, whatever its
        length), and the efficiency the tokens allow without a limit (an upper bound:
        ``max(ceil(tokens / L), sequences longer than L / 2)`` packs), where that is more than
        ``DEPTH_NOTE_COST`` above the plan's. Computed from the plan alone, no packing:
        ``print(plan)`` and :func:`packlib.compare`'s table show it."""
        cost = self._depth_cost()
        if cost is None:
            return ""
        d = self.max_sequences_per_pack
        allowed = "the 1 sequence" if d == 1 else f"the {d} sequences"
        return (f"{100 * cost[0]:.1f} % of the room is padding in packs holding {allowed} allowed; without a "
                f"depth limit (max_sequences_per_pack=None) these sequences can fill up to {100 * cost[1]:.2f} % "
                "of their packs")

    def _depth_cost(self):
        """``(padding share in packs at the depth limit, efficiency the tokens allow without
        one)`` where both exceed the plan's by ``DEPTH_NOTE_COST`` (see ``depth_note``), else ``None``."""
        d, L, packs = self.max_sequences_per_pack, self.max_sequence_length, self.num_packs
        if d is None or packs == 0:
            return None
        at_limit = np.diff(self.strategy_offsets) == d
        closed_by_depth = int(self.counts[at_limit] @ (L - self.strategy_tokens()[at_limit]))
        if closed_by_depth <= DEPTH_NOTE_COST * packs * L:
            return None
        long_ones = int(self.histogram()[L // 2:].sum())  # longer than L / 2: a pack each, whatever the depth
        unlimited = self.num_tokens / (L * max(-(-self.num_tokens // L), long_ones))
        if unlimited - self.efficiency <= DEPTH_NOTE_COST:
            return None
        return closed_by_depth / (packs * L), unlimited

    @property
    def max_pack_size(self) -> int:
        """The most sequences any pack of the plan holds (at most ``max_sequences_per_pack``)."""
        return int(np.diff(self.strategy_offsets).max()) if self.counts.size else 0

    @property
    def depth(self) -> int:
        """Deprecated: the most sequences any pack holds; use :attr:`max_pack_size`.
        ("Depth" elsewhere in packlib means the limit, ``max_sequences_per_pack``.)"""
        warn_deprecated("PackingPlan.depth (the widest strategy, not the depth limit)",
                        "use plan.max_pack_size (or plan.max_sequences_per_pack for the limit)",
                        removed_in=DEPRECATED_IN_0_2)
        return self.max_pack_size

    def histogram(self) -> np.ndarray:
        """The length histogram this plan packs (int64, length ``L``)."""
        weights = np.repeat(self.counts, np.diff(self.strategy_offsets))
        return _weighted_bincount(self.strategy_items - 1, weights, self.max_sequence_length)

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
        return self._assign(as_lengths(lengths, self.max_sequence_length), as_seed(seed))

    def _assign(self, lengths: np.ndarray, seed: int) -> Packs:
        """:meth:`assign` of lengths and a seed already checked (int64 in ``[1, L]``)."""
        from ._kernels.assign import assign_plan

        L = self.max_sequence_length
        got = _histogram(lengths, L)
        want = self.histogram()
        if not np.array_equal(got, want):
            diff = np.flatnonzero(got != want)
            shown = ", ".join(f"length {i + 1}: {got[i]} given vs {want[i]} planned" for i in diff[:5])
            more = f" (and {diff.size - 5} more lengths)" if diff.size > 5 else ""
            raise ValueError(
                f"lengths do not match the plan's histogram: {shown}{more}; "
                "build the plan from histogram(lengths, max_sequence_length)"
            )
        offsets, indices, out_lengths = assign_plan(self.strategy_items, self.strategy_offsets, self.counts,
                                                    readonly_view(lengths), L, seed_to_int64(seed))
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
        return [(self.strategy(i).tolist(), int(self.counts[i])) for i in order]

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
            "strategies": [self.strategy(i).tolist() for i in range(self.num_strategies)],
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
        items, offsets = _ragged_rows(d["strategies"])
        method = d.get("method", d.get("algo", ""))
        return cls.from_ragged(items, offsets, as_int_array(d["repeat_counts"], "repeat_counts"), L, depth,
                               method=registry_name(method), lower_bound=d.get("lower_bound"))

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
        if self.depth_note:
            lines.append(f"  depth limit  {self.depth_note}")
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
        if self.depth_note:
            rows.append(("depth limit", self.depth_note))
        rows += [(f"{count:,} ×", str(lengths)) for lengths, count in self.top_strategies(5)]
        return _html_table(f"PackingPlan: {self.num_strategies:,} strategies", rows)

    def plot(self, ax=None, **kwargs):
        """Plot the histogram and how the plan packs it (needs the ``plot`` extra).

        Parameters and return value as for :func:`packlib.plot.plan`."""
        from .plot import plan as plot_plan

        return plot_plan(self, ax=ax, **kwargs)


PackingPlan.__module__ = "packlib"  # reprs name the public path, which never moves


def _from_ragged(items, offsets, counts, L, depth, kwargs):
    """Unpickle a plan (stored raggedly)."""
    return PackingPlan.from_ragged(items, offsets, counts, L, depth, **kwargs)


def _ragged_rows(rows) -> tuple[np.ndarray, np.ndarray]:
    """A list of lists of lengths as CSR ``(items, offsets)``, exact integers only."""
    if isinstance(rows, (str, bytes)) or not hasattr(rows, "__iter__"):
        raise TypeError(f"strategies must be a list of lists of lengths, got {type(rows).__name__}")
    rows = [as_int_array(r, f"strategies[{k}]", minimum=0) for k, r in enumerate(rows)]
    sizes = np.array([r.size for r in rows], dtype=np.int64)
    items = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    return items, np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)


def _weighted_bincount(values: np.ndarray, weights: np.ndarray, size: int) -> np.ndarray:
    out = np.zeros(size, dtype=np.int64)
    np.add.at(out, values, weights)
    return out



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
