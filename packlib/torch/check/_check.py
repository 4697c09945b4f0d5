""":func:`check_packing`: does the user's own model compute a packed row as it computes each
of the row's sequences alone?

Packing is exact when every layer keeps the row's sequences apart: attention does, through
``position_ids``, ``cu_seq_lens_*`` or a mask; layers that carry state along the row
(state-space mixers, short convolutions, recurrences, linear attention) do only where the
model's forward is told the boundaries, and a patched attention, a KV cache or a layer that
mixes the sequence axis may not at all. No list of architectures can be complete, so the
check is by behaviour: the model runs the collated batch and every sequence alone, and each
trained token's log-probability is compared.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .._lazy import require_torch
from ..collate._collator import PackedCollator
from ..collate._padded import PaddedCollator
from ..collate._vision import VisionPackedCollator
from ..collate._preference import model_inputs
from ..collate._tree_masks import tree_mask
from ._causes import likely_cause, stateful_config, stateful_layers
from ._hf import attn_implementation
from ._rows import sequence_paths

#: ``(absolute, relative)`` tolerances by the model's floating dtype: on a trained token's
#: log-probability, and on the log-probabilities over the vocabulary relative to their spread
#: (about 20 times the rounding differences measured between packed and alone on exact
#: models: benchmarks/bench_model_exactness.py); half precision rounds every layer's output
#: to 8 (bfloat16) or 11 (float16) bits, so it hides small leaks that float32 shows
TOLERANCES = {"float32": (1e-4, 2e-5), "float64": (1e-8, 1e-9), "bfloat16": (2e-2, 1.5e-2), "float16": (5e-3, 5e-3)}
#: the tolerance is at least this many times the rounding measured on the model itself (a
#: large model in half precision, or float32 matmuls in TF32, rounds more than a small one),
#: and at most NOISE_CAP times the dtype's
NOISE_FACTOR, NOISE_CAP = 4.0, 10.0
UNPACKED = ("train it on unpacked sequences instead: data_collator=packlib.torch.PaddedCollator() (one right-padded "
            "row per sequence) with packlib.BalancedBatchSampler(lengths, max_sequence_length, ..., padded=True) "
            "(micro-batches of similar lengths, balanced across ranks, at most max_sequence_length tokens with their "
            "padding) and balance_trainer (docs/training.md, 'Models that cannot pack: unpacked rows, still "
            "balanced')")


@dataclass(frozen=True)
class PackingCheck:
    """What :func:`check_packing` measured on a model that keeps packed sequences apart.

    Attributes
    ----------
    max_difference : float
        The largest absolute difference of a trained token's log-probability, packed vs alone.
    differences : tuple of float
        That difference for each sequence of the batch (an example of plain text is one
        sequence; a pair two, chosen then rejected; a group one per completion), in order.
    relative_difference : float
        The largest difference of the log-probabilities over the whole vocabulary at the
        trained positions, divided by their spread (a leak in a freshly initialised model,
        whose log-probabilities are all close, shows here first).
    tolerance : tuple of float
        ``(absolute, relative)``: the tolerances applied, the model's dtype's (float32: 1e-4 and
        2e-5), widened to 4 times the rounding measured on the model itself where that is
        larger (each sequence alone against alone with tokens appended), at most 10 times.
    model : str
        The model's class name.
    attn_implementation : str or None
        ``model.config._attn_implementation``.
    dtype : str
        The model's floating dtype.
    """

    max_difference: float
    differences: tuple
    relative_difference: float
    tolerance: tuple
    model: str
    attn_implementation: str | None
    dtype: str

    def __repr__(self) -> str:
        return (f"PackingCheck(model={self.model!r}, attn_implementation={self.attn_implementation!r}, "
                f"dtype={self.dtype!r}, max_difference={self.max_difference:.3g}, "
                f"relative_difference={self.relative_difference:.3g}, sequences={len(self.differences)}, "
                "exact=True)")

    def to_dict(self) -> dict:
        """The report as plain Python values."""
        return {"model": self.model, "attn_implementation": self.attn_implementation, "dtype": self.dtype,
                "max_difference": self.max_difference, "differences": list(self.differences),
                "relative_difference": self.relative_difference, "tolerance": list(self.tolerance)}


PackingCheck.__module__ = "packlib.torch"


def check_packing(model, examples, *, collator=None) -> PackingCheck:
    """Check that ``model`` computes a packed batch of ``examples`` exactly as each of its
    sequences alone: every trained token's log-probability within float tolerance.

    The model runs in eval mode without gradients, on its own device and dtype; its
    parameters, training mode and ``requires_grad`` flags are as they were afterwards.
    :func:`packlib.torch.balance_trainer` and packlib's TRL trainers run this check on a few
    short sequences of the training data before their first step; a plain ``Trainer`` or a
    hand-written loop calls it once before training (docs/training.md).

    Parameters
    ----------
    model : torch.nn.Module
        A causal language model with a ``config`` (a ``transformers`` ``*ForCausalLM``, or
        anything whose output has ``logits`` of shape ``(rows, tokens, vocab)``), or a reward
        model (a ``*ForSequenceClassification``: its score at every token is compared).
    examples : list
        A few short examples of the training data, as the collator takes them (text, pairs,
        groups, trajectories); at least two sequences, so that one follows another in the row.
    collator : PackedCollator, PaddedCollator or VisionPackedCollator, optional
        Default ``PackedCollator()``. With ``share_prompt`` or ``share_prefix`` the tree's mask
        is checked too; on a model with layers that carry state along the row these are
        refused without running (a mask cannot fork a recurrent state).

    Returns
    -------
    PackingCheck
        The differences measured, the model's class and attention implementation.

    Raises
    ------
    ValueError
        The model leaks across sequences (its class, the difference, the likely cause and what
        to do instead), its packed forward raises, or the input is not usable: a model without
        ``config``, on the meta device, or without ``logits``; examples the collator refuses.
    """
    return run_check(model, examples, collator)


def run_check(model, examples, collator, runner=None) -> PackingCheck:
    """:func:`check_packing`, the forwards run by ``runner`` (default ``model``): the wrapper a
    trainer calls (DDP, FSDP), whose forward gathers sharded parameters, around ``model``."""
    torch = require_torch()
    collator = _checked(model, examples, collator)
    runner = model if runner is None else runner
    name = type(model).__name__
    _refuse_tree_on_recurrence(model, collator, name)
    try:
        batch = collator(list(examples))
    except (ValueError, TypeError) as e:
        raise ValueError(f"check_packing: the collator refused the examples: {e}") from e
    paths = sequence_paths(batch)
    if not any(any(t) for _, t in paths):
        raise ValueError("check_packing: the examples train no token (every label -100 or masked): give examples "
                         "with trained tokens")
    state = _save_state(runner)
    try:
        runner.eval()
        with torch.no_grad():
            packed, dtype = _packed_logps(model, runner, batch, name)
            alone = [_alone_logps(model, runner, batch, path, name, "use_cache" in batch) for path, _ in paths]
    finally:
        _restore_state(runner, state)
    return _compare(model, name, dtype, batch, paths, packed, alone)


def _checked(model, examples, collator):
    torch = require_torch()
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module (a transformers causal LM), got {type(model).__name__}")
    if getattr(model, "config", None) is None:
        raise ValueError(f"{type(model).__name__} has no .config: check_packing takes a transformers causal LM "
                         "(or a module with a config whose output has logits)")
    if any(p.device.type == "meta" for p in model.parameters()):
        raise ValueError(f"{type(model).__name__} is on the meta device (its weights are not loaded): load or "
                         "materialise it (model.to_empty(device=...) and its weights) before check_packing")
    if isinstance(examples, (Mapping, str, bytes)) or not hasattr(examples, "__len__") or len(examples) == 0:
        raise ValueError("examples must be a non-empty list of examples (dicts with 'input_ids', pairs, groups), "
                         f"got {type(examples).__name__ if not hasattr(examples, '__len__') else 'an empty one'}")
    if collator is None:
        return PackedCollator()
    if not isinstance(collator, (PackedCollator, PaddedCollator, VisionPackedCollator)):
        raise TypeError(f"collator must be a packlib.torch.PackedCollator, PaddedCollator or VisionPackedCollator, got "
                        f"{type(collator).__name__}")
    return collator


def _refuse_tree_on_recurrence(model, collator, name: str) -> None:
    tree = getattr(collator, "share_prompt", False) or getattr(collator, "share_prefix", False)
    if not tree:
        return
    layers = stateful_layers(model)
    setting = stateful_config(model.config)
    if layers or setting:
        what = "share_prompt=True" if getattr(collator, "share_prompt", False) else "share_prefix=True"
        shown = "; ".join(layers[:3]) if layers else setting
        raise ValueError(f"{name} has layers that carry state along the row ({shown}): a {what} row lays a prompt "
                         "(prefix) out once for several continuations, which a mask can hide from attention but not "
                         "from a recurrence (its state cannot fork). Collate with PackedCollator() without sharing "
                         f"if check_packing(model, examples) passes on it, else {UNPACKED}")


def _save_state(model):
    return [(m, m.training) for m in model.modules()], [(p, p.requires_grad) for p in model.parameters()]


def _restore_state(model, state) -> None:
    modes, grads = state
    for m, training in modes:
        m.training = training
    for p, flag in grads:
        if p.requires_grad != flag:
            p.requires_grad_(flag)


def _model_dtype(model):
    torch = require_torch()
    for p in model.parameters():
        if p.is_floating_point():
            return p.device, p.dtype
    return torch.device("cpu"), torch.float32


def _scorer(model):
    """``(backbone, head)`` of a ``*ForSequenceClassification`` model (a reward model), else ``None``."""
    torch = require_torch()
    head, prefix = getattr(model, "score", None), getattr(model, "base_model_prefix", None)
    backbone = getattr(model, prefix, None) if isinstance(prefix, str) else None
    if isinstance(head, torch.nn.Module) and isinstance(backbone, torch.nn.Module):
        return backbone, head
    return None


def _logits(model, runner, kwargs, name: str, what: str):
    """The model's logits on ``kwargs`` (float32), or for a reward model its score head on
    every token's last hidden state: ``(rows, tokens, vocab or labels)``."""
    scorer = _scorer(model)
    try:
        if scorer is not None:
            hidden = scorer[0](**kwargs).last_hidden_state
            return scorer[1](hidden).float()
        out = runner(**kwargs)
    except Exception as e:  # noqa: BLE001  (transformers' own refusal, or any failure: reported naming the model)
        raise ValueError(f"{name} raised on {what}: {type(e).__name__}: {e}. It cannot be checked (or trained) this "
                         f"way: {UNPACKED}") from e
    logits = getattr(out, "logits", None)
    if logits is None and isinstance(out, Mapping):
        logits = out.get("logits")
    if logits is None or logits.dim() != 3:
        raise ValueError(f"{name}'s output has no logits of shape (rows, tokens, vocab): check_packing takes a causal "
                         "language model (a *ForCausalLM) or a reward model (a *ForSequenceClassification)")
    return logits.float()


