"""The one registry of packing methods, and :func:`pack`, which packs lengths with any of them.

Every place that takes a method by name (:func:`packlib.compare`, the command line, the
format adapters, the pipeline, :func:`packlib.optimal_pack`'s heuristics) looks it up here,
so a name means the same packer everywhere, and ``plan.method`` is always a name this
registry accepts.

>>> import packlib
>>> packlib.methods.names()
('spfhp', 'lpfhp', 'nnls', 'optimal', 'ffd', 'bfd')
>>> packlib.methods.get("nnlshp").name          # the paper's spelling is an alias
'nnls'
>>> packs = packlib.pack([5, 3, 2, 4, 1], 6, method="bfd")
>>> packs.to_list()
[[0, 4], [3, 2], [1]]
"""
from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import Callable

from ._names import ALIASES, NAMES

__all__ = ["Method", "get", "names", "pack"]



@dataclass(frozen=True)
class Method:
    """One packing method.

    Attributes
    ----------
    name : str
        The registry name (what ``plan.method`` holds).
    kind : str
        ``"histogram"``: packs a length histogram into a :class:`~packlib.PackingPlan`
        (``packer(histogram, max_sequence_length=None, max_sequences_per_pack=3)``);
        ``"sequence"``: packs a list of lengths into :class:`~packlib.Packs`
        (``packer(lengths, max_sequence_length, max_sequences_per_pack=None)``).
    summary : str
        One line for tables and ``--help``.
    default_depth : int or None
        The depth limit its function takes by default, and :func:`pack` with it: the paper's
        3 for the histogram methods (NNLSHP's work grows with the depth, and BERT-style
        attention's cost with sequences per row), unlimited for the per-sequence ones.
    """

    name: str
    kind: str
    summary: str
    _module: str
    _function: str
    _checked: str

    @property
    def default_depth(self) -> int | None:
        return 3 if self.kind == "histogram" else None

    @property
    def function(self) -> Callable:
        """The public packing function."""
        return getattr(import_module(f".{self._module}", __package__), self._function)

    @property
    def _run(self) -> Callable:
        # the packer's body behind its checks, for callers that checked the arguments once
        # already: histogram methods (h, L, depth) -> PackingPlan, sequence methods
        # (lengths, L, depth) -> Packs (docs/design.md, "Validation")
        return getattr(import_module(f".{self._module}", __package__), self._checked)


_METHODS = {
    m.name: m
    for m in (
        Method("spfhp", "histogram", "shortest-pack-first histogram packing (Krell et al., 2021)", "packing", "spfhp_pack", "_spfhp"),
        Method("lpfhp", "histogram", "longest-pack-first histogram packing (Krell et al., 2021)", "packing", "lpfhp_pack", "_lpfhp"),
        Method("nnls", "histogram", "non-negative least-squares histogram packing (NNLSHP)", "packing", "nnls_pack", "_nnls"),
        Method("optimal", "histogram", "near-optimal histogram packing with a proven lower bound", "optimal", "optimal_pack", "_optimal"),
        Method("ffd", "sequence", "first-fit decreasing, per sequence", "packing", "ffd_pack", "_ffd"),
        Method("bfd", "sequence", "best-fit decreasing, per sequence", "packing", "bfd_pack", "_bfd"),
    )
}
assert tuple(_METHODS) == NAMES, "the registry and packlib._names list the same methods"


def names(kind: str | None = None) -> tuple[str, ...]:
    """Registry names.

    Parameters
    ----------
    kind : str, optional
        ``"histogram"`` or ``"sequence"``: only the methods of that kind.
    """
    if kind is not None and kind not in ("histogram", "sequence"):
        raise ValueError(f"kind must be 'histogram', 'sequence' or None, got {kind!r}")
    return tuple(n for n, m in _METHODS.items() if kind is None or m.kind == kind)


