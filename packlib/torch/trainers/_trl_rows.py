"""What TRL's preference trainers read of a model, computed on one packed row.

``DPOTrainer`` and ``KTOTrainer`` call their model as ``model(**inputs, labels=labels,
fused_lm_head=True)`` on a right-padded batch and read per-token fields of its output
(``log_probs``, ``entropy``, ``mean_logits``, ``is_top1``, ``log_sum_sq_probs``), each of
shape ``(sequences, padded length - 1)``; ``RewardTrainer`` calls ``model(**inputs)`` and reads
``logits``, one score per sequence. Here the same fields come from a packed row of
:class:`packlib.torch.PackedCollator`: :func:`padded_view` lays each sequence's completion
tokens out as the trainer's shifted padded batch holds them (row ``i`` is sequence ``i`` in
TRL's order, its completion from column 0), and within a :func:`packed_forward` block a
model called with ``packlib_row=`` the packed batch runs that row and returns those fields in
that layout (:func:`fused_output`, :func:`scores_output`). Every other call is the model's own,
and after the block the model is as it was.
"""
from __future__ import annotations

import contextlib
import inspect
from collections.abc import Mapping

from ..._compat import fused_output_class
from .._lazy import require_torch
from ..collate._preference import model_inputs
from ..logps._logps import _apply, _chunks, _completion_targets, _flat_logits
from ..logps._scores import sequence_scores

#: the keyword a patched model reads its packed row from
ROW_KEY = "packlib_row"


def is_packed_row(inputs) -> bool:
    """Whether ``inputs`` is a batch of pairs or groups from :class:`PackedCollator`."""
    return isinstance(inputs, Mapping) and all(k in inputs for k in ("prev_index", "sequence_ids", "group_ids"))


def row_units(row) -> int:
    """The pairs (or KTO's examples: groups of one) a packed row holds."""
    g = row["group_ids"]
    return int(g.max()) + 1 if g.numel() else 0


def padded_view(row):
    """``(input_ids, completion_mask)`` of shape ``(sequences, width + 1)``: what the
    trainer's padded batch would hold for the row's completions, shifted so that
    ``completion_mask[:, 1:]`` marks the completion tokens whose log-probability is read
    (column ``j`` is a completion's token ``j``), and ``completion_mask[:, 0]`` is 1 only
    for a completion whose first token has no predecessor (TRL counts it, unscored)."""
    torch = require_torch()
    src, tok, seq, col, n, width = _completion_targets(row, row["input_ids"].numel())
    counted = src >= 0
    ids = torch.zeros(n, width + 1, dtype=torch.int64, device=tok.device)
    mask = torch.zeros(n, width + 1, dtype=torch.int64, device=tok.device)
    ids[seq, col + 1] = tok
    mask[seq[counted], col[counted] + 1] = 1
    uncounted = torch.zeros(n, dtype=torch.int64, device=tok.device).index_add_(0, seq[~counted],
                                                                              torch.ones_like(seq[~counted]))
    mask[:, 0] = uncounted
    return ids, mask


def fused_output(run, row, keep_logits: bool = False):
    """TRL's ``FusedCausalLMOutput`` for ``row``'s completions: ``run(**kwargs)`` is the
    model's forward on the row, whose logits are read (``keep_logits``: only those of the
    positions that predict a completion token, through the model's ``logits_to_keep``);
    ``log_probs`` differentiable (:func:`packlib.torch.token_logps`' rows and columns), the
    other per-token fields without gradient, zero where no completion token is."""
    torch = require_torch()
    FusedCausalLMOutput = fused_output_class()
    src, tok, seq, col, n, width = _completion_targets(row, row["input_ids"].numel())
    c = src >= 0
    src, tok, seq, col = src[c], tok[c], seq[c], col[c]
    if keep_logits:
        keep = torch.unique(src)  # sorted: the positions whose logits are needed
        out = run(logits_to_keep=keep)
        src = torch.searchsorted(keep, src)
    else:
        out = run()
    flat, chunk_size = _flat_logits(out.logits, None)
    dev = flat.device
    src, tok, seq, col = (x.to(dev) for x in (src, tok, seq, col))
    per_token = _apply(flat, src, tok, chunk_size, 1.0)
    at = (seq, col)
    log_probs = torch.zeros(n, width, dtype=torch.float32, device=dev).index_put(at, per_token)
    mask = torch.zeros(n, width, dtype=torch.bool, device=dev).index_put(at, torch.ones_like(tok, dtype=torch.bool))
    fields = {}
    with torch.no_grad():
        for name, values in _token_fields(flat, src, tok).items():
            fields[name] = torch.zeros(n, width, dtype=values.dtype, device=dev).index_put(at, values)
    loss = -log_probs.sum() / mask.sum().clamp(min=1)
    return FusedCausalLMOutput(loss=loss, log_probs=log_probs, label_mask=mask,
                               aux_loss=getattr(out, "aux_loss", None), **fields)


