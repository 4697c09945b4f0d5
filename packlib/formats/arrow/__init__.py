"""Pack Arrow tables and Hugging Face datasets, whole-dataset, with TRL's output columns.

Needs the ``arrow`` extra (``pyarrow``); :func:`pack_dataset` also the ``hf`` extra
(``datasets``). Both are imported only when a function here is called.

A tokenised dataset has list columns with identical offsets (``input_ids``, ``labels``,
``attention_mask``, …): row ``i`` of every column holds the same number of values.
:func:`pack_table` packs the rows into packed rows of at most ``max_sequence_length``
tokens (TRL's ``seq_length``), moving every selected column together, and adds
``seq_lengths`` (the lengths of the segments in each packed row), the column TRL's
``pack_dataset`` produces, so code written for TRL's output consumes it unchanged:

>>> import pyarrow as pa
>>> from packlib.formats.arrow import pack_table, packing_report
>>> t = pa.table({"input_ids": [[1, 2, 3, 4, 5], [6, 7], [8, 9, 10], [11]],
...               "attention_mask": [[1, 1, 1, 0, 0], [1, 0], [1, 1, 0], [1]]})
>>> packed = pack_table(t, seq_length=4, overflow="truncate")   # TRL's bfd; the default refuses long rows
>>> packed.to_pydict()
{'input_ids': [[1, 2, 3, 4], [8, 9, 10, 11], [6, 7]], 'attention_mask': [[1, 1, 1, 0], [1, 1, 0, 1], [1, 0]], 'seq_lengths': [[4], [3, 1], [2]]}
>>> packing_report(packed)["truncated_tokens"]
1

Unlike TRL, which packs inside every 1,000-row ``map`` batch, the whole table is packed at
once (fewer packed rows), and the tokens are copied once by compiled code.

The pipeline is four public steps, which the larger-than-memory pipeline
(:mod:`packlib.pipeline`) reuses shard by shard:

1. :func:`select_list_columns` — which columns to pack;
2. :func:`row_lengths` — tokens per row (checking the columns agree);
3. :func:`make_segments` — rows -> segments (``overflow="error"``, ``"truncate"`` or
   ``"split"``), dropping empty and null rows;
4. :func:`packlib.methods.pack` on the segment lengths, then :func:`gather_packs` to copy
   the tokens into packed rows.
"""
from __future__ import annotations

from ._columns import POSITION_IDS, REPORT_KEY, SEQ_LENGTHS, null_rows, row_lengths, select_list_columns  # noqa: F401
from ._gather import gather_packs
from ._segments import Segments, make_segments
from ._table import pack_dataset, pack_table, packing_report

__all__ = [
    "pack_table",
    "pack_dataset",
    "packing_report",
    "select_list_columns",
    "row_lengths",
    "null_rows",
    "make_segments",
    "Segments",
    "gather_packs",
]
