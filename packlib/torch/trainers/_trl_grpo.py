"""TRL's ``GRPOTrainer`` on packed rows: :class:`PackedGRPOMixin` and ``PackedGRPOTrainer``.

``GRPOTrainer`` samples ``num_generations`` completions per prompt, scores them, and then
computes each completion token's log-probability on a padded batch that repeats every prompt
for each of its completions (prompts left-padded, completions right-padded). The mixin
replaces that one computation (its per-token log-probs and entropies, used for the policy,
the old policy and the reference model alike): the rows TRL hands it are laid out as
:class:`PackedCollator` groups, **each prompt once** with its completions after it, in one
padding-free row, and :func:`token_logps` reads the log-probs back into TRL's padded shape.
Sampling, rewards, advantages, the loss (every ``loss_type``) and the Trainer's accumulation
stay TRL's own.

>>> from packlib.torch.trainers import PackedGRPOMixin
>>> PackedGRPOMixin.__name__
'PackedGRPOMixin'
"""
from __future__ import annotations

from ..._compat import attn_implementation, check_versions, entropy_bonus, with_host_methods
from .._lazy import require_torch
from ..check._trainer import add_packing_check
from ..collate import PackedCollator, model_inputs, shared_prompt_block_mask
from ..logps import token_logps

_CLASS = None


@with_host_methods
class PackedGRPOMixin:
    """Put before ``GRPOTrainer`` (or a subclass of it) in a class's bases:
    ``class MyTrainer(PackedGRPOMixin, GRPOTrainer)``; ``PackedGRPOTrainer`` is that class.

    Each call's rows are grouped by prompt (rows with the same prompt tokens are one group,
    whichever order TRL shuffled them into), laid out with ``PackedCollator(share_prompt=True,
    ragged_groups=True)`` and run as one row of ``batch_size`` rows at most (TRL's chunking);
    the attention keeps each completion to its prompt and itself (the batch's 4-D mask with
    ``sdpa`` / ``eager``, a ``BlockMask`` with ``flex_attention``). With a flash-attention
    model the prompt is laid out per completion instead (flash-attention's varlen kernels
    cannot read a tree). Entropies are computed from the same logits, divided by the
    temperature as TRL's fused head does.

    Before the first step the model is checked on a shared-prompt row
    (:func:`packlib.torch.check_packing`); ``packlib_check_packing=False`` turns the check off.

    Refused (``ValueError``): images (vision-language models: use ``GRPOTrainer``), MoE
    auxiliary losses, completions whose mask is not one run of ones from their start. Refused
    when constructed (``RuntimeError``, naming the installed and the supported versions):
    transformers, Accelerate or TRL outside the supported range (docs/training.md,
    "Supported versions"), on any class the mixin is in, as ``PackedGRPOTrainer`` is refused.
    """

    def __init__(self, *args, packlib_check_packing: bool = True, **kwargs):
        check_versions(("transformers", "accelerate", "trl"), f"packlib.torch.PackedGRPOMixin ({type(self).__name__})")
        super().__init__(*args, **kwargs)
        add_packing_check(self, packlib_check_packing)

    def _packlib_per_token_logps(self, model, input_ids, attention_mask, logits_to_keep, batch_size=None,
                                 compute_entropy=False, compute_aux_loss=False, **vision):
        """GRPOTrainer's per-token log-probs and entropies of its padded rows, computed on packed
        rows (its private method of that computation is this one)."""
        torch = require_torch()
        given = sorted(k for k, v in vision.items() if v is not None)
        if given or compute_aux_loss:
            what = "MoE auxiliary loss" if compute_aux_loss else f"vision inputs ({', '.join(given)})"
            raise ValueError(f"PackedGRPOTrainer packs text rows only; this batch needs the {what}: train it with "
                             "trl.GRPOTrainer")
        n = input_ids.shape[0]
        step = batch_size or n
        logps = torch.zeros(n, logits_to_keep, dtype=torch.float32, device=input_ids.device)
        entropies = torch.zeros_like(logps) if compute_entropy else None
        ran = False
        for start in range(0, n, step):
            rows = range(start, min(n, start + step))
            ran |= self._packed_chunk(model, input_ids, attention_mask, logits_to_keep, rows, logps, entropies)
        if not ran and n and torch.is_grad_enabled():
            logps += self._packlib_anchor(model, input_ids, logits_to_keep)
        return logps, entropies, None

    def _packlib_anchor(self, model, input_ids, keep):
        """A zero connected to the model's graph: when every completion of the call is masked
        (``mask_truncated_completions``), the log-probs still come from a forward of the model
        (one prompt token), so that TRL's ``backward`` finds a graph, as with its own forward."""
        torch = require_torch()
        token = input_ids[:1, -keep - 1:-keep]  # the last prompt token (prompts are left-padded)
        with self.accelerator.autocast():
            logits = model(input_ids=token, position_ids=torch.zeros_like(token), use_cache=False).logits
        return logits.float().sum() * 0

    def _packed_chunk(self, model, input_ids, attention_mask, keep, rows, logps, entropies):
        torch = require_torch()
        examples, order = _groups(input_ids, attention_mask, keep, rows)
        if not examples:
            return False
        inner = self.accelerator.unwrap_model(model)  # its config: DDP and the like hide it
        share = _attention(inner) != "flash"
        collate = PackedCollator(share_prompt=share, ragged_groups=True, flash_attn_kwargs=not share,
                                 mask_dtype=_dtype(inner) if share else None)
        batch = {k: (v.to(input_ids.device) if torch.is_tensor(v) else v) for k, v in collate(examples).items()}
        if share and _attention(inner) == "flex":
            batch["attention_mask"] = shared_prompt_block_mask(batch, device=input_ids.device)
        with self.accelerator.autocast():
            logits = model(**model_inputs(batch)).logits
        temperature = getattr(self, "temperature", 1.0)
        ours, mask = token_logps(logits, batch, temperature=temperature)
        index = torch.as_tensor(order, device=input_ids.device)
        logps[index, :ours.shape[1]] = ours * mask
        if entropies is not None:
            with torch.set_grad_enabled(torch.is_grad_enabled() and entropy_bonus(self)):
                ent = _entropies(logits, batch, temperature, ours.shape)
            entropies[index, :ours.shape[1]] = ent * mask
        return True


