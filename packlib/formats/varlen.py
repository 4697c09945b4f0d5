"""Padding-free ("varlen") fields for modern trainers, derived from document lengths.

Every field here is a view of one object: the ordered lengths of the documents in a row
(or in a batch laid end to end). Take them from :class:`packlib.Packs` with
:func:`row_lengths` / :func:`batch_lengths`, or give them directly.

Worked example: one row of 12 with documents of lengths 3, 2, 4 (and 3 padding):

>>> import numpy as np
>>> lens = [3, 2, 4]
>>> cu_seqlens(lens).tolist(), max_seqlen(lens)
([0, 3, 5, 9], 4)
>>> position_ids(lens).tolist()
[0, 1, 2, 0, 1, 0, 1, 2, 3]
>>> seq_idx(lens).tolist()
[0, 0, 0, 1, 1, 2, 2, 2, 2]
>>> mlperf_input_mask(lens, 12).tolist()
[1, 1, 1, 2, 2, 3, 3, 3, 3, 0, 0, 0]
>>> attention_span(lens, 12).tolist()
[2, 1, 0, 1, 0, 3, 2, 1, 0, 0, 0, 0]
>>> torchtune_seq_lens(lens, 12).tolist()
[3, 2, 4, 3]
"""
from __future__ import annotations

import numpy as np

from .._deprecation import deprecated_call
from .._validate import as_bool, as_int, as_int_array, as_lengths, as_positive_int, check_total, exact_sum
from .._validate import memory_errors_as_value_errors as _fits_memory

__all__ = [
    "row_lengths",
    "batch_lengths",
    "cu_seqlens",
    "max_seqlen",
    "position_ids",
    "seq_idx",
    "mlperf_input_mask",
    "attention_span",
    "torchtune_seq_lens",
    "torchtune_input_pos",
    "varlen_fields",
    "hf_flattening_batch",
    "megatron_thd",
    "torchtune_pack",
]

_INT32_MAX = 2**31 - 1


def _lengths(lengths, name: str = "lengths") -> np.ndarray:
    """Document lengths: whole numbers >= 1 whose total fits the kernels (``MAX_TOTAL``)."""
    return as_lengths(lengths, None, name)


def _row_length_renamed(width_at: int):
    """``row_length=`` (this module's former keyword) for ``max_sequence_length``, the house
    name of a pack's capacity and the ``width_at``-th positional parameter."""

    def decorate(f):
        def rewrite(args, kwargs):
            if "row_length" not in kwargs:
                return None
            kwargs = dict(kwargs)
            width = kwargs.pop("row_length")
            if len(args) > width_at or "max_sequence_length" in kwargs:
                raise TypeError(f"{f.__name__}() got the row width twice: pass max_sequence_length only")
            return (args, {**kwargs, "max_sequence_length": width}, f"{f.__name__}(row_length=...)",
                    "pass max_sequence_length=... (or the width as the second argument)")

        return deprecated_call(rewrite)(f)

    return decorate


def _row(lengths, max_sequence_length) -> tuple[np.ndarray, int]:
    """Lengths and the row width ``max_sequence_length``, checked."""
    lens = _lengths(lengths)
    T = as_positive_int(max_sequence_length, "max_sequence_length")
    if int(lens.sum()) > T:
        raise ValueError(f"the documents hold {int(lens.sum())} tokens > max_sequence_length = {T}")
    return lens, T


def row_lengths(packs, p: int) -> np.ndarray:
    """The lengths of the documents in pack ``p`` of a :class:`packlib.Packs`, in order.

    Parameters
    ----------
    packs : packlib.Packs
    p : int
        Pack index (negative counts from the end; out of range is an ``IndexError``).
    """
    n = packs.num_packs
    p = as_int(p, "p", maximum=None)
    p += n if p < 0 else 0
    if not 0 <= p < n:
        raise IndexError(f"pack index out of range for {n} packs")
    return packs.lengths[packs.offsets[p] : packs.offsets[p + 1]]


def batch_lengths(packs, pack_ids) -> np.ndarray:
    """The document lengths of several packs laid end to end (a padding-free batch).

    Parameters
    ----------
    packs : packlib.Packs
    pack_ids : 1-D int array
        Pack indices (out of range is an ``IndexError``).
    """
    ids = as_int_array(pack_ids, "pack_ids")
    if ids.size and (ids.min() < -packs.num_packs or ids.max() >= packs.num_packs):
        bad = int(ids[(ids < -packs.num_packs) | (ids >= packs.num_packs)][0])
        raise IndexError(f"pack_ids must index the {packs.num_packs} packs, got {bad}")
    if ids.size == 0:
        return np.zeros(0, dtype=np.int64)
    return np.concatenate([row_lengths(packs, p) for p in ids.tolist()])


