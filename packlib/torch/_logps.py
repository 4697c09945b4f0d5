"""Per-sequence log-probabilities of a packed row, from the model's logits, exactly and in
chunks: :func:`sequence_logps`."""
from __future__ import annotations

from collections.abc import Mapping

from ._lazy import require_torch

__all__ = ["sequence_logps"]

#: float32 elements of one chunk's ``(tokens, vocab)`` block (64 MiB)
CHUNK_ELEMENTS = 2**24


def _targets(batch, T: int):
    """``(src, tok, seq, n)``: for every counted token, the row position whose logits predict
    it, its id, its sequence's output index; and the number of sequences."""
    torch = require_torch()
    if not isinstance(batch, Mapping):
        raise TypeError(f"batch must be the dict PackedCollator returned, got {type(batch).__name__}")
    if "prev_index" in batch:  # pairs or groups
        for key in ("input_ids", "completion_mask", "sequence_ids"):
            if key not in batch:
                raise ValueError(f"batch has 'prev_index' but no {key!r}: give sequence_logps the whole batch "
                                 "PackedCollator returned for pairs or groups")
        ids, prev = batch["input_ids"].reshape(-1), batch["prev_index"].reshape(-1)
        sid = batch["sequence_ids"].reshape(-1)
        sel = (batch["completion_mask"].reshape(-1) != 0) & (prev >= 0)
        _check_length(ids.numel(), T)
        return prev[sel], ids[sel], sid[sel], int(sid.max()) + 1
    if "labels" not in batch or "position_ids" not in batch:
        raise ValueError("sequence_logps needs a batch from PackedCollator: pairs or groups (with 'prev_index', "
                         "'sequence_ids', 'completion_mask') or packed sequences (with 'labels' and 'position_ids'); "
                         f"got keys {sorted(map(str, batch))}")
    labels, pos = batch["labels"].reshape(-1), batch["position_ids"].reshape(-1)
    _check_length(labels.numel(), T)
    starts = pos == 0
    if not bool(starts[0]):
        raise ValueError("batch['position_ids'] does not start at 0: sequence_logps reads each sequence's start "
                         "from position_ids restarting at 0, as PackedCollator writes them")
    sel = labels != -100
    if bool((sel & starts).any()):
        i = int(torch.nonzero(sel & starts)[0, 0])
        raise ValueError(f"batch['labels'] at position {i}, a sequence's first token, is not -100: it would be "
                         "predicted from the previous sequence's last token; set each sequence's first label to "
                         "-100 (PackedCollator does)")
    seq = torch.cumsum(starts.to(torch.int64), 0) - 1
    where = torch.nonzero(sel).reshape(-1)
    return where - 1, labels[where], seq[where], int(starts.sum())


def _check_length(n: int, T: int) -> None:
    if n != T:
        raise ValueError(f"the logits hold {T} positions but the batch {n} tokens: give the logits of this batch's "
                         "row (shape (1, T, vocab))")


def _chunks(n: int, vocab: int, chunk_size):
    step = max(1, CHUNK_ELEMENTS // max(1, vocab)) if chunk_size is None else chunk_size
    return [(i, min(n, i + step)) for i in range(0, n, step)]


def _token_logps_function():
    torch = require_torch()

    class TokenLogps(torch.autograd.Function):
        """``log_softmax(logits[src])[tok]`` per counted token, chunk by chunk in float32;
        the backward recomputes each chunk's softmax instead of keeping it."""

        @staticmethod
        def forward(ctx, logits, src, tok, spans):
            out = torch.empty(src.numel(), dtype=torch.float32, device=logits.device)
            for a, b in spans:
                x = logits.index_select(0, src[a:b]).float()
                out[a:b] = x.gather(1, tok[a:b, None]).squeeze(1) - torch.logsumexp(x, dim=-1)
            ctx.save_for_backward(logits, src, tok)
            ctx.spans = spans
            return out

        @staticmethod
        def backward(ctx, grad_out):
            logits, src, tok = ctx.saved_tensors
            grad = torch.zeros_like(logits)
            for a, b in ctx.spans:
                g = grad_out[a:b].float()
                p = torch.softmax(logits.index_select(0, src[a:b]).float(), dim=-1).mul_(-g[:, None])
                p.scatter_add_(1, tok[a:b, None], g[:, None])
                grad.index_add_(0, src[a:b], p.to(grad.dtype))
            return grad, None, None, None

    return TokenLogps


def sequence_logps(logits, batch, *, chunk_size: int | None = None):
    """Each sequence's summed completion log-probabilities, in TRL's order.

    For a row of pairs from :class:`PackedCollator`: ``2B`` values, the ``B`` chosen then the
    ``B`` rejected (``.chunk(2)`` splits them as ``DPOTrainer`` does); for groups, group-major
    (completion ``j`` of group ``g`` at ``g * k + j``); for packed sequences (``labels``), one
    value per sequence, summing its labelled tokens. Token ``t``'s log-probability is read
    from the logits of the position that predicts it (``t - 1`` in its own sequence; the
    prompt's last token for a completion's first token when the prompt is shared), as
    ``log_softmax`` in float32; sums accumulate in float64 and come back as float32.

    Memory: the log-softmax is computed ``chunk_size`` tokens at a time (default: as many as
    keep a chunk's float32 ``(tokens, vocab)`` block to 64 MiB), never for the whole row; the
    peak beyond the logits is about two such blocks, in the forward and in the backward (which
    recomputes a chunk's softmax instead of keeping it), plus the logits' gradient, of the
    logits' shape and dtype, that autograd returns. The logits are kept for the backward.

    Parameters
    ----------
    logits : torch.Tensor
        The model's logits for the batch's row, shape ``(1, T, vocab)`` or ``(T, vocab)``.
    batch : dict
        What :class:`PackedCollator` returned for the row.
    chunk_size : int, optional
        Tokens per chunk.

    Returns
    -------
    torch.Tensor
        float32, one value per sequence; differentiable with respect to ``logits``.
    """
    torch = require_torch()
    from .._validate import as_positive_int

    if not isinstance(logits, torch.Tensor) or not logits.is_floating_point() or logits.dim() not in (2, 3) \
            or (logits.dim() == 3 and logits.shape[0] != 1):
        raise TypeError("logits must be a floating torch.Tensor of shape (1, T, vocab) or (T, vocab), got "
                        + (f"shape {tuple(logits.shape)} of {logits.dtype}" if isinstance(logits, torch.Tensor)
                           else type(logits).__name__))
    chunk_size = None if chunk_size is None else as_positive_int(chunk_size, "chunk_size")
    flat = logits.reshape(-1, logits.shape[-1])
    src, tok, seq, n = _targets(batch, flat.shape[0])
    dev = flat.device
    src, tok, seq = src.to(dev), tok.to(dev), seq.to(dev)
    if tok.numel() and int(tok.max()) >= flat.shape[1]:
        raise ValueError(f"the batch holds token id {int(tok.max())} but the logits only {flat.shape[1]} classes: "
                         "give the logits of the model that read this batch")
    per_token = _token_logps_function().apply(flat, src, tok, _chunks(src.numel(), flat.shape[1], chunk_size))
    sums = torch.zeros(n, dtype=torch.float64, device=dev).index_add(0, seq, per_token.double())
    return sums.float()
