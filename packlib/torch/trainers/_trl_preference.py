"""TRL's ``DPOTrainer``, ``RewardTrainer`` and ``KTOTrainer`` on packed rows:
``PackedDPOTrainer``, ``PackedRewardTrainer`` and ``PackedKTOTrainer``.

Each is the TRL trainer itself (a subclass, built when first asked for, so that TRL is
imported only then), taking the same arguments, whose ``data_collator`` defaults to a
:class:`packlib.torch.PackedCollator` that cuts as the trainer's own collator cuts
(``max_length``, ``truncation_mode``). Its loss is the trainer's own code, unchanged: the
packed row is handed to that code as a stand-in of its padded batch (each completion's
tokens laid out as the padded batch holds them, ``_trl_rows.py``), and the model, called by
that code, runs the packed row and returns what the code reads of it (per-token
log-probabilities, entropies, mean logits; a reward model's scores). So every ``loss_type``
that reads these fields, ``precompute_ref_log_probs``, the reference model (or PEFT's
disabled adapter), ``margin`` and ``center_rewards_coefficient``, KTO's KL term, the logged
metrics and the defaults are the trainer's. A padded batch (TRL's own collator) goes to the
trainer's code as it is.

Under :func:`packlib.torch.balance_trainer` each micro-batch's loss is scaled so that the
optimizer step's loss is the mean over all of the step's pairs (KTO: examples) on every
rank, whatever the sizes of its micro-batches (the Trainer's count of a step's items counts them).
"""
from __future__ import annotations

import contextlib
import copy
import inspect

from ..._compat import check_versions, host_method, reference_adapter, tp_size, with_host_methods
from ..check._trainer import add_packing_check
from ..collate._collator import PACKED_TRAINER_FLAG, PADDED_READERS, PackedCollator
from ..logps._logps import sequence_logps
from ..collate._preference import model_inputs, truncation_settings
from .._lazy import require_torch
from ._trl_rows import ROW_KEY, is_packed_row, packed_forward, padded_view, row_units

#: public name -> TRL's class it subclasses
TRAINERS = {packed: trl_name for trl_name, packed in PADDED_READERS.items()}
KL_KEY = "kl_batch"
_CLASSES: dict = {}


