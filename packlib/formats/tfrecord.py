"""TFRecord files without TensorFlow.

Each record is ``uint64 length`` (little-endian), ``uint32 masked_crc32c(length)``,
``data[length]``, ``uint32 masked_crc32c(data)``; records are simply concatenated. The
reader checks both CRCs of every record and raises ``ValueError`` naming the file, the
record number and the byte offset on any damage. ``compression="gzip"`` compresses the
whole stream, as TensorFlow's ``GZIP`` option does.

CRC-32C comes from the ``crc32c`` or ``google-crc32c`` package when one is installed (the
fast path); otherwise from a numba slicing-by-8 kernel (speeds: docs/formats.md).

>>> import os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "x.tfrecord")
>>> write_tfrecord(path, [b"first", b"second"])
2
>>> list(read_tfrecord(path))
[b'first', b'second']
"""
from __future__ import annotations

import gzip
import os
import zlib
from dataclasses import dataclass
from typing import Iterable, Iterator

import numpy as np

from .._validate import as_bool, as_choice, as_int_array
from .._validate import as_bytes as _as_bytes

__all__ = [
    "crc32c",
    "masked_crc32c",
    "Records",
    "read_tfrecord",
    "iter_tfrecord",
    "write_tfrecord",
    "frame_records",
    "parse_tfrecord_bytes",
    "crc_backend",
    "TFRecordWriter",
]

_MASK_DELTA = 0xA282EAD8


def _c_crc():
    """A C CRC-32C taking any buffer, or None."""
    try:
        import crc32c as _crc32c_mod

        return _crc32c_mod.crc32c
    except ImportError:
        pass
    try:
        import google_crc32c

        if google_crc32c.implementation == "c":
            return lambda data: google_crc32c.value(bytes(data))
    except ImportError:
        pass
    return None


_BACKEND = {}


def crc_backend(name: str = "auto"):
    """Return ``(name, function)`` for a CRC-32C backend.

    Parameters
    ----------
    name : {"auto", "c", "numba"}
        ``"c"``: the ``crc32c`` or ``google-crc32c`` package; ``"numba"``: the built-in
        kernel; ``"auto"``: C if installed, else numba.
    """
    name = as_choice(name, "crc", ("auto", "c", "numba"))
    if name in _BACKEND:
        return _BACKEND[name]
    fn = _c_crc() if name in ("auto", "c") else None
    if fn is None and name == "c":
        raise ValueError("no C CRC-32C package found: pip install crc32c (or google-crc32c), or use crc='numba'")
    if fn is not None:
        result = ("c", fn)
    else:
        from .._kernels.crc32c import TABLES, crc32c_update

        def fn(data):
            a = np.frombuffer(data, dtype=np.uint8)
            return int(crc32c_update(np.uint32(0), a, 0, a.size, TABLES))

        result = ("numba", fn)
    _BACKEND[name] = result
    return result


def crc32c(data, backend: str = "auto") -> int:
    """CRC-32C (Castagnoli) of a bytes-like object.

    Parameters
    ----------
    data : bytes-like
    backend : {"auto", "c", "numba"}
        As for :func:`crc_backend`.

    Examples
    --------
    >>> hex(crc32c(b"123456789"))
    '0xe3069283'
    """
    return crc_backend(backend)[1](data)


