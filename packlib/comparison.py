"""Side-by-side comparison of packing methods on one histogram: :func:`packlib.compare`.

(The module is ``comparison``, not ``compare``, so that importing it can never replace the
function ``packlib.compare`` with a module of the same name.)
"""
from __future__ import annotations

import html
import math
import sys
import time
from dataclasses import asdict, dataclass
from typing import Iterable, Sequence

import numpy as np

from . import methods as _registry
from ._deprecation import DEPRECATED_IN_0_2, deprecated_call
from ._progress import progress_bar
from ._method_warmup import LP_WARMUPS, WARMUP_HISTOGRAM, share_first_compile, warm_method  # noqa: F401
from ._shared_compile import usable_cores
from ._validate import as_bool, as_depth, as_time_limit

__all__ = ["compare", "ComparisonTable", "ComparisonRow"]


def get_packer(method: str):
    """The histogram packer called ``method`` (a histogram name of :mod:`packlib.methods`)."""
    return _registry.get(method, kind="histogram").function


@dataclass(frozen=True)
class ComparisonRow:
    """One packing of the histogram: a method at one depth.

    A method that refused the input (one :func:`compare` ran by default, not by name) has
    ``packs = gap = None``, ``efficiency = speedup = nan`` and its reason in ``note``.
    """

    method: str
    depth: int | None
    packs: int | None
    efficiency: float
    speedup: float
    speedup_limit: float
    lower_bound: int | None
    gap: int | None
    seconds: float
    note: str = ""

    @property
    def depth_label(self) -> str:
        return "unlimited" if self.depth is None else str(self.depth)


class ComparisonTable(list):
    """A list of :class:`ComparisonRow` records that prints as a table.

    ``to_markdown()`` gives a Markdown table, ``to_pandas()`` a DataFrame (needs pandas),
    ``to_records()`` plain dicts, ``plot()`` a bar chart (needs matplotlib); notebooks show it
    as an HTML table.
    """

    columns = ("method", "depth", "packs", "efficiency", "speed-up", "of limit", "gap to bound", "time")

    def _cells(self, row: ComparisonRow) -> list[str]:
        if row.packs is None:
            return [row.method, row.depth_label, "refused", "", "", f"{row.speedup_limit:.4f}x", "",
                    _format_seconds(row.seconds)]
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

    def plot(self, ax=None):
        """Efficiency by method, grouped by depth, as a bar chart (needs the ``plot`` extra:
        ``pip install 'packlib[plot]'``).

        Parameters and return value as for :func:`packlib.plot.compare`: one matplotlib
        ``Axes``, drawn on ``ax`` or a new figure's (``ax.figure.savefig(path)`` saves it).
        """
        from .plot import compare as plot_compare

        return plot_compare(self, ax=ax)

    def _table(self) -> tuple[list[str], list[list[str]]]:
        """Header and cells; a "note" column only when some row has a note."""
        if not any(r.note for r in self):
            return list(self.columns), [self._cells(r) for r in self]
        return list(self.columns) + ["note"], [self._cells(r) + [r.note] for r in self]

    def to_markdown(self) -> str:
        head, cells = self._table()
        rows = [head] + cells
        widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
        right = [False, False, True, True, True, True, True, True, False][: len(head)]

        def fmt(cells):
            return "| " + " | ".join(c.rjust(w) if rj else c.ljust(w) for c, w, rj in zip(cells, widths, right)) + " |"

        sep = "|" + "|".join(("-" * (w + 1) + ":") if rj else ("-" * (w + 2)) for w, rj in zip(widths, right)) + "|"
        return "\n".join([fmt(rows[0]), sep] + [fmt(r) for r in rows[1:]])

    def _repr_html_(self) -> str:
        columns, cells = self._table()
        head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in cells)
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

    def __repr__(self) -> str:
        return self.to_markdown()

    def best(self, depth=...) -> ComparisonRow:
        """The row with the fewest packs (ties: the faster one); rows of refusals are skipped.

        Parameters
        ----------
        depth : int or None, optional
            Only rows at this depth (``None``: unlimited); ``ValueError`` if the table has
            none. By default, all rows.
        """
        rows = [r for r in self if (depth is ... or r.depth == depth) and r.packs is not None]
        if not rows:
            have = ", ".join(sorted({r.depth_label for r in self})) or "none"
            raise ValueError(f"the table has no rows at depth {depth!r} (depths compared: {have}); "
                             "pass one of those, or compare() at that depth")
        return min(rows, key=lambda r: (r.packs, r.seconds))


