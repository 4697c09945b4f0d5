"""torch, imported when first needed (``import packlib.torch`` needs no torch)."""
from __future__ import annotations


def require_torch():
    """The ``torch`` module (with ``torch.utils.data``), or an ``ImportError`` saying how to
    install it."""
    try:
        import torch
        import torch.utils.data  # noqa: F401  (the submodule DataLoader lives in)
    except ImportError as e:  # torch missing or broken
        raise ImportError(
            "packlib.torch needs PyTorch: pip install torch (or pip install packlib[torch])"
        ) from e
    return torch
