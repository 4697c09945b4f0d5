"""Certified bounds: dual prices rounded to integers and checked exactly, and the simple bounds."""
from __future__ import annotations

from fractions import Fraction
from operator import mul

import numpy as np

from ._results import Certificate, _certificate

_MAX_DENOMINATOR = 2**40


def _certify(y: np.ndarray, h: np.ndarray, L: int, depth: int | None) -> Certificate | None:
    """A :class:`Certificate` from prices ``y`` (float, one per length ``1..L``): the
    prices are scaled and rounded down to integers whose best pack is worth at most
    ``2**40``, and that best pack is computed exactly (integer DP); it is the denominator."""
    from .._kernels.optimal import max_pack_value

    lens = np.flatnonzero(h) + 1
    y = np.clip(np.nan_to_num(np.asarray(y, dtype=np.float64)[lens - 1]), 0.0, None)
    if not lens.size or not (y > 0).any():
        return None
    D = 0 if depth is None or depth >= L // int(lens[0]) else depth
    v = float(max_pack_value(lens, y, L, D))
    scale = _MAX_DENOMINATOR / v * (1.0 - 1e-9)
    while True:
        yi = np.floor(y * scale).astype(np.int64)
        vi = int(max_pack_value(lens, yi, L, D))
        if 0 < vi <= _MAX_DENOMINATOR or vi == 0:
            break
        scale *= 0.5  # pragma: no cover - float max off by more than the margin
    if vi == 0:
        return None
    return _certificate(lens, h[lens - 1], yi, vi, L, depth)


def _simple_certificates(h: np.ndarray, L: int, depth: int | None) -> list[Certificate]:
    """Certificates of the three simple bounds (each is a dual solution of the LP):
    price = length over ``L`` (tokens); 1 per sequence longer than ``L / 2``;
    1 per sequence over ``depth``."""
    lens = np.flatnonzero(h) + 1
    if not lens.size:
        return []
    counts = h[lens - 1]
    out = [_certificate(lens, counts, lens, L, L, depth)]
    large = (2 * lens > L).astype(np.int64)
    if large.any():
        out.append(_certificate(lens, counts, large, 1, L, depth))
    if depth is not None:
        out.append(_certificate(lens, counts, np.ones(lens.size, np.int64), depth, L, depth))
    return out


def _l2_certificate(h: np.ndarray, L: int, depth: int | None):
    """The best certificate of the Martello-Toth L2 family: for a threshold ``k <= L/2``,
    a sequence longer than ``L - k`` is priced ``L`` (only sequences shorter than ``k``
    fit beside it, and they are priced 0), one of length ``k..L-k`` its length, a
    shorter one 0; the denominator is ``L``. Any pack is worth at most ``L``: either it
    holds a long sequence and nothing else priced, or its priced lengths add up to at most
    ``L``. ``k`` maximises ``long sequences * L + tokens in k..L-k``, in ``O(L)``.
    Returns ``(certificate, k)`` or ``(None, 0)``."""
    if not h.any() or L < 2:
        return None, 0
    lengths = np.arange(1, L + 1, dtype=np.int64)
    tok = np.concatenate([[0], np.cumsum(h * lengths)])  # tok[j]: tokens of lengths <= j
    cnt = np.concatenate([[0], np.cumsum(h)])
    k = np.arange(1, L // 2 + 1)
    value = (cnt[L] - cnt[L - k]) * L + (tok[L - k] - tok[k - 1])  # exact: < 2**63 for real inputs
    best = int(k[int(np.argmax(value))])
    lens = np.flatnonzero(h) + 1
    prices = np.where(lens > L - best, L, np.where(lens >= best, lens, 0)).astype(np.int64)
    return _certificate(lens, h[lens - 1], prices, L, L, depth), best


def _verified(cert: Certificate | None) -> Certificate | None:
    """``cert`` if an exact check proves every pack worth at most its denominator (without
    the depth limit, which can only lower a pack's worth), else None."""
    from .._kernels.optimal import pack_value_at_most

    if cert is None:
        return None
    L, den = cert.max_sequence_length, cert.denominator
    dear = np.array([int(p) * L > den * int(l) for p, l in zip(cert.prices.tolist(), cert.lengths.tolist())], dtype=np.bool_)
    ok = pack_value_at_most(cert.lengths, cert.prices, dear, L, np.int64(den))
    return cert if ok else None


def _best_certificate(certs):
    """The certificate proving the highest fraction ``sum(counts*prices)/denominator``."""
    certs = [c for c in certs if c is not None]
    if not certs:
        return None

    def value(c):
        return Fraction(sum(map(mul, c.counts.tolist(), c.prices.tolist())), c.denominator)  # exact: Python ints

    return max(certs, key=value)


def _simple_bounds(h: np.ndarray, L: int, depth: int | None) -> tuple[int, int, int]:
    lengths = np.arange(1, L + 1, dtype=np.int64)
    tokens = int((h * lengths).sum())
    n = int(h.sum())
    trivial = -(-tokens // L)
    large = int(h[lengths * 2 > L].sum())
    card = -(-n // depth) if depth is not None else 0
    return trivial, large, card
