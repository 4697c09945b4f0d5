"""``tf.train.Example`` encoding and decoding, written by hand (no TensorFlow, no protobuf):
the codec of the TFRecord and MLPerf BERT adapters. Its public names are
:mod:`packlib.formats.example`'s.

Schema (proto3): ``Example{Features features = 1}``, ``Features{map<string, Feature>
feature = 1}``, ``Feature{oneof: BytesList bytes_list = 1; FloatList float_list = 2;
Int64List int64_list = 3}``, each list a ``repeated value = 1`` (float32 and int64 are
packed on output; the decoder accepts packed and unpacked encodings).

Output is deterministic: features are written in sorted key order, as protobuf does with
``deterministic=True``.

Two levels:

- :func:`encode_example` / :func:`decode_example`: one record, any features, numpy in/out.
- :class:`Schema` with :meth:`Schema.encode` / :meth:`Schema.decode`: many records of fixed
  int64/float list lengths, in one compiled pass (the MLPerf writer's fast path).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from .._validate import as_choice, as_int_array, as_nonnegative_int
from .._validate import as_matrix as _as_matrix

__all__ = ["encode_example", "decode_example", "Schema"]


# --------------------------------------------------------------------------------------
# varints (vectorised)
# --------------------------------------------------------------------------------------
def _varint(n: int) -> bytes:
    out = bytearray()
    n &= (1 << 64) - 1
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _encode_varints(values: np.ndarray) -> bytes:
    u = np.ascontiguousarray(values, dtype=np.int64).view(np.uint64)
    if u.size == 0:
        return b""
    nbytes = np.ones(u.size, dtype=np.int64)
    for k in range(1, 10):
        nbytes += u >= (np.uint64(1) << np.uint64(7 * k))
    ends = np.cumsum(nbytes)
    starts = ends - nbytes
    out = np.empty(int(ends[-1]), dtype=np.uint8)
    for k in range(10):
        sel = nbytes > k
        if not sel.any():
            break
        chunk = (u[sel] >> np.uint64(7 * k)) & np.uint64(0x7F)
        chunk |= np.where(nbytes[sel] > k + 1, np.uint64(0x80), np.uint64(0))
        out[starts[sel] + k] = chunk.astype(np.uint8)
    return out.tobytes()


def _decode_varints(data: np.ndarray) -> np.ndarray:
    """Packed varints -> int64 (raises on a truncated or over-long varint)."""
    if data.size == 0:
        return np.zeros(0, dtype=np.int64)
    last = data < 0x80
    if not last[-1]:
        raise ValueError("truncated varint in a packed int64 list")
    group = np.concatenate(([0], np.cumsum(last)[:-1]))
    ends = np.flatnonzero(last)
    starts = np.concatenate(([0], ends[:-1] + 1))
    pos = np.arange(data.size) - starts[group]
    if pos.max() > 9:
        raise ValueError("varint longer than 10 bytes")
    parts = (data.astype(np.uint64) & np.uint64(0x7F)) << (np.uint64(7) * pos.astype(np.uint64))
    return np.bitwise_or.reduceat(parts, starts).view(np.int64)


def _read_varint(buf: bytes, pos: int, stop: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= stop or shift > 63:
            raise ValueError("truncated or over-long varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result & ((1 << 64) - 1), pos
        shift += 7


def _fields(buf: bytes, pos: int, stop: int):
    """Yield ``(field, wire, value)`` where value is an int (varint), or (start, stop)."""
    while pos < stop:
        tag, pos = _read_varint(buf, pos, stop)
        field, wire = tag >> 3, tag & 7
        if wire == 0:
            v, pos = _read_varint(buf, pos, stop)
            yield field, wire, v
        elif wire == 2:
            n, pos = _read_varint(buf, pos, stop)
            if pos + n > stop:
                raise ValueError("length-delimited field runs past the end of its message")
            yield field, wire, (pos, pos + n)
            pos += n
        elif wire == 5:
            if pos + 4 > stop:
                raise ValueError("truncated fixed32 field")
            yield field, wire, (pos, pos + 4)
            pos += 4
        elif wire == 1:
            if pos + 8 > stop:
                raise ValueError("truncated fixed64 field")
            yield field, wire, (pos, pos + 8)
            pos += 8
        else:
            raise ValueError(f"unsupported wire type {wire}")


def _len_delim(field: int, payload: bytes) -> bytes:
    return _varint((field << 3) | 2) + _varint(len(payload)) + payload


# --------------------------------------------------------------------------------------
# one record
# --------------------------------------------------------------------------------------
_F32_MAX = float(np.finfo(np.float32).max)


def _encode_feature(name: str, value) -> bytes:
    if isinstance(value, (bytes, str)):
        value = [value]
    if isinstance(value, (list, tuple)) and value and isinstance(value[0], (bytes, str)):
        items = []
        for v in value:
            if isinstance(v, str):
                items.append(v.encode())
            elif isinstance(v, (bytes, bytearray)):
                items.append(bytes(v))
            else:
                raise TypeError(
                    f"feature {name!r}: a bytes_list must hold only bytes or str, got {type(v).__name__} {v!r:.40}"
                )
        body = b"".join(_len_delim(1, v) for v in items)
        return _len_delim(1, body)
    if isinstance(value, (dict, set)) or value is None:
        raise TypeError(f"feature {name!r}: cannot encode {type(value).__name__}; give ints, floats or bytes")
    try:
        arr = np.zeros(0, dtype=np.int64) if isinstance(value, (list, tuple)) and not value else np.asarray(value)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"feature {name!r}: not a 1-D list of numbers ({exc})") from None
    if arr.ndim > 1:
        raise ValueError(f"feature {name!r} must be 1-D, got shape {arr.shape}")
    arr = arr.reshape(-1)
    kind = arr.dtype.kind
    if kind == "f":
        finite = np.abs(arr[np.isfinite(arr)])
        if finite.size and finite.max() > _F32_MAX:
            raise ValueError(
                f"feature {name!r} has a value ({finite.max():g}) beyond float32's range: float_list stores float32"
            )
        body = _len_delim(1, arr.astype("<f4").tobytes()) if arr.size else b""
        return _len_delim(2, body)
    if kind == "b":
        raise TypeError(f"feature {name!r} holds booleans; convert with .astype(np.int64) for an int64_list")
    if kind in "iu":
        if kind == "u" and arr.size and arr.max() > np.iinfo(np.int64).max:
            raise ValueError(f"feature {name!r} has values above 2**63-1")
        body = _len_delim(1, _encode_varints(arr.astype(np.int64))) if arr.size else b""
        return _len_delim(3, body)
    if kind == "O":  # Python ints beyond int64, or mixed objects
        try:
            arr = as_int_array(arr, f"feature {name!r}")
        except TypeError as exc:
            raise TypeError(f"{exc}: cannot encode it; give ints, floats or bytes") from None
        body = _len_delim(1, _encode_varints(arr)) if arr.size else b""
        return _len_delim(3, body)
    raise TypeError(f"feature {name!r}: cannot encode dtype {arr.dtype}; give ints, floats or bytes")


def encode_example(features: Mapping[str, object]) -> bytes:
    """Serialise a ``tf.train.Example``.

    Parameters
    ----------
    features : mapping of str to array_like
        Integer arrays (or lists) become ``int64_list``, float arrays ``float_list``
        (stored as float32), ``bytes`` / ``str`` or lists of them ``bytes_list``. An empty
        list is written as an empty ``int64_list`` unless given as a float array.

    Returns
    -------
    bytes
        Keys in sorted order: the same features give the same bytes.
    """
    if not isinstance(features, Mapping):
        raise TypeError(f"features must be a mapping of name -> values, got {type(features).__name__}")
    for name in features:
        if not isinstance(name, str):
            raise TypeError(f"feature names must be str, got {type(name).__name__} {name!r}")
    entries = []
    for name in sorted(features):
        feature = _encode_feature(name, features[name])
        entries.append(_len_delim(1, _len_delim(1, name.encode()) + _len_delim(2, feature)))
    return _len_delim(1, b"".join(entries)) if entries else b""  # as protobuf: unset when empty


def _decode_list(buf: bytes, start: int, stop: int, kind: int):
    if kind == 1:  # BytesList
        return [bytes(buf[a:b]) for f, w, (a, b) in _fields(buf, start, stop) if f == 1 and w == 2]
    parts = []
    for f, w, v in _fields(buf, start, stop):
        if f != 1:
            continue
        if kind == 2:  # FloatList: packed (wire 2) or one fixed32 each (wire 5)
            if w not in (2, 5):
                raise ValueError(f"float_list value has wire type {w}")
            a, b = v
            if (b - a) % 4:
                raise ValueError("packed float_list length is not a multiple of 4")
            parts.append(np.frombuffer(buf[a:b], dtype="<f4"))
        else:  # Int64List: packed (wire 2) or one varint each (wire 0)
            if w == 0:
                parts.append(np.array([v], dtype=np.uint64).view(np.int64))
            elif w == 2:
                parts.append(_decode_varints(np.frombuffer(buf[v[0]:v[1]], dtype=np.uint8)))
            else:
                raise ValueError(f"int64_list value has wire type {w}")
    dtype = np.float32 if kind == 2 else np.int64
    return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype=dtype)


def decode_example(data, *, path: str | None = None, record: int | None = None) -> dict:
    """Parse a serialised ``tf.train.Example``.

    Parameters
    ----------
    data : bytes-like
        One serialised record.
    path : str, optional
        The file it comes from, named in error messages.
    record : int, optional
        Its record number, named in error messages.

    Returns
    -------
    dict
        ``name -> int64 array`` (int64_list), ``float32 array`` (float_list) or
        ``list[bytes]`` (bytes_list); a feature with no list set decodes as an empty int64
        array. Keys in sorted order.

    Raises
    ------
    ValueError
        If the bytes are not a well-formed Example.
    """
    from .._validate import as_bytes as _as_bytes

    buf = _as_bytes(data, "data").tobytes()
    where = ""
    if path is not None or record is not None:
        where = f"{path if path is not None else '<records>'}: " + (f"record {record}: " if record is not None else "")
    out = {}
    try:
        for f, w, v in _fields(buf, 0, len(buf)):
            if f != 1 or w != 2:
                continue
            for f2, w2, v2 in _fields(buf, *v):
                if f2 != 1 or w2 != 2:
                    continue
                key, value = b"", None
                for f3, w3, v3 in _fields(buf, *v2):
                    if f3 == 1 and w3 == 2:
                        key = buf[v3[0]:v3[1]]
                    elif f3 == 2 and w3 == 2:
                        value = v3
                name = key.decode("utf-8")
                result = np.zeros(0, dtype=np.int64)
                if value is not None:
                    for f4, w4, v4 in _fields(buf, *value):
                        if f4 in (1, 2, 3) and w4 == 2:
                            result = _decode_list(buf, v4[0], v4[1], f4)
                out[name] = result
    except UnicodeDecodeError:
        raise ValueError(f"{where}not a valid tf.train.Example: feature name is not UTF-8") from None
    except ValueError as exc:
        raise ValueError(f"{where}not a valid tf.train.Example: {exc}") from None
    return dict(sorted(out.items()))


# --------------------------------------------------------------------------------------
# many records of one fixed schema
# --------------------------------------------------------------------------------------
def _schema_errors() -> dict:
    """What each status of the fixed-schema decoder means (its named constants)."""
    from .._kernels.formats import BAD_PROTO, MISSING_FEATURE, UNKNOWN_FEATURE, WRONG_LENGTH, WRONG_TYPE

    return {BAD_PROTO: "malformed protobuf (not a tf.train.Example)", UNKNOWN_FEATURE: "has a feature not in the schema",
            WRONG_LENGTH: "has a list of the wrong length", WRONG_TYPE: "has a list of the wrong type",
            MISSING_FEATURE: "lacks a feature"}


@dataclass(frozen=True)
class Schema:
    """A fixed-length Example schema: ``{name: ("int64" | "float", length)}``.

    ``encode`` and ``decode`` work on many records at once, in compiled code: ints in one
    int64 matrix and floats in one float32 matrix, feature ``name`` in the columns
    ``columns(name)``.

    >>> s = Schema.of({"ids": ("int64", 3), "w": ("float", 1)})
    >>> s.columns("ids"), s.columns("w")
    (slice(0, 3, None), slice(0, 1, None))
    """

    names: tuple
    kinds: tuple
    widths: tuple

    def __post_init__(self):
        # the compiled encoder/decoder trust these: check them however the schema was built
        names, kinds, widths = tuple(self.names), tuple(self.kinds), tuple(self.widths)
        if not len(names) == len(kinds) == len(widths):
            raise ValueError(f"names, kinds and widths need one entry per feature, got {len(names)}, {len(kinds)}, {len(widths)}")
        for n in names:
            if not isinstance(n, str):
                raise TypeError(f"feature names must be str, got {type(n).__name__} {n!r}")
        if list(names) != sorted(set(names)):
            raise ValueError("feature names must be unique and sorted (use Schema.of)")
        kinds = tuple(as_choice(k, f"feature {n!r}: kind", ("int64", "float")) for n, k in zip(names, kinds))
        widths = tuple(as_nonnegative_int(w, f"feature {n!r}: length", maximum=2**31 - 1) for n, w in zip(names, widths))
        object.__setattr__(self, "names", names)
        object.__setattr__(self, "kinds", kinds)
        object.__setattr__(self, "widths", widths)

    @classmethod
    def of(cls, spec: Mapping[str, tuple]) -> "Schema":
        """Build a schema (keys get sorted).

        Parameters
        ----------
        spec : mapping of str to (kind, length)
            ``{name: ("int64" | "float", length)}``.
        """
        if not isinstance(spec, Mapping):
            raise TypeError(f"spec must be a mapping {{name: (kind, length)}}, got {type(spec).__name__}")
        for n in spec:
            if not isinstance(n, str):
                raise TypeError(f"feature names must be str, got {type(n).__name__} {n!r}")
        names = tuple(sorted(spec))
        kinds, widths = [], []
        for n in names:
            entry = spec[n]
            if not isinstance(entry, (tuple, list)) or len(entry) != 2:
                raise TypeError(f"feature {n!r}: give (kind, length), e.g. ('int64', 128), got {entry!r}")
            kind, width = entry
            kinds.append(as_choice(kind, f"feature {n!r}: kind", ("int64", "float")))
            widths.append(as_nonnegative_int(width, f"feature {n!r}: length", maximum=2**31 - 1))
        return cls(names, tuple(kinds), tuple(widths))

    def _arrays(self):
        keys = [n.encode() for n in self.names]
        key_offsets = np.concatenate(([0], np.cumsum([len(k) for k in keys]))).astype(np.int64)
        kinds = np.array([0 if k == "int64" else 1 for k in self.kinds], dtype=np.int64)
        widths = np.array(self.widths, dtype=np.int64)
        cols = np.zeros(len(self.names), dtype=np.int64)
        ni = nf = 0
        for i, k in enumerate(kinds):
            if k == 0:
                cols[i], ni = ni, ni + widths[i]
            else:
                cols[i], nf = nf, nf + widths[i]
        return np.frombuffer(b"".join(keys), dtype=np.uint8).copy(), key_offsets, kinds, widths, cols, ni, nf

    @property
    def int_width(self) -> int:
        """Columns of the int64 matrix."""
        return sum(w for k, w in zip(self.kinds, self.widths) if k == "int64")

    @property
    def float_width(self) -> int:
        """Columns of the float32 matrix."""
        return sum(w for k, w in zip(self.kinds, self.widths) if k == "float")

    def columns(self, name: str) -> slice:
        """The columns of ``name`` in the int or float matrix.

        Parameters
        ----------
        name : str
        """
        start = 0
        kind = self.kinds[self.names.index(name)]
        for n, k, w in zip(self.names, self.kinds, self.widths):
            if n == name:
                return slice(start, start + w)
            if k == kind:
                start += w
        raise KeyError(name)

    def encode(self, ints: np.ndarray, floats: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Serialise rows: returns ``(data uint8, offsets int64)`` (record ``r`` is
        ``data[offsets[r]:offsets[r+1]]``), ready for :func:`write_tfrecord`.

        Parameters
        ----------
        ints : 2-D int array, shape ``(n, int_width)``
            Whole numbers (whole floats accepted, never rounded; booleans refused).
        floats : 2-D float array, shape ``(n, float_width)``
            Stored as float32.
        """
        from .._kernels.formats import encode_examples

        keys, key_offsets, kinds, widths, cols, ni, nf = self._arrays()
        ints = _as_matrix(ints, "ints", np.int64)
        floats = _as_matrix(floats, "floats", np.float32)
        n = ints.shape[0] if ints.ndim == 2 else -1
        if ints.shape != (n, ni) or floats.shape != (n, nf):
            raise ValueError(f"need ints of shape (n, {ni}) and floats of shape (n, {nf}), got {ints.shape} and {floats.shape}")
        return encode_examples(ints, floats.view(np.uint32), keys, key_offsets, kinds, widths, cols)

    def decode(self, records, *, path: str = "") -> tuple[np.ndarray, np.ndarray]:
        """Decode the :class:`~packlib.formats.tfrecord.Records` (or a list of bytes) into
        ``(ints (n, int_width) int64, floats (n, float_width) float32)``.

        Parameters
        ----------
        records : Records or iterable of bytes-like
        path : str, optional
            Named in error messages (a :class:`Records` names its own file).

        Raises
        ------
        ValueError
            Naming the file, record and feature if a record does not match the schema
            exactly (unknown or missing feature, wrong type or length, not an Example).
        """
        from .._kernels.formats import UNKNOWN_FEATURE, decode_examples
        from .tfrecord import Records, _join

        if not isinstance(records, Records):
            data, offsets = _join(records)
            records = Records(data, offsets[:-1], offsets[1:], path)
        keys, key_offsets, kinds, widths, cols, ni, nf = self._arrays()
        ints, fbits, err, rec, feat = decode_examples(records.data, records.starts, records.stops, keys, key_offsets, kinds, widths, cols, ni, nf)
        if err:
            name = records.path or path or "<records>"
            where = f"{name}: record {rec}"
            what = _schema_errors().get(int(err), "is invalid")
            if feat >= 0:
                what += f" (feature {self.names[feat]!r}, expected {self.kinds[feat]} x {self.widths[feat]})"
            elif err == UNKNOWN_FEATURE:
                got = sorted(decode_example(records[int(rec)], path=name, record=int(rec)))
                what += f" (it has {got}; the schema has {list(self.names)})"
            raise ValueError(f"{where} {what}")
        return ints, fbits.view(np.float32)


for _public in (encode_example, decode_example, Schema):
    _public.__module__ = "packlib.formats.example"  # the public path, which never moves
