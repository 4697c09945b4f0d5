"""The attention implementation a model runs, as the packing check reports it (read through
packlib/_compat.py, the one module that reads transformers' private names)."""
from __future__ import annotations

from ..._compat import attn_implementation as _attn_implementation


def attn_implementation(model) -> str | None:
    """``"sdpa"``, ``"eager"``, ``"flash_attention_2"``, ... of ``model``, or ``None``."""
    return _attn_implementation(model) or None