def _format_seconds(s: float) -> str:
    if s < 1e-3:
        return f"{s * 1e6:.0f} µs"
    if s < 1:
        return f"{s * 1e3:.1f} ms"
    return f"{s:.2f} s"


def _methods_second(args, kwargs):
    """``compare(h, methods, depths)``, the 0.1 spelling: the methods were second."""
    second = args[1] if len(args) > 1 else None
    if not (isinstance(second, str) or (
            isinstance(second, (list, tuple)) and all(isinstance(m, str) for m in second))):
        return None
    if kwargs.get("methods") is not None:
        raise TypeError("compare() got methods twice: by position (the 0.1 spelling) and by keyword")
    return ((args[0], None, *args[2:]), {**kwargs, "methods": second},
            f"compare(histogram, {second!r}, ...), the methods second (the 0.1 spelling; the second argument is "
            "now max_sequence_length),", f"write compare(histogram, methods={second!r})")


@deprecated_call(_methods_second, removed_in=DEPRECATED_IN_0_2)
def compare(
    histogram,
    max_sequence_length: int | None = None,
    max_sequences_per_pack: int | None | Iterable[int | None] = (2, 3, None),
    *,
    methods: str | Sequence[str] | None = None,
    warmup: bool = True,
    progress: bool | None = None,
    time_limit: float | None = 5.0,
) -> ComparisonTable:
    """Pack one histogram with several methods and depths and tabulate the results.

    Parameters
    ----------
    histogram : array_like of int
        ``histogram[i]`` = number of sequences of length ``i + 1``.
    max_sequence_length : int, optional
        Pack capacity; defaults to ``len(histogram)``.
    max_sequences_per_pack : int, None, or iterable of them, default (2, 3, None)
        The depth or depths to try (``None`` = unlimited).
    methods : str or sequence of str, optional
        Histogram methods of :mod:`packlib.methods` (``"spfhp"``, ``"lpfhp"``, ``"nnls"``,
        ``"optimal"``); default: all of them. A method run by default that refuses the
        input (``ValueError``) gets a row that says why; a method named here raises.
    warmup : bool, default True
        Call each method once on a tiny histogram first, so that the times reported are
        steady-state times, not numba compilation.
    progress : bool or None, default None
        Show a progress bar (needs tqdm) naming the method and depth running; ``None``:
        in a notebook or on a terminal.
    time_limit : float or None, default 5.0
        The limit on each ``"optimal"`` row, in seconds (:func:`packlib.optimal_pack`'s
        ``time_limit``): where it has not closed its gap by then, the row holds its best plan
        so far, its gap to the bound proven so far, and a note saying it stopped. ``None``: no
        limit (``optimal_pack`` alone runs until it proves its plan, which can take tens of
        seconds at long context with a depth limit).

    Returns
    -------
    ComparisonTable
        One :class:`ComparisonRow` per (depth, method), with packs, efficiency, speed-up and
        its limit, the gap to the LP lower bound (when :func:`packlib.lower_bound` is
        available) and time. ``"optimal"`` takes the SPFHP, LPFHP and NNLSHP plans of
        the rows before it instead of making them again (the same plan as alone); its time
        counts theirs, so it is the time it takes alone. Several depths run at once, one
        thread each, where the machine has the cores (the kernels release the GIL); a row's
        time is the CPU time of its method in its thread, which is its wall time alone
        (every histogram packer is single-threaded).

    See Also
    --------
    ComparisonTable.plot : the table as a bar chart.
    packlib.pack : one method by name.

    Examples
    --------
    >>> import packlib
    >>> table = packlib.compare([0, 2, 1, 1, 0, 2], max_sequences_per_pack=2, methods=["spfhp", "optimal"])
    >>> [(row.method, row.packs, row.gap) for row in table]
    [('spfhp', 4, 0), ('optimal', 4, 0)]
    """
    from .packing import _histogram_args

    # checked once here; the packers then run on the checked histogram (docs/design.md, "Validation")
    h, L, _ = _histogram_args(histogram, max_sequence_length, None)
    packers = _as_methods(methods)
    depths = _as_depths(max_sequences_per_pack)
    warm = as_bool(warmup, "warmup")
    limit = as_time_limit(time_limit)
    if progress is None:
        progress = "ipykernel" in sys.modules or bool(getattr(sys.stderr, "isatty", lambda: False)())
    with progress_bar(len(packers) * len(depths) * (2 if warm else 1), "compare", as_bool(progress, "progress"),
                      unit="run") as bar:
        if warm:
            share_first_compile(list(packers), depths[0], L)  # a new machine: two processes compile
            for name in packers:
                for d in depths:
                    _tell(bar, f"compiling {name}, depth {_label(d)}")
                    warm_method(name, d, L)
                    bar.update(1)
        table = ComparisonTable()
        for rows in _each_depth(h, L, depths, packers, methods is not None, bar, limit):
            table.extend(rows)
    return table