@with_host_methods
class _Packed:
    """What the three packed trainers share: the default collator, the model's packed
    forward, and the balanced steps' weighting."""

    _packlib_kind = "causal"
    _packlib_balanced = False
    _packlib_cuts = ()  # the config's settings of TRL's truncation that a PackedCollator must share

    def __init__(self, *args, packlib_check_packing: bool = True, **kwargs):
        base = _trl_base(type(self))
        bound = inspect.signature(base.__init__).bind(self, *args, **kwargs)
        if bound.arguments.get("data_collator") is None:
            bound.arguments["data_collator"] = self._packlib_default_collator(bound.arguments.get("args"), base)
        collator = bound.arguments["data_collator"]
        if isinstance(collator, PackedCollator):
            collator = _agreed_cuts(collator, bound.arguments.get("args"), base, self._packlib_cuts)
            bound.arguments["data_collator"] = self._packlib_collator(collator)
        super().__init__(*bound.args[1:], **bound.kwargs)
        add_packing_check(self, packlib_check_packing)  # check_packing on the model before the first step

    def _packlib_default_collator(self, args, base):
        return PackedCollator()

    def _packlib_collator(self, collator):
        return collator

    def _packlib_packed(self, stack) -> None:
        """Within ``stack``: the model (and the reference model) read packed rows."""
        stack.enter_context(packed_forward(self.model, self._packlib_kind))
        if getattr(self, "ref_model", None) is not None:
            stack.enter_context(packed_forward(self.ref_model, self._packlib_kind))

    def _packlib_inputs(self, row) -> dict:
        raise NotImplementedError

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if not is_packed_row(inputs):  # a padded batch: the trainer's own path
            return super().compute_loss(model, inputs, return_outputs=return_outputs)
        with contextlib.ExitStack() as stack:
            self._packlib_packed(stack)
            stack.enter_context(agreed_gather(self.accelerator))
            out = super().compute_loss(model, self._packlib_inputs(inputs), return_outputs=return_outputs)
        if not (self._packlib_balanced and num_items_in_batch is not None and self.model.training):
            return out
        loss, rest = (out[0], out[1:]) if return_outputs else (out, ())
        loss = loss * (row_units(inputs) * self._packlib_processes() / num_items_in_batch)
        return (loss, *rest) if return_outputs else loss

    def _packlib_processes(self) -> int:
        if not self.args.average_tokens_across_devices:
            return 1
        return max(1, self.accelerator.num_processes // max(1, self._packlib_tp()))

    def _packlib_tp(self) -> int:
        return tp_size(self)

    def _packlib_num_items_in_batch(self, batch_samples, device):
        """The step's denominator: its pairs (examples) over its micro-batches and ranks under
        balance_trainer; else the Trainer's own (its private method of that count is this one)."""
        if not (self._packlib_balanced and batch_samples and all(map(is_packed_row, batch_samples))):
            return host_method(self, _Packed, "num_items_in_batch")(batch_samples, device)
        torch = require_torch()
        n = torch.tensor(sum(row_units(b) for b in batch_samples), dtype=torch.int64, device=device)
        if self.args.average_tokens_across_devices and self.args.world_size > 1:
            n = self.accelerator.gather(n).sum() // self._packlib_tp()
        return n

    def packlib_balance(self) -> None:
        """Weigh each balanced step's pairs (examples) equally: what
        :func:`packlib.torch.balance_trainer` calls."""
        self._packlib_balanced = True
        self.loss_is_scaled_for_ga = True


class _DPO(_Packed):
    _packlib_cuts = ("max_length", "truncation_mode")

    def _packlib_default_collator(self, args, base):
        return PackedCollator(max_length=_setting(args, base, "max_length"),
                              truncation_mode=_setting(args, base, "truncation_mode"))

    def _packlib_inputs(self, row):
        ids, mask = padded_view(row)
        fake = {"input_ids": ids, "completion_mask": mask, "attention_mask": _tokens(row), ROW_KEY: row}
        fake.update({k: row[k] for k in ("ref_chosen_logps", "ref_rejected_logps") if k in row})
        return fake

    def compute_ref_log_probs(self, model, inputs):
        if not is_packed_row(inputs):
            return super().compute_ref_log_probs(model, inputs)
        with packed_forward(model, "causal"):
            return super().compute_ref_log_probs(model, self._packlib_inputs(inputs))


class _Reward(_Packed):
    _packlib_kind = "scores"

    def _packlib_inputs(self, row):
        fake = {"attention_mask": _tokens(row), ROW_KEY: row}
        if "margin" in row:
            fake["margin"] = row["margin"]
        return fake


@with_host_methods
class _KTO(_Packed):
    # per_device_train_batch_size sets KTO's KL pairs (TRL rotates completions within such
    # chunks of the dataset); balanced micro-batches are the sampler's whatever it is
    packlib_any_batch_size = True
    _packlib_cuts = ("max_length",)

    def _packlib_default_collator(self, args, base):
        return PackedCollator(max_length=_setting(args, base, "max_length"))

    def _packlib_collator(self, collator):
        return _KTOCollator(collator)

    def _packlib_inputs(self, row):
        ids, mask = padded_view(row)
        fake = {"input_ids": ids, "completion_mask": mask, "attention_mask": _tokens(row), "label": row["label"],
                ROW_KEY: row}
        fake.update({k: row[k] for k in ("ref_logps", "ref_KL_logps") if k in row})
        return fake

    def _packlib_kl_logps(self, model, batch):
        """KTO's KL term's log-probs of a packed row (its private method of them is this one)."""
        if ROW_KEY not in batch:
            return host_method(self, _KTO, "kl_logps")(model, batch)
        if not self.calculate_KL:
            return None
        return _kl_sums(model, batch[ROW_KEY])

    def compute_ref_log_probs(self, model, inputs):
        if not is_packed_row(inputs):
            return super().compute_ref_log_probs(model, inputs)
        torch = require_torch()
        # a PEFT model without ref_model is its own reference with the adapter disabled, as in TRL's
        with torch.no_grad(), reference_adapter(self), self.accelerator.autocast():
            logps = sequence_logps(model(**model_inputs(inputs)).logits, inputs)
            return logps, (_kl_sums(model, inputs) if self.calculate_KL else None)


@contextlib.contextmanager
def agreed_gather(accelerator):
    """Within the block, ``accelerator.gather`` (and ``gather_for_metrics``, which calls it)
    takes tensors whose first dimension differs between the processes: TRL's metrics gather one
    value per pair (example), and a balanced step's micro-batches hold different numbers of
    them on each rank, which a collective of one agreed shape cannot take. Each process's
    sizes are gathered first, every tensor padded to the largest, gathered, and the padding
    cut out again: the values TRL's gather would give of equal sizes. Afterwards the
    accelerator is as it was."""
    if getattr(accelerator, "num_processes", 1) < 2 or "gather" in vars(accelerator):
        yield
        return
    original = accelerator.gather
    accelerator.gather = lambda data: _gather_any(original, data)
    try:
        yield
    finally:
        del accelerator.gather


def _gather_any(gather, data):
    torch = require_torch()
    if isinstance(data, (tuple, list)):
        return type(data)(_gather_any(gather, d) for d in data)
    if isinstance(data, dict):
        return type(data)((k, _gather_any(gather, v)) for k, v in data.items())
    if not torch.is_tensor(data) or data.dim() == 0:
        return gather(data)
    sizes = gather(torch.tensor([data.shape[0]], dtype=torch.int64, device=data.device)).tolist()
    top = max(sizes)
    if min(sizes) == top:
        return gather(data)
    padded = torch.cat([data, data.new_zeros((top - data.shape[0], *data.shape[1:]))])
    every = gather(padded)
    return torch.cat([every[r * top:r * top + n] for r, n in enumerate(sizes)])


def _kl_sums(model, row):
    """KTO's KL sums: each example's prompt with its mismatched completion (no gradient)."""
    torch = require_torch()
    kl = row.get(KL_KEY)
    if kl is None:
        raise ValueError("KTOTrainer estimates its KL term from KL_completion_ids, but this packed batch has none: "
                         "keep the trainer's dataset column KL_completion_ids (loss_type='kto' adds it)")
    with torch.no_grad():
        return sequence_logps(model(**model_inputs(kl)).logits, kl)


class _KTOCollator:
    """KTO's examples: ``prompt_ids`` + ``completion_ids`` in one packed row, with
    ``label`` (and ``ref_logps``) carried, and their ``KL_completion_ids`` (each prompt with
    another example's completion, as TRL pairs them) in a second row, ``batch["kl_batch"]``."""

    def __init__(self, collator):
        self.collator = collator

    def __repr__(self) -> str:
        return f"KTO rows of {self.collator!r}"

    def __call__(self, examples):
        if not examples or "KL_completion_ids" not in examples[0]:
            return self.collator(examples)
        main = self.collator([{k: v for k, v in e.items() if k != "KL_completion_ids"} for e in examples])
        kl = self.collator([{"prompt_ids": e["prompt_ids"], "completion_ids": e["KL_completion_ids"]}
                            for e in examples])
        main[KL_KEY] = kl
        main["carried_keys"] = tuple(main["carried_keys"]) + (KL_KEY,)
        return main


def _tokens(row):
    """A stand-in ``attention_mask`` whose sum is the row's tokens (TRL's ``num_tokens``)."""
    torch = require_torch()
    return torch.ones_like(row["input_ids"])


def _agreed_cuts(collator, args, base, names):
    """A ``PackedCollator`` given to a packed trainer cuts as the trainer's config says (TRL's
    own collator cuts by ``max_length`` / ``truncation_mode``): one that sets no ``max_length``
    is copied with the config's, one that sets other values is refused, naming both."""
    if not names:
        return collator
    want = {name: _setting(args, base, name) for name in names}
    if collator.max_length is None and want["max_length"] is not None:
        agreed = copy.copy(collator)  # the user's collator itself is left as it is
        agreed.max_length, agreed.truncation_mode = truncation_settings(
            want["max_length"], want.get("truncation_mode", collator.truncation_mode), collator.share_prompt)
        return agreed
    for name in names:
        want, have = _setting(args, base, name), getattr(collator, name)
        if name == "truncation_mode" and _setting(args, base, "max_length") is None:
            continue  # nothing is cut: the mode does not matter
        if want != have:
            config = base.__name__.replace("Trainer", "Config")
            raise ValueError(f"the data_collator's {name}={have!r} but the trainer's {config} has {name}={want!r}: "
                             f"TRL's own collator cuts by the config, so the packed rows would hold other tokens than "
                             f"TRL's batch; build the collator with PackedCollator(..., {name}={want!r}), or set "
                             f"{name}={have!r} in the config (or leave data_collator out: the default cuts as the "
                             "config says)")
    return collator


def _setting(args, base, name):
    """``args.<name>``, or the default of the trainer's config when ``args`` is None."""
    if args is not None:
        return getattr(args, name)
    import trl

    config = getattr(trl, base.__name__.replace("Trainer", "Config"))
    return config.__dataclass_fields__[name].default


def _trl_base(cls):
    for c in cls.__mro__:
        if c.__module__.startswith("trl.") and c.__name__ in PADDED_READERS:
            return c
    raise TypeError(f"{cls.__name__} is not a subclass of TRL's DPOTrainer, RewardTrainer or KTOTrainer")


_MIXINS = {"PackedDPOTrainer": _DPO, "PackedRewardTrainer": _Reward, "PackedKTOTrainer": _KTO}

_DOC = """TRL's ``{base}`` on packed rows: the same arguments, loss and defaults, with
``data_collator`` a :class:`packlib.torch.PackedCollator` (by default one that cuts as the
trainer's own collator does); ``share_prompt=True`` lays each prompt out once. Before its first
step it checks that the model keeps packed sequences apart (:func:`packlib.torch.check_packing`;
``packlib_check_packing=False`` turns the check off). With
:func:`packlib.torch.balance_trainer`, every step's loss is the mean over its {unit}
(docs/preference.md, "{base}")."""


def trainer_class(name: str):
    """``PackedDPOTrainer``, ``PackedRewardTrainer`` or ``PackedKTOTrainer``: the TRL class
    with the packed path, built once (TRL imported then)."""
    if name not in _CLASSES:
        try:
            import trl
        except ImportError as e:
            raise ImportError(f"packlib.torch.{name} subclasses TRL's {TRAINERS[name]}: pip install 'packlib[trl]'") from e

        check_versions(("transformers", "accelerate", "trl"), f"packlib.torch.{name}")
        base_name = TRAINERS[name]
        base = getattr(trl, base_name)
        unit = "examples" if base_name == "KTOTrainer" else "pairs"
        cls = type(name, (_MIXINS[name], base), {"__module__": "packlib.torch", "__qualname__": name,
                                                 "__doc__": _DOC.format(base=base_name, unit=unit),
                                                 PACKED_TRAINER_FLAG: True})
        _CLASSES[name] = cls
    return _CLASSES[name]


def refuse_unweighted(trainer) -> None:
    """``balance_trainer``'s check: a TRL preference trainer weighs each micro-batch's mean
    equally, which a balanced step's micro-batches of different sizes would skew; the packed
    trainer weighs every pair (its ``packlib_balance``)."""
    if getattr(trainer, PACKED_TRAINER_FLAG, False):
        collator = trainer.data_collator
        if not isinstance(getattr(collator, "collator", collator), PackedCollator):
            raise ValueError(f"{type(trainer).__name__}'s data_collator is {type(collator).__name__}, whose padded "
                             "micro-batches it weighs as TRL does (each micro-batch's mean equally): pass "
                             "data_collator=packlib.torch.PackedCollator(), or leave it out")
        return
    for c in type(trainer).__mro__:
        if c.__module__.startswith("trl.") and c.__name__ in PADDED_READERS:
            fix = PADDED_READERS[c.__name__]
            raise ValueError(f"{c.__name__} averages each micro-batch's loss and weighs the micro-batches equally, "
                             "so a balanced step, whose micro-batches hold different numbers of pairs (KTO: examples), "
                             "would weigh them unequally (and TRL's padding collator cannot read a packed row): use "
                             f"packlib.torch.{fix} with data_collator=packlib.torch.PackedCollator(), the same "
                             "arguments otherwise, which weighs every pair of a step equally")

