"""The 4-D block-diagonal causal mask of one packed row."""
from __future__ import annotations

from ..._validate import as_int_array
from .._lazy import require_torch


def block_causal_mask(lengths, *, dtype=None):
    """The 4-D attention mask of one packed row: causal inside each sequence, nothing across.

    Shape ``(1, 1, T, T)`` for ``T = sum(lengths)``, additive as Hugging Face's eager and sdpa
    attention take a ready 4-D mask: 0 where a query may attend, the dtype's most negative
    value elsewhere. It costs ``T² × itemsize`` bytes (256 MiB at ``T = 8192`` in float32):
    prefer ``position_ids`` with ``use_cache=False``, or flash-attention's ``cu_seq_lens``,
    where the model supports them.

    Parameters
    ----------
    lengths : 1-D int array
        The sequences' lengths (>= 1), in row order.
    dtype : torch.dtype, optional
        Floating dtype of the mask (default ``torch.float32``); give the model's dtype for
        sdpa, which refuses a mask of another floating dtype.
    """
    torch = require_torch()
    lens = as_int_array(lengths, "lengths", allow_empty=False, minimum=1)
    dtype = mask_dtype(dtype)
    low = torch.finfo(dtype).min
    total = int(lens.sum())
    mask = torch.full((total, total), low, dtype=dtype)
    start = 0
    for n in lens.tolist():  # each sequence's diagonal block: causal (0 on and below the diagonal)
        mask[start:start + n, start:start + n] = torch.full((n, n), low, dtype=dtype).triu_(1)
        start += n
    return mask[None, None]


def mask_dtype(dtype):
    """The floating dtype of an additive mask (``None``: float32), or a ``TypeError``."""
    torch = require_torch()
    dtype = torch.float32 if dtype is None else dtype
    if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise TypeError(f"dtype must be a floating torch.dtype such as torch.float32, got {dtype!r}")
    return dtype


def additive_mask(allowed, dtype):
    """The ``(1, 1, T, T)`` additive mask of a ``(T, T)`` bool tensor of allowed pairs: 0 where
    a query may attend, ``dtype``'s most negative value elsewhere."""
    torch = require_torch()
    mask = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[None, None]
