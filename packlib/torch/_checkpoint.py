"""Checkpointable iteration: :class:`CheckpointableDataset` serves a checkpointable iterator
as a ``torch.utils.data.IterableDataset`` with ``state_dict()`` / ``load_state_dict()``."""
from __future__ import annotations

from ._lazy import require_torch

PUBLIC_MODULE = "packlib.torch"  # where the classes here say they live (pickles name it)


class CheckpointableDataset:
    """Wrap a checkpointable iterator (``getstate``/``setstate``, e.g.
    :class:`packlib.BucketedReadaheadBatchIterator`, :func:`packlib.pack_stream` or an
    infinibatch pipeline) as a ``torch.utils.data.IterableDataset`` with ``state_dict()`` /
    ``load_state_dict()``.

    Each element the iterator yields (a batch or a pack) is one element of the dataset:
    use ``DataLoader(ds, batch_size=None, num_workers=0)``. Several DataLoader workers
    would each replay the whole stream, so they are refused; shard across data-parallel
    ranks with the iterator's ``rank`` / ``world_size`` instead.

    ``state_dict()`` describes the position of what the *caller* has consumed: take it
    in the training loop, between steps. The object is an instance of this class and of
    ``torch.utils.data.IterableDataset`` (which the class joins when first used, so that
    ``import packlib.torch`` needs no torch).

    Parameters
    ----------
    iterator : iterator with getstate() and setstate()
        The stream to serve.
    """

    def __new__(cls, iterator):
        return super().__new__(iterable_dataset_class() if cls is CheckpointableDataset else cls)

    def __init__(self, iterator):
        super().__init__()
        if not all(hasattr(iterator, a) for a in ("getstate", "setstate", "__next__")):
            raise TypeError(
                f"iterator must have getstate(), setstate() and __next__, got {type(iterator).__name__}"
            )
        self._iterator = iterator

    def __iter__(self):
        info = require_torch().utils.data.get_worker_info()
        if info is not None and info.num_workers > 1:
            raise ValueError(
                "CheckpointableDataset runs in one process: use DataLoader(num_workers=0 or 1); "
                "shard across ranks with the iterator's rank/world_size"
            )
        return self

    def __next__(self):
        return next(self._iterator)

    def state_dict(self) -> dict:
        """The position of the stream, to save in a checkpoint."""
        return {"iterator_state": self._iterator.getstate()}

    def load_state_dict(self, state_dict: dict) -> None:
        """Continue from a position that :meth:`state_dict` returned.

        Parameters
        ----------
        state_dict : dict
            From :meth:`state_dict`.
        """
        if not isinstance(state_dict, dict):
            raise TypeError(
                f"state_dict must be a dict from CheckpointableDataset.state_dict(), got {type(state_dict).__name__}"
            )
        if "iterator_state" not in state_dict:
            raise ValueError(
                f"state_dict must come from CheckpointableDataset.state_dict() (it has keys {sorted(map(str, state_dict))}, "
                "not 'iterator_state')"
            )
        self._iterator.setstate(state_dict["iterator_state"])


ITERABLE_NAME = "_CheckpointableIterableDataset"


def iterable_dataset_class():
    """CheckpointableDataset joined with torch's IterableDataset, made once (named in
    :mod:`packlib.torch`, whose ``__getattr__`` makes it when unpickling, so that its
    instances pickle)."""
    made = globals().get(ITERABLE_NAME)
    if made is None:
        data = require_torch().utils.data
        made = type(ITERABLE_NAME, (CheckpointableDataset, data.IterableDataset), {"__module__": PUBLIC_MODULE})
        globals()[ITERABLE_NAME] = made
    return made


CheckpointableDataset.__module__ = PUBLIC_MODULE
