"""Which layers of a model carry state along a row: what :func:`packlib.torch.check_packing`
names as the likely cause when packed and unpacked differ, and why it refuses a shared
prompt or prefix tree on such a model before running it (a mask hides a token from
attention, not from a recurrence, so a recurrent state cannot fork).

Read from the model's modules (their class names) and its config (``layer_types``,
``layers_block_type``, ``hybrid_override_pattern``, ``block_types``); no list of
architectures, so a new model with such layers is named too.
"""
from __future__ import annotations

import re

#: class-name patterns of layers that carry state along the row, and what they are
_KINDS = (
    (re.compile(r"Mamba|Mixer|SSM|Ssm|SelectiveScan"), "Mamba / state-space mixer"),
    (re.compile(r"GatedDeltaNet|DeltaNet|LinearAttention|LinearAttn|Rwkv|RWKV|Retention"), "linear attention"),
    (re.compile(r"Rglru|RGLRU|RecurrentBlock|Recurrence|LRU\b"), "RG-LRU recurrence"),
    (re.compile(r"ShortConv|CausalConv"), "short convolution"),
)
#: config fields that name each layer's kind, and the kinds that are attention
_FIELDS = ("layer_types", "layers_block_type", "hybrid_override_pattern", "block_types")
_ATTENTION = {"full_attention", "sliding_attention", "attention", "chunked_attention", "global", "local", "*", "-",
              "E", "mlp", "moe"}


def stateful_layers(model) -> list[str]:
    """``["<module name> (<ClassName>: <kind>)", ...]``: the model's layers that carry state
    along the row, found by class name (a ``Conv1d`` counted only where no enclosing layer
    was found), outermost first; ``[]`` when none."""
    import torch

    found, inside = [], []
    for name, module in model.named_modules():
        if any(name.startswith(p + ".") for p in inside):
            continue
        cls = type(module).__name__
        kind = next((k for pattern, k in _KINDS if pattern.search(cls)), None)
        if kind is None and isinstance(module, torch.nn.Conv1d):
            kind = "Conv1d along the row"
        if kind is not None:
            found.append(f"{name or '<model>'} ({cls}: {kind})")
            inside.append(name)
    return found


def stateful_config(config) -> str | None:
    """The config field that says some layers are not attention (``layer_types=['conv',
    'full_attention']``), or ``None``."""
    for field in _FIELDS:
        value = getattr(config, field, None)
        if isinstance(value, str):
            if set(value) - _ATTENTION:
                return f"{field}={value!r}"
        elif isinstance(value, (list, tuple)) and value:
            others = sorted({str(v) for v in value} - _ATTENTION)
            if others:
                return f"{field} with {', '.join(map(repr, others))} layers"
    return None


def likely_cause(model) -> str:
    """A sentence naming the layers (or the config setting) that likely leak, or the other
    causes when none is found."""
    layers = stateful_layers(model)
    setting = stateful_config(getattr(model, "config", None))
    if layers:
        shown = "; ".join(layers[:3]) + (f"; and {len(layers) - 3} more" if len(layers) > 3 else "")
        where = f" ({setting})" if setting else ""
        return (f"likely cause: layers that carry state along the row{where}, which position_ids and "
                f"cu_seq_lens_* do not stop in this forward: {shown}")
    if setting:
        return (f"likely cause: the config's {setting}: layers that carry state along the row, which position_ids "
                "and cu_seq_lens_* do not stop in this forward")
    return ("no layer known to carry state along the row was found: look for an attention implementation that "
            "ignores position_ids / the mask (a custom kernel or patched forward), a KV cache in the forward "
            "(use_cache), or a layer that mixes the sequence axis (a running mean, a cumulative op, a router "
            "whose capacity spans the row)")
