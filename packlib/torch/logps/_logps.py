"""Log-probabilities of a packed row, from the model's logits, exactly and in chunks: each
sequence's sum (:func:`sequence_logps`) and each completion token's (:func:`token_logps`)."""
from __future__ import annotations

from collections.abc import Mapping

from .._lazy import require_torch

__all__ = ["sequence_logps", "token_logps"]

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
    labels, pos = batch["labels"].reshape(-1), _text_positions(batch["position_ids"])
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


def _text_positions(pos):
    """The row's text positions: ``position_ids`` itself, or the first of the ``(4, 1, T)``
    rows :class:`VisionPackedCollator` writes (text positions, then mRoPE's t, h, w)."""
    if pos.dim() == 3 and pos.shape[1] == 1:
        if pos.shape[0] != 4:
            raise ValueError(f"batch['position_ids'] has shape {tuple(pos.shape)}: mRoPE positions without the row of "
                             "text positions, from which sequence_logps reads where each sequence starts; give the "
                             "batch VisionPackedCollator returned (position_ids of shape (4, 1, T))")
        pos = pos[0]
    return pos.reshape(-1)


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
        def forward(ctx, logits, src, tok, spans, scale=1.0):
            out = torch.empty(src.numel(), dtype=torch.float32, device=logits.device)
            for a, b in spans:
                x = logits.index_select(0, src[a:b]).float()
                if scale != 1.0:
                    x.mul_(scale)
                out[a:b] = x.gather(1, tok[a:b, None]).squeeze(1) - torch.logsumexp(x, dim=-1)
            ctx.save_for_backward(logits, src, tok)
            ctx.spans, ctx.scale = spans, scale
            return out

        @staticmethod
        def backward(ctx, grad_out):
            logits, src, tok = ctx.saved_tensors
            grad = torch.zeros_like(logits)
            scale = ctx.scale
            for a, b in ctx.spans:
                g = grad_out[a:b].float() * scale
                x = logits.index_select(0, src[a:b]).float()
                p = torch.softmax(x.mul_(scale) if scale != 1.0 else x, dim=-1).mul_(-g[:, None])
                p.scatter_add_(1, tok[a:b, None], g[:, None])
                grad.index_add_(0, src[a:b], p.to(grad.dtype))
            return grad, None, None, None, None

    return TokenLogps


