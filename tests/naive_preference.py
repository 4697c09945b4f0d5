"""Plain-torch references for preference pairs and groups, computed without packlib.

The padded batch as TRL's ``DataCollatorForPreference`` lays it out (the B ``prompt + chosen``
sequences, then the B ``prompt + rejected``, right-padded to the longest, with
``attention_mask`` and ``completion_mask``) and each sequence's summed completion log-probs as
``DPOTrainer`` computes them (the logits at ``t - 1`` predict token ``t``; float32
``log_softmax``; summed over the completion tokens). Groups: each group's ``prompt +
completion_j`` sequences, group-major. torch is imported inside the functions, so this module
imports without it.
"""
from __future__ import annotations


def padded_pairs(examples, pad_token_id: int = 0):
    """TRL's padded preference batch: ``input_ids``, ``attention_mask``, ``completion_mask``
    (torch int64, shape ``(2B, longest)``)."""
    seqs = [(list(e["prompt_ids"]), list(e["chosen_ids"])) for e in examples]
    seqs += [(list(e["prompt_ids"]), list(e["rejected_ids"])) for e in examples]
    return _padded(seqs, pad_token_id)


def padded_groups(examples, pad_token_id: int = 0):
    """The padded batch of groups, group-major: ``prompt + completion_j`` for every group."""
    seqs = [(list(e["prompt_ids"]), list(c)) for e in examples for c in e["completion_ids"]]
    return _padded(seqs, pad_token_id)


def _padded(seqs, pad_token_id):
    import torch

    longest = max(len(p) + len(c) for p, c in seqs)
    ids = torch.full((len(seqs), longest), pad_token_id, dtype=torch.int64)
    att = torch.zeros((len(seqs), longest), dtype=torch.int64)
    comp = torch.zeros((len(seqs), longest), dtype=torch.int64)
    for i, (p, c) in enumerate(seqs):
        n = len(p) + len(c)
        ids[i, :n] = torch.tensor(p + c)
        att[i, :n] = 1
        comp[i, len(p):n] = 1
    return {"input_ids": ids, "attention_mask": att, "completion_mask": comp}


def padded_logps(logits, batch):
    """Per-sequence sums of completion log-probs of a padded batch (float32), as DPOTrainer:
    ``log_softmax(logits[:, :-1])`` gathered at ``input_ids[:, 1:]``, masked by
    ``completion_mask[:, 1:]``."""
    import torch

    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    tok = logp.gather(2, batch["input_ids"][:, 1:, None]).squeeze(2)
    return (tok * batch["completion_mask"][:, 1:]).sum(dim=1)


def reference_logps(model, examples, kind: str = "pairs"):
    """The model's per-sequence log-probs on the padded batch (``pairs``: B chosen then B
    rejected; ``groups``: group-major), and the batch's padded token count."""
    batch = padded_pairs(examples) if kind == "pairs" else padded_groups(examples)
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False).logits
    return padded_logps(logits, batch), batch["input_ids"].numel()


def alone_logps(model, examples, kind: str = "pairs"):
    """Each sequence run by itself (no padding, no packing), in the same order."""
    import torch

    if kind == "pairs":
        seqs = [(e["prompt_ids"], e["chosen_ids"]) for e in examples] + \
               [(e["prompt_ids"], e["rejected_ids"]) for e in examples]
    else:
        seqs = [(e["prompt_ids"], c) for e in examples for c in e["completion_ids"]]
    out = []
    for p, c in seqs:
        ids = torch.tensor([list(p) + list(c)])
        logits = model(input_ids=ids, use_cache=False).logits
        logp = torch.log_softmax(logits[0, :-1].float(), dim=-1).gather(1, ids[0, 1:, None]).squeeze(1)
        out.append(logp[len(p) - 1:].sum())
    return torch.stack(out)


def dpo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta: float = 0.1):
    """The sigmoid DPO loss, averaged over pairs."""
    import torch

    logits = beta * ((policy_chosen - ref_chosen) - (policy_rejected - ref_rejected))
    return -torch.nn.functional.logsigmoid(logits).mean()


def padded_groups_grpo(examples, pad_token_id: int = 0):
    """``GRPOTrainer``'s padded batch of groups, group-major: ``prompt_ids`` left-padded with
    ``prompt_mask``, ``completion_ids`` right-padded with ``completion_mask`` (torch int64)."""
    import torch

    prompts = [list(e["prompt_ids"]) for e in examples for _ in e["completion_ids"]]
    comps = [list(c) for e in examples for c in e["completion_ids"]]
    P, C = max(map(len, prompts)), max(map(len, comps))
    out = {"prompt_ids": torch.full((len(comps), P), pad_token_id), "prompt_mask": torch.zeros(len(comps), P, dtype=torch.int64),
           "completion_ids": torch.full((len(comps), C), pad_token_id),
           "completion_mask": torch.zeros(len(comps), C, dtype=torch.int64)}
    for i, (p, c) in enumerate(zip(prompts, comps)):
        out["prompt_ids"][i, P - len(p):] = torch.tensor(p)
        out["prompt_mask"][i, P - len(p):] = 1
        out["completion_ids"][i, :len(c)] = torch.tensor(c)
        out["completion_mask"][i, :len(c)] = 1
    return out


def dapo_loss(per_token_logps, old_per_token_logps, advantages, mask, epsilon_low=0.2, epsilon_high=0.2):
    """The clipped surrogate summed over the completion tokens and divided by their count
    (GRPO's default ``loss_type="dapo"`` on one process, no KL term)."""
    import torch

    ratio = torch.exp(per_token_logps - old_per_token_logps)
    clipped = torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high)
    per_token = -torch.min(ratio * advantages[:, None], clipped * advantages[:, None])
    return (per_token * mask).sum() / mask.sum().clamp(min=1)

