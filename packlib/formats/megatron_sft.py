"""Megatron-Bridge / NeMo packed SFT files: the ``.npy`` that ``GPTSFTPackedDataset`` reads.

Megatron-Bridge trains SFT on packed sequences from one ``.npy`` file written by its
``prepare_packed_sequence_data``, with a JSON list of packing metadata beside it.
:func:`write_packed` writes the same two files from a tokenised Arrow table or Hugging Face
dataset, packed by any :mod:`packlib.methods` packer (``"optimal"`` by default):

- the ``.npy`` is ``np.save`` of one dict per pack, ``{"input_ids": [...], "loss_mask":
  [...], "seq_start_id": [...]}`` (Python lists, pickled: read it with ``np.load(...,
  allow_pickle=True)``), ``seq_start_id`` the offset of each sequence in the pack;
- ``loss_mask`` is rolled by one inside each sequence, as Megatron-Bridge writes it: from a
  per-token ``loss_mask`` column ``mask[1:] + [False]``; from an ``answer_start_idx``
  column, true from position ``answer_start_idx - 1`` on;
- the metadata file is a JSON list; each call appends one dict (``dataset_max_seqlen``,
  ``max_samples_per_bin``, ``packing_factor``, ``packing_efficiency``, ``pack_size``,
  ``min_packed_seqlen``), as Megatron-Bridge does for its train and validation files.

Sizes are counted as Megatron-Bridge counts them: a sequence of ``n`` tokens takes
``n - 1`` positions of a pack (the model reads ``input_ids[:-1]`` and predicts
``input_ids[1:]``), so a pack holds at most ``max_sequence_length`` (its
``packed_sequence_size``) positions and its ``input_ids`` one more token per sequence.

>>> import os, tempfile
>>> import numpy as np, pyarrow as pa
>>> from packlib.formats.megatron_sft import write_packed
>>> t = pa.table({"input_ids": [[1, 2, 3, 4], [5, 6, 7], [8, 9, 10, 11, 12]],
...               "answer_start_idx": [2, 1, 3]})
>>> d = tempfile.mkdtemp()
>>> report = write_packed(t, 6, output=os.path.join(d, "train.npy"),
...                       metadata_output=os.path.join(d, "metadata.jsonl"))
>>> report["packs"], report["bound"]
(2, 2)
>>> packs = np.load(os.path.join(d, "train.npy"), allow_pickle=True)
>>> sorted(len(p["seq_start_id"]) for p in packs), report["metadata"]["max_samples_per_bin"]
([1, 2], 2)
"""
from __future__ import annotations

import json
import os
import tempfile

import numpy as np

from .. import methods as _methods
from .._validate import as_capacity, as_depth, as_seed
from .arrow._columns import _chunks, _column_lengths, _datasets, _is_list, _pyarrow
from .arrow._numpy import as_numpy, validity
from .arrow._segments import _as_overflow, make_segments

__all__ = ["write_packed"]

#: The keys of the metadata dict Megatron-Bridge's ``create_packing_strategy`` records.
METADATA_KEYS = ("dataset_max_seqlen", "max_samples_per_bin", "packing_factor", "packing_efficiency",
                 "pack_size", "min_packed_seqlen")
_IDS, _MASK, _ANSWER = "input_ids", "loss_mask", "answer_start_idx"


def _as_table(data):
    """The Arrow table of ``data`` and the dataset's row mapping (``select`` / ``shuffle``), or None."""
    pa = _pyarrow()
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data]), None
    if isinstance(data, pa.Table):
        return data, None
    if type(data).__module__.startswith("datasets"):
        ds = _datasets()
        if isinstance(data, ds.Dataset):
            rows_map = None
            if data._indices is not None:
                idx = data._indices.column(0)
                rows_map = as_numpy(idx).astype(np.int64)
            return data.data.table, rows_map
    raise TypeError(f"data must be a pyarrow.Table, RecordBatch or datasets.Dataset, got {type(data).__name__} "
                    "(a DatasetDict: pass one split, e.g. data['train'], with its own output file)")


