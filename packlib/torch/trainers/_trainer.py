"""Balanced steps in ``transformers.Trainer`` and TRL's trainers: :func:`balance_trainer`.

The Trainer draws its training data from :meth:`Trainer.get_train_dataloader`, a
``DataLoader`` with its own sampler that Accelerate then shards. :func:`balance_trainer`
replaces that method on one trainer with a ``DataLoader`` over the planned epochs of a
:class:`packlib.BalancedBatchSampler`, end to end, prepared by the trainer's own
``Accelerator`` and declared to the stream (``drawn_by``: each process gets exactly its
micro-batches), and
adds a callback that sets the epoch at every epoch the Trainer begins, a resumed one included. The
Trainer's own machinery does the rest: ``gradient_accumulation_steps`` micro-batches per
optimizer step, each step's loss the token mean over all of them on every rank
(``num_items_in_batch``), and ``train(resume_from_checkpoint=...)`` skipping what was trained.

>>> import packlib
>>> from packlib.torch import balance_trainer                            # doctest: +SKIP
>>> sampler = packlib.BalancedBatchSampler(lengths, 4096, rank=args.process_index,
...                                        world_size=args.world_size,
...                                        micro_batches=args.gradient_accumulation_steps)  # doctest: +SKIP
>>> trainer = balance_trainer(Trainer(model=model, args=args, train_dataset=dataset,
...                                   data_collator=PackedCollator()), sampler)  # doctest: +SKIP
"""
from __future__ import annotations

import functools
import warnings

import numpy as np

from ..._compat import check_versions, collator_with_removed_columns, remove_unused_columns
from ...balancing._epochs import EpochStream
from ...balancing._sampler import BalancedBatchSampler, set_label_counter
from ..check._trainer import add_packing_check
from ..collate._examples import label_tokens
from ..collate._padded import PaddedCollator
from .._lazy import require_torch
from ._checks import check_trainer
from ._trl_preference import refuse_unweighted

set_label_counter(label_tokens)  # the sampler counts what this package's collator trains

_LOADER_ARGS = {"num_workers": "dataloader_num_workers", "pin_memory": "dataloader_pin_memory",
                "persistent_workers": "dataloader_persistent_workers",
                "multiprocessing_context": "dataloader_multiprocessing_context",
                "prefetch_factor": "dataloader_prefetch_factor", "in_order": "dataloader_in_order"}