def masked_crc32c(data, backend: str = "auto") -> int:
    """TFRecord's masked CRC: ``((crc >> 15) | (crc << 17)) + 0xA282EAD8 mod 2**32``.

    Parameters
    ----------
    data : bytes-like
    backend : {"auto", "c", "numba"}
        As for :func:`crc_backend`.
    """
    c = crc32c(data, backend)
    return (((c >> 15) | (c << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def _masked_crcs(buf: np.ndarray, starts: np.ndarray, stops: np.ndarray, backend: str) -> np.ndarray:
    from .._kernels.crc32c import TABLES
    from .._kernels.formats import masked_crcs

    name, fn = crc_backend(backend)
    if name == "numba":
        view = buf.view()
        view.flags.writeable = False  # one compiled form, whether the caller's buffer is writable or not
        return masked_crcs(view, starts, stops, TABLES)
    mv = memoryview(buf)
    out = np.fromiter((fn(mv[a:b]) for a, b in zip(starts.tolist(), stops.tolist())), dtype=np.uint64, count=starts.size)
    return ((((out >> 15) | (out << 17)) + _MASK_DELTA) & 0xFFFFFFFF).astype(np.uint32)


@dataclass(frozen=True, eq=False, repr=False)
class Records:
    """The records of a TFRecord file, held in one buffer.

    Record ``i`` is ``data[starts[i]:stops[i]]``; ``records[i]`` returns it as ``bytes``.
    """

    data: np.ndarray
    starts: np.ndarray
    stops: np.ndarray
    path: str = ""

    def __post_init__(self):
        # the compiled decoders read data[starts[i]:stops[i]]: every record must lie inside
        object.__setattr__(self, "data", _as_bytes(self.data, "data").reshape(-1))
        starts = as_int_array(self.starts, "starts")
        stops = as_int_array(self.stops, "stops")
        if starts.shape != stops.shape:
            raise ValueError(f"starts and stops need one entry per record, got {starts.size} and {stops.size}")
        if starts.size and (starts.min() < 0 or (stops < starts).any() or stops.max() > self.data.size):
            raise ValueError(f"records must lie inside data (0 <= starts <= stops <= {self.data.size})")
        object.__setattr__(self, "starts", starts)
        object.__setattr__(self, "stops", stops)
        if not isinstance(self.path, (str, os.PathLike)):
            raise TypeError(f"path must be a str, got {type(self.path).__name__}")
        object.__setattr__(self, "path", os.fspath(self.path))

    def __len__(self) -> int:
        return self.starts.size

    def __getitem__(self, i: int) -> bytes:
        return self.data[self.starts[i] : self.stops[i]].tobytes()

    def __iter__(self) -> Iterator[bytes]:
        mv = memoryview(self.data)
        for a, b in zip(self.starts.tolist(), self.stops.tolist()):
            yield bytes(mv[a:b])

    @property
    def nbytes(self) -> int:
        """Bytes of record data (without framing)."""
        return int((self.stops - self.starts).sum())

    def __repr__(self) -> str:
        return f"Records({len(self):,} records, {self.nbytes:,} bytes of data, path={self.path!r})"


def _open_read(path, compression):
    compression = _compression(path, compression)
    if compression == "gzip":
        try:
            with gzip.open(path, "rb") as f:
                return f.read()
        except (OSError, EOFError, zlib.error) as exc:
            raise ValueError(f"{path}: not a readable gzip stream ({exc}); the file is corrupt or truncated") from None
    with open(path, "rb") as f:
        return f.read()


def _compression(path, compression):
    if compression is None:
        return None
    if not isinstance(compression, str):
        raise TypeError(f"compression must be None, 'gzip' or 'auto', got {type(compression).__name__} {compression!r}")
    if compression in ("", "none", "NONE"):
        return None
    if compression in ("gzip", "GZIP"):
        return "gzip"
    if compression == "auto":
        return "gzip" if str(path).endswith(".gz") else None
    raise ValueError(f"compression must be None, 'gzip' or 'auto', got {compression!r}")


def _frame_error(err: int, path, rec: int, offset: int, buf: np.ndarray) -> str:
    from .._kernels.formats import BAD_LENGTH_CRC, TRUNCATED_HEADER

    left = buf.size - offset
    if err == TRUNCATED_HEADER:
        what = f"truncated record header: the file is truncated (a header needs 12 bytes, only {left} left)"
    elif err == BAD_LENGTH_CRC:
        what = "bad length CRC (the length field is corrupted)"
    else:  # TRUNCATED_DATA
        declared = int.from_bytes(buf[offset:offset + 8].tobytes(), "little")
        what = (f"truncated record: the file is truncated (the header declares {declared:,} bytes of data "
                f"and a 4-byte CRC, only {max(left - 12, 0):,} bytes follow it)")
    return f"{path}: record {rec} at byte {offset}: {what}"


def parse_tfrecord_bytes(raw, *, verify: bool = True, crc: str = "auto", path: str = "<bytes>") -> Records:
    """Split an in-memory TFRecord stream into :class:`Records`.

    Parameters
    ----------
    raw : bytes-like
        The whole stream (uncompressed).
    verify, crc
        As for :func:`read_tfrecord`.
    path : str
        Named in error messages.
    """
    from .._kernels.crc32c import TABLES
    from .._kernels.formats import scan_frames, stored_crcs

    verify = as_bool(verify, "verify")
    crc_backend(crc)
    buf = _as_bytes(raw, "raw").reshape(-1)
    starts, stops, err, rec, offset = scan_frames(buf, TABLES)
    if err:
        raise ValueError(_frame_error(int(err), path, int(rec), int(offset), buf))
    if verify and starts.size:
        bad = np.flatnonzero(_masked_crcs(buf, starts, stops, crc) != stored_crcs(buf, stops))
        if bad.size:
            i = int(bad[0])
            raise ValueError(
                f"{path}: record {i} at byte {int(starts[i]) - 12}: bad data CRC (record data corrupted)"
                + (f"; {bad.size} bad records in all" if bad.size > 1 else "")
            )
    return Records(buf, starts, stops, str(path))


def read_tfrecord(path, *, compression=None, verify: bool = True, crc: str = "auto") -> Records:
    """Read a whole TFRecord file, checking every record's framing and CRCs.

    Parameters
    ----------
    path : str or os.PathLike
    compression : None, "gzip" or "auto"
        ``"auto"``: gzip when the name ends in ``.gz``.
    verify : bool, default True
        Check the data CRCs (the length CRCs and the framing are always checked).
    crc : "auto", "c" or "numba"
        CRC-32C backend.

    Returns
    -------
    Records

    Raises
    ------
    ValueError
        On a truncated file or a bad CRC, naming the file, record number and byte offset.
    """
    return parse_tfrecord_bytes(_open_read(path, compression), verify=verify, crc=crc, path=os.fspath(path))


def iter_tfrecord(path, *, compression=None, verify: bool = True, crc: str = "auto") -> Iterator[bytes]:
    """Iterate over the records of a TFRecord file as ``bytes`` (all checked first).

    Parameters
    ----------
    path, compression, verify, crc
        As for :func:`read_tfrecord`.
    """
    return iter(read_tfrecord(path, compression=compression, verify=verify, crc=crc))


def frame_records(data, offsets, *, crc: str = "auto") -> np.ndarray:
    """Frame records ``data[offsets[i]:offsets[i+1]]`` as a TFRecord stream (uint8 array).

    Parameters
    ----------
    data : bytes-like or uint8 array
        The records' bytes laid end to end.
    offsets : 1-D int array
        Record boundaries: starts at 0, non-decreasing, ends at ``len(data)``.
    crc : {"auto", "c", "numba"}
        As for :func:`crc_backend`.
    """
    from .._kernels.crc32c import TABLES
    from .._kernels.formats import frame_records as _frame

    data = np.ascontiguousarray(_as_bytes(data, "data"))
    offsets = as_int_array(offsets, "offsets", allow_empty=False)
    if offsets[0] != 0 or offsets[-1] != data.size or (np.diff(offsets) < 0).any():
        raise ValueError(
            f"offsets must start at 0, be non-decreasing and end at len(data) = {data.size}, got "
            f"{offsets[:6].tolist()}{' ...' if offsets.size > 6 else ''}"
        )
    crcs = _masked_crcs(data, offsets[:-1], offsets[1:], crc)
    return _frame(data, offsets, crcs, TABLES)


def _join(records: Iterable) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(records, (str, bytes, bytearray, memoryview, np.ndarray)) or not hasattr(records, "__iter__"):
        raise TypeError(
            f"records must be an iterable of bytes-like records (or a pair (data, offsets)), got "
            f"{type(records).__name__}; wrap a single record in a list"
        )
    chunks = []
    for i, r in enumerate(records):
        chunks.append(r if isinstance(r, bytes) else _as_bytes(r, f"records[{i}]").tobytes())
    sizes = np.fromiter((len(c) for c in chunks), dtype=np.int64, count=len(chunks))
    offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    return np.frombuffer(b"".join(chunks), dtype=np.uint8), offsets


class TFRecordWriter:
    """Append records to a TFRecord file: ``write(record)`` or, fast, ``write_many(data,
    offsets)``. Use as a context manager; the file is written under a temporary name and
    renamed on a clean exit, so it appears complete or not at all. Gzip output is
    byte-reproducible (no name or time in the header)."""

    def __init__(self, path, *, compression=None, crc: str = "auto"):
        self.path = os.fspath(path)
        crc_backend(crc)
        _compression(self.path, compression)
        self.crc = crc
        self.count = 0
        self._tmp = f"{self.path}.tmp{os.getpid()}"
        self._raw = open(self._tmp, "wb")
        self._f = (gzip.GzipFile(filename="", mode="wb", fileobj=self._raw, mtime=0)
                   if _compression(self.path, compression) == "gzip" else self._raw)

    def write_many(self, data, offsets) -> None:
        """Append records ``data[offsets[i]:offsets[i+1]]``.

        Parameters
        ----------
        data, offsets
            As for :func:`frame_records`.
        """
        framed = frame_records(data, offsets, crc=self.crc)
        self._f.write(memoryview(framed))
        self.count += len(offsets) - 1

    def write(self, record) -> None:
        """Append one record.

        Parameters
        ----------
        record : bytes-like
            ``bytes``, ``bytearray``, a byte ``memoryview`` or a 1-D uint8 array; anything
            else (``str``, ints, float arrays) is a ``TypeError``.
        """
        data = _as_bytes(record, "record")
        self.write_many(data, np.array([0, data.size], dtype=np.int64))

    def close(self, commit: bool = True) -> None:
        """Finish the file.

        Parameters
        ----------
        commit : bool, default True
            ``False``: discard it.
        """
        if self._raw.closed:
            return
        if self._f is not self._raw:
            self._f.close()
        self._raw.close()
        if commit:
            os.replace(self._tmp, self.path)
        elif os.path.exists(self._tmp):
            os.remove(self._tmp)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(commit=exc_type is None)


def write_tfrecord(path, records, *, compression=None, crc: str = "auto") -> int:
    """Write records to a TFRecord file; returns the number of records.

    Parameters
    ----------
    path : str or os.PathLike
    records : iterable of bytes-like, or (data, offsets), or Records
        Bytes-like records (``str``, ints and non-byte arrays are a ``TypeError``, checked
        before the file is created), or a pair ``(data, offsets)`` of a uint8 buffer and
        record offsets (the fast path), or :class:`Records`.
    compression : None, "gzip" or "auto"
        As for :func:`read_tfrecord`. Gzip output is byte-reproducible (no name or time in
        the header).
    crc : {"auto", "c", "numba"}
        As for :func:`crc_backend`.
    """
    if isinstance(records, tuple) and len(records) == 2 and isinstance(records[1], np.ndarray):
        data, offsets = records
    else:
        data, offsets = _join(records)
    # check before the file is created: a bad record leaves no file behind
    data = np.ascontiguousarray(_as_bytes(data, "data"))
    offsets = as_int_array(offsets, "offsets", allow_empty=False)
    with TFRecordWriter(path, compression=compression, crc=crc) as w:
        w.write_many(data, offsets)
    return int(len(offsets) - 1)

