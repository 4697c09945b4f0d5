"""How :func:`packlib.nnls_pack` scales with the pack capacity ``L``.

NNLSHP's active-set solver prices one strategy per step with a dynamic programme over
(sequences, tokens), ``O(D * L**2)`` per step, keeps a dense Cholesky factor of up to ``L``
active strategies and needs a number of steps that grows with ``L``: its run time grows
about as ``L**3`` and its scratch as ``L**2``, whatever the number of distinct lengths (the
padding slots range over every length). Up to :data:`FAST_NNLS_LENGTH` it runs on the
lengths themselves. Above, by default, it runs on :data:`NNLS_CLASSES` or fewer *length
classes* of ``q`` tokens each (:func:`length_classes`), so its solve's time and memory stay
those of a ``768``-token histogram at every ``L`` (the repair then runs LPFHP on the
lengths). Asked for the exact recipe (``exact=True``), it runs on the lengths up to
:data:`MAX_NNLS_LENGTH`. The optimal packer runs NNLSHP as one of its heuristics only where
:func:`nnls_fits`.
"""
from __future__ import annotations

#: The largest ``L`` at which the recipe runs on the lengths themselves when asked (``exact=True``).
MAX_NNLS_LENGTH = 2048
#: The largest ``L`` at which it does so by default; above, it runs on length classes.
FAST_NNLS_LENGTH = 768
#: The most length classes.
NNLS_CLASSES = 768


def nnls_fits(L: int) -> bool:
    """Whether NNLSHP can run on the lengths themselves (``exact=True``) at capacity ``L``."""
    return int(L) <= MAX_NNLS_LENGTH


def length_classes(L: int, exact: bool = False) -> tuple[int, int]:
    """``(q, G)``: NNLSHP at capacity ``L`` packs ``G = L // q`` classes of ``q`` tokens;
    ``(1, L)`` up to :data:`FAST_NNLS_LENGTH` (with ``exact``, every ``L``). Above, ``q`` is
    the width from ``q0 = ceil(L / NNLS_CLASSES)`` to ``2 q0`` that loses the fewest tokens
    of a pack: the ``L mod q`` that ``G`` classes leave unused, plus half a class (a
    sequence's mean rounding) for each width above one (``(L mod q) + (q - 1) / 2``, the
    narrowest of equals).

    >>> length_classes(768), length_classes(2048), length_classes(2048, exact=True), length_classes(131072)
    ((1, 768), (4, 512), (1, 2048), (172, 762))
    """
    L = int(L)
    if exact or L <= FAST_NNLS_LENGTH:
        return 1, L
    q0 = -(-L // NNLS_CLASSES)
    q = min(range(q0, 2 * q0 + 1), key=lambda w: (2 * (L % w) + w - 1, w))
    return q, L // q
