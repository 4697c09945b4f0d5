import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import packlib
from packlib.formats import varlen as vl

lengths_st = st.lists(st.integers(1, 9), max_size=6)


def test_worked_example_exactly():
    lens = [3, 2, 4]
    cu = vl.cu_seqlens(lens)
    assert cu.dtype == np.int32 and cu.tolist() == [0, 3, 5, 9]
    assert vl.max_seqlen(lens) == 4 and type(vl.max_seqlen(lens)) is int
    assert vl.position_ids(lens).tolist() == [0, 1, 2, 0, 1, 0, 1, 2, 3]
    assert vl.seq_idx(lens).tolist() == [0, 0, 0, 1, 1, 2, 2, 2, 2]
    assert vl.mlperf_input_mask(lens, 12).tolist() == [1, 1, 1, 2, 2, 3, 3, 3, 3, 0, 0, 0]
    assert vl.attention_span(lens, 12).tolist() == [2, 1, 0, 1, 0, 3, 2, 1, 0, 0, 0, 0]
    assert vl.torchtune_seq_lens(lens, 12).tolist() == [3, 2, 4, 3]
    assert vl.torchtune_input_pos(lens, 12).tolist() == [0, 1, 2, 0, 1, 0, 1, 2, 3, 4, 5, 6]


def _naive(lens, T):
    pos, idx, mask, span = [], [], [], []
    for k, n in enumerate(lens):
        pos += list(range(n))
        idx += [k] * n
        mask += [k + 1] * n
        span += list(range(n - 1, -1, -1))
    pad = T - sum(lens)
    return pos, idx, mask + [0] * pad, span + [0] * pad


@given(lengths_st, st.integers(0, 5))
def test_fields_match_naive(lens, pad):
    T = sum(lens) + pad
    pos, idx, mask, span = _naive(lens, T)
    assert vl.position_ids(lens).tolist() == pos
    assert vl.seq_idx(lens).tolist() == idx
    assert vl.cu_seqlens(lens).tolist() == [0] + [int(x) for x in np.cumsum(lens, dtype=np.int64)]
    if T:
        assert vl.mlperf_input_mask(lens, T).tolist() == mask
        assert vl.attention_span(lens, T).tolist() == span
        # Cerebras visibility rule reproduces the block-diagonal causal mask
        s = vl.attention_span(lens, T)
        docs = np.array(idx + [-1] * pad)
        for q in range(sum(lens)):
            for k in range(sum(lens)):
                assert (0 <= q - k <= s[k]) == (docs[q] == docs[k] and k <= q)
        tt = vl.torchtune_seq_lens(lens, T)
        assert tt.sum() == T and tt[: len(lens)].tolist() == lens
    f = vl.varlen_fields(lens)
    assert f["total_tokens"] == sum(lens) and f["max_seqlen"] == max(lens, default=0)


@given(lengths_st.filter(bool))
def test_hf_megatron_torchtune(lens):
    T = sum(lens)
    tokens = np.arange(100, 100 + T)
    b = vl.hf_flattening_batch(tokens, lens, return_seq_idx=True, return_flash_attn_kwargs=True)
    assert b["input_ids"].shape == (1, T) and b["labels"].shape == (1, T)
    starts = np.cumsum([0] + lens[:-1])
    assert (b["labels"][0, starts] == -100).all()
    keep = np.ones(T, bool)
    keep[starts] = False
    assert np.array_equal(b["labels"][0, keep], tokens[keep])
    assert b["cu_seq_lens_q"].dtype == np.int32 and b["seq_idx"].dtype == np.int32
    assert b["max_length_k"] == max(lens)
    m = vl.megatron_thd(lens, pad_to_multiple_of=4)
    assert m["qkv_format"] == "thd" and m["cu_seqlens_q"].tolist() == vl.cu_seqlens(lens).tolist()
    padded = [-(-n // 4) * 4 for n in lens]
    assert m["cu_seqlens_q_padded"].tolist() == vl.cu_seqlens(padded).tolist() and m["total_tokens"] == sum(padded)
    t = vl.torchtune_pack(tokens, lens, T + 3)
    assert t["tokens"][T:].tolist() == [0, 0, 0] and t["labels"][T:].tolist() == [-100] * 3
    assert t["seq_lens"].tolist() == lens + [3]


def test_from_packs():
    packs = packlib.Packs.from_lists([[2, 0], [1]], lengths=[3, 5, 2], max_sequence_length=5)
    assert vl.row_lengths(packs, 0).tolist() == [2, 3]
    assert vl.batch_lengths(packs, [1, 0]).tolist() == [5, 2, 3]
    assert vl.cu_seqlens(vl.batch_lengths(packs, [0, 1])).tolist() == [0, 2, 5, 10]


def test_errors():
    with pytest.raises(ValueError, match="overflow int32"):
        vl.cu_seqlens([2**30, 2**30])
    with pytest.raises(ValueError, match="max_sequence_length"):
        vl.mlperf_input_mask([3, 4], 6)
    with pytest.raises(TypeError, match="max_sequence_length"):
        vl.mlperf_input_mask([3, 4])
    with pytest.raises(TypeError, match="twice"):
        vl.attention_span([3, 4], 8, row_length=8)


def test_row_length_keyword_is_deprecated():
    with pytest.warns(DeprecationWarning, match="row_length"):
        old = vl.attention_span([3, 2], row_length=6)
    assert old.tolist() == vl.attention_span([3, 2], max_sequence_length=6).tolist() == [2, 1, 0, 1, 0, 0]
    with pytest.warns(DeprecationWarning, match="row_length"):
        assert vl.torchtune_pack([1, 2, 3], [3], row_length=4)["tokens"].tolist() == [1, 2, 3, 0]
    with pytest.raises(ValueError, match=">= 1"):
        vl.position_ids([2, 0])
    with pytest.raises(ValueError, match="sum to"):
        vl.hf_flattening_batch([1, 2], [3])
