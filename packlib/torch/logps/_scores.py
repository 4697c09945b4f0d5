"""Per-sequence scores of a reward model on one packed row: :func:`sequence_scores`."""
from __future__ import annotations

from collections.abc import Mapping

from .._lazy import require_torch
from ..collate._preference import model_inputs

__all__ = ["sequence_scores"]


def _last_tokens(batch):
    """The row position of each sequence's last token, in TRL's order."""
    torch = require_torch()
    needed = ("input_ids", "sequence_ids")
    if not isinstance(batch, Mapping) or any(key not in batch for key in needed):
        have = sorted(map(str, batch)) if isinstance(batch, Mapping) else type(batch).__name__
        raise ValueError("sequence_scores needs a batch of pairs or groups from PackedCollator, with 'input_ids' and "
                         f"'sequence_ids' (each token's sequence); got {have}")
    sid = batch["sequence_ids"].reshape(-1)
    n = int(sid.max()) + 1 if sid.numel() else 0
    pos = torch.arange(sid.numel(), device=sid.device)
    last = torch.full((n,), -1, dtype=torch.int64, device=sid.device)
    keep = sid >= 0
    return last.scatter_reduce(0, sid[keep], pos[keep], reduce="amax")


def _parts(model):
    """``(backbone, head)`` of a transformers ``*ForSequenceClassification`` model."""
    torch = require_torch()
    head = getattr(model, "score", None)
    prefix = getattr(model, "base_model_prefix", None)
    backbone = getattr(model, prefix, None) if isinstance(prefix, str) else None
    if not isinstance(head, torch.nn.Module) or not isinstance(backbone, torch.nn.Module):
        what = "score head (model.score)" if not isinstance(head, torch.nn.Module) else \
            f"backbone (model.{prefix}, its base_model_prefix)"
        raise ValueError(f"sequence_scores reads a transformers *ForSequenceClassification model (a backbone and a "
                         f"score head, such as LlamaForSequenceClassification); {type(model).__name__} has no {what}")
    return backbone, head


def sequence_scores(model, batch):
    """Each sequence's score from a reward model, in TRL's order: the score head of a
    transformers ``*ForSequenceClassification`` model read at each sequence's last token.

    Run as such a model runs on TRL's padded batch (its ``forward`` pools the last token of
    each padded row, so on one packed row it would pool one score for the whole row): the
    backbone reads the packed row, then ``model.score`` reads each sequence's last hidden
    state. Pairs: the ``B`` chosen, then the ``B`` rejected (``.chunk(2)`` splits them as
    ``RewardTrainer`` does); groups: group-major. Either layout (with a shared prompt, a
    completion's last token sees its prompt and itself).

    Parameters
    ----------
    model : torch.nn.Module
        A ``*ForSequenceClassification`` model (``model.score`` and the backbone named by
        ``model.base_model_prefix``).
    batch : dict
        What :class:`PackedCollator` returned for pairs or groups.

    Returns
    -------
    torch.Tensor
        Shape ``(sequences, num_labels)``, what ``model(...).logits`` holds on TRL's padded
        batch; differentiable.

    Examples
    --------
    A stand-in model whose backbone's hidden state is the token id, and whose score head
    passes it on, shows which token each score is read at:

    >>> import torch
    >>> from packlib.torch import PackedCollator, sequence_scores
    >>> class Backbone(torch.nn.Module):
    ...     def forward(self, input_ids, **kwargs):
    ...         return type("Output", (), {"last_hidden_state": input_ids[..., None].float()})
    >>> class RewardModel(torch.nn.Module):
    ...     base_model_prefix = "model"
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.model, self.score = Backbone(), torch.nn.Identity()
    >>> batch = PackedCollator()([{"chosen_ids": [5, 6, 7], "rejected_ids": [5, 8]}])
    >>> sequence_scores(RewardModel(), batch).tolist()
    [[7.0], [8.0]]
    """
    backbone, head = _parts(model)
    last = _last_tokens(batch)
    hidden = backbone(**model_inputs(batch)).last_hidden_state
    hidden = hidden.reshape(-1, hidden.shape[-1])
    return head(hidden.index_select(0, last.to(hidden.device)))
