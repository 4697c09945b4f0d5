"""The packing check before a trainer's first step: :func:`add_packing_check` adds a
``transformers.TrainerCallback`` whose ``on_train_begin`` runs :func:`check_packing` on the
trainer's model, with a few short sequences of its own training data laid out as its
collator lays them out. ``on_train_begin`` runs before the first optimizer step, so a
leaking model is refused before any step is taken.

Every rank reads the same first rows of the same dataset and runs the same forwards, with no
collective of its own: the ranks agree, and none waits for another. The cost is a handful of
forwards of a few dozen tokens.
"""
from __future__ import annotations

import weakref
from collections.abc import Mapping

from ..collate._collator import PackedCollator
from ..collate._examples import read_example
from ..collate._padded import PaddedCollator
from ..collate._vision import VisionPackedCollator
from ._check import run_check
from ._hf import attn_implementation

#: rows of the training data read, sequences checked, and tokens kept of each
ROWS, SEQUENCES, TOKENS = 8, 3, 24
#: the attribute that turns the check off on a trainer (``packlib_check_packing=False``)
FLAG = "packlib_check_packing"
CALLBACK_NAME, PUBLIC_MODULE = "PackingCheckCallback", "packlib.torch"
_CLASS = None


def add_packing_check(trainer, enabled: bool = True) -> None:
    """Make ``trainer`` run the packing check when training begins (once per trainer); with
    ``enabled=False`` (or a trainer built with ``packlib_check_packing=False``) it is off."""
    setattr(trainer, FLAG, bool(enabled) and bool(getattr(trainer, FLAG, True)))
    cls = callback_class()
    if not any(isinstance(c, cls) for c in trainer.callback_handler.callbacks):
        trainer.add_callback(cls(trainer))


def callback_class():
    """``packlib.torch.PackingCheckCallback``, made on first use (transformers imported then),
    under the name pickles look it up by (``packlib.torch.__getattr__`` makes it in a fresh
    process)."""
    global _CLASS
    if _CLASS is None:
        from transformers import TrainerCallback

        class PackingCheckCallback(TrainerCallback):
            """Runs :func:`packlib.torch.check_packing` on the trainer's model at ``on_train_begin``."""

            def __init__(self, trainer):
                self.trainer = weakref.ref(trainer)

            def __getstate__(self):  # a pickled trainer holds this callback, which holds the trainer
                return {"trainer": self.trainer()}

            def __setstate__(self, state):
                trainer = state["trainer"]
                self.trainer = weakref.ref(trainer) if trainer is not None else type(None)

            def on_train_begin(self, args, state, control, model=None, **kwargs):
                trainer = self.trainer()
                if trainer is not None and getattr(trainer, FLAG, True):
                    check_trainer_model(trainer, model if model is not None else trainer.model)

        PackingCheckCallback.__module__ = PUBLIC_MODULE
        PackingCheckCallback.__qualname__ = CALLBACK_NAME
        _CLASS = PackingCheckCallback
    return _CLASS


def check_trainer_model(trainer, model):
    """:func:`check_packing` on ``model`` with examples from ``trainer``'s data and collator."""
    wrapped = model
    model = trainer.accelerator.unwrap_model(model)
    sequences = _sequences(trainer, model)
    examples, collator = _layout(trainer, model, sequences)
    try:  # the forwards through the wrapper the trainer calls (FSDP's gathers its sharded parameters)
        return run_check(model, examples, collator, runner=wrapped)
    except ValueError as e:
        raise ValueError(f"{e}. (Checked before the first step by packlib's {type(trainer).__name__} path on "
                         f"{len(sequences)} short sequences of train_dataset; turn the check off with "
                         "balance_trainer(..., check_packing=False) or packlib_check_packing=False only if you know "
                         "why they differ)") from e


