"""How large a histogram :func:`packlib.nnls_pack` accepts.

NNLSHP's active-set solver prices one strategy per step with a dynamic programme over
(sequences, tokens), ``O(D * L**2)`` per step, and needs a number of steps that grows with
``L``: its run time grows about as ``L**3`` (``docs/guide.md`` has measured figures) and
its scratch as ``L**2``. Above
:data:`MAX_NNLS_LENGTH` it would run for minutes, so it refuses and says what to use
instead: :func:`packlib.optimal_pack` (near-optimal, with a proven bound), LPFHP (a
histogram heuristic) or BFD (per sequence).
"""
from __future__ import annotations

MAX_NNLS_LENGTH = 2048


def nnls_fits(L: int) -> bool:
    """Whether NNLSHP stays fast at capacity ``L``."""
    return int(L) <= MAX_NNLS_LENGTH


def check_nnls_size(h, L: int, depth) -> None:
    """Raise ``ValueError`` if NNLSHP would take minutes on this input (``L`` above
    :data:`MAX_NNLS_LENGTH`); ``h`` and ``depth`` are the validated histogram and depth
    (``None``: unlimited), accepted for future cost models."""
    if not nnls_fits(L):
        raise ValueError(
            f"nnls_pack is limited to max_sequence_length <= {MAX_NNLS_LENGTH} (its cost grows as L**3: "
            f"minutes at L = {int(L):,}); use method 'optimal' (optimal_pack: near-optimal with a proven "
            f"bound, fast at long context), 'lpfhp' (lpfhp_pack) or, per sequence, 'bfd' (bfd_pack)"
        )
