"""The cache-file format of :class:`~packlib.blending.BlendedIndex` (Megatron-style).

A saved index is four files in one directory, named by ``{hash}``, the md5 of the JSON
*description* (class, format, method, size, seed, weights), so indices with different
arguments never collide:

- ``{hash}-BlendedIndex-dataset_index.npy``, ``…-dataset_sample_index.npy``, ``…-counts.npy``
- ``{hash}-BlendedIndex-description.txt``: the description plus ``"checksums"`` (CRC-32 of
  each array's bytes), written last, so its presence marks a complete cache.

:func:`load` checks the description against its name, the arrays' shapes and dtypes and,
with ``verify=True`` (the default), their checksums and contents (dataset ids in range,
counts equal to the index, every sample of every dataset used exactly once); any mismatch
or unreadable file is a ``ValueError`` naming the file and saying to delete and rebuild.
"""
from __future__ import annotations

import hashlib
import json
import pathlib
import zlib

import numpy as np

from .._validate import as_bool, as_nonnegative_int, as_seed
from . import _common

FORMAT = 2  # 2: the shuffled order's round function and Feistel shape changed
ARRAYS = ("dataset_index", "dataset_sample_index", "counts")
_VERIFY_CHUNK = 1 << 22


def digest(desc: dict) -> str:
    """md5 of a description (the ``{hash}`` of the file names)."""
    return hashlib.md5(json.dumps(desc, sort_keys=True).encode()).hexdigest()


def checksum(arr: np.ndarray) -> str:
    """CRC-32 of an array's bytes in C order, as 8 hex digits (zlib's: a fast pass, not
    a cryptographic hash: it detects damage and mix-ups, not a deliberate forgery)."""
    a = np.ascontiguousarray(arr)
    crc = 0
    flat = a.reshape(-1).view(np.uint8) if a.size else np.zeros(0, np.uint8)
    step = 1 << 26
    for lo in range(0, flat.size, step):
        crc = zlib.crc32(memoryview(flat[lo : lo + step]), crc)
    return f"{crc:08x}"


def file_name(h: str, name: str) -> str:
    return f"{h}-BlendedIndex-{name}.npy" if name in ARRAYS else f"{h}-BlendedIndex-{name}.txt"


def save(index, directory) -> pathlib.Path:
    """Write ``index`` (materialised first if lazy) into ``directory``; returns the
    description file's path."""
    d = pathlib.Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    full = index.materialize()
    desc = index.description()
    h = digest(desc)
    sums = {}
    for name, arr in (
        ("dataset_index", full.dataset_index),
        ("dataset_sample_index", full.dataset_sample_index),
        ("counts", index.counts),
    ):
        arr = np.ascontiguousarray(arr)
        sums[name] = checksum(arr)
        tmp = d / f"{h}-BlendedIndex-{name}.tmp.npy"
        np.save(tmp, arr)
        tmp.replace(d / file_name(h, name))
    path = d / file_name(h, "description")
    tmp = d / f"{h}-BlendedIndex-description.tmp"
    tmp.write_text(json.dumps(dict(desc, checksums=sums), indent=1, sort_keys=True))
    tmp.replace(path)  # written last: marks completion
    return path


def _corrupt(path, what: str) -> ValueError:
    return ValueError(
        f"{path}: {what}; the blend cache is corrupt, incomplete or from another version: "
        "delete its files (or the directory) and rebuild it"
    )


def find(cls, directory, weights, size, method, seed) -> pathlib.Path:
    """The description file to load (see :meth:`BlendedIndex.load`)."""
    p = pathlib.Path(directory)
    if p.is_file():
        return p
    if weights is not None or size is not None:
        if weights is None or size is None:
            raise TypeError("give both weights and size (and method/seed) to pick an index")
        meth = "megatron" if method is None else method
        if meth != "exhaustive":
            meth = _common_method(meth)
        w = _common.weights_for(weights, meth)
        want = {
            "class": "BlendedIndex",
            "format": FORMAT,
            "method": meth,
            "size": as_nonnegative_int(size, "size"),
            "seed": as_seed(0 if seed is None else seed) if meth == "shuffled" else 0,
            "weights": [float(x) for x in w],
        }
        desc_path = p / file_name(digest(want), "description")
        if not desc_path.exists():
            raise ValueError(f"no saved index for these arguments in {p} (looked for {desc_path.name})")
        return desc_path
    found = sorted(p.glob("*-BlendedIndex-description.txt"))
    if len(found) != 1:
        raise ValueError(f"{p} holds {len(found)} saved indices; pass weights/size/method/seed or the description file")
    return found[0]


def _common_method(method):
    from .._validate import as_choice

    return as_choice(method, "method", _common.METHODS)


def _read_description(desc_path: pathlib.Path) -> tuple[dict, dict | None, str]:
    try:
        text = desc_path.read_text()
        raw = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _corrupt(desc_path, f"the description is not valid JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise _corrupt(desc_path, "the description is not a JSON object")
    sums = raw.pop("checksums", None)
    h = desc_path.name.split("-BlendedIndex-")[0]
    if digest(raw) != h or raw.get("class") != "BlendedIndex" or raw.get("format") != FORMAT:
        raise _corrupt(desc_path, "the description does not match its name")
    try:
        n = raw["size"]
        w = raw["weights"]
        ok = (
            isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= 2**62
            and isinstance(w, list) and w and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in w)
            and raw["method"] in _common.METHODS + ("exhaustive",)
            and isinstance(raw["seed"], int) and 0 <= raw["seed"] < 2**64
        )
    except KeyError:
        ok = False
    if not ok:
        raise _corrupt(desc_path, "the description lacks or misstates method, size, seed or weights")
    if sums is not None and (not isinstance(sums, dict) or set(sums) != set(ARRAYS)):
        raise _corrupt(desc_path, "the description's checksums are malformed")
    return raw, sums, h