def _label(depth) -> str:
    return "unlimited" if depth is None else str(depth)


def _tell(bar, text: str) -> None:
    """Show what runs now beside the bar (tqdm's postfix; nothing without a bar)."""
    if hasattr(bar, "set_postfix_str"):
        bar.set_postfix_str(text)


def _each_depth(h, L, depths, packers, named=True, bar=None, time_limit=None) -> list:
    """The rows of each depth, in order. Depths share nothing, and the kernels release the
    GIL, so on a machine with idle cores the depths run at once, one thread each."""
    threads = min(len(depths), usable_cores())
    if threads <= 1:
        return [_depth_rows(h, L, d, packers, named, bar, time_limit) for d in depths]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(lambda d: _depth_rows(h, L, d, packers, named, bar, time_limit), depths))


def _depth_rows(h, L, d, packers, named=True, bar=None, time_limit=None) -> list:
    """The rows of depth ``d``; with ``named=False`` (the default methods) a method that
    refuses the input gets a row saying why instead of raising."""
    plans, seconds, notes = {}, {}, {}
    for name, method in packers.items():
        if bar is not None:
            _tell(bar, f"{name}, depth {_label(d)}")
        # the time this thread spends: the method's own, whatever runs beside it (the
        # packers are single-threaded, so alone it is their wall time)
        t0 = time.thread_time()
        try:
            if name == "optimal":
                plans[name], reused = _optimal_reusing(h, L, d, plans, seconds, time_limit)
                if plans[name].status == 1:  # stopped by the time limit with a gap left
                    notes[name] = f"stopped at time_limit={time_limit:g} s"
            else:
                plans[name], reused = method._run(h, L, d), 0.0
        except ValueError as err:
            if named:
                raise
            notes[name], reused = f"{name} refused: {err}", 0.0
        seconds[name] = time.thread_time() - t0 + reused
        if bar is not None:
            bar.update(1)
    # a plan that proved its bound to the end (optimal_pack not stopped by its time limit)
    # saves computing it again
    bound = next((p.lower_bound for p in plans.values() if p.lower_bound is not None and p.status == 0), None)
    if bound is None:
        bound = _lower_bound_or_none(h, L, d)
    limit = _speedup_limit(h, L)
    _note_depth_cost(plans, packers, notes)
    return [_row(name, d, plans.get(name), bound, seconds[name], notes.get(name, ""), limit) for name in packers]