def _check_paths(output, metadata_output):
    """Validated output paths, and the metadata list already at ``metadata_output`` (or [])."""
    if output is None:
        raise TypeError("output= is required: the .npy file to write (Megatron-Bridge's packed_train_data_path)")
    for name, p in (("output", output), ("metadata_output", metadata_output)):
        if p is not None and not isinstance(p, (str, os.PathLike)):
            raise TypeError(f"{name} must be a path (str or os.PathLike), got {type(p).__name__}")
    output = os.fspath(output)
    if not output.endswith(".npy"):
        raise ValueError(f"output must end in .npy (Megatron-Bridge refuses other packed files), got {output!r}")
    for p in (output, metadata_output):
        if p is not None:
            parent = os.path.dirname(os.path.abspath(os.fspath(p)))
            if not os.path.isdir(parent):
                raise ValueError(f"the directory of {os.fspath(p)!r} does not exist; create it first")
    existing = []
    if metadata_output is not None:
        metadata_output = os.fspath(metadata_output)
        if os.path.exists(metadata_output):
            try:
                with open(metadata_output) as f:
                    existing = json.load(f)
            except (OSError, ValueError) as exc:
                raise ValueError(f"metadata_output {metadata_output!r} exists but is not readable JSON ({exc}); "
                                 "Megatron-Bridge appends to a JSON list: remove it or pass another path") from None
            if not isinstance(existing, list):
                raise ValueError(f"metadata_output {metadata_output!r} holds a JSON {type(existing).__name__}, not "
                                 "the list Megatron-Bridge appends to; remove it or pass another path")
    return output, metadata_output, existing


def _flat(column, name: str, kind: str) -> tuple:
    """Row offsets (int64, rows + 1) and flat values of a list column (one chunk's worth of copies at most)."""
    pa = _pyarrow()
    chunks = _chunks(column)
    arr = pa.concat_arrays(chunks) if len(chunks) != 1 else chunks[0]
    t = arr.type.value_type
    ok = pa.types.is_integer(t) or (kind == "mask" and (pa.types.is_boolean(t) or pa.types.is_floating(t)))
    if not ok:
        want = "integer" if kind == "ids" else "boolean or integer"
        raise TypeError(f"column {name!r} holds {t} values; it must be a list of {want} values")
    off = as_numpy(arr.offsets).astype(np.int64)
    values = arr.values.slice(int(off[0]), int(off[-1] - off[0]))     # a sliced array's own values only
    off -= off[0]
    if kind == "mask":
        return off, _bitmap(values)
    return off, as_numpy(values)


