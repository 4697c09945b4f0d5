"""The one private name of transformers the packing check reads: the attention implementation
a model runs, ``config._attn_implementation`` (transformers sets it when the model is built or
``set_attn_implementation`` is called; no public attribute holds it)."""
from __future__ import annotations


def attn_implementation(model) -> str | None:
    """``"sdpa"``, ``"eager"``, ``"flash_attention_2"``, ... of ``model``, or ``None``."""
    value = getattr(getattr(model, "config", None), "_attn_implementation", None)
    return None if value is None else str(value)
