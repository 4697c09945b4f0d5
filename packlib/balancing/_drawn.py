"""Who draws a batch sampler: read from the calling frames, without importing torch or
Accelerate (both are looked up in ``sys.modules`` only, where the caller already loaded them).

:class:`packlib.BalancedBatchSampler` asks this when its ``len()`` or ``iter()`` is taken, to
know whether Accelerate's ``BatchSamplerShard`` deals its micro-batches (``accelerator.prepare``
on two or more processes: micro-batch ``i`` to process ``i mod n``), whether a
``DataLoader`` draws ahead of the training loop (worker processes, Accelerate's one-batch
look-ahead), and which dataset the loader reads.

>>> import sys
>>> drawn = drawn_by(sys._getframe(0))
>>> drawn.shard is None and drawn.workers is None and drawn.accelerate is None and drawn.outer_shard is None
True
"""
from __future__ import annotations

import sys
from typing import NamedTuple

_ACCELERATE = "accelerate.data_loader"
_DEPTH = 8  # frames between a sampler and the loader that draws it (Accelerate's wrappers, torch's iterator)


class Drawn(NamedTuple):
    """What the frames above a sampler's ``iter()`` or ``len()`` show."""

    shard: object      # Accelerate's BatchSamplerShard calling the sampler itself, else None
    workers: int | None  # num_workers of a torch DataLoader iterator that prefetches and keeps no state
    dataset: object    # the dataset of the torch DataLoader iterator drawing the sampler, else None
    accelerate: str | None  # the name of an Accelerate loader above (DataLoaderShard, DataLoaderDispatcher)
    outer_shard: object  # a BatchSamplerShard further up, sharding something that wraps the sampler
    stateful: bool     # the torch iterator keeps a state of what was consumed (torchdata's StatefulDataLoader)


def _owner(frame):
    return frame.f_locals.get("self") if frame is not None else None


def accelerate_shard(frame, sampler):
    """Accelerate's ``BatchSamplerShard`` whose method is ``frame`` and which wraps ``sampler``."""
    owner = _owner(frame)
    if type(owner).__module__ == _ACCELERATE and type(owner).__name__ == "BatchSamplerShard" \
            and getattr(owner, "batch_sampler", None) is sampler:
        return owner
    return None


def drawn_by(frame, sampler=None) -> Drawn:
    """Read the frames from ``frame`` (the caller of the sampler's method) upwards."""
    shard = accelerate_shard(frame, sampler) if sampler is not None else None
    loader_module = sys.modules.get("torch.utils.data.dataloader")
    base = getattr(loader_module, "_BaseDataLoaderIter", None)
    workers = dataset = accelerate = outer = None
    seen_iterator = stateful = False
    for _ in range(_DEPTH):
        if frame is None:
            break
        owner = _owner(frame)
        if base is not None and not seen_iterator and isinstance(owner, base):
            seen_iterator = True
            n, stateful = getattr(owner, "_num_workers", 0), hasattr(owner, "state_dict")
            workers = n if n > 0 and not stateful else None
            dataset = getattr(owner, "_dataset", None)
        if accelerate is None and type(owner).__module__ == _ACCELERATE \
                and type(owner).__name__ in ("DataLoaderShard", "DataLoaderDispatcher"):
            accelerate = type(owner).__name__
        if shard is None and outer is None and type(owner).__module__ == _ACCELERATE \
                and type(owner).__name__ == "BatchSamplerShard":
            outer = owner
        frame = frame.f_back
    return Drawn(shard, workers, dataset, accelerate, outer, stateful)


def accelerate_processes():
    """``(num_processes, process_index)`` of Accelerate's ``PartialState`` when one was made
    in this process (an ``Accelerator``, or ``accelerator.prepare``), else ``None``."""
    state = sys.modules.get("accelerate.state")
    partial = getattr(state, "PartialState", None)
    if partial is None or not getattr(partial, "_shared_state", None):
        return None
    s = partial()
    return s.num_processes, s.process_index