def _bitmap(values) -> np.ndarray:
    """Mask values as a little-endian bitmap, bit ``i`` for value ``i`` (a boolean column's own
    bits when they start on a byte; nonzero numbers are true)."""
    pa = _pyarrow()
    if pa.types.is_boolean(values.type):
        buf = values.buffers()[1]
        if values.offset % 8 == 0 and buf is not None:
            start = values.offset // 8
            return np.frombuffer(buf, np.uint8, count=start + (len(values) + 7) // 8)[start:]
        values = as_numpy(values)
    else:
        values = as_numpy(values) != 0
    return np.packbits(values, bitorder="little")


def _valid(column) -> np.ndarray:
    return validity(column)


def _bad_row(rows_map, i: int) -> str:
    return f"row {i}" if rows_map is None else f"row {i} (table row {int(rows_map[i])})"


def _read_rows(table, rows_map):
    """Validated per-row arrays of the input: ``(ids_off, ids, n, mask)``; ``mask`` is
    ``("mask", off, values)`` or ``("answer", answer_start_idx)``. ``n`` (tokens per row,
    0 for a null row) and the answer are in dataset row order; offsets index the table."""
    names = table.schema.names
    if _IDS not in names:
        raise ValueError(f"no column {_IDS!r} in the data (its columns: {names}); tokenise it first")
    if not _is_list(table.schema.field(_IDS).type):
        raise TypeError(f"column {_IDS!r} must be a list column, got {table.schema.field(_IDS).type}")
    col = table.column(_IDS)
    n_table = _column_lengths(col, _IDS)            # null tokens: ValueError naming the row
    ids_off, ids = _flat(col, _IDS, "ids")
    n = n_table if rows_map is None else n_table[rows_map]
    if _MASK in names:
        mcol = table.column(_MASK)
        if not _is_list(table.schema.field(_MASK).type):
            raise TypeError(f"column {_MASK!r} must be a list column (one value per token), "
                            f"got {table.schema.field(_MASK).type}")
        m_len = _column_lengths(mcol, _MASK)
        m_valid = _valid(mcol)
        if rows_map is not None:
            m_len, m_valid = m_len[rows_map], m_valid[rows_map]
        bad = (n > 0) & ~m_valid
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(f"column {_MASK!r} is null in {_bad_row(rows_map, i)}, which has {n[i]} tokens; "
                             "give every sequence its mask (or drop the row)")
        bad = (n > 0) & (m_len != n)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(f"column {_MASK!r} has {m_len[i]} values in {_bad_row(rows_map, i)} but "
                             f"{_IDS!r} has {n[i]} tokens; the mask needs one value per token")
        m_off, m_vals = _flat(mcol, _MASK, "mask")
        return ids_off, ids, n, ("mask", m_off, m_vals)
    if _ANSWER not in names:
        raise ValueError(f"the data has neither a {_MASK!r} nor an {_ANSWER!r} column (its columns: {names}); "
                         "Megatron-Bridge builds the loss mask from one of them")
    return ids_off, ids, n, ("answer", _answers(table, rows_map, n))


def _answers(table, rows_map, n) -> np.ndarray:
    pa = _pyarrow()
    t = table.schema.field(_ANSWER).type
    if not pa.types.is_integer(t):
        raise TypeError(f"column {_ANSWER!r} must hold integers (the first answer token of each row), got {t}")
    col = table.column(_ANSWER)
    valid = _valid(col)
    a = as_numpy(col, nulls_as=0).astype(np.int64)
    if rows_map is not None:
        a, valid = a[rows_map], valid[rows_map]
    bad = (n > 0) & ~valid
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"column {_ANSWER!r} is null in {_bad_row(rows_map, i)}, which has {n[i]} tokens; "
                         "give every sequence its answer start (or drop the row)")
    bad = (n > 0) & ((a < 0) | (a > n))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"column {_ANSWER!r} is {a[i]} in {_bad_row(rows_map, i)}, outside its sequence "
                         f"of {n[i]} tokens (0 ... {n[i]}); it must index the sequence's first answer token")
    return a


def _segments(n, L: int, overflow: str, rows_map):
    """Segments in Megatron-Bridge's units (``n - 1`` positions per ``n`` tokens)."""
    cost = np.maximum(n - 1, 0)
    if overflow == "error" and cost.size and cost.max() > L:
        i = int(np.flatnonzero(cost > L)[0])
        raise ValueError(f"{_bad_row(rows_map, i)} holds {n[i]:,} tokens, {cost[i]:,} positions once shifted "
                         f"for next-token labels > max_sequence_length = {L:,}; pass overflow='truncate' to keep its "
                         f"first {L + 1:,} tokens or overflow='split' to cut it into pieces (each piece repeats the "
                         "last token of the one before as its first, so every label is trained once), or raise "
                         "max_sequence_length")
    return make_segments(cost, L, overflow=overflow)


