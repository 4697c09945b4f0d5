"""Cerebras-style HDF5 files for GPT training (needs the ``hdf5`` extra: ``h5py``).

Classic files: attribute ``n_examples`` on the file and one dataset ``data`` of shape
``(n_examples, 3, L)``, dtype ``i4``, rows ``[input_ids, attention_mask, labels]``, one
document per example: ``input_ids = tokens[:-1]`` and ``labels = tokens[1:]``, padded with
``pad_id``; ``attention_mask`` is 1 on real positions (it is really a loss mask).

Packed files: ``data`` of shape ``(n, 5, L)``, rows ``[input_ids, input_mask, labels,
attention_span, position_ids]``; several documents per example, as given by a
:class:`packlib.Packs` over the documents' *contributed* lengths (``len(doc) - 1``).
``position_ids`` restart at 0 per document and ``attention_span`` counts down to each
document's end, so key ``k`` is visible to query ``q`` iff ``0 <= q - k <= attention_span[k]``.

Both are written with ``chunks=(1, rows, L)``, gzip and a Fletcher-32 checksum per chunk:
one example per chunk, so a random read decompresses one example, not everything before
it, and a damaged chunk is an error, not silently different data. :func:`read_hdf5` also
checks that the examples are consistent (masks, shifted labels, positions and spans), so a
damaged chunk index -- which HDF5 reads back as an all-padding example -- is refused too.

>>> import os, tempfile, numpy as np
>>> path = os.path.join(tempfile.mkdtemp(), "docs.h5")
>>> write_hdf5(path, np.arange(1, 8), [0, 3, 7], max_sequence_length=4)
2
>>> read_hdf5(path)["labels"].tolist()
[[2, 3, 0, 0], [5, 6, 7, 0]]
"""
from __future__ import annotations

import os

import numpy as np

from .._validate import as_bool, as_int, as_int_array, as_nonnegative_int, as_optional_int, as_positive_int

__all__ = ["write_hdf5", "read_hdf5", "check_examples"]

CLASSIC_ROWS = ("input_ids", "attention_mask", "labels")
PACKED_ROWS = ("input_ids", "input_mask", "labels", "attention_span", "position_ids")


def _h5py():
    try:
        import h5py
    except ImportError:  # pragma: no cover
        raise ImportError("HDF5 files need h5py: pip install 'packlib[hdf5]'") from None
    return h5py


def _documents(tokens, doc_offsets):
    tok = as_int_array(tokens, "tokens")
    off = as_int_array(doc_offsets, "doc_offsets", allow_empty=False)
    if off[0] != 0 or off[-1] != tok.size or (np.diff(off) < 2).any():
        raise ValueError("doc_offsets must start at 0, end at len(tokens), and give every document >= 2 tokens "
                         "(a document of n tokens gives n - 1 inputs and labels)")
    if tok.size and (tok.min() < -(2**31) or tok.max() > 2**31 - 1):
        raise ValueError("token ids must fit in int32 (dtype i4)")
    return tok, off


def _packed_rows(tok, off, packs, a, b, L, pad_id):
    """Rows ``[input_ids, input_mask, labels, attention_span, position_ids]`` for packs a..b-1."""
    o = packs.offsets
    docs = packs.indices[o[a]:o[b]]
    n = np.diff(off)[docs] - 1                        # contributed tokens per document
    sizes = np.diff(o[a:b + 1])
    row = np.repeat(np.arange(b - a), sizes)
    row_start = np.concatenate(([0], np.cumsum(n)))[:-1]
    first_of_row = np.concatenate(([0], np.cumsum(sizes)))[:-1]
    start_in_row = row_start - np.repeat(np.concatenate((row_start, [0]))[first_of_row], sizes)
    out = np.zeros((b - a, 5, L), dtype=np.int32)
    out[:, 0, :] = pad_id
    out[:, 2, :] = pad_id
    if n.size:
        tok_row = np.repeat(row, n)
        pos = np.arange(int(n.sum())) - np.repeat(row_start, n)          # position within document
        col = np.repeat(start_in_row, n) + pos
        src = np.repeat(off[docs], n) + pos                              # token index in tokens
        out[tok_row, 0, col] = tok[src]
        out[tok_row, 1, col] = 1
        out[tok_row, 2, col] = tok[src + 1]
        out[tok_row, 3, col] = np.repeat(n, n) - 1 - pos
        out[tok_row, 4, col] = pos
    return out