def cu_seqlens(lengths) -> np.ndarray:
    """``concat([0], cumsum(lengths))`` as int32 (flash-attention's ``cu_seqlens``).

    Parameters
    ----------
    lengths : 1-D int array
        Document lengths (>= 1), in order.

    Raises
    ------
    ValueError
        If the total reaches 2**31 (int32 would overflow).
    """
    lens = _lengths(lengths)
    csum = np.concatenate(([0], np.cumsum(lens)))
    if csum[-1] > _INT32_MAX:
        raise ValueError(f"{int(csum[-1])} tokens in one batch overflow int32 cu_seqlens (limit 2**31 - 1); use smaller batches")
    return csum.astype(np.int32)


def max_seqlen(lengths) -> int:
    """The longest document (a Python int, as flash-attention wants); 0 when empty.

    Parameters
    ----------
    lengths : 1-D int array
        Document lengths (>= 1), in order.
    """
    lens = _lengths(lengths)
    return int(lens.max()) if lens.size else 0


@_fits_memory
def position_ids(lengths) -> np.ndarray:
    """Positions restarting at 0 in every document: ``arange(T) - repeat(starts, lengths)``.

    Parameters
    ----------
    lengths : 1-D int array
        Document lengths (>= 1), in order.
    """
    lens = _lengths(lengths)
    starts = np.concatenate(([0], np.cumsum(lens)[:-1])) if lens.size else lens
    return np.arange(int(lens.sum()), dtype=np.int64) - np.repeat(starts, lens)


@_fits_memory
def seq_idx(lengths) -> np.ndarray:
    """The document index of every token, int32: ``repeat(arange(n), lengths)``.

    Parameters
    ----------
    lengths : 1-D int array
        Document lengths (>= 1), in order.
    """
    lens = _lengths(lengths)
    return np.repeat(np.arange(lens.size, dtype=np.int32), lens)


@_row_length_renamed(1)
@_fits_memory
def mlperf_input_mask(lengths, max_sequence_length: int) -> np.ndarray:
    """MLPerf packed BERT ``input_mask``: document index ``1..k`` per token, 0 = padding.

    Parameters
    ----------
    lengths : 1-D int array
        Document lengths (>= 1), in order.
    max_sequence_length : int
        The row's width in tokens (at least ``sum(lengths)``). ``row_length=``, its former
        spelling, still works until packlib 0.4, with a ``DeprecationWarning``.
    """
    lens, T = _row(lengths, max_sequence_length)
    out = np.zeros(T, dtype=np.int64)
    out[: int(lens.sum())] = np.repeat(np.arange(1, lens.size + 1), lens)
    return out


@_row_length_renamed(1)
@_fits_memory
def attention_span(lengths, max_sequence_length: int) -> np.ndarray:
    """Cerebras ``attention_span``: counts down to each document's end (``n-1 .. 0``), 0 = padding.

    Parameters as for :func:`mlperf_input_mask`.
    """
    lens, T = _row(lengths, max_sequence_length)
    out = np.zeros(T, dtype=np.int64)
    out[: int(lens.sum())] = np.repeat(lens, lens) - 1 - position_ids(lens)
    return out


@_row_length_renamed(1)
@_fits_memory
def torchtune_seq_lens(lengths, max_sequence_length: int) -> np.ndarray:
    """torchtune ``seq_lens``: the documents, then the padding as one last "sequence".

    Parameters as for :func:`mlperf_input_mask`.
    """
    lens, T = _row(lengths, max_sequence_length)
    pad = T - int(lens.sum())
    return np.concatenate((lens, [pad])) if pad else lens.copy()


@_row_length_renamed(1)
@_fits_memory
def torchtune_input_pos(lengths, max_sequence_length: int) -> np.ndarray:
    """torchtune ``input_pos``: positions per document; padding positions keep counting
    from the last document's end.

    Parameters as for :func:`mlperf_input_mask`.
    """
    lens, T = _row(lengths, max_sequence_length)
    pos = position_ids(lens)
    pad = T - pos.size
    last = int(pos[-1]) + 1 if pos.size else 0
    return np.concatenate((pos, np.arange(last, last + pad, dtype=np.int64)))


@_fits_memory
def varlen_fields(lengths) -> dict:
    """The flash-attention varlen fields for documents laid end to end.

    Parameters
    ----------
    lengths : 1-D int array
        Document lengths (>= 1), in order.

    Returns
    -------
    dict
        ``cu_seqlens`` (int32), ``max_seqlen`` (int), ``position_ids`` (int64),
        ``seq_idx`` (int32), ``total_tokens`` (int).
    """
    lens = _lengths(lengths)
    return {"cu_seqlens": cu_seqlens(lens), "max_seqlen": max_seqlen(lens), "position_ids": position_ids(lens),
            "seq_idx": seq_idx(lens), "total_tokens": int(lens.sum())}


def _tokens(tokens, lengths, name="tokens"):
    tok = as_int_array(tokens, name)
    lens = _lengths(lengths)
    if tok.size != int(lens.sum()):
        raise ValueError(f"{name} holds {tok.size} values but the lengths sum to {int(lens.sum())}")
    return tok, lens


