"""The results of the bound: :class:`LowerBound` and its checkable :class:`Certificate`."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np


# statuses of LowerBound and of optimal_pack's plan (``status``), one name each
FINISHED = 0  # the LP solved, its ceiling proven, or not needed
TIME_LIMIT = 1  # stopped by time_limit
ROUND_LIMIT = 2  # stopped by the limit on LP rounds (_tuning.MAX_ROUNDS)


@dataclass(frozen=True, repr=False)
class Certificate:
    """A proof of a lower bound on the number of packs that anyone can check.

    Every pack of at most ``max_sequences_per_pack`` sequences (any number when ``None``)
    whose lengths add up to at most ``max_sequence_length`` has a price sum of at most
    ``denominator`` (copies of a length count once each; a pack may hold any number of
    copies). So ``packs >= sum(counts * prices) / denominator`` for any packing of the
    histogram (weak LP duality, Farley 1990), and ``bound`` is the ceiling of that.
    Checking it is one knapsack DP over ``(sequences, tokens)``: see
    ``tests/naive_certificate.py`` for a plain-Python checker.

    With ``grid = K`` (the bounds of a coarser histogram, at long context with a depth
    limit) the prices depend only on ``floor(length * K / max_sequence_length)`` (``0``
    there: price 0), and the claim is made, and can be checked, on that grid: every pack of
    at most ``max_sequences_per_pack`` grid units ``floor(length * K / L)`` of the present
    lengths that add up to at most ``K`` is worth at most ``denominator``. That implies the
    claim above (the units of a pack that fits ``L`` tokens add up to at most ``K``), with a
    DP over ``K`` instead of ``L`` tokens.

    Attributes
    ----------
    lengths : int64 array, shape ``(n,)``
        The distinct lengths of the histogram, ascending.
    counts : int64 array, shape ``(n,)``
        How many sequences have each length.
    prices : int64 array, shape ``(n,)``
        A price per length, ``>= 0``.
    denominator : int
        ``0 < denominator <= 2**40``: the largest price sum of any pack.
    max_sequence_length : int
    max_sequences_per_pack : int or None
    grid : int or None
        ``K``: the prices are a function of ``floor(length * K / L)`` and the claim holds
        on that grid (see above); ``None``: prices per length, claim over tokens.
    """

    lengths: np.ndarray
    counts: np.ndarray
    prices: np.ndarray
    denominator: int
    max_sequence_length: int
    max_sequences_per_pack: int | None
    grid: int | None = None

    @property
    def bound(self) -> int:
        """``ceil(sum(counts * prices) / denominator)``, in exact integer arithmetic."""
        num = sum(int(c) * int(p) for c, p in zip(self.counts.tolist(), self.prices.tolist()))
        return -(-num // int(self.denominator))

    def to_dict(self) -> dict:
        """The certificate as plain lists and ints (JSON-serialisable)."""
        return {
            "lengths": self.lengths.tolist(),
            "counts": self.counts.tolist(),
            "prices": self.prices.tolist(),
            "denominator": int(self.denominator),
            "max_sequence_length": self.max_sequence_length,
            "max_sequences_per_pack": self.max_sequences_per_pack,
            "grid": self.grid,
        }

    def __repr__(self) -> str:
        grid = "" if self.grid is None else f", on a grid of {self.grid:,}"
        return (f"Certificate({self.lengths.size:,} lengths, denominator {self.denominator:,}{grid}, "
                f"bound {self.bound:,})")


def _certificate(lengths, counts, prices, denominator, L, depth, grid=None) -> Certificate:
    ro = []
    for a in (lengths, counts, prices):
        a = np.array(a, dtype=np.int64)
        a.setflags(write=False)
        ro.append(a)
    return Certificate(ro[0], ro[1], ro[2], int(denominator), int(L), depth, None if grid is None else int(grid))


@dataclass(frozen=True, repr=False)
class LowerBound:
    """Proven lower bounds on the number of packs a histogram needs.

    Attributes
    ----------
    bound : int
        The best of the bounds below: no packing uses fewer packs.
    lp_bound : int
        The best bound certified from the cutting-stock LP's duals, equal to
        ``certificate.bound`` (the simple bounds below are such dual bounds too, so
        ``lp_bound == bound``).
    lp_value : float
        The value of the last LP HiGHS solved: the LP optimum, or slightly above it when
        column generation stopped because the ceiling was already proven (``lp_bound``
        itself comes from a verified dual solution, not from this value). NaN when no
        LP was solved.
    lp_converged : bool
        Whether ``lp_bound`` is the ceiling of the LP optimum: column generation solved
        the LP, or proved that further rounds could not raise the ceiling
        (``info["lp"]`` says which). ``False``: stopped early (the bound is then weaker
        but still valid) or not needed.
    trivial_bound : int
        ``ceil(tokens / L)``.
    large_items_bound : int
        Sequences longer than ``L / 2``: each needs its own pack.
    cardinality_bound : int
        ``ceil(sequences / max_sequences_per_pack)`` (0 when unlimited).
    max_sequence_length : int
    max_sequences_per_pack : int or None
    certificate : Certificate
        Integer prices per length that prove ``bound`` (checkable without packlib).
    status : int
        ``0``: finished (the LP was solved, its ceiling proven, or not needed);
        ``1``: stopped by the time limit; ``2``: stopped by the limit on LP rounds.
        Whatever the status, ``bound`` is proven.
    message : str
        How it stopped, in a sentence.
    info : dict
        ``rounds`` (LP solves), ``columns`` (patterns generated), ``seconds``, ``lp``.
    """

    bound: int
    lp_bound: int
    lp_value: float
    lp_converged: bool
    trivial_bound: int
    large_items_bound: int
    cardinality_bound: int
    max_sequence_length: int
    max_sequences_per_pack: int | None
    info: dict = field(default_factory=dict, compare=False)
    certificate: Certificate | None = field(default=None, compare=False)
    status: int = 0
    message: str = ""

    @property
    def success(self) -> bool:
        """``status == 0`` (finished)."""
        return self.status == FINISHED

    def __int__(self) -> int:
        return self.bound

    def to_dict(self) -> dict:
        """The bounds as a plain dict (JSON-serialisable)."""
        return {
            "bound": self.bound,
            "lp_bound": self.lp_bound,
            "lp_value": self.lp_value,
            "lp_converged": self.lp_converged,
            "trivial_bound": self.trivial_bound,
            "large_items_bound": self.large_items_bound,
            "cardinality_bound": self.cardinality_bound,
            "max_sequence_length": self.max_sequence_length,
            "max_sequences_per_pack": self.max_sequences_per_pack,
            "status": self.status,
            "message": self.message,
            "certificate": None if self.certificate is None else self.certificate.to_dict(),
            "info": dict(self.info),
        }

    def __repr__(self) -> str:
        depth = "unlimited" if self.max_sequences_per_pack is None else self.max_sequences_per_pack
        status = self.info.get("lp", "solved")
        if status == "skipped":
            lp = "LP not needed"
        elif status.startswith("not solved"):
            lp = f"L2 bound {self.lp_bound:,}"
        elif math.isnan(self.lp_value):
            lp = "LP not run (time limit)"
        else:
            lp = f"LP {self.lp_bound:,} (value {self.lp_value:,.3f}{'' if self.lp_converged else ', stopped early'})"
        return (
            f"LowerBound({self.bound:,} packs of {self.max_sequence_length} tokens, max {depth} per pack: "
            f"{lp}, tokens {self.trivial_bound:,}, long sequences {self.large_items_bound:,}, "
            f"sequences/depth {self.cardinality_bound:,})"
        )


Certificate.__module__ = LowerBound.__module__ = "packlib"  # pickles and reprs name the public path
