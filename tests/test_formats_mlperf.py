import argparse
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import packlib
from packlib.formats import mlperf_bert as mb
from packlib.formats.example import decode_example
from packlib.formats.tfrecord import read_tfrecord
from tests.naive_formats import pack_sequences, unpack_record

MLPERF_KEYS = ["sequences_dropped", "num_strategies_utilized", "new_number_of_samples", "original_number_of_samples",
               "compression_ratio", "expected_speedup", "theoretical_speedup", "avg_seq_per_sample",
               "padding_tokens_original_dataset", "padding_tokens_packed_dataset", "packing_efficiency",
               "top_8_strategies"]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    d = tmp_path_factory.mktemp("bert")
    seqs = mb.synthetic_sequences(3000, seed=7)
    half = 1700
    parts = [(0, half), (half, 3000)]
    for i, (a, b) in enumerate(parts):
        sub = mb.BertSequences(seqs.seq_offsets[a:b + 1] - seqs.seq_offsets[a],
                               seqs.tokens[seqs.seq_offsets[a]:seqs.seq_offsets[b]],
                               seqs.segments[seqs.seq_offsets[a]:seqs.seq_offsets[b]],
                               seqs.mlm_offsets[a:b + 1] - seqs.mlm_offsets[a],
                               seqs.mlm_positions[seqs.mlm_offsets[a]:seqs.mlm_offsets[b]],
                               seqs.mlm_ids[seqs.mlm_offsets[a]:seqs.mlm_offsets[b]],
                               seqs.next_sentence_labels[a:b])
        mb.write_unpacked(d / f"unpacked-{i}.tfrecord", sub)
    return d, seqs


def _run(argv):
    from packlib.pipeline.mlperf import cli

    parser = argparse.ArgumentParser()
    cli.configure_parser(parser)
    return cli.run(parser.parse_args(argv))


def _input_dicts(seqs):
    return [seqs.sequence(i) for i in range(seqs.num_sequences)]


def test_synthetic_data_looks_like_mlperf(dataset):
    d, seqs = dataset
    raw = read_tfrecord(d / "unpacked-0.tfrecord")[0]
    rec = decode_example(raw)
    assert {k: v.size for k, v in rec.items()} == {
        "input_ids": 512, "input_mask": 512, "segment_ids": 512, "masked_lm_positions": 76,
        "masked_lm_ids": 76, "masked_lm_weights": 76, "next_sentence_labels": 1}
    assert rec["masked_lm_weights"].dtype == np.float32
    n = int(rec["input_mask"].sum())
    assert rec["input_ids"][0] == 101 and rec["input_ids"][n - 1] == 102 and not rec["input_ids"][n:].any()
    assert (seqs.lengths == 512).any() and seqs.lengths.min() < 100


def test_read_unpacked_round_trip(dataset):
    d, seqs = dataset
    got = mb.read_unpacked(sorted(d.glob("unpacked-*.tfrecord")))
    for name in ("seq_offsets", "tokens", "segments", "mlm_offsets", "mlm_positions", "mlm_ids", "next_sentence_labels"):
        assert np.array_equal(getattr(got, name), getattr(seqs, name)), name


def test_build_matches_naive_packer(dataset):
    _, seqs = dataset
    packs = packlib.lpfhp_pack(packlib.histogram(seqs.lengths, 512), max_sequences_per_pack=3).assign(seqs.lengths, seed=3).shuffled(3)
    schema = mb.packed_schema()
    ints, floats = mb.build_packed_features(seqs, packs, 10, 70)
    dicts = _input_dicts(seqs)
    for r in range(60):
        want = pack_sequences([dicts[i] for i in packs[10 + r]])
        for name, values in want.items():
            m = floats if isinstance(values[0], float) else ints
            assert m[r, schema.columns(name)].tolist() == values, (r, name)