def _order(packs, seed: int):
    """Segment numbers in output order (packs shuffled by the seed) and the packs' CSR offsets."""
    sizes = np.diff(packs.offsets)
    perm = np.random.default_rng(seed).permutation(sizes.size)
    sizes = sizes[perm]
    offsets = np.zeros(sizes.size + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    first = np.repeat(packs.offsets[:-1][perm] - offsets[:-1], sizes)
    return packs.indices[first + np.arange(offsets[-1], dtype=np.int64)], offsets


def _metadata(seg_len, pack_off, L: int) -> dict:
    """Megatron-Bridge's metadata of this packing (its rounding; Python numbers)."""
    P = pack_off.size - 1
    sums = np.add.reduceat(seg_len, pack_off[:-1]) if P else np.zeros(0, np.int64)
    tokens = int(seg_len.sum())
    return {
        "dataset_max_seqlen": int(seg_len.max()),
        "max_samples_per_bin": int(np.diff(pack_off).max()),
        "packing_factor": round(seg_len.size / P, 2),
        "packing_efficiency": round(tokens / P / L * 100, 2),
        "pack_size": L,
        "min_packed_seqlen": int(sums.min()),
    }


def _save_atomic(path: str, write) -> None:
    """Write ``path`` through a temporary file beside it, renamed over it only on success."""
    d, base = os.path.split(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{base}.", suffix=".tmp", dir=d)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


# --------------------------------------------------------------------------------------
# The file: np.save's .npy of an object array, its pickle written from the arrays
# --------------------------------------------------------------------------------------
# np.save pickles an object array (protocol 3) as a reduce of numpy's _reconstruct whose
# state holds the list of items. The frame around the list is taken from numpy's own pickle
# of an array of the same shape; the items (one dict of three lists per pack) are written
# as pickle opcodes by a kernel, straight from the token arrays, with no Python object per
# token. np.load gives the same dicts of Python ints and bools np.save would have.


def _key(name: str) -> bytes:
    b = name.encode()
    return b"X" + len(b).to_bytes(4, "little") + b       # BINUNICODE


_CONSTS = [np.frombuffer(c, np.uint8) for c in (
    b"}(" + _key(_IDS) + b"](",                           # EMPTY_DICT MARK key EMPTY_LIST MARK
    b"e" + _key(_MASK) + b"](",                           # APPENDS key EMPTY_LIST MARK
    b"e" + _key("seq_start_id") + b"](",
    b"eu")]                                               # APPENDS SETITEMS


def _frame(num_packs: int) -> tuple:
    """What np.save writes before and after the pickled items of ``num_packs`` objects."""
    import io
    import pickle
    import pickletools

    template = np.empty(num_packs, dtype=object)
    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(head, np.lib.format.header_data_from_array_1_0(template))
    body = pickle.dumps(template, protocol=3)
    first = last = None
    for op, _, pos in pickletools.genops(body):
        if first is None and op.name == "EMPTY_LIST":
            first = pos + 1
        if op.name == "TUPLE":
            last = pos
    return head.getvalue() + body[:first] + b"(", b"e" + body[last:]


# tokens per batch of packs the kernel encodes at once (a module constant so tests can make it small)
_BATCH_TOKENS = 1 << 24


def _write_npy(f, ids_off, ids, mask, rows_map, seg, order, pack_off) -> None:
    """Write the .npy to the open file ``f``, a batch of packs (about ``_BATCH_TOKENS`` tokens) at a time."""
    from .._kernels.megatron_sft import pickled_packs

    P = pack_off.size - 1
    before, after = _frame(P)
    f.write(before)
    cum = np.zeros(P + 1, np.int64)
    np.cumsum(np.add.reduceat(seg.length[order] + 1, pack_off[:-1]), out=cum[1:])
    use_mask = mask[0] == "mask"
    m_off, m_vals = (mask[1], mask[2]) if use_mask else (ids_off, np.zeros(1, np.uint8))
    p0 = 0
    while p0 < P:
        p1 = int(np.searchsorted(cum, cum[p0] + _BATCH_TOKENS, side="right")) - 1
        p1 = min(max(p1, p0 + 1), P)
        sel = order[pack_off[p0]:pack_off[p1]]
        rows = seg.row[sel]
        start = seg.start[sel]
        thresh = start if use_mask else mask[1][rows] - 1 - start
        table_rows = rows if rows_map is None else rows_map[rows]
        f.write(pickled_packs(ids, ids_off, m_vals, m_off, thresh, use_mask, table_rows, start, seg.length[sel],
                              pack_off[p0:p1 + 1] - pack_off[p0], *_CONSTS).data)
        p0 = p1
    f.write(after)


def write_packed(data, max_sequence_length, max_sequences_per_pack=None, *, output, metadata_output=None,
                 method="optimal", seed=0, overflow="error") -> dict:
    """Pack a tokenised SFT dataset into Megatron-Bridge's packed ``.npy`` file (and metadata).

    Parameters
    ----------
    data : pyarrow.Table, RecordBatch or datasets.Dataset
        An ``input_ids`` list column (integers), and either a ``loss_mask`` list column (one
        boolean or 0/1 value per token, true where the loss applies; used when both are
        present, as Megatron-Bridge does) or an integer ``answer_start_idx`` column (the
        first answer token, ``0 <= answer_start_idx <= len(input_ids)``). Other columns are
        ignored. A dataset's ``select`` / ``shuffle`` mapping is followed.
    max_sequence_length : int
        Positions per pack: Megatron-Bridge's ``packed_sequence_size``. A sequence of ``n``
        tokens takes ``n - 1`` of them.
    max_sequences_per_pack : int or None, default None
        At most this many sequences per pack (``None``: unlimited).
    output : str or os.PathLike
        The ``.npy`` file to write (the recipe's ``packed_train_data_path`` or
        ``packed_val_data_path``). Written whole or not at all: through a temporary file
        beside it, renamed over it at the end.
    metadata_output : str or os.PathLike, optional
        The JSON metadata list (the recipe's ``packed_metadata_path``): this packing's dict
        is appended to the list already there, or a new list is written.
    method : str, default "optimal"
        Any :mod:`packlib.methods` name (``"optimal"``, ``"bfd"``, ``"ffd"``, ...).
    seed : int, default 0
        Which equal-length sequences share a pack (histogram methods), and the packs'
        order in the file (a seeded shuffle). The same data, arguments and seed write the
        same bytes.
    overflow : {"error", "truncate", "split"}, default "error"
        A sequence longer than ``max_sequence_length + 1`` tokens is refused (``ValueError``
        naming the row; the library's one default), keeps its first
        ``max_sequence_length + 1`` tokens, or is cut into pieces of at most that many
        tokens, each starting with the last token of the one before, so that every
        next-token label is trained exactly once.

    Returns
    -------
    dict
        ``metadata`` (the dict appended to ``metadata_output``), ``rows``, ``sequences``
        (packed, pieces counted), ``packs``, ``tokens`` (positions packed), ``bound``
        (⌈tokens / max_sequence_length⌉), ``packs_over_bound``, ``dropped_empty_rows``
        (empty or null ``input_ids``), ``dropped_one_token_rows`` (no label to train:
        Megatron-Bridge would pack them with zero positions), ``truncated_tokens``,
        ``split_rows``, ``method``, ``seed``, ``overflow``, ``output``, ``metadata_output``.

    Raises
    ------
    ValueError, TypeError
        Missing columns, a mask whose length differs from its tokens, ``answer_start_idx``
        outside its sequence, a null mask, answer start or token, a row too long for
        ``overflow="error"``, nothing to pack: naming the row and column. Nothing is
        written then.
    """
    L = as_capacity(max_sequence_length)
    depth = as_depth(max_sequences_per_pack)
    m = _methods.get(method)
    seed = as_seed(seed)
    overflow = _as_overflow(overflow)
    output, metadata_output, existing = _check_paths(output, metadata_output)
    table, rows_map = _as_table(data)
    ids_off, ids, n, mask = _read_rows(table, rows_map)
    seg = _segments(n, L, overflow, rows_map)
    if seg.num_segments == 0:
        raise ValueError(f"nothing to pack: all {n.size} rows are empty, null or one token long")
    packs = _methods.pack(seg.length, L, depth, method=m.name, seed=seed)
    order, pack_off = _order(packs, seed)
    meta = _metadata(seg.length[order], pack_off, L)
    _save_atomic(output, lambda f: _write_npy(f, ids_off, ids, mask, rows_map, seg, order, pack_off))
    if metadata_output is not None:
        text = json.dumps(existing + [meta]).encode()
        _save_atomic(metadata_output, lambda f: f.write(text))
    P, total = pack_off.size - 1, seg.num_tokens
    one_token = int(np.count_nonzero(n == 1))
    return {
        "metadata": meta, "rows": int(n.size), "sequences": seg.num_segments, "packs": P, "tokens": total,
        "bound": -(-total // L), "packs_over_bound": P + total // -L,
        "dropped_empty_rows": seg.dropped_rows - one_token, "dropped_one_token_rows": one_token,
        "truncated_tokens": seg.truncated_tokens, "split_rows": int(np.count_nonzero(seg.start == L)),
        "method": m.name, "seed": seed, "overflow": overflow, "output": output, "metadata_output": metadata_output,
    }