def _normalised(model, logits):
    """Log-probabilities of a language model's logits; a reward model's scores as they are."""
    torch = require_torch()
    return logits if _scorer(model) is not None else torch.log_softmax(logits, dim=-1)


def _packed_logps(model, runner, batch, name: str):
    torch = require_torch()
    device, dtype = _model_dtype(model)
    inputs = model_inputs(batch) if "tree_end" not in batch or "attention_mask" in batch else \
        model_inputs({**batch, "attention_mask": tree_mask(batch)})
    moved = {}
    for k, v in inputs.items():
        if k == "labels":  # compared from the logits; a loss is not needed
            continue
        if torch.is_tensor(v):
            v = v.to(device)
            if v.is_floating_point():  # a 4-D mask: in the model's dtype
                v = v.to(dtype)
        moved[k] = v
    logits = _logits(model, runner, moved, name, "the packed row")
    flat = _normalised(model, logits.reshape(-1, logits.shape[-1]))
    return flat, str(dtype).replace("torch.", "")


def _alone_logps(model, runner, batch, path, name: str, use_cache: bool):
    """The sequence alone, and alone with tokens appended (which a causal model computes the
    sequence's positions through unchanged, up to rounding: the rounding of another shape)."""
    torch = require_torch()
    device, _ = _model_dtype(model)
    ids = batch["input_ids"].reshape(-1)[path].reshape(1, -1).to(device)
    extra = {"use_cache": False} if use_cache else {}
    alone = _normalised(model, _logits(model, runner, {"input_ids": ids, **extra}, name, "a sequence alone")[0])
    longer = torch.cat([ids, ids.flip(1), ids], dim=1)
    try:
        logits = _logits(model, runner, {"input_ids": longer, **extra}, name, "a longer row")
        appended = _normalised(model, logits[0, :ids.shape[1]])
    except ValueError:  # a model that takes no longer sequence: no estimate of the rounding
        appended = alone
    return alone, appended


