"""Side-by-side comparison of packing methods on one histogram."""
from __future__ import annotations

import html
import time
from dataclasses import asdict, dataclass
from typing import Iterable, Sequence

import numpy as np

from ._validate import as_depth, as_histogram

__all__ = ["compare", "ComparisonTable", "ComparisonRow", "METHODS"]

#: Method name -> (module, function) of the packers :func:`compare` knows.
METHODS = {
    "spfhp": ("packing", "spfhp_pack"),
    "lpfhp": ("packing", "lpfhp_pack"),
    "nnls": ("packing", "nnls_pack"),
    "optimal": ("optimal", "optimal_pack"),
}


def get_packer(method: str):
    """The histogram packer called ``method`` (one of :data:`METHODS`)."""
    from importlib import import_module

    try:
        module, name = METHODS[method]
    except KeyError:
        raise ValueError(f"unknown method {method!r}; choose from {', '.join(METHODS)}") from None
    return getattr(import_module(f".{module}", __package__), name)


@dataclass(frozen=True)
class ComparisonRow:
    """One packing of the histogram: a method at one depth."""

    method: str
    depth: int | None
    packs: int
    efficiency: float
    speedup: float
    speedup_limit: float
    lower_bound: int | None
    gap: int | None
    seconds: float

    @property
    def depth_label(self) -> str:
        return "unlimited" if self.depth is None else str(self.depth)


class ComparisonTable(list):
    """A list of :class:`ComparisonRow` records that prints as a table.

    ``to_markdown()`` gives a Markdown table, ``to_pandas()`` a DataFrame (needs pandas),
    ``to_records()`` plain dicts; notebooks show it as an HTML table.
    """

    columns = ("method", "depth", "packs", "efficiency", "speed-up", "of limit", "gap to bound", "time")

    def _cells(self, row: ComparisonRow) -> list[str]:
        gap = "" if row.gap is None else f"{row.gap:,}"
        if row.gap and row.lower_bound:
            pct = 100 * row.gap / row.lower_bound
            gap += f" ({pct:.3f} %)" if pct >= 0.001 else " (<0.001 %)"
        return [
            row.method,
            row.depth_label,
            f"{row.packs:,}",
            f"{100 * row.efficiency:.3f} %",
            f"{row.speedup:.4f}x",
            f"{row.speedup_limit:.4f}x",
            gap,
            _format_seconds(row.seconds),
        ]

    def to_records(self) -> list[dict]:
        return [asdict(r) for r in self]

    def to_pandas(self):
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("to_pandas() needs pandas: pip install 'packlib[pandas]'") from None
        return pd.DataFrame(self.to_records())

    def to_markdown(self) -> str:
        rows = [list(self.columns)] + [self._cells(r) for r in self]
        widths = [max(len(r[i]) for r in rows) for i in range(len(self.columns))]
        right = [False, False, True, True, True, True, True, True]

        def fmt(cells):
            return "| " + " | ".join(c.rjust(w) if rj else c.ljust(w) for c, w, rj in zip(cells, widths, right)) + " |"

        sep = "|" + "|".join(("-" * (w + 1) + ":") if rj else ("-" * (w + 2)) for w, rj in zip(widths, right)) + "|"
        return "\n".join([fmt(rows[0]), sep] + [fmt(r) for r in rows[1:]])

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(c)}</th>" for c in self.columns)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in self._cells(r)) + "</tr>" for r in self)
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

    def __repr__(self) -> str:
        return self.to_markdown()

    def best(self, depth=...) -> ComparisonRow:
        """The row with the fewest packs (optionally among one depth only)."""
        rows = [r for r in self if depth is ... or r.depth == depth]
        return min(rows, key=lambda r: (r.packs, r.seconds))


def _format_seconds(s: float) -> str:
    if s < 1e-3:
        return f"{s * 1e6:.0f} µs"
    if s < 1:
        return f"{s * 1e3:.1f} ms"
    return f"{s:.2f} s"


def compare(
    histogram,
    methods: Sequence[str] | None = None,
    max_sequences_per_pack: Iterable[int | None] = (2, 3, None),
    *,
    max_sequence_length: int | None = None,
    warmup: bool = True,
) -> ComparisonTable:
    """Pack one histogram with several methods and depths and tabulate the results.

    Parameters
    ----------
    histogram : array_like of int
        ``histogram[i]`` = number of sequences of length ``i + 1``.
    methods : sequence of str, optional
        Any of ``"spfhp"``, ``"lpfhp"``, ``"nnls"``, ``"optimal"``; default: all of them.
    max_sequences_per_pack : iterable of int or None
        Depths to try (``None`` = unlimited).
    warmup : bool, default True
        Call each method once on a tiny histogram first, so that the times reported are
        steady-state times, not numba compilation.

    Returns
    -------
    ComparisonTable
        One :class:`ComparisonRow` per (depth, method), with packs, efficiency, speed-up and
        its limit, the gap to the LP lower bound (when :func:`packlib.lower_bound` is
        available) and wall time.
    """
    h = as_histogram(histogram)
    methods = list(METHODS) if methods is None else list(methods)
    packers = {m: get_packer(m) for m in methods}
    depths = [as_depth(d) for d in max_sequences_per_pack]
    if warmup:
        tiny = np.zeros(8, dtype=np.int64)
        tiny[[1, 4, 7]] = [3, 2, 1]
        for packer in packers.values():
            for d in set(depths):
                packer(tiny, d)
    table = ComparisonTable()
    for d in depths:
        plans, seconds = {}, {}
        for m, packer in packers.items():
            t0 = time.perf_counter()
            plans[m] = packer(h, d, max_sequence_length=max_sequence_length)
            seconds[m] = time.perf_counter() - t0
        # a plan that carries a proven bound (optimal_pack) saves computing it again
        bound = next((p.lower_bound for p in plans.values() if p.lower_bound is not None), None)
        if bound is None:
            bound = _lower_bound_or_none(h, d, max_sequence_length)
        for m, plan in plans.items():
            table.append(
                ComparisonRow(
                    method=m,
                    depth=d,
                    packs=plan.num_packs,
                    efficiency=plan.efficiency,
                    speedup=plan.speedup,
                    speedup_limit=plan.speedup_limit,
                    lower_bound=bound,
                    gap=None if bound is None else plan.num_packs - bound,
                    seconds=seconds[m],
                )
            )
    return table


def _lower_bound_or_none(h, depth, max_sequence_length):
    try:
        from .optimal import lower_bound
    except ImportError:
        return None
    return int(lower_bound(h, depth, max_sequence_length=max_sequence_length).bound)
