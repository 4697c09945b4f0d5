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

import numpy as np

from ._deprecation import DEPRECATED_IN_0_2, deprecated_call
from ._histogram import MAX_HISTOGRAM_LENGTH, histogram
from ._packs import Packs
from ._plan import PackingPlan
from ._validate import (
    as_bool,
    as_depth,
    as_histogram,
    as_lengths,
    as_nonnegative_int,
    as_positive_int,
    exact_sum,
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

# Per-sequence packers: FFD's tree holds free space in int32, BFD keeps one bucket per value.
MAX_FFD_LENGTH = 2**31 - 1
MAX_BFD_LENGTH = 2**27


def histogram_signature(packer):
    """Give a histogram packer the house signature ``(histogram, max_sequence_length=None,
    max_sequences_per_pack=3, *, ...)`` while keeping the 0.1 spelling working for one
    release: ``packer(h, 3)`` and ``packer(h, None)`` passed the depth second. A lone second
    positional argument that is ``None`` or shorter than the histogram cannot be a capacity,
    so it is read as that old depth, with a ``DeprecationWarning``."""

    def rewrite(args, kwargs):
        if len(args) != 2 or "max_sequences_per_pack" in kwargs:
            return None
        histogram, second = args
        size = np.shape(histogram)[0] if np.ndim(histogram) == 1 else None
        # with max_sequence_length also given by keyword, the positional one can only be the depth
        if "max_sequence_length" in kwargs or second is None or (
            isinstance(second, (int, np.integer)) and not isinstance(second, bool) and size is not None and second < size
        ):
            return ((histogram,), {**kwargs, "max_sequences_per_pack": second},
                    f"{packer.__name__}(histogram, {second!r}), the depth limit second (the 0.1 spelling; the second "
                    "argument is now max_sequence_length),",
                    f"write {packer.__name__}(histogram, max_sequences_per_pack={second!r})")
        return None

    return deprecated_call(rewrite, removed_in=DEPRECATED_IN_0_2)(packer)


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

    See Also
    --------
    lpfhp_pack : best fit instead of worst fit; fewer packs on real data.
    nnls_pack : the paper's third packer, closer to optimal.
    optimal_pack : near-optimal, with a proven lower bound.
    bfd_pack : per-sequence packing, when the packs must name sample ids.

    References
    ----------
    .. [1] M. Krell, M. Kosec, S. P. Perez, A. Fitzgibbon, "Efficient Sequence Packing without
       Cross-contamination: Accelerating Large Language Models without Impacting
       Performance", arXiv:2107.02027, 2021.

    Examples
    --------
    >>> import packlib
    >>> plan = packlib.spfhp_pack([0, 2, 1, 1, 0, 2], max_sequences_per_pack=2)
    >>> plan.num_packs, plan.top_strategies(2)
    (4, [([6], 2), ([4, 2], 1)])
    """
    return _spfhp(*_histogram_args(histogram, max_sequence_length, max_sequences_per_pack))


def _spfhp(h: np.ndarray, L: int, depth: int | None) -> PackingPlan:
    """:func:`spfhp_pack` of arguments already checked (``_histogram_args``)."""
    from ._kernels.greedy import spfhp

    strategies, counts = spfhp(h, L, L if depth is None else depth)
    return _plan_from_kernel(strategies, counts, L, depth, "spfhp")


@histogram_signature
def lpfhp_pack(histogram, max_sequence_length: int | None = None, max_sequences_per_pack: int | None = 3) -> PackingPlan:
    """Longest-pack-first histogram packing (LPFHP; Krell et al., 2021).

    Like :func:`spfhp_pack`, but each length goes into the open pack with the *least*
    room that fits it (best fit), and as many copies as fit go in at once. Reproduces the
    reference implementation's plan exactly; better than SPFHP at every depth on real data.

    Parameters and return value as for :func:`spfhp_pack`.

    See Also
    --------
    spfhp_pack : worst fit, the paper's first packer.
    nnls_pack, optimal_pack : fewer packs, at more cost.

    References
    ----------
    .. [1] M. Krell, M. Kosec, S. P. Perez, A. Fitzgibbon, "Efficient Sequence Packing without
       Cross-contamination: Accelerating Large Language Models without Impacting
       Performance", arXiv:2107.02027, 2021.
    """
    return _lpfhp(*_histogram_args(histogram, max_sequence_length, max_sequences_per_pack))


def _lpfhp(h: np.ndarray, L: int, depth: int | None) -> PackingPlan:
    """:func:`lpfhp_pack` of arguments already checked (``_histogram_args``)."""
    from ._kernels.greedy import lpfhp

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
    exact: bool = False,
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
    - above ``max_sequence_length = 768`` (the exact solver's cost grows as ``L**3``)
      the recipe runs on at most 768 length classes of
      ``q`` tokens, ``q`` from ``ceil(L / 768)`` to twice that, the width that leaves the
      fewest tokens of a pack unused (a class's sequences fill its slots, so every pack fits
      ``L``): its time and memory are at most those of ``L = 768`` at every ``L`` (the repair,
      which then runs on the classes and again on the lengths, aside), the short-length
      cutoff counts classes, and ``plan.info["length_class"]`` is ``q``. The plan is then
      within a tenth of a percent of the recipe's; ``exact=True`` gives the recipe's own
      plan, on the lengths, up to ``L = 2048``, at the cost of the ``L**3`` solve
      (docs/guide.md, "How NNLSHP scales with the max length", measures both).

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
    exact : bool, default False
        Run the recipe on the lengths themselves at every ``L`` up to 2048 (``ValueError``
        above), not on length classes above 768: the recipe's own plan, up to 0.1 % fewer
        packs, for a solve whose time grows as ``L**3`` (see above).

    Returns
    -------
    PackingPlan
        ``plan.info["iterations"]`` is the number of NNLS solves, ``"length_class"`` the
        class width ``q`` (1: the lengths themselves) and ``"exact"`` whether the recipe
        ran on the lengths (``q == 1``).

    See Also
    --------
    spfhp_pack, lpfhp_pack : the paper's greedy packers.
    optimal_pack : near-optimal, with a proven lower bound.

    References
    ----------
    .. [1] M. Krell, M. Kosec, S. P. Perez, A. Fitzgibbon, "Efficient Sequence Packing without
       Cross-contamination: Accelerating Large Language Models without Impacting
       Performance", arXiv:2107.02027, 2021.
    """
    h, L, depth = _histogram_args(histogram, max_sequence_length, max_sequences_per_pack)
    exact = as_bool(exact, "exact")
    if exact:
        from ._nnls_limits import MAX_NNLS_LENGTH

        if L > MAX_NNLS_LENGTH:
            raise ValueError(f"exact=True runs the recipe on the lengths themselves only up to max_sequence_length = "
                             f"{MAX_NNLS_LENGTH:,} (its time grows as L**3), "
                             f"got {L:,}; leave exact=False (length classes), or use optimal_pack for the fewest packs")
    return _nnls(h, L, depth, max_iterations=as_positive_int(max_iterations, "max_iterations", maximum=10**6),
                 short_length_cutoff=as_nonnegative_int(short_length_cutoff, "short_length_cutoff"),
                 repair=as_bool(repair, "repair"), exact=exact)


def _nnls(h: np.ndarray, L: int, depth: int | None, *, max_iterations: int = 20, short_length_cutoff: int = 8,
          repair: bool = True, exact: bool = False) -> PackingPlan:
    """:func:`nnls_pack` of arguments already checked (``_histogram_args`` and the options)."""
    from ._first_use import NNLS_CLASS_UNITS, NNLS_UNITS, compile_first_use
    from ._nnls_limits import length_classes
    from ._nnls_recipe import nnls_recipe, refill_slots, repack_underfilled

    q, G = length_classes(L, exact)
    compile_first_use(NNLS_UNITS if q == 1 else NNLS_CLASS_UNITS)  # a new machine: two processes compile
    # above the exact range the recipe runs on G length classes of q tokens (docs/design.md)
    hc = h if q == 1 else np.add.reduceat(h, np.arange(G, dtype=np.int64) * q)
    cutoff = min(short_length_cutoff, G)
    weights = np.ones(G)
    weights[:cutoff] = cutoff / (2.0 * G)
    kernel_depth = G if depth is None else depth
    (strategies, counts), iterations = nnls_recipe(hc, G, kernel_depth, np.sqrt(weights), max_iterations)
    if repair:
        strategies, counts = repack_underfilled(strategies, counts, G, kernel_depth)
    if q > 1:
        from ._kernels.nnls_grid import classes_to_lengths

        strategies, counts = classes_to_lengths(strategies, counts, h, q, G)
        if repair:  # again on the lengths: the room the classes rounded up is free there
            strategies, counts = repack_underfilled(strategies, counts, L, L if depth is None else depth)
            if depth is not None:  # and the slots they could not fill
                strategies, counts = refill_slots(strategies, counts, L, depth, q)
    info = {"iterations": int(iterations), "length_class": q, "exact": q == 1}
    return _plan_from_kernel(strategies, counts, L, depth, "nnls", **info)


def _sequence_args(lengths, max_sequence_length, max_sequences_per_pack):
    """Check the arguments of a per-sequence packer once: ``(lengths, L, depth)``."""
    L = as_positive_int(max_sequence_length, "max_sequence_length")
    return as_lengths(lengths, L), L, as_depth(max_sequences_per_pack)


def _per_sequence(lens: np.ndarray, L: int, depth: int | None, kernel_name: str) -> Packs:
    """Run the FFD or BFD kernel on arguments already checked (``_sequence_args``)."""
    from ._kernels import binpack

    # A capacity above the total never binds: both packers then place exactly as they would
    # with capacity = total, so the kernels get that (their structures are O(capacity)).
    total = exact_sum(lens)
    kernel_L = max(1, min(L, total))
    limit = MAX_FFD_LENGTH if kernel_name == "ffd" else MAX_BFD_LENGTH
    if kernel_L > limit:
        raise ValueError(
            f"max_sequence_length = {L:,} with {total:,} tokens is above what {kernel_name}_pack supports "
            f"({limit:,}); " + ("use ffd_pack" if kernel_name == "bfd" else "split the sequences")
        )
    kernel_depth = kernel_L if depth is None else min(depth, kernel_L)
    offsets, indices = getattr(binpack, kernel_name)(lens, kernel_L, kernel_depth)
    return Packs._unchecked(offsets, indices, lens[indices], L, depth)


def _ffd(lens: np.ndarray, L: int, depth: int | None) -> Packs:
    """:func:`ffd_pack` of arguments already checked (``_sequence_args``)."""
    return _per_sequence(lens, L, depth, "ffd")


def _bfd(lens: np.ndarray, L: int, depth: int | None) -> Packs:
    """:func:`bfd_pack` of arguments already checked (``_sequence_args``)."""
    return _per_sequence(lens, L, depth, "bfd")


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

    See Also
    --------
    bfd_pack : best fit instead of first fit.
    pack : any method by name.

    References
    ----------
    .. [1] D. S. Johnson, "Near-optimal bin packing algorithms", PhD thesis, MIT, 1973.
    """
    return _ffd(*_sequence_args(lengths, max_sequence_length, max_sequences_per_pack))


def bfd_pack(lengths, max_sequence_length: int, max_sequences_per_pack: int | None = None) -> Packs:
    """Best-fit-decreasing bin packing of individual sequences.

    Sequences are taken longest first (ties in input order) and each goes into the open
    pack with the *least* free space that still fits it (ties: the most recently filled such
    pack), found in O(1) words of a bitset over free-space values (at most ``L`` of them).

    Parameters and return value as for :func:`ffd_pack`.

    See Also
    --------
    ffd_pack : first fit instead of best fit.
    pack_stream : the same, window by window over a stream.

    References
    ----------
    .. [1] D. S. Johnson, "Near-optimal bin packing algorithms", PhD thesis, MIT, 1973.
    """
    return _bfd(*_sequence_args(lengths, max_sequence_length, max_sequences_per_pack))
