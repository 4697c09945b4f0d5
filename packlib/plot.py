"""Plots for notebooks and reports (the ``plot`` extra: ``pip install 'packlib[plot]'``).

Every function draws on the given matplotlib ``Axes`` (or a new figure's) and returns that
``Axes``, one type everywhere, so plots compose with the rest of a user's figure
(``ax.figure.savefig(path)`` saves it). A new figure uses matplotlib's ``"constrained"``
layout, so no label is clipped when it is saved without ``bbox_inches="tight"``; axes that
count (ranks, steps) have integer ticks. matplotlib is imported only here, and only when a
function is called.

>>> import matplotlib
>>> matplotlib.use("Agg")
>>> import packlib
>>> ax = packlib.plot.histogram(packlib.datasets.wikipedia_512(), log=True)
>>> ax.get_xlabel(), ax.get_ylabel()
('sequence length (tokens)', 'count')
"""
from __future__ import annotations

import numpy as np

__all__ = ["histogram", "plan", "strategies", "compare", "schedule"]


def _pyplot():
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError("plotting needs matplotlib: pip install 'packlib[plot]'") from None
    return plt


def _axes(ax, ncols: int = 1, figsize=(8, 4)):
    """``ax``, or a new figure's Axes (a list of ``ncols`` when ``ncols > 1``), laid out by
    matplotlib's constrained layout so that saving clips no label."""
    if ax is not None:
        return ax
    _, axes = _pyplot().subplots(1, ncols, figsize=figsize, layout="constrained", squeeze=False)
    return axes[0, 0] if ncols == 1 else list(axes[0])


def _integer_ticks(axis):
    """Ticks at whole numbers only (an axis that counts ranks or steps)."""
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))


def _auto_log(values, log):
    """``log=None``: a log scale when the largest bar would flatten the rest (> 20x the median)."""
    if log is not None:
        return log
    nz = np.asarray(values, dtype=float)
    nz = nz[nz > 0]
    return bool(nz.size) and nz.max() > 20 * np.median(nz)


def _bars(ax, counts, **kwargs):
    """Bars of width 1 at 1, 2, ..., as one filled step outline: one artist whatever the
    number of lengths (``ax.bar`` draws one rectangle per length: minutes at L = 131,072).
    What ``ax.stairs`` draws, with its data limits given: ``stairs`` (``add_patch``) finds
    them by walking the outline's segments one by one in Python, slow at long context."""
    from matplotlib.patches import StepPatch

    edges = np.arange(0.5, len(counts) + 1.0)
    patch = StepPatch(counts, edges, fill=True, linewidth=0, **kwargs)
    ax.add_artist(patch)
    patch.sticky_edges.y.append(0)  # the bars stand on 0, as stairs' baseline does
    values = np.asarray(counts, dtype=float)
    positive = values[values > 0]
    ys = [0.0, *((positive.min(), positive.max()) if positive.size else ())]  # the least: a log axis's floor
    ax.update_datalim([(x, y) for x in (edges[0], edges[-1]) for y in ys])
    ax.autoscale_view()
    return patch


def histogram(histogram, ax=None, *, label: str = "sequences", log: bool | None = None):
    """Bar plot of a length histogram (``histogram[i]`` = count of length ``i + 1``).

    Parameters
    ----------
    histogram : array_like of int
    ax : matplotlib Axes, optional
        Where to draw; a new figure's Axes by default.
    label : str, default "sequences"
        Legend label.
    log : bool or None, default None
        Log scale; ``None`` decides from the data (see below).

    Returns
    -------
    matplotlib Axes

    ``log=None`` picks a log scale when one length dominates (as length 512 does on
    Wikipedia, where long documents are cut to the max length).

    See Also
    --------
    plan : the lengths next to the packs a plan makes of them.
    """
    from ._validate import as_histogram

    h = as_histogram(histogram)
    ax = _axes(ax)
    _bars(ax, h, label=label, alpha=0.8)
    ax.set_xlabel("sequence length (tokens)")
    ax.set_ylabel("count")
    ax.set_xlim(0, h.size + 1)
    if _auto_log(h, log):
        ax.set_yscale("log")
    ax.set_title(f"{int(h.sum()):,} sequences, max length {h.size}")
    return ax


def plan(plan, ax=None, *, log: bool | None = None):
    """The plan's input lengths next to the tokens per pack it produces.

    Parameters
    ----------
    plan : PackingPlan
    ax : matplotlib Axes, optional
    log : bool or None, default None
        As for :func:`histogram`.

    Returns
    -------
    matplotlib Axes

    Unpacked, every sequence is padded to ``L``; packed, the lines on the right show how
    full the packs are (a perfect packing is a single line at ``L``, drawn as wide at any
    ``L``).

    See Also
    --------
    histogram : the lengths alone.
    strategies : the packs the plan uses most.
    packlib.PackingPlan.plot : the same, as a method.
    """
    ax = _axes(ax)
    h = plan.histogram()
    L = plan.max_sequence_length
    fill = plan.strategy_tokens()
    packed = np.bincount(fill - 1, weights=plan.counts, minlength=L)[:L] if plan.num_strategies else np.zeros(L)
    _bars(ax, h, alpha=0.6, label=f"sequence lengths ({plan.num_sequences:,})")
    # tokens per pack as lines of a fixed width in points, not bars one token wide: near
    # 100 % efficiency nearly every pack is at L, one bar a pixel cannot show
    at = np.flatnonzero(packed)
    ax.vlines(at + 1, 0, packed[at], colors="C1", linewidth=2.5, zorder=3,
              label=f"tokens per pack ({plan.num_packs:,} packs)")
    ax.set_xlabel("tokens")
    ax.set_ylabel("count")
    ax.set_xlim(0, L + 1)
    if _auto_log(np.concatenate([h, packed]), log):
        ax.set_yscale("log")
    depth = "unlimited" if plan.max_sequences_per_pack is None else plan.max_sequences_per_pack
    ax.set_title(f"{plan.method or 'plan'} (max {depth} per pack): {100 * plan.efficiency:.3f} % efficiency")
    ax.legend(loc="upper left")
    return ax


