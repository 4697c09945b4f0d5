"""How a batch sampler is drawn, as its user declares it: read from the ``DataLoader`` handed
to :meth:`packlib.BalancedBatchSampler.drawn_by`, never from the calling frames, and without
importing torch or Accelerate (an Accelerate loader is known by its class's module). The
loader's collator may declare what it trains of each example (a ``label_tokens(dataset)``
method, as :class:`packlib.torch.PackedCollator` does): the sampler's default
``label_tokens``, with no global rule installed by an adapter.

:class:`packlib.BalancedBatchSampler` yields its own rank's micro-batches unless told that
Accelerate's ``BatchSamplerShard`` deals them (``accelerator.prepare`` on two or more
processes: micro-batch ``i`` to process ``i mod n``), in which case it yields every rank's.
Undeclared under an Accelerate state of two or more processes, it cannot know which, and
refuses (:func:`undeclared_refusal`).

>>> drawing = loader_drawing([[0, 1]], sampler=None)  # a loader without a batch_sampler: refused
Traceback (most recent call last):
...
ValueError: drawn_by() takes the DataLoader that draws this sampler (after accelerator.prepare when Accelerate prepares it), got list
>>> UNDECLARED.processes is None and UNDECLARED.ahead is None
True
"""
from __future__ import annotations

from typing import NamedTuple

from .._compat import accelerate_processes

_ACCELERATE = "accelerate.data_loader"


class Drawn(NamedTuple):
    """How a sampler is drawn."""

    processes: int | None  # Accelerate's BatchSamplerShard deals its micro-batches among this many processes
    process_index: int | None  # ... to this process
    ahead: str | None  # why the loader draws micro-batches ahead of the loop (and keeps no state of it)
    dataset: object    # the dataset of the loader drawing the sampler, else None
    accelerate: str | None  # the class of an Accelerate loader (DataLoaderShard, DataLoaderDispatcher)
    split_batches: bool  # Accelerate splits each batch between the processes
    declared: bool     # told by drawn_by() (or balance_trainer), not assumed
    count_labels: object = None  # the loader's collator's label_tokens(dataset), where it declares one


UNDECLARED = Drawn(None, None, None, None, None, False, False)


def _is_accelerate(obj, name: str) -> bool:
    return type(obj).__module__ == _ACCELERATE and type(obj).__name__ == name


def loader_drawing(loader, sampler) -> Drawn:
    """What ``loader`` (a ``torch.utils.data.DataLoader``, or Accelerate's prepared one) shows
    of how it draws ``sampler``: read from the loader's public attributes."""
    batch_sampler = getattr(loader, "batch_sampler", None)
    if batch_sampler is None or not hasattr(loader, "dataset"):
        raise ValueError("drawn_by() takes the DataLoader that draws this sampler (after accelerator.prepare when "
                         f"Accelerate prepares it), got {type(loader).__name__}")
    accelerate = type(loader).__name__ if type(loader).__module__ == _ACCELERATE else None
    processes = index = None
    split = False
    if _is_accelerate(batch_sampler, "BatchSamplerShard"):
        if batch_sampler.batch_sampler is not sampler:
            raise ValueError(
                "Accelerate's BatchSamplerShard deals the batches of "
                f"{type(batch_sampler.batch_sampler).__name__}, which wraps this sampler, one to each process in "
                f"turn: each rank would keep one micro-batch in {batch_sampler.num_processes} of its own plan. Pass "
                "the BalancedBatchSampler itself as the DataLoader's batch_sampler")
        processes, index = int(batch_sampler.num_processes), int(batch_sampler.process_index)
        split = bool(batch_sampler.split_batches)
    elif batch_sampler is not sampler and accelerate != "DataLoaderDispatcher":
        raise ValueError(f"this DataLoader draws {type(batch_sampler).__name__}, not this sampler: pass the "
                         "BalancedBatchSampler itself as the DataLoader's batch_sampler, and the loader to drawn_by()")
    stateful = bool(getattr(loader, "use_stateful_dataloader", False)) if accelerate else hasattr(loader, "state_dict")
    count = getattr(getattr(loader, "collate_fn", None), "label_tokens", None)
    return Drawn(processes, index, _ahead(loader, accelerate, stateful), loader.dataset, accelerate, split, True,
                 count if callable(count) else None)


def _ahead(loader, accelerate, stateful) -> str | None:
    """Why the sampler's position runs ahead of what the training loop consumed, or ``None``
    (a stateful loader's own state accounts for it)."""
    n = int(getattr(loader, "num_workers", 0) or 0)
    if stateful:
        return None
    if n > 0:
        return (f"this sampler is drawn by a DataLoader with num_workers={n}, which takes micro-batches ahead of the "
                "training loop (prefetch)")
    if accelerate is not None:
        return ("this sampler is drawn through Accelerate's prepared DataLoader, which takes one micro-batch ahead of "
                "the training loop to know the last one")
    return None


def undeclared_refusal(world_size: int) -> str | None:
    """Why an undeclared sampler of ``world_size`` ranks cannot know what to yield: Accelerate
    runs two or more processes here, and ``accelerator.prepare`` may deal its micro-batches
    (every rank's wanted) or not (this rank's). ``None`` when it can know."""
    procs = accelerate_processes()
    if world_size < 2 or procs is None or procs[0] < 2:
        return None
    return (f"this BalancedBatchSampler is drawn under Accelerate's {procs[0]} processes, and it cannot tell whether "
            "accelerator.prepare deals its micro-batches (then it must yield every rank's) or a plain DataLoader "
            "draws it (its own rank's only); guessing wrong loses or repeats samples. Declare it: "
            "loader = sampler.drawn_by(accelerator.prepare(loader)) (or sampler.drawn_by(loader) for a loader "
            "that is not prepared); in a transformers Trainer use packlib.torch.balance_trainer, which declares it")


def check_drawn(drawn: Drawn, check_processes) -> None:
    """Refuse the ways of drawing a balanced sampler that would train the wrong micro-batches
    (``check_processes(num_processes, process_index, who)``: the sampler's check of its rank)."""
    if drawn.accelerate == "DataLoaderDispatcher":
        raise ValueError(
            "Accelerate's dispatch_batches=True draws this sampler on the main process and splits each batch "
            "between the processes, which cuts packed rows apart; prepare the DataLoader with "
            "Accelerator(dataloader_config=DataLoaderConfiguration(dispatch_batches=False))")
    if drawn.processes is not None:
        if drawn.split_batches:
            raise ValueError("Accelerate's split_batches=True splits each micro-batch between the processes; "
                             "prepare the DataLoader with split_batches=False")
        check_processes(drawn.processes, drawn.process_index, "accelerator.prepare (BatchSamplerShard)")
    elif drawn.accelerate is not None and (procs := accelerate_processes()) is not None:
        check_processes(*procs, "Accelerate")