def _sequences(trainer, model) -> list[list[int]]:
    """Up to :data:`SEQUENCES` token lists of at most :data:`TOKENS` tokens, from the first rows
    of the training data (two copies of one if it holds only one; a fixed pattern of the
    vocabulary if it holds no token ids)."""
    found = []
    dataset = getattr(trainer, "train_dataset", None)
    rows = min(ROWS, len(dataset)) if dataset is not None and hasattr(dataset, "__len__") else 0
    for i in range(rows):
        try:
            row = dataset[i]
        except Exception:  # noqa: BLE001  (a dataset that cannot be read here: the fixed pattern instead)
            break
        for seq in _row_sequences(row, getattr(trainer, "processing_class", None)):
            if len(seq) >= 2 and len(found) < SEQUENCES:
                found.append(seq[:TOKENS])
    if not found:
        vocab = int(getattr(model.config.get_text_config() if hasattr(model.config, "get_text_config")
                            else model.config, "vocab_size", 0) or 2)
        found = [[(7 * i + 3 * s + 1) % vocab for i in range(n)] for s, n in enumerate((TOKENS, TOKENS // 2, 11))]
    return found if len(found) >= 2 else found * 2


def _ids(values) -> list[int]:
    if hasattr(values, "tolist"):
        values = values.tolist()
    return [int(v) for v in values] if isinstance(values, (list, tuple)) and all(
        isinstance(v, int) or hasattr(v, "__index__") for v in values) else []


def _row_sequences(row, tokenizer) -> list[list[int]]:
    if not isinstance(row, Mapping):
        return [_ids(row)]
    if "prompt_ids" in row or "chosen_ids" in row:
        prompt = _ids(row.get("prompt_ids", []))[: TOKENS // 2]
        completions = []
        for key in ("chosen_ids", "rejected_ids", "completion_ids"):
            value = row.get(key)
            if value is not None:
                value = value.tolist() if hasattr(value, "tolist") else value
                nested = bool(value) and isinstance(value[0], (list, tuple))
                completions.extend(_ids(v) for v in (value if nested else [value]))
        return [prompt + c for c in completions if c]
    if "input_ids" in row:
        try:
            ids, lens, _ = read_example({k: row[k] for k in ("input_ids", "seq_lengths", "position_ids")
                                         if row.get(k) is not None}, 0)
        except (ValueError, TypeError):
            return []
        starts = (lens.cumsum() - lens).tolist()
        return [ids[s:s + n].tolist() for s, n in zip(starts, lens.tolist())]
    prompt = row.get("prompt")
    if isinstance(prompt, str) and callable(tokenizer):
        try:
            return [_ids(tokenizer(prompt)["input_ids"])]
        except Exception:  # noqa: BLE001  (a processor that takes more than text: the fixed pattern instead)
            return []
    return []


def _tree_kind(trainer, model, collator) -> str | None:
    inner = getattr(collator, "collator", collator)
    if getattr(inner, "share_prefix", False):
        return "prefix"
    if getattr(inner, "share_prompt", False):
        return "prompt"
    grpo = any(c.__name__ == "PackedGRPOMixin" for c in type(trainer).__mro__)
    attn = attn_implementation(model) or ""
    return "prompt" if grpo and "flash" not in attn else None


def _layout(trainer, model, sequences):
    """The check's ``(examples, collator)``: the sequences as the trainer's collator lays them
    out (unpacked rows, a shared prompt, a prefix tree, or packed rows)."""
    collator = getattr(trainer, "data_collator", None)
    inner = getattr(collator, "collator", collator)
    if isinstance(inner, (PaddedCollator, VisionPackedCollator)):  # text rows, laid out as the trainer does
        return [{"input_ids": s} for s in sequences], inner
    tree = _tree_kind(trainer, model, collator)
    if tree == "prefix":
        return [{"input_ids": s} for s in sequences], PackedCollator(share_prefix=True, attention_mask="4d")
    if tree == "prompt":
        prompt, rest = sequences[0][: TOKENS // 2], [s[: TOKENS // 2] for s in sequences]
        return ([{"prompt_ids": prompt, "completion_ids": rest}],
                PackedCollator(share_prompt=True, ragged_groups=True))
    plain = isinstance(inner, PackedCollator) and not (inner.share_prompt or inner.share_prefix)
    return [{"input_ids": s} for s in sequences], inner if plain else PackedCollator()