def write_hdf5(path, tokens, doc_offsets, packs=None, *, max_sequence_length: int, pad_id: int = 0,
               compression: str | None = "gzip", chunk_rows: int = 4096) -> int:
    """Write documents as a Cerebras-style HDF5 file; returns the number of examples.

    Parameters
    ----------
    path : str or os.PathLike
        Output file (``.h5``).
    tokens : 1-D int array
        All documents' token ids laid end to end.
    doc_offsets : 1-D int array, shape ``(D + 1,)``
        Document ``d`` is ``tokens[doc_offsets[d]:doc_offsets[d+1]]`` (at least 2 tokens).
    packs : packlib.Packs, optional
        Packs of document ids whose ``lengths`` are the documents' lengths minus one (e.g.
        ``packlib.ffd_pack(np.diff(doc_offsets) - 1, L)``). Without it, a classic file with
        one document per example is written.
    max_sequence_length : int
        ``L``, the example width.
    pad_id : int, default 0
        Token id of padding positions (in ``input_ids`` and ``labels``); must fit in int32.
    compression : "gzip", "lzf" or None
    chunk_rows : int, default 4096
        Examples built and written per step (memory: ``chunk_rows x rows x L`` int32).

    Raises
    ------
    ValueError
        If a document (or a pack) does not fit in ``L``, or the packs do not cover every
        document exactly once with the right lengths.
    """
    from ..packing import Packs

    h5py = _h5py()
    tok, off = _documents(tokens, doc_offsets)
    L = as_positive_int(max_sequence_length, "max_sequence_length", maximum=2**31 - 1)
    pad_id = as_int(pad_id, "pad_id", minimum=-(2**31), maximum=2**31 - 1)
    chunk_rows = as_positive_int(chunk_rows, "chunk_rows")
    if compression is not None and compression not in ("gzip", "lzf"):
        raise (ValueError if isinstance(compression, str) else TypeError)(
            f"compression must be 'gzip', 'lzf' or None, got {compression!r}"
        )
    if packs is not None and not isinstance(packs, Packs):
        raise TypeError(
            f"packs must be a packlib.Packs over the documents (e.g. packlib.ffd_pack(np.diff(doc_offsets) - 1, L)), "
            f"got {type(packs).__name__}"
        )
    contributed = np.diff(off) - 1
    if packs is None:
        if contributed.size and contributed.max() > L:
            d = int(np.argmax(contributed))
            raise ValueError(f"document {d} has {contributed[d] + 1} tokens > max_sequence_length + 1 = {L + 1}; split it first")
        rows, n = 3, contributed.size
    else:
        if packs.max_sequence_length > L:
            raise ValueError(f"packs were built for max_sequence_length {packs.max_sequence_length} > {L}")
        packs.validate(contributed.size)
        if not np.array_equal(packs.lengths, contributed[packs.indices]):
            raise ValueError("packs.lengths must be the documents' lengths minus one (the tokens each contributes)")
        rows, n = 5, packs.num_packs
    tmp = f"{os.fspath(path)}.tmp{os.getpid()}"
    try:
        with h5py.File(tmp, "w") as f:
            f.attrs["n_examples"] = n
            kw = dict(compression=compression) if compression else {}
            if n:
                kw["fletcher32"] = True  # a checksum per chunk: damage is an error on read
            ds = f.create_dataset("data", shape=(n, rows, L), dtype="i4", chunks=(1, rows, L) if n else None, **kw)
            for a in range(0, n, chunk_rows):
                b = min(n, a + chunk_rows)
                if packs is None:
                    block = np.full((b - a, 3, L), pad_id, dtype=np.int32)
                    block[:, 1, :] = 0
                    ln = contributed[a:b]
                    mask = np.arange(L)[None, :] < ln[:, None]
                    src = np.repeat(off[a:b], ln) + (np.arange(int(ln.sum())) - np.repeat(np.concatenate(([0], np.cumsum(ln)))[:-1], ln))
                    block[:, 0, :][mask] = tok[src]
                    block[:, 1, :][mask] = 1
                    block[:, 2, :][mask] = tok[src + 1]
                else:
                    block = _packed_rows(tok, off, packs, a, b, L, pad_id)
                ds[a:b] = block
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return int(n)