def balance_trainer(trainer, sampler, *, check_packing: bool = True):
    """Make ``trainer`` train the balanced steps of ``sampler``: its micro-batches, in its
    order, ``sampler.micro_batches`` per optimizer step, on every process.

    Parameters
    ----------
    trainer : transformers.Trainer
        Any ``Trainer`` (TRL's ``SFTTrainer`` included), built with
        ``per_device_train_batch_size=1`` (a micro-batch is one packed row) and a
        ``data_collator`` that packs a micro-batch into one row
        (:class:`packlib.torch.PackedCollator`), or, for a model that cannot pack,
        :class:`packlib.torch.PaddedCollator` with a sampler built with ``padded=True`` (a
        ``UserWarning`` without it). Changed in place.
    sampler : packlib.BalancedBatchSampler
        Built from the lengths of ``trainer.train_dataset`` (as the trainer holds it, after
        any preparation of its own), with ``rank=args.process_index``,
        ``world_size=args.world_size`` and ``micro_batches=args.gradient_accumulation_steps``.
    check_packing : bool, default True
        When training begins, before the first step, check that the model computes a packed
        row as each of its sequences alone (:func:`packlib.torch.check_packing`, on a few short
        sequences of ``train_dataset`` laid out by the trainer's collator) and refuse a model
        that leaks across them (``ValueError``); ``False`` turns the check off.

    Returns
    -------
    transformers.Trainer
        ``trainer`` itself.

    Notes
    -----
    A balanced schedule's epochs may differ by a step or two, while the Trainer runs every
    epoch of its own for as many steps as its first. So the Trainer draws the planned epochs
    end to end, its own epochs cut at the first planned epoch's steps, and stops when
    ``num_train_epochs`` planned epochs are done:
    ``args.max_steps`` is set to their steps (unless it was set), every planned epoch is
    trained exactly once, whole, and a resume lands on the micro-batch where the run stopped.
    Each step's loss is the token mean over all its micro-batches on every rank with the
    Trainer's default ``average_tokens_across_devices=True`` (with ``False`` each rank divides
    by its own tokens).

    TRL's ``DPOTrainer``, ``RewardTrainer`` and ``KTOTrainer`` average each micro-batch's loss,
    which would weigh a balanced step's pairs unequally: they are refused, naming
    ``packlib.torch.PackedDPOTrainer`` (``PackedRewardTrainer``, ``PackedKTOTrainer``), whose
    step's loss is then the mean over all the step's pairs (KTO: examples) on every rank
    (``PackedKTOTrainer`` takes any ``per_device_train_batch_size``: it only sets KTO's KL pairs).

    Refused (``RuntimeError``, naming the installed and the supported versions): transformers,
    Accelerate or (for TRL's trainers) TRL outside the supported range (docs/training.md,
    "Supported versions"). Refused (``ValueError``, naming the setting): ``per_device_train_batch_size`` other than
    1, ``gradient_accumulation_steps`` other than the sampler's ``micro_batches``, a rank or
    world size other than the trainer's, transformers' padding collators, TRL's preference
    trainers (above), and (when the trainer builds its loader) a dataset whose rows are not
    the sampler's lengths. Also, before anything changes: a dataset without ``len()`` and
    indexing (iterable, streaming), a trainer that regroups rows (TRL's ``GRPOTrainer``,
    ``RLOOTrainer``: use ``PackedGRPOTrainer``), a model that declares
    ``accepts_loss_kwargs = False`` (its loss cannot take ``num_items_in_batch``) unless a
    ``compute_loss_func`` is given; Qwen2.5-VL and Qwen3-VL, whose ``forward`` does pass it on
    although they declare ``False``, get ``trainer.model_accepts_loss_kwargs = True``; a model transformers cannot resume through
    the Trainer (Qwen2-VL, Qwen2.5-VL) is warned about.
    """
    if not isinstance(sampler, BalancedBatchSampler):
        raise TypeError(f"sampler must be a packlib.BalancedBatchSampler, got {type(sampler).__name__}")
    from_trl = any(c.__module__.startswith("trl.") for c in type(trainer).__mro__)
    check_versions(("transformers", "accelerate") + (("trl",) if from_trl else ()), "packlib.torch.balance_trainer")
    refuse_unweighted(trainer)  # TRL's preference trainers: packlib's, which weigh every pair of a step, or refused
    args = trainer.args
    if args.per_device_train_batch_size != 1 and not getattr(trainer, "packlib_any_batch_size", False):
        raise ValueError(f"per_device_train_batch_size={args.per_device_train_batch_size}: each micro-batch of a "
                         "balanced schedule is one packed row, so set per_device_train_batch_size=1")
    if args.gradient_accumulation_steps != sampler.micro_batches:
        raise ValueError(f"gradient_accumulation_steps={args.gradient_accumulation_steps} but the sampler plans "
                         f"{sampler.micro_batches} micro-batches per step: set gradient_accumulation_steps="
                         f"{sampler.micro_batches}, or build the sampler with micro_batches="
                         "args.gradient_accumulation_steps")
    if (args.world_size, args.process_index) != (sampler.world_size, sampler.rank):
        raise ValueError(f"the sampler was built for rank {sampler.rank} of world_size {sampler.world_size}, but this "
                         f"trainer runs process {args.process_index} of {args.world_size}: build it with "
                         "rank=args.process_index, world_size=args.world_size")
    _check_collator(trainer.data_collator, sampler)
    check_trainer(trainer, sampler)
    if args.max_steps > 0:
        stream = EpochStream(sampler, total_steps=args.max_steps)
    else:
        stream = EpochStream(sampler, epochs=args.num_train_epochs)
        args.max_steps = stream.total_steps  # the Trainer stops when the planned epochs end, each whole
    trainer.get_train_dataloader = lambda: _train_dataloader(trainer, stream)
    trainer.add_callback(_epoch_callback(stream))
    add_packing_check(trainer, check_packing)  # check_packing on the model before the first step
    if callable(getattr(trainer, "packlib_balance", None)):
        trainer.packlib_balance()  # each step's loss: the mean over its pairs (examples), on every rank
    return trainer


