"""PyTorch adapter: a checkpointable iterator as a ``torch.utils.data.IterableDataset``.

Needs the ``torch`` extra (``pip install packlib[torch]``); torch is imported only when the
adapter is used, so ``import packlib.torch`` works without it.

>>> from packlib.torch import CheckpointableDataset            # doctest: +SKIP
>>> ds = CheckpointableDataset(packlib.BucketedReadaheadBatchIterator(...))  # doctest: +SKIP
>>> loader = torch.utils.data.DataLoader(ds, batch_size=None)  # doctest: +SKIP
>>> checkpoint["data"] = ds.state_dict()                       # doctest: +SKIP
"""
from __future__ import annotations

__all__ = ["CheckpointableDataset"]

_CLASS = None


def _torch_data():
    try:
        import torch.utils.data as data
    except ImportError as e:  # torch missing or broken
        raise ImportError(
            "packlib.torch needs PyTorch: pip install torch (or pip install packlib[torch])"
        ) from e
    return data


def _build():
    global _CLASS
    if _CLASS is not None:
        return _CLASS
    data = _torch_data()

    class CheckpointableDataset(data.IterableDataset):
        """Wrap a checkpointable iterator (``getstate``/``setstate``, e.g.
        :class:`packlib.BucketedReadaheadBatchIterator`, :func:`packlib.pack_stream` or an
        infinibatch pipeline) as an ``IterableDataset`` with ``state_dict()`` /
        ``load_state_dict()``.

        Each element the iterator yields (a batch or a pack) is one element of the dataset:
        use ``DataLoader(ds, batch_size=None, num_workers=0)``. Several DataLoader workers
        would each replay the whole stream, so they are refused; shard across data-parallel
        ranks with the iterator's ``rank`` / ``world_size`` instead.

        ``state_dict()`` describes the position of what the *caller* has consumed: take it
        in the training loop, between steps.
        """

        def __init__(self, iterator):
            super().__init__()
            if not all(hasattr(iterator, a) for a in ("getstate", "setstate", "__next__")):
                raise TypeError(
                    f"iterator must have getstate(), setstate() and __next__, got {type(iterator).__name__}"
                )
            self._iterator = iterator

        def __iter__(self):
            info = data.get_worker_info()
            if info is not None and info.num_workers > 1:
                raise ValueError(
                    "CheckpointableDataset runs in one process: use DataLoader(num_workers=0 or 1); "
                    "shard across ranks with the iterator's rank/world_size"
                )
            return self

        def __next__(self):
            return next(self._iterator)

        def state_dict(self) -> dict:
            return {"iterator_state": self._iterator.getstate()}

        def load_state_dict(self, state_dict: dict) -> None:
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

    _CLASS = CheckpointableDataset
    return _CLASS


def __getattr__(name):
    if name == "CheckpointableDataset":
        try:
            return _build()
        except ImportError as e:
            err = e

            def _missing(*args, **kwargs):
                raise err

            return _missing
    raise AttributeError(f"module 'packlib.torch' has no attribute {name!r}")
