"""What a step should train, computed without packlib: every sequence run alone.

A packed row, a collator's masks or a training loop's accumulation is exact when its loss and
gradient equal these: each sequence through the model by itself (its own positions, nothing
else in the row), its token losses summed over the tokens that are trained, divided by the
number of trained tokens of the whole step (token-weighted, not sequence- or micro-batch-
weighted). Plain torch: no packlib import. Needs torch (imported by the functions).
"""
from __future__ import annotations

import numpy as np


def trained_tokens(n: int, *masks, labels=None) -> np.ndarray:
    """Which of a sequence's ``n`` tokens carry a loss term: not its first (nothing predicts it),
    not where ``labels`` is -100, and only where every given mask is non-zero."""
    keep = np.ones(n, bool)
    keep[0] = False
    for m in masks:
        if m is not None:
            keep &= np.asarray(m) != 0
    if labels is not None:
        keep &= np.asarray(labels) != -100
    return keep


def loss_sum(model, tokens, trained, labels=None):
    """``(sum of the trained tokens' losses, their count)`` of one sequence run alone, as a
    0-d tensor with its graph (so ``backward`` works) and an int."""
    import torch

    ids = torch.as_tensor(np.asarray(tokens))[None]
    target = torch.as_tensor(np.asarray(tokens if labels is None else labels))
    logits = model(input_ids=ids, use_cache=False).logits[0]
    keep = torch.as_tensor(np.asarray(trained))
    # token j is predicted by position j - 1
    per_token = torch.nn.functional.cross_entropy(logits[:-1].float(), target[1:].clamp(min=0), reduction="none")
    mask = keep[1:]
    return (per_token * mask).sum(), int(mask.sum())


def step_loss(model, sequences):
    """The token-mean loss of a step: ``sequences`` is a list of ``(tokens, trained[, labels])``."""
    total, count = 0.0, 0
    for seq in sequences:
        s, n = loss_sum(model, *seq)
        total, count = total + s, count + n
    return total / max(count, 1)


def loss_and_grads(model, sequences):
    """The step's token-mean loss (float) and every parameter's gradient (list of tensors)."""
    model.zero_grad()
    loss = step_loss(model, sequences)
    loss.backward()
    grads = [p.grad.detach().clone() for p in model.parameters()]
    model.zero_grad()
    return float(loss), grads


def max_relative(grads, reference) -> float:
    """The largest ``|g - g_ref|`` over all parameters, relative to the largest ``|g_ref|``."""
    top = max(float(r.abs().max()) for r in reference)
    return max(float((g - r).abs().max()) for g, r in zip(grads, reference)) / top


def train_steps(model, optimizer, steps):
    """Train ``steps`` (each a list of ``(tokens, trained)``) one optimizer step each."""
    for seqs in steps:
        optimizer.zero_grad()
        step_loss(model, seqs).backward()
        optimizer.step()
    return model
