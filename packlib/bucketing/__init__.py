"""Readahead bucketing and streaming packing.

- :class:`BucketedReadaheadBatchIterator`: a drop-in for infinibatch's class of the same name
  (same batches in the same order for the same source, arguments and seed; compatible
  ``getstate()`` / ``setstate()``), with a compiled path for integer keys and optional
  data-parallel sharding (``rank`` / ``world_size``).
- :func:`bucket`: the same grouping over a numpy array of lengths, in one compiled call,
  returning :class:`Batches` (CSR over batches).
- :func:`pack_stream`: read a window, pack it with :func:`packlib.bfd_pack` /
  :func:`packlib.ffd_pack`, yield packs of items; checkpointable the same way.

Semantics (infinibatch 0.1.1): read ``read_ahead`` items (fewer at the end of a finite
source), sort them by ``key`` longest first with a *stable* sort, cut batches front to back
(the size of a batch is fixed by its first, longest item; ``boundary_key`` starts a new
batch whenever its value changes), then shuffle the window's batches with one
``random.Random(seed)`` that lives across windows.

>>> import packlib
>>> packlib.bucket([3, 1, 2, 5, 4, 4], read_ahead=3, batch_size=2, shuffle=False).to_list()
[[0, 2], [1], [3, 4], [5]]
"""
from __future__ import annotations

from ._batches import Batches, bucket
from ._iterator import BucketedReadaheadBatchIterator
from ._stream import PackStream, pack_stream

__all__ = ["BucketedReadaheadBatchIterator", "bucket", "pack_stream", "Batches", "PackStream"]

for _cls in (Batches, BucketedReadaheadBatchIterator, PackStream):
    _cls.__module__ = "packlib"  # pickles and reprs name the public path, which never moves