PackedGRPOMixin.__module__ = "packlib.torch"


def _groups(input_ids, attention_mask, keep, rows):
    """TRL's padded rows as :class:`PackedCollator` groups: ``(examples, order)``, ``order``
    the padded row of each packed sequence (group-major)."""
    prompt_part, completion_part = attention_mask[:, :-keep], attention_mask[:, -keep:]
    groups: dict = {}
    for i in rows:
        c = completion_part[i]
        length = int(c.sum())
        if not bool((c[:length] != 0).all()):
            raise ValueError(f"row {i}'s completion mask is not one run of ones from its start: PackedGRPOTrainer "
                             "reads each completion as its first tokens; train it with trl.GRPOTrainer")
        if length == 0:
            continue
        p = prompt_part[i] != 0
        prompt = tuple(input_ids[i, :-keep][p].tolist())
        groups.setdefault(prompt, []).append((i, input_ids[i, -keep:][:length].tolist()))
    examples = [{"prompt_ids": list(p), "completion_ids": [c for _, c in members]} for p, members in groups.items()]
    order = [i for members in groups.values() for i, _ in members]
    return examples, order


def _attention(model) -> str:
    impl = attn_implementation(model)
    return "flash" if "flash" in impl else "flex" if "flex" in impl else "dense"


def _dtype(model):
    torch = require_torch()
    param = next(model.parameters(), None)
    return param.dtype if param is not None and param.dtype.is_floating_point else torch.float32


def _entropies(logits, batch, temperature, shape):
    """Each completion token's entropy of ``softmax(logits / temperature)`` at the position that
    predicts it, in :func:`token_logps`' layout."""
    torch = require_torch()
    flat = logits.reshape(-1, logits.shape[-1])
    prev, sid = batch["prev_index"].reshape(-1), batch["sequence_ids"].reshape(-1)
    where = torch.nonzero(batch["completion_mask"].reshape(-1) != 0).reshape(-1)
    seq, src = sid[where], prev[where]
    runs, counts = torch.unique_consecutive(seq, return_counts=True)
    col = torch.arange(seq.numel(), device=seq.device) - torch.repeat_interleave(torch.cumsum(counts, 0) - counts,
                                                                                  counts)
    ok = src >= 0
    x = flat.index_select(0, src[ok]).float() / temperature
    logp = torch.log_softmax(x, dim=-1)
    ent = -(logp.exp() * logp).sum(-1)
    out = torch.zeros(shape, dtype=torch.float32, device=flat.device)
    return out.index_put((seq[ok], col[ok]), ent)


def packed_grpo_trainer():
    """``PackedGRPOTrainer``: ``(PackedGRPOMixin, trl.GRPOTrainer)``, built on first use."""
    global _CLASS
    if _CLASS is None:
        try:
            from trl import GRPOTrainer
        except ImportError as e:
            raise ImportError("PackedGRPOTrainer needs TRL: pip install 'packlib[trl]'") from e
        check_versions(("transformers", "accelerate", "trl"), "packlib.torch.PackedGRPOTrainer")
        _CLASS = type("PackedGRPOTrainer", (PackedGRPOMixin, GRPOTrainer), {
            "__module__": "packlib.torch", "__doc__":
            "``trl.GRPOTrainer`` computing its per-token log-probs on packed rows, each prompt once "
            "(:class:`PackedGRPOMixin`); built and used exactly as ``GRPOTrainer``."})
    return _CLASS