@_fits_memory
def hf_flattening_batch(tokens, lengths, *, return_position_ids: bool = True, return_seq_idx: bool = False,
                        return_flash_attn_kwargs: bool = False, separator_id: int = -100) -> dict:
    """A batch as Hugging Face's ``DataCollatorWithFlattening`` builds it.

    ``tokens`` are the documents' token ids laid end to end (``lengths`` tell them apart).
    ``input_ids`` and ``labels`` have shape ``(1, T)``; the first label of each document is
    ``separator_id`` (-100, ignored by the loss), so no document predicts across a boundary.
    Optional ``position_ids`` (int64), ``seq_idx`` (int32) and ``cu_seq_lens_q/k`` (int32)
    with ``max_length_q/k`` (int). No padding.

    Parameters
    ----------
    tokens : 1-D int array
        All documents' token ids, end to end.
    lengths : 1-D int array
        Document lengths (>= 1), summing to ``len(tokens)``.
    return_position_ids, return_seq_idx, return_flash_attn_kwargs : bool
        Which optional fields to add.
    separator_id : int, default -100
        The label of each document's first token.
    """
    tok, lens = _tokens(tokens, lengths)
    return_position_ids = as_bool(return_position_ids, "return_position_ids")
    return_seq_idx = as_bool(return_seq_idx, "return_seq_idx")
    return_flash_attn_kwargs = as_bool(return_flash_attn_kwargs, "return_flash_attn_kwargs")
    separator_id = as_int(separator_id, "separator_id", minimum=-(2**63), maximum=2**63 - 1)
    labels = tok.copy()
    starts = np.concatenate(([0], np.cumsum(lens)[:-1])) if lens.size else lens
    labels[starts] = separator_id
    out = {"input_ids": tok[None, :], "labels": labels[None, :]}
    if return_position_ids:
        out["position_ids"] = position_ids(lens)[None, :]
    if return_seq_idx:
        out["seq_idx"] = seq_idx(lens)[None, :]
    if return_flash_attn_kwargs:
        cu = cu_seqlens(lens)
        m = max_seqlen(lens)
        out.update(cu_seq_lens_q=cu, cu_seq_lens_k=cu.copy(), max_length_q=m, max_length_k=m)
    return out


@_fits_memory
def megatron_thd(lengths, *, pad_to_multiple_of: int = 1) -> dict:
    """Megatron-core ``PackedSeqParams`` fields for the ``thd`` layout.

    With ``pad_to_multiple_of > 1`` (context parallelism pads each document to a multiple
    of ``2 * cp_size``), ``cu_seqlens_*_padded`` hold the padded boundaries and
    ``total_tokens`` counts the padded tokens.

    Parameters
    ----------
    lengths : 1-D int array
        Document lengths (>= 1), in order.
    pad_to_multiple_of : int, default 1
    """
    lens = _lengths(lengths)
    m = as_positive_int(pad_to_multiple_of, "pad_to_multiple_of")
    padded = -(-lens // m) * m  # each <= len + m - 1 < 2**63
    check_total(exact_sum(padded), "megatron_thd", "number of padded tokens")
    cu, cu_p = cu_seqlens(lens), cu_seqlens(padded)
    return {"qkv_format": "thd", "cu_seqlens_q": cu, "cu_seqlens_kv": cu.copy(),
            "cu_seqlens_q_padded": cu_p, "cu_seqlens_kv_padded": cu_p.copy(),
            "max_seqlen_q": max_seqlen(padded), "max_seqlen_kv": max_seqlen(padded),
            "total_tokens": int(padded.sum())}


@_row_length_renamed(2)
@_fits_memory
def torchtune_pack(tokens, lengths, max_sequence_length: int, *, labels=None, padding_idx: int = 0,
                   ignore_index: int = -100) -> dict:
    """One packed row as torchtune's ``PackedDataset`` yields it: ``tokens`` (padded with
    ``padding_idx``), ``labels`` (padded with ``ignore_index``; default: the tokens),
    ``input_pos`` and ``seq_lens``, all int64.

    Parameters
    ----------
    tokens, lengths
        As for :func:`hf_flattening_batch`.
    max_sequence_length : int
        The row's width (at least ``len(tokens)``).
    labels : 1-D int array, optional
        Default: the tokens.
    padding_idx, ignore_index : int
        Padding of ``tokens`` and of ``labels`` (exact integers).
    """
    tok, lens = _tokens(tokens, lengths)
    _, T = _row(lens, max_sequence_length)
    padding_idx = as_int(padding_idx, "padding_idx", minimum=-(2**63), maximum=2**63 - 1)
    ignore_index = as_int(ignore_index, "ignore_index", minimum=-(2**63), maximum=2**63 - 1)
    lab = tok if labels is None else _tokens(labels, lens, "labels")[0]
    pad = T - tok.size
    return {"tokens": np.concatenate((tok, np.full(pad, padding_idx, dtype=np.int64))),
            "labels": np.concatenate((lab, np.full(pad, ignore_index, dtype=np.int64))),
            "input_pos": torchtune_input_pos(lens, T), "seq_lens": torchtune_seq_lens(lens, T)}