def strategies(plan, ax=None, *, top: int = 15, log: bool | None = None):
    """Horizontal bars of the ``top`` most used strategies and their pack counts.

    Parameters
    ----------
    plan : PackingPlan
    ax : matplotlib Axes, optional
    top : int, default 15
    log : bool or None, default None
        As for :func:`histogram`.

    Returns
    -------
    matplotlib Axes

    See Also
    --------
    plan : the tokens per pack of the whole plan.
    """
    ax = _axes(ax)
    items = plan.top_strategies(top)[::-1]
    labels = ["+".join(map(str, lengths)) for lengths, _ in items]
    counts = [c for _, c in items]
    ax.barh(np.arange(len(items)), counts)
    if _auto_log(counts, log):
        from matplotlib.ticker import LogLocator, NullFormatter

        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(base=10))
        ax.xaxis.set_minor_formatter(NullFormatter())  # labelled minor ticks overlap on a short range
    ax.set_yticks(np.arange(len(items)), labels)
    ax.set_xlabel("packs")
    ax.set_title(f"top {len(items)} of {plan.num_strategies:,} strategies")
    return ax


def compare(table, ax=None):
    """Efficiency by method, grouped by depth, from :func:`packlib.compare`'s table.

    Parameters
    ----------
    table : ComparisonTable
    ax : matplotlib Axes, optional

    Returns
    -------
    matplotlib Axes

    A method that refused the input (its row's efficiency is nan) has no bar.

    See Also
    --------
    packlib.compare : the table.
    packlib.ComparisonTable.plot : the same, as a method (``packlib.compare(h).plot()``).
    """
    ax = _axes(ax)
    methods = list(dict.fromkeys(r.method for r in table))
    depths = list(dict.fromkeys(r.depth for r in table))
    width = 0.8 / max(len(methods), 1)
    lookup = {(r.method, r.depth): r for r in table}
    for k, m in enumerate(methods):
        values = [100 * lookup[(m, d)].efficiency if (m, d) in lookup else np.nan for d in depths]
        ax.bar(np.arange(len(depths)) + k * width, values, width=width, label=m)
    ax.set_xticks(np.arange(len(depths)) + width * (len(methods) - 1) / 2,
                  ["unlimited" if d is None else f"depth {d}" for d in depths])
    finite = [100 * r.efficiency for r in table if np.isfinite(r.efficiency)]  # not a refusal's nan
    if finite:
        ax.set_ylim(max(0.0, min(finite) - 2), 100.5)
    ax.set_ylabel("efficiency (%)")
    ax.legend()
    ax.set_title("packing efficiency by method and depth")
    return ax


def schedule(schedule, baseline=None, ax=None, *, steps: int = 200):
    """How busy each rank is at each step: ``cost / the step's largest rank cost`` as an
    image (1.0: the rank sets the step's time; lower: it waits), for the first ``steps``
    steps; with ``baseline`` (e.g. :func:`packlib.round_robin` of the same lengths), the
    two side by side, each titled with its balance.

    Parameters
    ----------
    schedule : Schedule
    baseline : Schedule, optional
    ax : matplotlib Axes, or a pair of them with ``baseline``, optional
    steps : int, default 200

    Returns
    -------
    matplotlib Axes
        The ``schedule``'s; with ``baseline``, the baseline's is beside it in the same
        figure (``ax.figure.axes``).

    See Also
    --------
    packlib.Schedule.plot : the same, as a method.
    """
    from ._validate import as_positive_int

    steps = as_positive_int(steps, "steps")
    shown = [schedule] if baseline is None else [baseline, schedule]
    if ax is None:
        axes = _axes(None, len(shown), figsize=(5 * len(shown) + 1, 4))
        axes = axes if baseline is not None else [axes]
    else:
        axes = list(ax) if baseline is not None else [ax]
    titles = ["packlib.balance"] if baseline is None else ["packs dealt round-robin", "packlib.balance"]
    image = None
    for a, s, title in zip(axes, shown, titles):
        c = np.asarray(s.cost[:steps], dtype=float)
        worst = c.max(axis=1, keepdims=True)
        busy = np.divide(c, worst, out=np.ones_like(c), where=worst > 0)
        image = a.imshow(busy.T, aspect="auto", cmap="viridis", vmin=0.0, vmax=1.0, interpolation="nearest")
        _integer_ticks(a.xaxis)
        _integer_ticks(a.yaxis)
        a.set_xlabel("step")
        a.set_ylabel("rank")
        a.set_title(f"{title}: balance {s.balance:.3f}")
    axes[-1].figure.colorbar(image, ax=axes, label="cost / step's slowest rank")
    return axes[-1]
