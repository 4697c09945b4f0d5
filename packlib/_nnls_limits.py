"""How :func:`packlib.nnls_pack` scales with the pack capacity ``L``.

NNLSHP's active-set solver prices one strategy per step with a dynamic programme over
(sequences, tokens), ``O(D * L**2)`` per step, keeps a dense Cholesky factor of up to ``L``
active strategies and needs a number of steps that grows with ``L``: its run time grows
about as ``L**3`` and its scratch as ``L**2``. Up to :data:`MAX_NNLS_LENGTH` it runs on the
lengths themselves. Above, it runs on :data:`NNLS_CLASSES` or fewer *length classes* of
``q`` tokens each (:func:`length_classes`), so its solve's time and memory stay those of a
``768``-token histogram at every ``L`` (the repair then runs LPFHP on the lengths). The
optimal packer runs NNLSHP as one of its heuristics only where :func:`nnls_fits`.
"""
from __future__ import annotations

MAX_NNLS_LENGTH = 2048
NNLS_CLASSES = 768


def nnls_fits(L: int) -> bool:
    """Whether NNLSHP runs on the lengths themselves (not on length classes) at capacity ``L``."""
    return int(L) <= MAX_NNLS_LENGTH


def length_classes(L: int) -> tuple[int, int]:
    """``(q, G)``: NNLSHP at capacity ``L`` packs ``G = L // q`` classes of ``q`` tokens;
    ``(1, L)`` up to :data:`MAX_NNLS_LENGTH`, else ``q = ceil(L / NNLS_CLASSES)``.

    >>> length_classes(2048), length_classes(131072)
    ((1, 2048), (171, 766))
    """
    L = int(L)
    if nnls_fits(L):
        return 1, L
    q = -(-L // NNLS_CLASSES)
    return q, L // q