def _load_array(path: pathlib.Path, mmap: bool):
    if not path.exists():
        raise _corrupt(path, "the file is missing")
    try:
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except Exception as exc:  # noqa: BLE001 -- a damaged header fails in many ways (even SyntaxError)
        raise _corrupt(path, f"not a readable .npy array ({type(exc).__name__}: {exc})") from None


def load(cls, directory, mmap=True, *, weights=None, size=None, method=None, seed=None, verify=True):
    mmap = as_bool(mmap, "mmap")
    verify = as_bool(verify, "verify")
    desc_path = find(cls, directory, weights, size, method, seed)
    desc, sums, h = _read_description(desc_path)
    base = desc_path.parent
    paths = {name: base / file_name(h, name) for name in ARRAYS}
    di = _load_array(paths["dataset_index"], mmap)
    si = _load_array(paths["dataset_sample_index"], mmap)
    counts = _load_array(paths["counts"], False)
    n, k = desc["size"], len(desc["weights"])
    for name, arr, shape, dtype in (
        ("dataset_index", di, (n,), _common.index_dtype(k)),
        ("dataset_sample_index", si, (n,), np.dtype(np.int64)),
        ("counts", counts, (k,), np.dtype(np.int64)),
    ):
        if arr.shape != shape or arr.dtype != dtype:
            raise _corrupt(paths[name], f"holds {arr.dtype} {arr.shape}, expected {np.dtype(dtype)} {shape} "
                           f"(from {desc_path.name})")
    if verify:
        if sums is not None:
            for name, arr in (("dataset_index", di), ("dataset_sample_index", si), ("counts", counts)):
                if checksum(arr) != sums[name]:
                    raise _corrupt(paths[name], f"its checksum differs from the one in {desc_path.name}")
        problem = check_arrays(di, si, counts, n, desc["method"])
        if problem:
            raise _corrupt(desc_path.parent / file_name(h, "dataset_index"), problem)
    elif counts.size and (counts.min() < 0 or sum(int(c) for c in counts.tolist()) != n):
        raise _corrupt(paths["counts"], f"counts must be >= 0 and sum to the size {n}")
    from .._validate import readonly

    return cls(
        readonly(di),
        readonly(si),
        readonly(np.array(counts, dtype=np.int64)),
        readonly(np.array(desc["weights"], dtype=np.float64)),
        desc["method"],
        int(desc["seed"]),
        int(n),
    )


def check_arrays(di: np.ndarray, si: np.ndarray, counts: np.ndarray, n: int, method: str) -> str | None:
    """Why the arrays are not a valid index of ``n`` samples with these ``counts`` (or
    None): dataset ids in ``[0, k)``, per-dataset totals equal to ``counts``, and every
    sample ``0 .. counts[i]-1`` of every dataset used exactly once. (The order within a
    dataset is covered by the checksum.) Runs in chunks: O(n) time, n bytes of scratch."""
    k = counts.size
    if counts.size and counts.min() < 0:
        return f"counts has a negative entry ({int(counts.min())})"
    if sum(int(c) for c in counts.tolist()) != n:
        return f"counts sum to {sum(int(c) for c in counts.tolist())}, not the size {n}"
    if n == 0:
        return None
    offsets = np.zeros(k + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    seen = np.zeros(n, dtype=bool)
    tally = np.zeros(k, dtype=np.int64)
    for lo in range(0, n, _VERIFY_CHUNK):
        d = np.asarray(di[lo : lo + _VERIFY_CHUNK]).astype(np.int64)
        s = np.asarray(si[lo : lo + _VERIFY_CHUNK])
        if d.min() < 0 or d.max() >= k:
            bad = int(np.flatnonzero((d < 0) | (d >= k))[0]) + lo
            return f"dataset_index[{bad}] = {int(di[bad])} is not a dataset id in [0, {k})"
        out = (s < 0) | (s >= counts[d])
        if out.any():
            bad = int(np.flatnonzero(out)[0]) + lo
            return (f"dataset_sample_index[{bad}] = {int(si[bad])} is outside dataset {int(di[bad])}'s "
                    f"{int(counts[int(di[bad])])} samples")
        seen[offsets[d] + s] = True  # every key is in [0, n): n keys cover [0, n) iff none repeats
        tally += np.bincount(d, minlength=k)
    if not np.array_equal(tally, counts):
        bad = int(np.flatnonzero(tally != counts)[0])
        return f"dataset {bad} appears {int(tally[bad])} times in dataset_index but counts says {int(counts[bad])}"
    if not seen.all():
        miss = int(np.flatnonzero(~seen)[0])
        d = int(np.searchsorted(offsets, miss, side="right") - 1)
        return f"sample {miss - int(offsets[d])} of dataset {d} is never used (another is used twice)"
    return None
