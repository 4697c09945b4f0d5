import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from packlib.formats.example import Schema, decode_example, encode_example


def _example_classes(syntax: str):
    """tf.train.Example built at test time from a descriptor (proto3: packed repeated
    fields; proto2: unpacked)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    fd = descriptor_pb2.FileDescriptorProto(name=f"example_{syntax}.proto", package=f"t{syntax}", syntax=syntax)
    F = descriptor_pb2.FieldDescriptorProto
    rep = F.LABEL_REPEATED
    opt = F.LABEL_OPTIONAL

    def msg(name, fields, nested=None, options=None):
        m = fd.message_type.add(name=name) if nested is None else nested.nested_type.add(name=name)
        for fname, num, ftype, label, tname in fields:
            f = m.field.add(name=fname, number=num, type=ftype, label=label)
            if tname:
                f.type_name = tname
        if options:
            m.options.map_entry = True
        return m

    p = f".t{syntax}."
    msg("BytesList", [("value", 1, F.TYPE_BYTES, rep, None)])
    msg("FloatList", [("value", 1, F.TYPE_FLOAT, rep, None)])
    msg("Int64List", [("value", 1, F.TYPE_INT64, rep, None)])
    feat = msg("Feature", [("bytes_list", 1, F.TYPE_MESSAGE, opt, p + "BytesList"),
                           ("float_list", 2, F.TYPE_MESSAGE, opt, p + "FloatList"),
                           ("int64_list", 3, F.TYPE_MESSAGE, opt, p + "Int64List")])
    feat.oneof_decl.add(name="kind")
    for f in feat.field:
        f.oneof_index = 0
    feats = msg("Features", [("feature", 1, F.TYPE_MESSAGE, rep, p + "Features.FeatureEntry")])
    msg("FeatureEntry", [("key", 1, F.TYPE_STRING, opt, None), ("value", 2, F.TYPE_MESSAGE, opt, p + "Feature")],
        nested=feats, options=True)
    msg("Example", [("features", 1, F.TYPE_MESSAGE, opt, p + "Features")])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"t{syntax}.Example"))


def _fill(ex, features):
    for k, v in features.items():
        f = ex.features.feature[k]
        if isinstance(v, list):
            f.bytes_list.SetInParent()
            f.bytes_list.value.extend(v)
        elif v.dtype.kind == "f":
            f.float_list.SetInParent()
            f.float_list.value.extend(v.tolist())
        else:
            f.int64_list.SetInParent()
            f.int64_list.value.extend(v.tolist())
    return ex


names = st.text(alphabet="abcdefghij_", min_size=1, max_size=6)
values = st.one_of(
    st.lists(st.integers(-(2**63), 2**63 - 1), max_size=6).map(lambda x: np.array(x, dtype=np.int64)),
    st.lists(st.floats(width=32, allow_nan=False), min_size=1, max_size=6).map(lambda x: np.array(x, dtype=np.float32)),
    st.lists(st.binary(max_size=5), min_size=1, max_size=3),
)


def _equal(a, b):
    assert sorted(a) == sorted(b)
    for k in a:
        if isinstance(a[k], list):
            assert a[k] == b[k]
        else:
            assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k])


@given(st.dictionaries(names, values, max_size=5))
def test_matches_protobuf_deterministic_bytes_and_round_trips(features):
    Example3 = _example_classes("proto3")
    data = encode_example(features)
    ref = _fill(Example3(), features)
    # We write keys in byte order, as C++ protobuf (TensorFlow) does with deterministic=True;
    # upb (Python protobuf >= 4.21) orders a key after the keys it is a prefix of.
    if not any(a != b and b.startswith(a) for a in features for b in features):
        assert data == ref.SerializeToString(deterministic=True)
    parsed = Example3()
    parsed.ParseFromString(data)
    assert parsed == ref
    _equal(decode_example(data), features)


@given(st.dictionaries(names, values, max_size=5))
def test_decodes_unpacked_repeated_fields(features):
    Example2 = _example_classes("proto2")  # proto2: repeated scalars are not packed
    data = _fill(Example2(), features).SerializeToString()
    if any(not isinstance(v, list) and v.size > 1 for v in features.values()):
        assert data != encode_example(features)  # really a different encoding
    _equal(decode_example(data), features)


def test_matches_tfrecord_package_example_pb2():
    example_pb2 = pytest.importorskip("tfrecord.example_pb2")
    f = {"a": np.array([1, -1, 300]), "b": np.array([1.5], np.float32), "c": [b"xy"]}
    ex = example_pb2.Example()
    ex.ParseFromString(encode_example(f))
    assert list(ex.features.feature["a"].int64_list.value) == [1, -1, 300]
    assert ex.SerializeToString(deterministic=True) == encode_example(f)


def test_empty_and_invalid():
    assert decode_example(encode_example({})) == {}
    d = decode_example(encode_example({"e": np.zeros(0, np.float32), "i": []}))
    assert d["e"].dtype == np.float32 and d["i"].dtype == np.int64 and d["e"].size == d["i"].size == 0
    with pytest.raises(ValueError, match="not a valid tf.train.Example"):
        decode_example(b"\x0a\x05\x0a")
    with pytest.raises(TypeError, match="cannot encode"):
        encode_example({"x": np.array(["a"], dtype=object)})


schema = Schema.of({"ids": ("int64", 4), "w": ("float", 2), "lab": ("int64", 1)})


@given(st.lists(st.tuples(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=4, max_size=4),
                          st.lists(st.floats(width=32, allow_nan=False), min_size=2, max_size=2),
                          st.integers(-5, 2**40)), max_size=5))
def test_schema_encode_equals_one_record_encoder_and_decodes(rows):
    ints = np.array([r[0] + [r[2]] for r in rows], dtype=np.int64).reshape(len(rows), 5)
    floats = np.array([r[1] for r in rows], dtype=np.float32).reshape(len(rows), 2)
    data, offsets = schema.encode(ints, floats)
    recs = [data[offsets[i]:offsets[i + 1]].tobytes() for i in range(len(rows))]
    for i, rec in enumerate(recs):
        assert rec == encode_example({"ids": ints[i, schema.columns("ids")], "w": floats[i],
                                      "lab": ints[i, schema.columns("lab")]})
    got_i, got_f = schema.decode(recs)
    assert np.array_equal(got_i, ints) and np.array_equal(got_f.view(np.uint32), floats.view(np.uint32))


def test_schema_decode_accepts_unpacked_fields():
    Example2 = _example_classes("proto2")
    f = {"ids": np.array([1, 2, 3, 4]), "w": np.array([0.5, 2.0], np.float32), "lab": np.array([9])}
    got_i, got_f = schema.decode([_fill(Example2(), f).SerializeToString()])
    assert got_i.tolist() == [[1, 2, 3, 4, 9]] and got_f.tolist() == [[0.5, 2.0]]


@pytest.mark.parametrize("features, message", [
    ({"ids": np.arange(4), "w": np.zeros(2, np.float32)}, "record 1 lacks a feature .*'lab'"),
    ({"ids": np.arange(3), "w": np.zeros(2, np.float32), "lab": [1]}, "record 1 has a list of the wrong length .*'ids'"),
    ({"ids": np.arange(5), "w": np.zeros(2, np.float32), "lab": [1]}, "wrong length .*'ids'"),
    ({"ids": np.arange(4), "w": np.zeros(2), "lab": [1], "x": [1]}, "feature not in the schema .*'x'"),
    ({"ids": np.arange(4), "w": np.zeros(2, np.int64), "lab": [1]}, "wrong type .*'w'"),
])
def test_schema_decode_errors_name_record_and_feature(features, message):
    good = encode_example({"ids": np.arange(4), "w": np.zeros(2, np.float32), "lab": [1]})
    with pytest.raises(ValueError, match=message):
        schema.decode([good, encode_example(features)], path="f.tfrecord")


def test_schema_validation():
    with pytest.raises(ValueError, match="kind"):
        Schema.of({"a": ("int32", 3)})
    with pytest.raises(ValueError, match="shape"):
        schema.encode(np.zeros((2, 4)), np.zeros((2, 2)))
