"""The trainer side of :func:`packlib.torch.balance_trainer`: :class:`BalancedTrainerMixin`,
whose ``get_train_dataloader`` (the Trainer's documented override point for its training
data) draws the balanced stream the trainer holds, and the classes that carry it.

A trainer is balanced by its class, never by a function set on the instance:
:func:`balanced_class` is ``(BalancedTrainerMixin, cls)`` for a trainer class ``cls``, made
once per class and named so that ``pickle`` finds it in a fresh process
(``packlib.torch.Balanced[module:qualname]``, rebuilt by ``packlib.torch.__getattr__``). The
model is not touched: ``copy.deepcopy(trainer.model)`` and a pickled model carry nothing of
packlib's.

>>> from packlib.torch.trainers._balanced import BalancedTrainerMixin, balanced_name
>>> BalancedTrainerMixin.__module__
'packlib.torch'
>>> balanced_name(BalancedTrainerMixin)
'Balanced[packlib/torch:BalancedTrainerMixin]'
"""
from __future__ import annotations

import functools
import importlib

import numpy as np

from ..._compat import collator_with_removed_columns, remove_unused_columns
from .._lazy import require_torch
from ..check._trainer import CALLBACK_NAME, callback_class

PUBLIC_MODULE = "packlib.torch"  # where the classes here say they live (pickles name it)
EPOCHS_NAME = "BalancedEpochs"
_PREFIX = "Balanced["
_CLASSES: dict = {}
_LOADER_ARGS = {"num_workers": "dataloader_num_workers", "pin_memory": "dataloader_pin_memory",
                "persistent_workers": "dataloader_persistent_workers",
                "multiprocessing_context": "dataloader_multiprocessing_context",
                "prefetch_factor": "dataloader_prefetch_factor", "in_order": "dataloader_in_order"}


class BalancedTrainerMixin:
    """Put before a ``transformers.Trainer`` class (TRL's included) in a class's bases:
    ``class MyTrainer(BalancedTrainerMixin, Trainer)``. Its ``get_train_dataloader`` returns a
    ``DataLoader`` over the balanced steps the trainer holds (``packlib_stream``), prepared by
    the trainer's ``Accelerator`` and declared to the stream (``drawn_by``), so each process
    gets exactly its micro-batches.

    :func:`packlib.torch.balance_trainer` gives a trainer its stream, after its checks: on a
    trainer of another class it switches the instance to ``(BalancedTrainerMixin, its class)``
    (made once per class, picklable), so nothing is set on the instance's methods. A trainer of
    this class that was not given a stream is refused when it asks for its training data
    (``RuntimeError``, naming ``balance_trainer``).
    """

    #: the planned epochs end to end (``packlib.balancing.EpochStream``), set by ``balance_trainer``
    packlib_stream = None

    def get_train_dataloader(self):
        """The balanced steps' ``DataLoader`` (``packlib_stream`` drawn through the trainer's
        collator and ``Accelerator``)."""
        if self.packlib_stream is None:
            raise RuntimeError(f"{type(self).__name__} is a BalancedTrainerMixin but no balanced sampler was given "
                               "to it: call packlib.torch.balance_trainer(trainer, sampler) before train()")
        return train_dataloader(self, self.packlib_stream)


BalancedTrainerMixin.__module__ = PUBLIC_MODULE


def balanced_name(cls) -> str:
    """The name pickles give the balanced class of ``cls``: its module and qualified name,
    with ``/`` for the dots (a pickled name is looked up attribute by attribute at the dots)."""
    return f"{_PREFIX}{cls.__module__}:{cls.__qualname__}]".replace(".", "/")


def balanced_class(cls):
    """``cls`` with :class:`BalancedTrainerMixin` first in its bases (``cls`` itself when it
    has it): one class per ``cls``, cached."""
    if issubclass(cls, BalancedTrainerMixin):
        return cls
    if cls not in _CLASSES:
        name = balanced_name(cls)
        _CLASSES[cls] = type(f"Balanced{cls.__name__}", (BalancedTrainerMixin, cls), {
            "__module__": PUBLIC_MODULE, "__qualname__": name,
            "__doc__": f"``{cls.__module__}.{cls.__qualname__}`` drawing balanced steps (:class:`BalancedTrainerMixin`)."})
    return _CLASSES[cls]


def public_class(name: str):
    """The class ``packlib.torch.<name>`` made here, for ``pickle`` in a fresh process: a
    balanced class (:func:`balanced_name`) or a callback of the balanced or packed trainers;
    ``None`` for another name."""
    if name == EPOCHS_NAME:
        return epoch_callback_class()
    if name == CALLBACK_NAME:
        return callback_class()
    if not (name.startswith(_PREFIX) and name.endswith("]") and ":" in name):
        return None
    module, qualname = name[len(_PREFIX):-1].replace("/", ".").split(":", 1)
    cls = importlib.import_module(module)
    for part in qualname.split("."):
        cls = getattr(cls, part)
    return balanced_class(cls)


def train_dataloader(trainer, stream):
    """What a balanced trainer's ``get_train_dataloader()`` returns: a ``DataLoader`` drawing
    ``stream``, prepared by the trainer's ``Accelerator``."""
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
    check_rows(dataset, stream.source)
    args = trainer.args
    kwargs = {k: getattr(args, a) for k, a in _LOADER_ARGS.items() if hasattr(args, a)}
    kwargs["worker_init_fn"] = functools.partial(seed_worker, num_workers=args.dataloader_num_workers,
                                                 rank=args.process_index)
    loader = torch.utils.data.DataLoader(dataset, batch_sampler=stream, collate_fn=collator, **kwargs)
    return stream.drawn_by(trainer.accelerator.prepare(loader))


def check_rows(dataset, sampler) -> None:
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


def epoch_callback_class():
    """``packlib.torch.BalancedEpochs``: a ``TrainerCallback`` that sets its stream's epoch when
    the Trainer begins one: the epoch the Trainer is in, ``global_step // steps per epoch`` (a
    resume included), which Accelerate's ``set_epoch`` does not reach through its wrappers
    after a skip. Made on first use (transformers imported then)."""
    made = globals().get(EPOCHS_NAME)
    if made is None:
        from transformers import TrainerCallback

        def on_epoch_begin(self, args, state, control, **kwargs):
            self.stream.set_epoch(state.global_step // self.stream.steps_per_epoch)

        made = type(EPOCHS_NAME, (TrainerCallback,), {
            "__module__": PUBLIC_MODULE, "__init__": _epochs_init, "on_epoch_begin": on_epoch_begin,
            "__doc__": "Sets a balanced stream's epoch when the Trainer begins one (packlib.torch.balance_trainer)."})
        globals()[EPOCHS_NAME] = made
    return made


def _epochs_init(self, stream):
    self.stream = stream