def get(name, *, kind: str | None = None) -> Method:
    """The :class:`Method` called ``name`` (or one of its aliases).

    Parameters
    ----------
    name : str
        A name from :func:`names` (any case), or an alias (``"nnlshp"``).
    kind : str, optional
        Accept only a method of this kind.

    Notes
    -----
    Raises ``TypeError`` if ``name`` is not a string, ``ValueError`` if no method (of the
    requested ``kind``) has that name, listing the names there are.
    """
    if not isinstance(name, str):
        raise TypeError(f"method must be a method name (str), got {type(name).__name__} {name!r}; "
                        f"choose from {', '.join(names(kind))}")
    method = _METHODS.get(ALIASES.get(name.lower(), name.lower()))
    if method is None or (kind is not None and method.kind != kind):
        what = "method" if kind is None else f"{kind} method"
        raise ValueError(f"unknown {what} {name!r}; choose from {', '.join(names(kind))}")
    return method


def pack(lengths, max_sequence_length, max_sequences_per_pack="default", *, method: str = "bfd", seed: int = 0):
    """Pack sequences of the given lengths with any registered method; returns :class:`~packlib.Packs`.

    Sequence methods (``"bfd"``, ``"ffd"``) pack the lengths directly. Histogram methods
    (``"nnls"``, ``"optimal"``, ``"lpfhp"``, ``"spfhp"``) pack their histogram into a plan,
    which is then assigned sample ids (:meth:`~packlib.PackingPlan.assign`, from ``seed``):
    the plan the method's own function makes, ``packlib.nnls_pack(packlib.histogram(lengths,
    L))`` for ``"nnls"``, its depth included. Either way the same lengths, arguments and seed
    give the same packs.

    Parameters
    ----------
    lengths, max_sequence_length
        As for :func:`packlib.ffd_pack`.
    max_sequences_per_pack : int, None or "default", default "default"
        Depth limit; ``None`` for unlimited; ``"default"``: the method's own
        (:attr:`Method.default_depth`): 3 for the histogram methods, as ``nnls_pack`` and the
        others (the paper's), unlimited for ``"bfd"`` and ``"ffd"``. Where the default depth
        costs the packs a few percent of efficiency, a ``UserWarning`` says so and names
        ``max_sequences_per_pack=None``.
    method : str, default "bfd"
        A name from :func:`names`.
    seed : int, default 0
        Which equal-length sample goes to which pack (histogram methods only).

    Returns
    -------
    Packs

    See Also
    --------
    packlib.compare : every method side by side on a histogram.

    Examples
    --------
    >>> import packlib
    >>> packlib.pack([5, 3, 2, 4, 1], 6, 2, method="lpfhp").pack_sizes.tolist()
    [2, 2, 1]
    """
    from ._validate import as_depth, as_lengths, as_positive_int, as_seed

    m = get(method)
    L = as_positive_int(max_sequence_length, "max_sequence_length")
    default = isinstance(max_sequences_per_pack, str) and max_sequences_per_pack == "default"
    depth = m.default_depth if default else as_depth(max_sequences_per_pack)
    return _pack(as_lengths(lengths, L), L, depth, m, as_seed(seed), warn_depth=default)


def _pack(lengths, max_sequence_length: int, max_sequences_per_pack, method: Method, seed: int, *,
          warn_depth: bool = False):
    """:func:`pack` of arguments already checked (int64 lengths in ``[1, L]``, a
    :class:`Method`, a seed in ``[0, 2**64)``): what adapters call after their one check.
    ``warn_depth``: the depth is the method's default, and a warning says where it costs."""
    from ._histogram import MAX_HISTOGRAM_LENGTH, _histogram
    from ._validate import as_positive_int

    L, depth = max_sequence_length, max_sequences_per_pack
    if method.kind == "sequence":
        return method._run(lengths, L, depth)
    as_positive_int(L, "max_sequence_length", maximum=MAX_HISTOGRAM_LENGTH,
                    hint=f"the {method.name} method packs a histogram, one count per length; use method='bfd' or 'ffd'")
    plan = method._run(_histogram(lengths, L), L, depth)
    if warn_depth and plan.depth_note:
        import warnings

        warnings.warn(f"pack(method={method.name!r}) packs at most {depth} sequences a pack by default (the "
                      f"paper's, as {method.name}_pack): {plan.depth_note}", UserWarning, stacklevel=3)
    return plan._assign(lengths, seed)
