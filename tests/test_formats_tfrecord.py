import gzip
import os

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.naive_formats import crc32c as naive_crc32c
from tests.naive_formats import frame as naive_frame
from packlib.formats import tfrecord as tfr


def test_crc_check_value_every_backend():
    for backend in ("auto", "numba"):
        assert tfr.crc32c(b"123456789", backend) == 0xE3069283
    assert naive_crc32c(b"123456789") == 0xE3069283


@given(st.binary(max_size=300))
def test_numba_crc_matches_naive_and_c(data):
    want = naive_crc32c(data)
    assert tfr.crc32c(data, "numba") == want
    assert tfr.crc32c(data, "auto") == want


@given(st.lists(st.binary(max_size=200), max_size=8))
def test_framing_matches_naive_and_round_trips(tmp_path_factory, records):
    path = tmp_path_factory.mktemp("t") / "x.tfrecord"
    assert tfr.write_tfrecord(path, records) == len(records)
    raw = path.read_bytes()
    assert raw == naive_frame(records)
    for crc in ("auto", "numba"):
        assert list(tfr.read_tfrecord(path, crc=crc)) == records


def test_gzip_round_trip_is_deterministic(tmp_path):
    recs = [os.urandom(n) for n in (0, 3, 1000)]
    a, b = tmp_path / "a.tfrecord.gz", tmp_path / "b.tfrecord.gz"
    tfr.write_tfrecord(a, recs, compression="gzip")
    tfr.write_tfrecord(b, recs, compression="auto")
    assert a.read_bytes() == b.read_bytes()
    assert gzip.decompress(a.read_bytes()) == naive_frame(recs)
    assert list(tfr.read_tfrecord(a, compression="auto")) == recs
    with pytest.raises(ValueError, match="gzip"):
        tfr.read_tfrecord(_plain(tmp_path, recs), compression="gzip")


def _plain(tmp_path, recs):
    p = tmp_path / "plain.tfrecord"
    tfr.write_tfrecord(p, recs)
    return p


def test_records_access(tmp_path):
    recs = [b"a", b"", b"xyz"]
    p = _plain(tmp_path, recs)
    r = tfr.read_tfrecord(p)
    assert len(r) == 3 and r[2] == b"xyz" and r.nbytes == 4 and "3 records" in repr(r)
    assert list(tfr.iter_tfrecord(p)) == recs


def test_data_offsets_input(tmp_path):
    data = np.frombuffer(b"helloworld", dtype=np.uint8)
    p = tmp_path / "x.tfrecord"
    tfr.write_tfrecord(p, (data, np.array([0, 5, 10])))
    assert list(tfr.read_tfrecord(p)) == [b"hello", b"world"]
    with pytest.raises(ValueError, match="offsets"):
        tfr.frame_records(data, np.array([0, 5, 11]))


@pytest.mark.parametrize("crc", ["auto", "numba"])
def test_corruption_is_reported_with_file_and_record(tmp_path, crc):
    recs = [os.urandom(50) for _ in range(4)]
    p = _plain(tmp_path, recs)
    raw = bytearray(p.read_bytes())
    size = 66  # 12 + 50 + 4 per record
    # flipped data byte in record 2
    bad = bytearray(raw)
    bad[2 * size + 12 + 7] ^= 0x40
    (tmp_path / "d.tfrecord").write_bytes(bad)
    with pytest.raises(ValueError, match=r"d\.tfrecord: record 2 at byte 132: bad data CRC"):
        tfr.read_tfrecord(tmp_path / "d.tfrecord", crc=crc)
    # flipped stored data CRC
    bad = bytearray(raw)
    bad[size + 12 + 50] ^= 1
    (tmp_path / "c.tfrecord").write_bytes(bad)
    with pytest.raises(ValueError, match="record 1 .*bad data CRC"):
        tfr.read_tfrecord(tmp_path / "c.tfrecord", crc=crc)
    # no check when asked
    assert len(tfr.read_tfrecord(tmp_path / "c.tfrecord", verify=False)) == 4
    # bad length field
    bad = bytearray(raw)
    bad[3 * size + 1] ^= 1
    (tmp_path / "l.tfrecord").write_bytes(bad)
    with pytest.raises(ValueError, match=r"l\.tfrecord: record 3 at byte 198: bad length CRC"):
        tfr.read_tfrecord(tmp_path / "l.tfrecord", crc=crc)
    # truncated in the data, and in a header
    (tmp_path / "t.tfrecord").write_bytes(bytes(raw[:-10]))
    with pytest.raises(ValueError, match=r"t\.tfrecord: record 3 at byte 198: truncated record"):
        tfr.read_tfrecord(tmp_path / "t.tfrecord", crc=crc)
    (tmp_path / "h.tfrecord").write_bytes(bytes(raw[: 2 * size + 5]))
    with pytest.raises(ValueError, match="record 2 at byte 132: truncated record header"):
        tfr.read_tfrecord(tmp_path / "h.tfrecord", crc=crc)


def test_cross_check_with_tfrecord_package(tmp_path):
    tfrecord = pytest.importorskip("tfrecord")
    from packlib.formats.example import decode_example, encode_example

    theirs = tmp_path / "theirs.tfrecord"
    w = tfrecord.TFRecordWriter(str(theirs))
    rows = [{"ids": ([1, 2, 300], "int"), "w": ([0.5, 1.0], "float")}, {"ids": ([7], "int"), "w": ([], "float")}]
    for row in rows:
        w.write(row)
    w.close()
    got = [decode_example(r) for r in tfr.read_tfrecord(theirs)]
    assert got[0]["ids"].tolist() == [1, 2, 300] and got[0]["w"].tolist() == [0.5, 1.0]
    assert got[1]["ids"].tolist() == [7]
    ours = tmp_path / "ours.tfrecord"
    tfr.write_tfrecord(ours, [encode_example({"ids": np.array([5, -1]), "w": np.array([2.5], np.float32)})])
    back = list(tfrecord.tfrecord_loader(str(ours), None, {"ids": "int", "w": "float"}))
    assert back[0]["ids"].tolist() == [5, -1] and back[0]["w"].tolist() == [2.5]


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="compression"):
        tfr.read_tfrecord(tmp_path / "x", compression="zip")
    with pytest.raises(ValueError, match="crc must be one of"):
        tfr.crc32c(b"", "fast")


def test_google_crc32c_path(monkeypatch, tmp_path):
    pytest.importorskip("google_crc32c")
    import sys

    monkeypatch.setitem(sys.modules, "crc32c", None)  # hide the crc32c package
    monkeypatch.setattr(tfr, "_BACKEND", {})
    name, fn = tfr.crc_backend("c")
    assert name == "c" and fn(memoryview(b"123456789")) == 0xE3069283
    recs = [os.urandom(n) for n in (0, 9, 300)]
    p = tmp_path / "g.tfrecord"
    tfr.write_tfrecord(p, recs)
    assert p.read_bytes() == naive_frame(recs) and list(tfr.read_tfrecord(p)) == recs