def _note_depth_cost(plans, packers, notes) -> None:
    """A note on the first row of a depth whose limit costs its plan a few percent of
    efficiency (:attr:`packlib.PackingPlan.depth_note`): one note a depth, not one a method."""
    for name in packers:
        cost = plans[name]._depth_cost() if name in plans else None
        if cost is not None:
            text = f"{100 * cost[0]:.1f} % padding in packs at the depth limit; unlimited: up to {100 * cost[1]:.2f} %"
            notes[name] = "; ".join(filter(None, [notes.get(name), text]))
            return


def _row(name, d, plan, bound, seconds, note, limit) -> ComparisonRow:
    if plan is None:
        return ComparisonRow(method=name, depth=d, packs=None, efficiency=math.nan, speedup=math.nan,
                             speedup_limit=limit, lower_bound=bound, gap=None, seconds=seconds, note=note)
    return ComparisonRow(method=name, depth=d, packs=plan.num_packs, efficiency=plan.efficiency,
                         speedup=plan.speedup, speedup_limit=plan.speedup_limit, lower_bound=bound,
                         gap=None if bound is None else plan.num_packs - bound, seconds=seconds, note=note)


def _speedup_limit(h, L) -> float:
    """Sequences per pack if packs held ``L`` tokens each: ``n L / tokens``."""
    tokens = float(np.dot(h.astype(np.float64), np.arange(1, h.size + 1)))
    return float(h.sum()) * L / tokens if tokens else math.nan


def _optimal_reusing(h, L, depth, plans, seconds, time_limit=None):
    """``optimal_pack`` on a histogram whose SPFHP / LPFHP / NNLSHP plans this table already
    made: it takes them instead of running those heuristics again. Returns the plan and the
    seconds of the heuristics it took, which count in its time (the time it takes alone)."""
    from .optimal import _optimal

    known = {}
    if depth is None or depth < L:  # the depth the optimal packer runs its heuristics at
        known = {name: (plans[name], seconds[name]) for name in ("spfhp", "lpfhp", "nnls") if name in plans}
    offered = sum(s for _, s in known.values())
    plan = _optimal(h, L, depth, known=known, time_limit=time_limit)
    return plan, offered - sum(s for _, s in known.values())


def _as_methods(methods) -> dict:
    """Registry name -> :class:`~packlib.methods.Method` of each histogram method asked for."""
    if methods is None:
        names = list(_registry.names("histogram"))
    elif isinstance(methods, str):
        names = [methods]
    elif hasattr(methods, "__iter__"):
        names = list(methods)
    else:
        raise TypeError(f"methods must be a method name or a list of them, got {type(methods).__name__}")
    if not names:
        raise ValueError("methods is empty: name at least one of " + ", ".join(_registry.names("histogram")))
    out = {}
    for m in names:
        method = _registry.get(m, kind="histogram")
        out[method.name] = method
    return out


def _as_depths(max_sequences_per_pack) -> list:
    """The distinct depth limits asked for, checked, in order."""
    if max_sequences_per_pack is None or isinstance(max_sequences_per_pack, (int, np.integer)):
        depths = [as_depth(max_sequences_per_pack)]
    elif hasattr(max_sequences_per_pack, "__iter__") and not isinstance(max_sequences_per_pack, (str, bytes)):
        depths = [as_depth(d) for d in max_sequences_per_pack]
    else:
        depths = [as_depth(max_sequences_per_pack)]  # raises the TypeError that explains
    if not depths:
        raise ValueError("max_sequences_per_pack is empty: give a depth, None (unlimited), or a list of them")
    return list(dict.fromkeys(depths))


def _lower_bound_or_none(h, L, depth):
    try:
        from .optimal import _lower_bound
    except ImportError:
        return None
    return int(_lower_bound(h, L, depth).bound)


ComparisonTable.__module__ = "packlib"  # pickles and reprs name the public path, which never moves