def sequence_logps(logits, batch, *, chunk_size: int | None = None):
    """Each sequence's summed completion log-probabilities, in TRL's order.

    For a row of pairs from :class:`PackedCollator`: ``2B`` values, the ``B`` chosen then the
    ``B`` rejected (``.chunk(2)`` splits them as ``DPOTrainer`` does); for groups, group-major
    (completion ``j`` of group ``g`` at ``g * k + j``); for packed sequences (``labels``), one
    value per sequence, summing its labelled tokens (a :class:`VisionPackedCollator` row too:
    one value per example, each equal to the example run alone); for a prefix tree
    (``share_prefix=True``), one value per trajectory, summing its trained tokens. Token
    ``t``'s log-probability is read from the logits of the position that predicts it (``t - 1`` in its own sequence; the
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
    flat, chunk_size = _flat_logits(logits, chunk_size)
    if isinstance(batch, Mapping) and "tree_end" in batch:  # a prefix tree: one value per trajectory
        from ._tree import tree_sequence_logps
        return tree_sequence_logps(batch, flat.shape[0], flat.device, lambda s, t: _apply(flat, s, t, chunk_size, 1.0))
    src, tok, seq, n = _targets(batch, flat.shape[0])
    dev = flat.device
    src, tok, seq = src.to(dev), tok.to(dev), seq.to(dev)
    per_token = _apply(flat, src, tok, chunk_size, 1.0)
    sums = torch.zeros(n, dtype=torch.float64, device=dev).index_add(0, seq, per_token.double())
    return sums.float()


def _flat_logits(logits, chunk_size):
    """``(logits as (T, vocab), chunk_size)``, checked."""
    torch = require_torch()
    from ..._validate import as_positive_int

    if not isinstance(logits, torch.Tensor) or not logits.is_floating_point() or logits.dim() not in (2, 3) \
            or (logits.dim() == 3 and logits.shape[0] != 1):
        raise TypeError("logits must be a floating torch.Tensor of shape (1, T, vocab) or (T, vocab), got "
                        + (f"shape {tuple(logits.shape)} of {logits.dtype}" if isinstance(logits, torch.Tensor)
                           else type(logits).__name__))
    chunk_size = None if chunk_size is None else as_positive_int(chunk_size, "chunk_size")
    return logits.reshape(-1, logits.shape[-1]), chunk_size


def _apply(flat, src, tok, chunk_size, scale):
    """The chunked ``log_softmax(flat[src] * scale)[tok]``, float32, differentiable."""
    if tok.numel() and int(tok.max()) >= flat.shape[1]:
        raise ValueError(f"the batch holds token id {int(tok.max())} but the logits only {flat.shape[1]} classes: "
                         "give the logits of the model that read this batch")
    return _token_logps_function().apply(flat, src, tok, _chunks(src.numel(), flat.shape[1], chunk_size), scale)


def _completion_targets(batch, T: int):
    """``(src, tok, seq, col, n, width, row_token)`` of a batch of pairs or groups: for every
    completion token, the row position that predicts it (-1: none), its id, its sequence, its
    column (its place in its completion); the number of sequences, the longest completion."""
    torch = require_torch()
    needed = ("input_ids", "prev_index", "sequence_ids", "completion_mask")
    if not isinstance(batch, Mapping) or any(key not in batch for key in needed):
        have = sorted(map(str, batch)) if isinstance(batch, Mapping) else type(batch).__name__
        missing = [key for key in needed if key not in batch] if isinstance(batch, Mapping) else list(needed)
        raise ValueError(f"token_logps needs a batch of pairs or groups from PackedCollator, with {', '.join(needed)}; "
                         f"this one has no {', '.join(map(repr, missing))} (its keys: {have})")
    ids, prev = batch["input_ids"].reshape(-1), batch["prev_index"].reshape(-1)
    _check_length(ids.numel(), T)
    sid = batch["sequence_ids"].reshape(-1)
    where = torch.nonzero(batch["completion_mask"].reshape(-1) != 0).reshape(-1)
    seq = sid[where]
    runs, counts = torch.unique_consecutive(seq, return_counts=True)
    starts = torch.cumsum(counts, 0) - counts
    col = torch.arange(seq.numel(), device=seq.device) - torch.repeat_interleave(starts, counts)
    n = int(sid.max()) + 1 if sid.numel() else 0
    width = int(counts.max()) if counts.numel() else 0
    return prev[where], ids[where], seq, col, n, width


def token_logps(logits, batch, *, chunk_size: int | None = None, temperature: float = 1.0):
    """Each completion token's log-probability, right-padded per sequence, in TRL's order.

    What ``GRPOTrainer`` (and RLOO, PPO) computes on its padded batch, ``per_token_logps`` with
    ``completion_mask``, from one packed row of pairs or groups: row ``i`` holds sequence
    ``i``'s completion tokens in order (pairs: the ``B`` chosen, then the ``B`` rejected;
    groups: group-major, completion ``j`` of group ``g`` at ``g * k + j``), zero past its end.
    On a prefix tree (``share_prefix=True``) row ``i`` is trajectory ``i``'s completion (from its
    first trained token on; ``mask`` 0 on its untrained tokens), each token read at its parent
    in the trie; a token several trajectories train is computed once and handed to each.
    Computed as :func:`sequence_logps` computes them: float32 ``log_softmax`` of the logits of
    the position that predicts each token, ``chunk_size`` tokens at a time (the same memory
    bound), the backward recomputing each chunk's softmax.

    Parameters
    ----------
    logits : torch.Tensor
        The model's logits for the batch's row, shape ``(1, T, vocab)`` or ``(T, vocab)``.
    batch : dict
        What :class:`PackedCollator` returned for pairs or groups.
    chunk_size : int, optional
        Tokens per chunk.
    temperature : float, default 1.0
        The logits are divided by it first, as ``GRPOTrainer`` divides them by its
        ``temperature`` (the sampling temperature).

    Returns
    -------
    logps : torch.Tensor
        float32, shape ``(sequences, longest completion)``; differentiable with respect to
        ``logits``.
    mask : torch.Tensor
        int64, the same shape: 1 on a completion token that has a predecessor (every one,
        unless ``truncation_mode="keep_end"`` cut a sequence's whole prompt, whose first token
        TRL does not score either).

    Examples
    --------
    >>> import torch
    >>> from packlib.torch import PackedCollator, token_logps
    >>> batch = PackedCollator(share_prompt=True)([{"prompt_ids": [1, 2], "completion_ids": [[3, 4, 5], [6]]}])
    >>> logps, mask = token_logps(torch.zeros(1, 6, 8), batch)
    >>> mask.tolist(), round(float(logps[0, 0]), 4)
    ([[1, 1, 1], [1, 0, 0]], -2.0794)
    """
    torch = require_torch()
    from ..._validate import as_float_array

    temperature = float(as_float_array([temperature], "temperature")[0])
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 (the logits are divided by it), got {temperature}")
    flat, chunk_size = _flat_logits(logits, chunk_size)
    if isinstance(batch, Mapping) and "tree_end" in batch:  # a prefix tree: one row per trajectory
        from ._tree import tree_token_logps
        return tree_token_logps(batch, flat.shape[0], flat.device,
                                lambda s, t: _apply(flat, s, t, chunk_size, 1.0 / temperature))
    src, tok, seq, col, n, width = _completion_targets(batch, flat.shape[0])
    dev = flat.device
    counted = src >= 0
    src, tok, seq, col, counted = (x.to(dev) for x in (src, tok, seq, col, counted))
    per_token = _apply(flat, src[counted], tok[counted], chunk_size, 1.0 / temperature)
    logps = torch.zeros(n, width, dtype=torch.float32, device=dev).index_put((seq[counted], col[counted]), per_token)
    mask = torch.zeros(n, width, dtype=torch.int64, device=dev)
    mask[seq[counted], col[counted]] = 1
    return logps, mask