def test_cli_end_to_end_field_by_field_and_reproducible(dataset, tmp_path, capsys):
    d, seqs = dataset
    out1, out2 = tmp_path / "a", tmp_path / "b"
    args = ["--input-glob", str(d / "unpacked-*.tfrecord"), "--records-per-file", "400", "--seed", "5", "--no-progress"]
    assert _run(args + ["--output-dir", str(out1)]) == 0
    text = capsys.readouterr().out
    assert "verified" in text and "3,000 input sequences exactly once" in text
    assert _run(args + ["--output-dir", str(out2), "--workers", "2"]) == 0
    names = sorted(os.listdir(out1))
    assert names == sorted(os.listdir(out2)) and "packing_metadata.json" in names
    for n in names:
        assert (out1 / n).read_bytes() == (out2 / n).read_bytes(), n
    meta = json.loads((out1 / "packing_metadata.json").read_text())
    assert list(meta)[: len(MLPERF_KEYS)] == MLPERF_KEYS
    assert meta["original_number_of_samples"] == 3000 and meta["sequences_dropped"] == 0

    # independent unpacking of every output record, checked against the inputs
    plan = packlib.nnls_pack(packlib.histogram(seqs.lengths, 512), max_sequences_per_pack=3)
    packs = plan.assign(seqs.lengths, seed=5).shuffled(5)
    files = [out1 / n for n in names if n.endswith(".tfrecord")]
    assert len(files) == -(-packs.num_packs // 400) and meta["new_number_of_samples"] == packs.num_packs
    records = [decode_example(r) for f in files for r in read_tfrecord(f)]
    assert len(records) == packs.num_packs
    dicts = _input_dicts(seqs)
    seen = []
    strategies = set()
    for p, rec in enumerate(records):
        assert rec["masked_lm_ids"].size == 79 and rec["next_sentence_labels"].size == 3
        got = unpack_record(rec)
        ids = packs[p].tolist()
        assert len(got) == len(ids)
        strategies.add(tuple(sorted(len(g["input_ids"]) for g in got)))
        for g, i in zip(got, ids):
            want = dicts[i]
            assert g["input_ids"] == want["input_ids"].tolist()
            assert g["segment_ids"] == want["segment_ids"].tolist()
            assert g["positions"] == list(range(len(g["input_ids"])))
            assert g["masked_lm_positions"] == want["masked_lm_positions"].tolist()
            assert g["masked_lm_ids"] == want["masked_lm_ids"].tolist()
            assert g["next_sentence_labels"] == want["next_sentence_labels"]
            assert g["next_sentence_position"] == g["start"] and g["next_sentence_weight"] == 1.0
            seen.append(i)
        end = sum(len(g["input_ids"]) for g in got)
        assert not rec["input_ids"][end:].any() and not rec["positions"][end:].any()
    assert sorted(seen) == list(range(3000))
    # files are shuffled across strategies, not one strategy per file
    first = {tuple(sorted(len(g["input_ids"]) for g in unpack_record(r))) for r in records[:400]}
    assert len(first) > 10


def test_read_packed_inverts_write(dataset, tmp_path):
    _, seqs = dataset
    packs = packlib.spfhp_pack(packlib.histogram(seqs.lengths, 512), max_sequences_per_pack=3).assign(seqs.lengths, seed=1)
    mb.write_packed(tmp_path / "p.tfrecord.gz", seqs, packs, compression="gzip")
    back = mb.read_packed(tmp_path / "p.tfrecord.gz", compression="gzip")
    assert np.array_equal(np.sort(back.fingerprints()), np.sort(seqs.fingerprints()))
    order = packs.indices
    assert np.array_equal(back.lengths, seqs.lengths[order])


def test_corrupted_input_names_file_and_record(dataset, tmp_path):
    d, _ = dataset
    raw = bytearray((d / "unpacked-1.tfrecord").read_bytes())
    raw[len(raw) // 2] ^= 0x10
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "x.tfrecord").write_bytes(raw)
    with pytest.raises(ValueError, match=r"x\.tfrecord: record \d+ at byte \d+: bad data CRC"):
        _run(["--input-glob", str(tmp_path / "in" / "*.tfrecord"), "--output-dir", str(tmp_path / "o")])
    with pytest.raises(ValueError, match="matches no files"):
        _run(["--input-glob", str(tmp_path / "none*"), "--output-dir", str(tmp_path / "o")])


def test_malformed_packed_record_is_refused():
    schema = mb.packed_schema(8, 2, 2)
    ints = np.zeros((1, schema.int_width), dtype=np.int64)
    floats = np.zeros((1, schema.float_width), dtype=np.float32)
    ints[0, schema.columns("input_mask")] = [2, 2, 1, 0, 0, 0, 0, 0]  # sequence 2 before 1
    with pytest.raises(ValueError, match="record 0 is not a well-formed"):
        mb.unpack_packed(ints, floats, schema)


def test_too_many_predictions_is_an_error():
    seqs = mb.synthetic_sequences(40, seed=2, max_sequence_length=64, max_predictions=2)
    packs = packlib.Packs.from_lists([list(range(40))], seqs.lengths, 10**6)
    with pytest.raises(ValueError, match="pack 0 .*more than"):
        mb.build_packed_features(seqs, packs, max_sequences_per_pack=3)


def test_unpacked_validation():
    schema = mb.unpacked_schema(8, 2)
    ints = np.zeros((1, schema.int_width), dtype=np.int64)
    floats = np.zeros((1, schema.float_width), dtype=np.float32)
    ints[0, schema.columns("input_mask")] = [1, 0, 1, 0, 0, 0, 0, 0]
    with pytest.raises(ValueError, match="record 0: input_mask"):
        mb.BertSequences.from_padded(ints, floats, schema)
    ints[0, schema.columns("input_mask")] = [1, 1, 0, 0, 0, 0, 0, 0]
    floats[0, schema.columns("masked_lm_weights")] = [0.5, 0]
    with pytest.raises(ValueError, match="masked_lm_weights"):
        mb.BertSequences.from_padded(ints, floats, schema)


def test_python_m_packlib(dataset, tmp_path):
    d, _ = dataset
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    res = subprocess.run([sys.executable, "-m", "packlib", "mlperf-bert", "--input-glob", str(d / "unpacked-0.tfrecord"),
                          "--output-dir", str(tmp_path / "o"), "--method", "lpfhp", "--records-per-file", "5000"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "exactly once" in res.stdout
    assert sorted(os.listdir(tmp_path / "o")) == ["packed-00000-of-00001.tfrecord", "packing_metadata.json"]


def test_bad_record_deep_in_a_file_is_numbered_in_the_file(tmp_path):
    from packlib.formats.example import encode_example
    from packlib.formats.tfrecord import write_tfrecord

    seqs = mb.synthetic_sequences(2100, seed=4, max_sequence_length=32, max_predictions=5)
    schema = mb.unpacked_schema(32, 5)
    data, offs = schema.encode(*seqs.to_padded(schema))
    recs = [data[offs[i]:offs[i + 1]].tobytes() for i in range(2100)]
    recs[2060] = encode_example({"input_ids": np.zeros(32, np.int64)})
    write_tfrecord(tmp_path / "u.tfrecord", recs)
    with pytest.raises(ValueError, match=r"u\.tfrecord: record 2060 lacks a feature"):
        mb.read_unpacked(tmp_path / "u.tfrecord")
    ints, floats = seqs.to_padded(schema)
    ints[2050, schema.columns("input_mask")][:3] = [1, 0, 1]
    data, offs = schema.encode(ints, floats)
    write_tfrecord(tmp_path / "v.tfrecord", (data, offs))
    with pytest.raises(ValueError, match=r"v\.tfrecord: record 2050: input_mask"):
        mb.read_unpacked(tmp_path / "v.tfrecord")


def test_cli_skips_empty_inputs_and_refuses_all_empty(dataset, tmp_path, capsys):
    from packlib.formats.tfrecord import write_tfrecord

    d, _ = dataset
    (tmp_path / "in").mkdir()
    write_tfrecord(tmp_path / "in" / "empty.tfrecord", [])
    with pytest.raises(ValueError, match="hold no records"):
        _run(["--input-glob", str(tmp_path / "in" / "*"), "--output-dir", str(tmp_path / "o")])
    assert _run(["--input-glob", str(tmp_path / "in" / "*"), "--input-glob", str(d / "unpacked-1.tfrecord"),
                 "--output-dir", str(tmp_path / "o"), "--method", "spfhp", "--workers", "2", "--compression", "gzip",
                 "--records-per-file", "300"]) == 0
    assert "1,300 input sequences exactly once" in capsys.readouterr().out
    assert len(list((tmp_path / "o").glob("packed-*-of-*.tfrecord.gz"))) >= 2


def test_packed_records_are_what_protobuf_writes(dataset, tmp_path):
    example_pb2 = pytest.importorskip("tfrecord.example_pb2")
    _, seqs = dataset
    packs = packlib.lpfhp_pack(packlib.histogram(seqs.lengths, 512), max_sequences_per_pack=3).assign(seqs.lengths, seed=0)
    data, offsets = mb.encode_packed(seqs, packs, 0, 20)
    for i in range(20):
        raw = data[offsets[i]:offsets[i + 1]].tobytes()
        ex = example_pb2.Example()
        ex.ParseFromString(raw)
        assert ex.SerializeToString(deterministic=True) == raw
        assert len(ex.features.feature["masked_lm_weights"].float_list.value) == 79


def test_cli_runs_without_pyarrow(dataset, tmp_path):
    """The mlperf-bert tool runs on the out-of-core pipeline, which needs numpy only."""
    d, _ = dataset
    code = ("import sys; sys.modules['pyarrow'] = None\n"
            "from packlib.cli import main\n"
            f"sys.exit(main(['mlperf-bert', '--input-glob', {str(d / 'unpacked-*.tfrecord')!r}, "
            f"'--output-dir', {str(tmp_path / 'o')!r}, '--workers', '2', '--records-per-file', '700']))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, PYTHONPATH=os.getcwd()))
    assert res.returncode == 0, res.stderr
    assert "3,000 input sequences exactly once" in res.stdout


def test_bad_input_writes_nothing(dataset, tmp_path):
    d, _ = dataset
    bad = tmp_path / "in" / "z-bad.tfrecord"
    bad.parent.mkdir()
    raw = (d / "unpacked-0.tfrecord").read_bytes()
    bad.write_bytes(raw[: len(raw) // 3])
    with pytest.raises(ValueError, match=r"z-bad\.tfrecord: record \d+ at byte \d+: truncated"):
        _run(["--input-glob", str(d / "unpacked-*.tfrecord"), "--input-glob", str(bad),
              "--output-dir", str(tmp_path / "out"), "--workers", "2"])
    assert sorted(os.listdir(tmp_path)) == ["in"]


def test_same_output_as_in_memory_packing(dataset, tmp_path):
    """The pipeline writes what packing everything in memory writes."""
    d, seqs = dataset
    assert _run(["--input-glob", str(d / "unpacked-*.tfrecord"), "--output-dir", str(tmp_path / "o"),
                 "--records-per-file", "1000", "--seed", "9", "--method", "lpfhp", "--no-verify"]) == 0
    plan = packlib.lpfhp_pack(packlib.histogram(seqs.lengths, 512), max_sequences_per_pack=3)
    packs = plan.assign(seqs.lengths, seed=9).shuffled(9)
    names = sorted(p for p in os.listdir(tmp_path / "o") if p.endswith(".tfrecord"))
    assert len(names) == -(-packs.num_packs // 1000)
    for i, name in enumerate(names):
        mb.write_packed(tmp_path / "ref.tfrecord", seqs, packs, 1000 * i, min(packs.num_packs, 1000 * (i + 1)))
        assert (tmp_path / "o" / name).read_bytes() == (tmp_path / "ref.tfrecord").read_bytes()


def _dying_spill(job, i, *args):
    if i == 1:
        os._exit(3)
    from packlib.pipeline.mlperf import _tasks

    return _tasks.bert_spill_task(job, i, *args)


def test_a_worker_that_dies_writes_nothing(dataset, tmp_path, monkeypatch, capsys):
    from packlib.pipeline.mlperf import _run as mlperf_run

    d, _ = dataset
    monkeypatch.setattr(mlperf_run, "bert_spill_task", _dying_spill)
    assert _run(["--input-glob", str(d / "unpacked-*.tfrecord"), "--output-dir", str(tmp_path / "out"),
                 "--workers", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: a worker process died") and err.count("\n") == 1
    assert os.listdir(tmp_path) == []


def test_mlm_positions_must_lie_inside_their_sequence():
    """Issue 15: positions past the sequence were accepted and written."""
    from packlib.formats.mlperf_bert import BertSequences

    with pytest.raises(ValueError, match=r"mlm_positions\[0\] = 5 is outside sequence 0, which has 3 tokens"):
        BertSequences([0, 3], [1, 2, 3], [0, 0, 0], [0, 1], [5], [7], [1])
    with pytest.raises(ValueError, match="outside sequence 1"):
        BertSequences([0, 3, 5], [1, 2, 3, 4, 5], [0] * 5, [0, 1, 2], [2, 2], [7, 8], [1, 0])
    assert BertSequences([0, 3], [1, 2, 3], [0, 0, 0], [0, 1], [2], [7], [1]).num_sequences == 1
