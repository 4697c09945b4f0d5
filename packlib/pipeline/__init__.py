"""Pack datasets larger than memory, on one machine or a Ray cluster.

:func:`pack_files` reads Parquet files, ``datasets`` ``save_to_disk`` directories or
unpacked MLPerf BERT TFRecords and writes packed Parquet files with the columns
:func:`packlib.formats.arrow.pack_table` gives (the selected list columns, packed, plus
``seq_lengths``; by default also ``position_ids`` and, where the data has loss masks,
``labels`` with them folded in, as :func:`~packlib.formats.arrow.pack_dataset` writes), in
two passes over the input:

1. **lengths**: each shard's row lengths (4 bytes a row) go to the driver, which cuts
   rows into segments (``overflow``), packs all of them with the registry's packer (the
   packs :func:`packlib.methods.pack` gives on the same lengths and seed), shuffles the
   packs from the seed and gives every segment its output file and position;
2. **exchange**: each worker reads its shard again and spills every segment into the
   bucket of its output file; then each output file is assembled from its buckets and
   written as ``part-NNNNN-of-NNNNN.parquet``.

Workers hold one record batch of input, or one output file, at a time, so memory grows
with the batch and output-file size and the worker count, not with the dataset; the driver
holds about 40 bytes per sequence. The output is the same, byte for byte, whatever the
engine and the number of workers; it appears atomically (a failed or interrupted run leaves
nothing in ``output``, nothing staged beside it and no worker running). A verify pass re-reads the output and checks, by content hash, that every
input sequence appears exactly once.

>>> import os, tempfile
>>> import pyarrow as pa, pyarrow.parquet as pq
>>> from packlib.pipeline import pack_files
>>> d = tempfile.mkdtemp()
>>> pq.write_table(pa.table({"input_ids": [[1, 2, 3], [4, 5], [6], [7, 8, 9, 10]], "text": ["a", "b", "c", "d"]}),
...                os.path.join(d, "a.parquet"))
>>> result = pack_files(os.path.join(d, "*.parquet"), 5, output=os.path.join(d, "packed"), workers=1)
>>> result.num_packs, result.num_sequences, result.left_out_columns
(2, 4, ('text',))
>>> packed = pq.read_table(result.files[0]).to_pydict()
>>> packed["input_ids"], packed["seq_lengths"]
([[1, 2, 3, 4, 5], [7, 8, 9, 10, 6]], [[3, 2], [4, 1]])
>>> packed["position_ids"]   # restarting at every sequence: a Trainer drops seq_lengths
[[0, 1, 2, 0, 1], [0, 1, 2, 3, 0]]
>>> sorted(os.listdir(os.path.join(d, "packed")))
['_packing_metadata.json', 'part-00000-of-00001.parquet']
>>> pq.read_table(os.path.join(d, "packed")).num_rows   # the directory reads as one dataset
2
"""
from __future__ import annotations

from ._errors import InputError, Interrupted, PipelineError, VerifyError, WorkerDied
from ._pack_files import ENGINES, OVERFLOWS, pack_files  # noqa: F401
from ._result import PackResult, read_metadata

__all__ = ["pack_files", "read_metadata", "PackResult", "PipelineError", "InputError", "WorkerDied", "VerifyError", "Interrupted"]
