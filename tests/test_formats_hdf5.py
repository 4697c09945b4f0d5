import numpy as np
import pytest

import packlib
from packlib.formats import varlen

h5py = pytest.importorskip("h5py")
from packlib.formats import hdf5  # noqa: E402


def _docs(seed=0, n=30, L=16):
    rng = np.random.default_rng(seed)
    lens = rng.integers(2, L + 2, size=n)
    off = np.concatenate(([0], np.cumsum(lens)))
    return rng.integers(1, 50000, size=int(off[-1])), off


def test_classic_round_trip_and_layout(tmp_path):
    tok, off = _docs()
    n = hdf5.write_hdf5(tmp_path / "c.h5", tok, off, max_sequence_length=16, pad_id=7)
    with h5py.File(tmp_path / "c.h5") as f:
        ds = f["data"]
        assert f.attrs["n_examples"] == n == 30
        assert ds.shape == (30, 3, 16) and ds.dtype == np.dtype("i4") and ds.chunks == (1, 3, 16)
        assert ds.compression == "gzip"
    r = hdf5.read_hdf5(tmp_path / "c.h5")
    for d in range(30):
        doc = tok[off[d]:off[d + 1]]
        m = doc.size - 1
        assert r["input_ids"][d].tolist() == doc[:-1].tolist() + [7] * (16 - m)
        assert r["labels"][d].tolist() == doc[1:].tolist() + [7] * (16 - m)
        assert r["attention_mask"][d].tolist() == [1] * m + [0] * (16 - m)


def test_packed_round_trip_against_varlen(tmp_path):
    tok, off = _docs(1, n=40)
    contributed = np.diff(off) - 1
    packs = packlib.ffd_pack(contributed, 16).shuffled(2)
    n = hdf5.write_hdf5(tmp_path / "p.h5", tok, off, packs, max_sequence_length=16, chunk_rows=3)
    r = hdf5.read_hdf5(tmp_path / "p.h5")
    assert n == packs.num_packs and r["data"].shape == (n, 5, 16)
    for p in range(n):
        docs = packs[p]
        lens = contributed[docs]
        ids = np.concatenate([tok[off[d]:off[d + 1] - 1] for d in docs])
        labels = np.concatenate([tok[off[d] + 1:off[d + 1]] for d in docs])
        T = ids.size
        assert r["input_ids"][p, :T].tolist() == ids.tolist() and not r["input_ids"][p, T:].any()
        assert r["labels"][p, :T].tolist() == labels.tolist()
        assert r["input_mask"][p].tolist() == [1] * T + [0] * (16 - T)
        assert r["attention_span"][p].tolist() == varlen.attention_span(lens, 16).tolist()
        assert r["position_ids"][p, :T].tolist() == varlen.position_ids(lens).tolist()
    sub = hdf5.read_hdf5(tmp_path / "p.h5", 1, 3)
    assert sub["data"].shape == (2, 5, 16) and sub["n_examples"] == n


def test_errors(tmp_path):
    tok, off = _docs()
    with pytest.raises(ValueError, match="max_sequence_length"):
        hdf5.write_hdf5(tmp_path / "x.h5", tok, off, max_sequence_length=4)
    bad = packlib.Packs.from_lists([[0]], np.diff(off), 100)
    with pytest.raises(ValueError):
        hdf5.write_hdf5(tmp_path / "x.h5", tok, off, bad, max_sequence_length=16)
    with pytest.raises(ValueError, match="doc_offsets"):
        hdf5.write_hdf5(tmp_path / "x.h5", tok, off[:-1], max_sequence_length=16)
    with h5py.File(tmp_path / "other.h5", "w") as f:
        f["x"] = np.zeros(3)
    with pytest.raises(ValueError, match="not a Cerebras-style file"):
        hdf5.read_hdf5(tmp_path / "other.h5")