def read_hdf5(path, start: int = 0, stop: int | None = None, *, verify: bool = True) -> dict:
    """Read examples ``start .. stop-1`` of a Cerebras-style file.

    Parameters
    ----------
    path : str or os.PathLike
    start, stop : int, optional
        The examples to read (``stop=None``: to the end), as a Python slice of
        non-negative bounds.
    verify : bool, default True
        Check that the examples are consistent (see :func:`check_examples`); a damaged or
        foreign file raises ``ValueError``. ``False`` returns the data as stored.

    Returns
    -------
    dict
        ``n_examples`` and one ``(n, L)`` int32 array per row name (``CLASSIC_ROWS`` or
        ``PACKED_ROWS``, told apart by the number of rows), plus ``data`` itself.
    """
    h5py = _h5py()
    verify = as_bool(verify, "verify")
    start = as_nonnegative_int(start, "start")
    stop = as_optional_int(stop, "stop", minimum=0)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no such file")
    try:
        with h5py.File(path, "r") as f:
            if "data" not in f or not isinstance(f["data"], h5py.Dataset) or f["data"].ndim != 3 or f["data"].shape[1] not in (3, 5):
                raise ValueError(f"{path}: not a Cerebras-style file (need dataset 'data' of shape (n, 3 or 5, L))")
            ds = f["data"]
            n_attr = f.attrs.get("n_examples", ds.shape[0])
            if not isinstance(n_attr, (int, np.integer)) or isinstance(n_attr, (bool, np.bool_)):
                raise ValueError(f"{path}: attribute n_examples must be an integer, got {n_attr!r}")
            n = int(n_attr)
            if n != ds.shape[0]:
                raise ValueError(f"{path}: n_examples = {n} but data holds {ds.shape[0]} examples")
            if ds.dtype.kind not in "iu":
                raise ValueError(f"{path}: data must hold integers, got dtype {ds.dtype}")
            data = ds[start:stop]
    except ValueError:
        raise
    except (OSError, KeyError, RuntimeError, TypeError) as exc:  # h5py's errors on damaged files
        raise ValueError(f"{path}: not a readable HDF5 file ({type(exc).__name__}: {exc}); it is corrupt or truncated") from None
    names = CLASSIC_ROWS if data.shape[1] == 3 else PACKED_ROWS
    if verify:
        problem = check_examples(data)
        if problem:
            i, what = problem
            raise ValueError(
                f"{path}: example {start + i} {what}: the file is damaged or not written by packlib "
                "(pass verify=False to read it as stored)"
            )
    out = {"n_examples": n, "data": data}
    out.update({name: data[:, i, :] for i, name in enumerate(names)})
    return out


def check_examples(data: np.ndarray) -> tuple[int, str] | None:
    """Why examples are inconsistent, as ``(example, reason)``, or None if they are
    consistent.

    Every example holds at least one real position, real positions come first (the mask
    is 1 then 0), a label is the next position's input id within a document, padding is
    one ``pad_id`` in ``input_ids`` and ``labels``; packed examples also have
    ``position_ids`` counting from 0 in each document and ``attention_span`` counting down
    to its end.

    Parameters
    ----------
    data : int array, shape ``(n, 3 or 5, L)``
        Examples as :func:`write_hdf5` writes them.
    """
    if data.shape[0] == 0:
        return None
    ids, mask, labels = data[:, 0, :], data[:, 1, :], data[:, 2, :]

    def first(bad: np.ndarray, what: str):
        rows = np.flatnonzero(bad.reshape(bad.shape[0], -1).any(axis=1))
        return (int(rows[0]), what) if rows.size else None

    checks = [
        (~np.isin(mask, (0, 1)), "has a mask value other than 0 and 1"),
        (mask[:, 0] != 1, "has no real token (all padding)"),
        (mask[:, 1:] > mask[:, :-1], "has padding before a real token"),
    ]
    pad = mask == 0
    checks.append(((ids != labels) & pad, "has padding whose input id and label differ"))
    if pad.any():
        pad_id = ids[pad][0]
        checks.append((pad & (ids != pad_id), "has two different padding ids"))
    if data.shape[1] == 3:
        same_doc = mask[:, 1:] == 1
    else:
        span, pos = data[:, 3, :], data[:, 4, :]
        real = mask == 1
        step = (pos[:, 1:] == pos[:, :-1] + 1) & real[:, 1:]
        checks += [
            (real[:, :1] & (pos[:, :1] != 0), "does not start a document at position 0"),
            (real[:, 1:] & (pos[:, 1:] != 0) & ~step, "has position_ids that neither restart at 0 nor count up"),
            (pad & ((pos != 0) | (span != 0)), "has padding with non-zero position_ids or attention_span"),
            (step & (span[:, 1:] != span[:, :-1] - 1), "has attention_span not counting down within a document"),
            (real[:, :-1] & ~step & (span[:, :-1] != 0), "has a document whose attention_span does not end at 0"),
            (real[:, -1:] & (span[:, -1:] != 0), "has a document whose attention_span does not end at 0"),
        ]
        same_doc = step
    checks.append((same_doc & (labels[:, :-1] != ids[:, 1:]), "has a label that is not the next input id"))
    for bad, what in checks:
        found = first(bad, what)
        if found:
            return found
    return None