def _difference(p, a, target, scores: bool):
    """``(absolute, relative)``: the largest difference of the trained tokens'
    log-probabilities (a reward model: of its scores), and of the whole rows over their spread."""
    if scores:
        d, spread = float((p - a).abs().max()), (a.max() - a.min())
    else:
        d = float((p.gather(1, target) - a.gather(1, target)).abs().max())
        spread = a.max(dim=-1).values - a.min(dim=-1).values
    rel = float(((p - a).abs().max(dim=-1).values / spread.clamp(min=1e-12)).max())
    return (float("inf") if d != d else d), (float("inf") if rel != rel else rel)


def _compare(model, name, dtype, batch, paths, packed, alone) -> PackingCheck:
    torch = require_torch()
    flat_ids = batch["input_ids"].reshape(-1)
    scores = _scorer(model) is not None
    diffs, worst, worst_rel, noise = [], (0.0, -1), 0.0, (0.0, 0.0)
    for k, ((path, trained), (own, appended)) in enumerate(zip(paths, alone)):
        js = [j for j in range(1, len(path)) if trained[j]]
        if not js:
            diffs.append(0.0)
            continue
        dev = own.device
        p = packed[torch.tensor([path[j - 1] for j in js], device=packed.device)].to(dev)
        rows = torch.tensor(js, device=dev) - 1
        a = own[rows]
        target = flat_ids[torch.tensor([path[j] for j in js])].to(dev)[:, None]
        d, rel = _difference(p, a, target, scores)
        noise = tuple(map(max, noise, _difference(appended[rows], a, target, scores)))
        diffs.append(d)
        worst, worst_rel = max(worst, (d, k)), max(worst_rel, rel)
    atol, rtol = _tolerance(dtype, noise)
    attn = attn_implementation(model)
    if worst[0] > atol or worst_rel > rtol:
        raise ValueError(_leak_message(model, name, dtype, worst, worst_rel, (atol, rtol), attn))
    return PackingCheck(max_difference=worst[0], differences=tuple(diffs), relative_difference=worst_rel,
                        tolerance=(atol, rtol), model=name, attn_implementation=attn, dtype=dtype)


def _tolerance(dtype: str, noise):
    """The dtype's tolerances, widened to :data:`NOISE_FACTOR` times the rounding measured on
    the model itself (each sequence alone against alone with tokens appended: the same values
    computed in another shape), at most :data:`NOISE_CAP` times the dtype's."""
    base = TOLERANCES.get(dtype, TOLERANCES["float32"])
    return tuple(max(t, min(NOISE_FACTOR * n, NOISE_CAP * t)) for t, n in zip(base, noise))


def _leak_message(model, name, dtype, worst, rel, tolerance, attn) -> str:
    d, k = worst
    return (f"{name} does not keep packed sequences apart (attn_implementation={attn!r}, {dtype}): a trained token's "
            f"log-probability differs by up to {d:.3g} between the packed row and the sequence alone (sequence {k}; "
            f"{rel:.3g} of the log-probabilities' spread; tolerance {tolerance[0]:g} absolute, {tolerance[1]:g} "
            f"relative), so every sequence after the first would be trained on its neighbours' tokens. "
            f"{likely_cause(model)}. To fix: {UNPACKED}; or, where the model's layers can read sequence "
            "boundaries (flash-linear-attention / mamba_ssm / causal_conv1d kernels on a GPU), install them and "
            "check again")