def _token_fields(flat, src, tok):
    """Entropy, mean logit, ``log(sum p²)`` and whether the token is the most likely one,
    per counted token, chunk by chunk in float32 (no gradient)."""
    torch = require_torch()
    n = src.numel()
    out = {k: torch.empty(n, dtype=torch.float32, device=flat.device)
           for k in ("entropy", "mean_logits", "log_sum_sq_probs")}
    out["is_top1"] = torch.empty(n, dtype=torch.bool, device=flat.device)
    for a, b in _chunks(n, flat.shape[1], None):
        x = flat.index_select(0, src[a:b]).float()
        lse = torch.logsumexp(x, dim=-1)
        out["entropy"][a:b] = lse - (torch.softmax(x, dim=-1) * x).sum(-1)
        out["mean_logits"][a:b] = x.mean(-1)
        out["log_sum_sq_probs"][a:b] = torch.logsumexp(2 * x, dim=-1) - 2 * lse
        out["is_top1"][a:b] = x.argmax(-1) == tok[a:b]
    return out


def scores_output(model, row):
    """What a ``*ForSequenceClassification`` model's forward returns on TRL's padded batch
    (``logits``: one score per sequence, in TRL's order), from the packed row."""
    from transformers.modeling_outputs import SequenceClassifierOutputWithPast

    return SequenceClassifierOutputWithPast(logits=sequence_scores(model, row))


def base_module(model):
    """The transformers model inside Accelerate's, DeepSpeed's or PEFT's wrappers (the one
    whose ``forward`` TRL patches with its fused LM head)."""
    torch = require_torch()
    m = model
    while isinstance(getattr(m, "module", None), torch.nn.Module):
        m = m.module
    if callable(getattr(m, "get_base_model", None)):
        m = m.get_base_model()
    return m


@contextlib.contextmanager
def packed_forward(model, kind: str):
    """For the duration of the ``with`` block, make ``model(..., packlib_row=row)`` compute on
    the packed ``row`` what TRL's trainer reads (``kind``: ``"causal"``, with
    ``fused_lm_head=True`` TRL's fused fields, else the model's output on the row;
    ``"scores"``: one score per sequence); other calls are unchanged. On leaving, the model's
    ``forward`` is what it was, so no copy, pickle or later trainer of the model sees the
    packed path. Nested blocks on the same model reuse the outer one."""
    module = base_module(model)
    current = module.__dict__.get("forward")
    if getattr(current, "_packlib_row_kind", None) == kind:
        yield
        return
    inner = module.forward
    # the packed row runs the class's forward on this module: a forward TRL set on the
    # instance calls the forward of the module it was set on, which a deep copy does not rebind
    own = type(module).forward.__get__(module)
    # the logits of the positions that predict a completion token only, where the model can
    keep_logits = "logits_to_keep" in inspect.signature(type(module).forward).parameters

    def forward(*args, packlib_row=None, **kwargs):
        if packlib_row is None:
            return inner(*args, **kwargs)
        if kind == "scores":
            return scores_output(module, packlib_row)
        extra = {k: kwargs[k] for k in ("output_router_logits",) if k in kwargs}
        if not kwargs.get("fused_lm_head", False):
            return own(**model_inputs(packlib_row), **extra)
        return fused_output(lambda **keep: own(**model_inputs(packlib_row), **extra, **keep), packlib_row,
                            keep_logits=keep_logits)

    forward._packlib_row_kind = kind
    module.forward = forward
    try:
        yield
    finally:
        if current is None:
            del module.forward
        else:
            module.forward = current