def _check_collator(collator, sampler) -> None:
    from transformers.data.data_collator import DataCollatorWithPadding, default_data_collator

    if collator is default_data_collator or isinstance(collator, DataCollatorWithPadding):
        raise ValueError("the trainer's data_collator pads a micro-batch's samples into a batch of rows; a balanced "
                         "micro-batch is one packed row: pass data_collator=packlib.torch.PackedCollator()")
    if isinstance(collator, PaddedCollator) and not sampler.padded:
        warnings.warn("data_collator=PaddedCollator() lays each sequence out in its own row, but the sampler plans "
                      "micro-batches for packed rows (a long sequence beside several short ones, all padded to the "
                      "longest: more tokens computed, and up to sequences x max_sequence_length of them in memory); "
                      "build the sampler with padded=True (micro-batches of similar lengths, at most "
                      "max_sequence_length tokens with their padding)", UserWarning, stacklevel=3)


def _train_dataloader(trainer, stream):
    """What ``trainer.get_train_dataloader()`` returns: a ``DataLoader`` drawing ``stream``,
    prepared by the trainer's ``Accelerator``."""
    torch = require_torch()
    from transformers.trainer_utils import seed_worker

    dataset, collator = trainer.train_dataset, trainer.data_collator
    if dataset is None or isinstance(dataset, torch.utils.data.IterableDataset) or not hasattr(dataset, "__len__"):
        raise ValueError("a balanced schedule needs a train_dataset with a len() and indexing (a datasets.Dataset, "
                         "a list of examples), not an iterable dataset")
    if hasattr(dataset, "column_names") and hasattr(dataset, "with_format"):  # a datasets.Dataset
        dataset = remove_unused_columns(trainer, dataset)
    else:
        collator = collator_with_removed_columns(trainer, collator)
    _check_rows(dataset, stream.source)
    args = trainer.args
    kwargs = {k: getattr(args, a) for k, a in _LOADER_ARGS.items() if hasattr(args, a)}
    kwargs["worker_init_fn"] = functools.partial(seed_worker, num_workers=args.dataloader_num_workers,
                                                 rank=args.process_index)
    loader = torch.utils.data.DataLoader(dataset, batch_sampler=stream, collate_fn=collator, **kwargs)
    return stream.drawn_by(trainer.accelerator.prepare(loader))


def _check_rows(dataset, sampler) -> None:
    """The dataset is the one the sampler was planned for: as many rows, of its lengths."""
    lengths = sampler._settings.lengths
    if len(dataset) != lengths.size:
        raise ValueError(f"the trainer's train_dataset holds {len(dataset):,} rows but the sampler was built from "
                         f"{lengths.size:,} lengths (a trainer's preparation may truncate or drop rows: TRL's "
                         "max_length; build the sampler from the lengths of trainer.train_dataset)")
    names = getattr(dataset, "column_names", None)
    if sampler._settings.group_lengths is not None:
        return  # 2-D lengths: a sample is a group (its row holds more than one sequence)
    if not isinstance(names, list) or "input_ids" not in names or "attention_mask" in names:
        return  # only a datasets.Dataset's token lists are read here (padding: lengths may count real tokens)
    from ...formats.arrow._columns import _column_lengths

    have = _column_lengths(dataset.select_columns(["input_ids"]).with_format("arrow")[:].column("input_ids"))
    bad = np.flatnonzero(have != lengths)
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"row {i} of the trainer's train_dataset holds {int(have[i])} input_ids but the sampler "
                         f"planned {int(lengths[i])} tokens for it ({bad.size:,} rows differ; a trainer's preparation "
                         "may truncate them: TRL's max_length): build the sampler from the lengths of "
                         "trainer.train_dataset")


_CALLBACK = None


def _epoch_callback(stream):
    """A ``TrainerCallback`` that sets ``stream``'s epoch when the Trainer begins one: the
    epoch the Trainer is in, ``global_step // steps per epoch`` (a resume included), which
    Accelerate's ``set_epoch`` does not reach through its wrappers after a skip."""
    global _CALLBACK
    if _CALLBACK is None:
        from transformers import TrainerCallback

        class BalancedEpochs(TrainerCallback):
            def __init__(self, stream):
                self.stream = stream

            def on_epoch_begin(self, args, state, control, **kwargs):
                self.stream.set_epoch(state.global_step // self.stream.steps_per_epoch)

        _CALLBACK = BalancedEpochs
    return _CALLBACK(stream)
