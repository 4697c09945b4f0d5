"""Blended-dataset indices: which dataset (and which of its samples) serves each step.

Mixing ``k`` datasets by weight into one stream of ``size`` samples needs two arrays:
``dataset_index[s]`` (which dataset serves global sample ``s``) and
``dataset_sample_index[s]`` (which of that dataset's samples). :func:`blend` builds them
three ways:

``"megatron"``
    Bit-identical to Megatron-Core's ``build_blending_indices`` (weights normalised twice
    in float64 as Megatron's Python does; the greedy "largest deficit ``w_i*max(s,1) -
    c_i``, lowest index on ties"), computed with an exact threshold filter instead of
    scanning every dataset at every step.
``"smooth"``
    A deterministic interleave in which every prefix of length ``s`` holds each dataset
    ``floor(w_i*s)`` or ``ceil(w_i*s)`` times (Megatron's greedy drifts to about ±1.5); the
    index of a size is the first part of the index of any larger size.
``"shuffled"``
    The same totals in a pseudo-random order from ``seed``: position ``s`` is sent through
    a keyed bijection of ``[0, size)`` (a four-round Feistel network over ``Z_a x Z_b``
    with cycle-walking), so any position or slice is computed on its own, without a build.

:func:`blend_exhaustive` is Megatron's exhaustive variant (each dataset exactly
``sizes[i]`` times).
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import pathlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ._progress import progress_bar
from ._validate import as_int_array, as_nonnegative_int, as_seed, seed_to_int64

__all__ = ["BlendedIndex", "blend", "blend_exhaustive"]

METHODS = ("megatron", "smooth", "shuffled")
_INT16_LIMIT = 32767  # Megatron: fewer than 32,767 datasets fit its int16 index
_INT32_LIMIT = 2**31 - 1
_CHUNK = 1 << 22  # steps per kernel call when a progress bar is shown
_FORMAT = 2  # 2: the shuffled order's round function and Feistel shape changed


def _index_dtype(k: int):
    return np.int16 if k < _INT16_LIMIT else np.int32


def _readonly(a: np.ndarray) -> np.ndarray:
    if a is not None and a.flags.writeable:
        a.flags.writeable = False
    return a


# --------------------------------------------------------------------------- validation


def _as_weights(weights, allow_zero: bool) -> np.ndarray:
    arr = np.asarray(weights)
    if arr.ndim != 1:
        raise ValueError(f"weights must be a 1-D array, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError("weights is empty: give one weight per dataset")
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"weights must be real numbers, got dtype {arr.dtype}")
    w = np.ascontiguousarray(arr, dtype=np.float64)
    bad = ~np.isfinite(w)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"weights must be finite, got {w[i]} at index {i}")
    if (w < 0).any():
        i = int(np.flatnonzero(w < 0)[0])
        raise ValueError(f"weights must be >= 0, got {w[i]} at index {i}")
    if not (w > 0).any():
        raise ValueError("weights are all zero: give at least one positive weight")
    if not allow_zero and (w == 0).any():
        i = int(np.flatnonzero(w == 0)[0])
        raise ValueError(
            f"weights[{i}] is 0: method='megatron' (like Megatron-Core) needs every weight > 0; "
            "drop the dataset, or use method='smooth' or 'shuffled', which allow zero weights"
        )
    if w.size > _INT32_LIMIT:
        raise ValueError(f"{w.size} datasets do not fit an int32 dataset index")
    return w


def _normalise(w: np.ndarray) -> np.ndarray:
    """Megatron's two float64 normalisations (builder, then BlendedDataset)."""
    w = w / w.sum()
    w = w / w.sum()
    if not np.isfinite(w).all():
        raise ValueError("weights overflow when normalised; scale them down")
    return w


def largest_remainder(weights: np.ndarray, size: int) -> np.ndarray:
    """Hamilton totals for ``size`` seats, computed with exact rationals.

    Each dataset gets ``floor(q_i)`` of its quota ``q_i = size * w_i / sum(w)`` (the exact
    values of the float64 weights), and the seats left go one each to the largest
    remainders ``q_i - floor(q_i)``; among equal remainders the lower index goes first.
    """
    fr = [Fraction(float(x)) for x in weights]
    total = sum(fr)
    seats = []
    rem = []
    for q in fr:
        x = q * size / total
        f = math.floor(x)
        seats.append(f)
        rem.append(x - f)
    left = size - sum(seats)
    if left:
        order = sorted(range(len(fr)), key=lambda i: (-rem[i], i))
        for i in order[:left]:
            seats[i] += 1
    return np.array(seats, dtype=np.int64)


# --------------------------------------------------------------------------- result


@dataclass(frozen=True, repr=False, eq=False)
class BlendedIndex:
    """A blended-dataset index: the stream of ``size`` samples drawn from ``k`` datasets.

    Attributes
    ----------
    dataset_index : ndarray of int16 (int32 from 32,767 datasets on), shape (size,), or None
        ``dataset_index[s]`` is the dataset that serves global sample ``s``. ``None`` for a
        ``shuffled`` index built with ``materialize=False``: use :meth:`slice`.
    dataset_sample_index : ndarray of int64, shape (size,), or None
        Which sample of that dataset: for ``megatron`` and ``smooth`` the number of earlier
        samples of the same dataset (``0, 1, 2, ...`` in order); for ``shuffled`` a random
        bijection onto ``0 .. counts[i]-1`` (each used once, not in increasing order).
    counts : ndarray of int64, shape (k,)
        Samples drawn from each dataset.
    weights : ndarray of float64, shape (k,)
        The weights as normalised (twice, as Megatron does).
    method : str
        ``"megatron"``, ``"smooth"``, ``"shuffled"`` or ``"exhaustive"``.
    seed : int
        The seed of ``shuffled`` (0 and unused otherwise).
    size : int
        Length of the index.

    All arrays are read-only.
    """

    dataset_index: np.ndarray | None
    dataset_sample_index: np.ndarray | None
    counts: np.ndarray
    weights: np.ndarray
    method: str
    seed: int
    size: int

    # ------------------------------------------------------------------ basic facts
    @property
    def num_datasets(self) -> int:
        """Number of datasets ``k``."""
        return int(self.counts.size)

    @property
    def materialized(self) -> bool:
        """Whether the two arrays are held in memory (or memory-mapped)."""
        return self.dataset_index is not None

    def slice(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """``(dataset_index[start:stop], dataset_sample_index[start:stop])``.

        For a materialised index these are read-only views (O(1)). For a lazy ``shuffled``
        index they are computed directly: O(stop - start) time plus O(k) set-up, no other
        position is touched, so every rank of a data-parallel job can compute only its own
        part (see docs/blending.md). ``megatron`` and ``smooth`` are sequential
        constructions, so a slice of them costs building the index up to ``stop`` once
        (for ``smooth`` that is ``blend(weights, stop, "smooth")`` itself, whose index is
        the first part of any larger one); build it once (or :meth:`load` a saved one)
        and slice the result.

        Parameters
        ----------
        start, stop : int
            ``0 <= start <= stop <= size``.
        """
        start = as_nonnegative_int(start, "start")
        stop = as_nonnegative_int(stop, "stop")
        if not start <= stop <= self.size:
            raise ValueError(f"need 0 <= start <= stop <= size = {self.size}, got start={start}, stop={stop}")
        if self.materialized:
            return self.dataset_index[start:stop], self.dataset_sample_index[start:stop]
        return _shuffled_range(self.counts, self.size, self.seed, start, stop)

    def materialize(self) -> "BlendedIndex":
        """The same index with both arrays computed (itself if they already are)."""
        if self.materialized:
            return self
        d, s = _shuffled_range(self.counts, self.size, self.seed, 0, self.size)
        return BlendedIndex(_readonly(d), _readonly(s), self.counts, self.weights, self.method, self.seed, self.size)

    # ------------------------------------------------------------------ cache files
    def description(self) -> dict:
        """The JSON-able description (method, size, seed, weights) that names the cache files."""
        return {
            "class": "BlendedIndex",
            "format": _FORMAT,
            "method": self.method,
            "size": int(self.size),
            "seed": int(self.seed),
            "weights": [float(x) for x in self.weights],
        }

    @property
    def digest(self) -> str:
        """md5 of the description (the ``{hash}`` in the cache file names)."""
        return _digest(self.description())

    def save(self, directory) -> pathlib.Path:
        """Write ``{hash}-BlendedIndex-description.txt``, ``…-dataset_index.npy``,
        ``…-dataset_sample_index.npy`` and ``…-counts.npy`` into ``directory``.

        Like Megatron's cache, ``{hash}`` is the md5 of the JSON description, so indices
        with different weights, sizes, methods or seeds never collide. A lazy ``shuffled``
        index is materialised first. Returns the description file's path.
        """
        d = pathlib.Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        full = self.materialize()
        desc = self.description()
        h = _digest(desc)
        for name, arr in (
            ("dataset_index", full.dataset_index),
            ("dataset_sample_index", full.dataset_sample_index),
            ("counts", self.counts),
        ):
            tmp = d / f"{h}-BlendedIndex-{name}.tmp.npy"
            np.save(tmp, np.asarray(arr))
            tmp.replace(d / f"{h}-BlendedIndex-{name}.npy")
        path = d / f"{h}-BlendedIndex-description.txt"
        path.write_text(json.dumps(desc, indent=1, sort_keys=True))  # written last: marks completion
        return path

    @classmethod
    def load(cls, directory, mmap: bool = True, *, weights=None, size=None, method=None, seed=None) -> "BlendedIndex":
        """Read an index written by :meth:`save`.

        Parameters
        ----------
        directory : path
            The cache directory, or the path of a ``…-description.txt`` file.
        mmap : bool
            Memory-map the arrays (read-only) instead of reading them.
        weights, size, method, seed : optional
            When given, the index for exactly these arguments of :func:`blend` is loaded
            (its file name is computed from them); otherwise ``directory`` must hold exactly
            one index.

        Raises
        ------
        ValueError
            If no (or more than one) matching index is found, or the files do not match
            their description.
        """
        p = pathlib.Path(directory)
        if p.is_file():
            desc_path = p
        elif weights is not None or size is not None:
            if weights is None or size is None:
                raise ValueError("give both weights and size (and method/seed) to pick an index")
            meth = "megatron" if method is None else method
            w = _normalise(_as_weights(weights, allow_zero=meth != "megatron"))
            want = {
                "class": "BlendedIndex",
                "format": _FORMAT,
                "method": meth,
                "size": as_nonnegative_int(size, "size"),
                "seed": as_seed(0 if seed is None else seed) if meth == "shuffled" else 0,
                "weights": [float(x) for x in w],
            }
            desc_path = p / f"{_digest(want)}-BlendedIndex-description.txt"
            if not desc_path.exists():
                raise ValueError(f"no saved index for these arguments in {p} (looked for {desc_path.name})")
        else:
            found = sorted(p.glob("*-BlendedIndex-description.txt"))
            if len(found) != 1:
                raise ValueError(
                    f"{p} holds {len(found)} saved indices; pass weights/size/method/seed or the description file"
                )
            desc_path = found[0]
        desc = json.loads(desc_path.read_text())
        h = desc_path.name.split("-BlendedIndex-")[0]
        if _digest(desc) != h or desc.get("class") != "BlendedIndex" or desc.get("format") != _FORMAT:
            raise ValueError(f"{desc_path} does not match its name: the cache is corrupt or from another version")
        base = desc_path.parent
        mode = "r" if mmap else None
        di = np.load(base / f"{h}-BlendedIndex-dataset_index.npy", mmap_mode=mode)
        si = np.load(base / f"{h}-BlendedIndex-dataset_sample_index.npy", mmap_mode=mode)
        counts = np.load(base / f"{h}-BlendedIndex-counts.npy")
        n, k = desc["size"], len(desc["weights"])
        if di.shape != (n,) or si.shape != (n,) or counts.shape != (k,) or int(counts.sum()) != n:
            raise ValueError(f"the arrays next to {desc_path} do not match its description")
        if di.dtype != _index_dtype(k) or si.dtype != np.int64:
            raise ValueError(f"the arrays next to {desc_path} have unexpected dtypes")
        return cls(
            _readonly(di),
            _readonly(si),
            _readonly(counts.astype(np.int64)),
            _readonly(np.array(desc["weights"], dtype=np.float64)),
            desc["method"],
            int(desc["seed"]),
            int(n),
        )

    # ------------------------------------------------------------------ display
    def shares(self) -> np.ndarray:
        """``counts / size`` (zeros for an empty index)."""
        return self.counts / self.size if self.size else np.zeros(self.counts.size)

    def to_dict(self) -> dict:
        """Plain-Python summary (not the arrays)."""
        return {
            "method": self.method,
            "size": int(self.size),
            "seed": int(self.seed),
            "num_datasets": self.num_datasets,
            "weights": [float(x) for x in self.weights],
            "counts": [int(x) for x in self.counts],
            "materialized": self.materialized,
            "digest": self.digest,
        }

    def __repr__(self) -> str:
        k = self.num_datasets
        dev = float(np.abs(self.counts - self.weights * self.size).max()) if k else 0.0
        extra = "" if self.materialized else ", lazy"
        seed = f", seed={self.seed}" if self.method == "shuffled" else ""
        return (
            f"BlendedIndex(method={self.method!r}, size={self.size:,}, datasets={k}{seed}, "
            f"max |count - weight*size| = {dev:.3g}{extra})"
        )

    def _repr_html_(self) -> str:
        k = self.num_datasets
        show = range(min(k, 20))
        sh = self.shares()
        rows = "".join(
            f"<tr><td>{i}</td><td>{self.weights[i]:.6g}</td><td>{int(self.counts[i]):,}</td><td>{sh[i]:.6g}</td></tr>"
            for i in show
        )
        if k > 20:
            rows += f"<tr><td colspan='4'>… {k - 20} more datasets</td></tr>"
        seed = f", seed {self.seed}" if self.method == "shuffled" else ""
        return (
            f"<table><caption>BlendedIndex: {self.method}, {self.size:,} samples, {k} datasets{seed}</caption>"
            "<tr><th>dataset</th><th>weight</th><th>count</th><th>share</th></tr>"
            f"{rows}</table>"
        )


def _digest(desc: dict) -> str:
    return hashlib.md5(json.dumps(desc, sort_keys=True).encode()).hexdigest()


# --------------------------------------------------------------------------- builders


# Steps per filter block of method="megatron": each block costs one pass over the k
# datasets plus its steps over a few dozen candidates; 32 measured best from k=100 to 30,000.
_MEGATRON_BLOCK = 32


def _feistel_shape(size: int) -> tuple[int, int]:
    """``a x b >= size`` with the fewest spare slots (each spare slot is a cycle-walking
    step), ``a`` searched from ``sqrt(size)`` down by at most an eighth (and 1024 values),
    so the two halves stay about as large as each other and the rounds mix well."""
    a0 = max(1, math.isqrt(max(size - 1, 0)) + 1)
    if size <= 1:
        return a0, max(1, size)
    a = np.arange(a0, max(0, a0 - min(1024, a0 // 8 + 1)), -1, dtype=np.int64)
    spare = a * (-(-size // a)) - size
    best = int(a[int(np.argmin(spare))])  # first minimum: the largest such a
    return best, -(-size // best)


def _feistel_params(counts: np.ndarray, size: int, seed: int):
    from ._kernels import rng

    a, b = _feistel_shape(size)
    s64 = seed_to_int64(seed)
    keys = np.array([rng.stream_seed(s64, 101 + r) for r in range(4)], dtype=np.uint64)
    offsets = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    bits = max(1, int(size - 1).bit_length()) if size > 1 else 1
    tbits = min(bits, max(8, (counts.size * 8).bit_length()), 22)
    shift = bits - tbits
    starts = np.arange(0, (size >> shift) + 1, dtype=np.int64) << shift
    table = (np.searchsorted(offsets, starts, side="right") - 1).astype(np.int64)
    np.minimum(table, counts.size - 1, out=table)
    return a, b, keys, offsets, table, shift


_SMOOTH_THREADED_FROM = 1 << 20  # below this, handing blocks between threads does not pay


def _smooth_blocks(w, n, counts, out_d, out_s, threaded: bool, bar) -> int:
    """``smooth_fill`` block by block from Python, for a progress bar and, when
    ``threaded``, on two threads: a producer generates and sorts the jobs of the next
    blocks while this thread places the current one. Four buffers, not two, let either
    side run ahead through scheduling hiccups (measured 1000 x 50 M: 2 buffers 193-203 ms,
    4 buffers 169-176 ms). The kernels and their order are those of ``smooth_fill``, so
    the result is identical. Returns the missed windows."""
    import threading

    from ._kernels.blend_smooth import block_deadlines, block_jobs, finish, place_block, smooth_setup

    k = w.size
    B = int(block_deadlines(k, n, threaded))
    inv, occ, pos, cap = smooth_setup(w, n, B)
    nbuf = 4 if threaded else 1
    bufs = [(np.empty((cap, 2), np.int64), np.empty((cap, 2), np.int64), np.zeros(B + 1, np.int64)) for _ in range(nbuf)]
    made = [(0, 0)] * nbuf  # (jobs, misses) of the block in each buffer
    fx = np.zeros(k, np.int64)
    done = np.zeros(k, np.int64)
    starts = list(range(1, n + 1, B))

    def make(b):
        job, srt, hist = bufs[b % nbuf]
        D0 = starts[b]
        made[b % nbuf] = block_jobs(w, inv, counts, fx, D0, min(D0 + B, n + 1), job, hist, srt)

    def place(b):
        mj, m1 = made[b % nbuf]
        missed = m1 + place_block(bufs[b % nbuf][1], mj, starts[b], occ, pos, done, out_d, out_s)
        bar.update(min(B, n + 1 - starts[b]))
        return missed

    missed = 0
    if not threaded:
        for b in range(len(starts)):
            make(b)
            missed += place(b)
        return missed + finish(w, inv, n, counts, fx, occ, out_d, out_s)

    free, ready = threading.Semaphore(nbuf), threading.Semaphore(0)
    failure: list[BaseException] = []
    stop = threading.Event()

    def produce():
        try:
            for b in range(len(starts)):
                free.acquire()
                if stop.is_set():
                    return
                make(b)
                ready.release()
        except BaseException as e:  # surfaced in the placing thread
            failure.append(e)
            ready.release()

    producer = threading.Thread(target=produce, name="packlib-smooth-jobs", daemon=True)
    producer.start()
    try:
        for b in range(len(starts)):
            ready.acquire()
            if failure:
                raise failure[0]
            missed += place(b)
            free.release()
    finally:
        stop.set()
        free.release()
        producer.join()
    return missed + finish(w, inv, n, counts, fx, occ, out_d, out_s)


def _worker_count(n: int) -> int:
    """Threads for a build of ``n`` samples: the kernels release the GIL, so big shuffled
    builds split over the CPUs this process may use (and smooth uses two)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, 8, n >> 20))


def _shuffled_range(counts, size, seed, start, stop, progress=False):
    from ._kernels.blend import shuffled_fill

    n = stop - start
    d = np.empty(n, dtype=_index_dtype(counts.size))
    s = np.empty(n, dtype=np.int64)
    if n == 0:
        return d, s
    a, b, keys, offsets, table, shift = _feistel_params(counts, size, seed)
    workers = _worker_count(n)
    step = _CHUNK if progress else -(-n // workers)
    pieces = [(lo, min(stop, lo + step)) for lo in range(start, stop, step)]

    def run(piece):
        lo, hi = piece
        shuffled_fill(lo, hi, size, a, b, keys, offsets, table, shift, d[lo - start :], s[lo - start :])
        return hi - lo

    with progress_bar(n, "blend (shuffled)", progress, unit="sample") as bar:
        if workers == 1 or len(pieces) == 1:
            for piece in pieces:
                bar.update(run(piece))
        else:
            with ThreadPoolExecutor(workers) as pool:
                for done in pool.map(run, pieces):
                    bar.update(done)
    return d, s


def _progress_wanted(progress, work: float) -> bool | None:
    if progress is None:
        return None if work > 2e9 else False
    return bool(progress)


def blend(
    weights, size, method: str = "megatron", seed: int = 0, progress=None, *, materialize: bool = True
) -> BlendedIndex:
    """Blend ``k`` datasets by weight into an index of ``size`` samples.

    Parameters
    ----------
    weights : array_like of float, shape (k,)
        Non-negative, finite, not all zero; normalised here (twice in float64, exactly as
        Megatron-Core does). ``megatron`` needs every weight > 0.
    size : int
        Number of samples, ``>= 0``.
    method : {"megatron", "smooth", "shuffled"}
        ``megatron``: Megatron-Core's greedy, bit-identical. Cost O(size * (k/B + m)) for
        blocks of ``B = 32`` steps and the ``m`` datasets near the top (a few dozen for
        lognormal weights), never more than O(size * k) (the loop's), about 10x faster than
        the loop at 1000 datasets. ``smooth``: every prefix within ±1 of its quota; the
        totals are a quota apportionment, and the index of a size is a prefix of the index
        of any larger size; O(size + k * size / B) for blocks of ``B >= 16384`` (about 6 ns
        per sample on one core, 3.5 ns with a second one). ``shuffled``: the largest-remainder
        totals in a seeded pseudo-random order; O(size + k) (about 3 ns per sample on one
        core, split over the available cores), and any slice on its own in O(len + k).
    seed : int
        Seed of ``shuffled`` (ignored, and recorded as 0, otherwise).
    progress : bool or None
        Show a tqdm bar (``None``: only for large builds on a terminal; needs tqdm).
    materialize : bool
        ``shuffled`` only: ``False`` returns a lazy index whose arrays are ``None``;
        :meth:`BlendedIndex.slice` computes any part of it on demand.

    Returns
    -------
    BlendedIndex

    Raises
    ------
    ValueError
        For NaN, infinite, negative or all-zero weights, zero weights with ``megatron``,
        a negative or non-integer size, an unknown method, or ``materialize=False`` with a
        sequential method.
    RuntimeError
        If ``smooth`` could not keep every prefix within its quota (never observed; see
        docs/blending.md).

    Examples
    --------
    >>> import packlib
    >>> idx = packlib.blend([0.5, 0.3, 0.2], 10)
    >>> idx.dataset_index.tolist()
    [0, 1, 2, 0, 1, 0, 2, 0, 1, 0]
    >>> idx.counts.tolist()
    [5, 3, 2]
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    w = _normalise(_as_weights(weights, allow_zero=method != "megatron"))
    n = as_nonnegative_int(size, "size")
    seed = as_seed(seed) if method == "shuffled" else (as_seed(seed) and 0)
    k = w.size
    if not materialize and method != "shuffled":
        raise ValueError(f"method={method!r} is built sequentially; materialize=False needs method='shuffled'")
    dtype = _index_dtype(k)

    if method == "megatron":
        from ._kernels.blend import THETA_GAP, megatron_fill

        d = np.empty(n, dtype=dtype)
        s = np.empty(n, dtype=np.int64)
        counts = np.zeros(k, dtype=np.int64)
        state = np.array([0.0, THETA_GAP])  # filter threshold and its last drop, across chunks
        show = _progress_wanted(progress, float(n) * min(k, 100))
        step = _CHUNK if show is not False else max(n, 1)
        with progress_bar(n, "blend (megatron)", show, unit="sample") as bar:
            for lo in range(0, n, step):
                hi = min(n, lo + step)
                megatron_fill(w, lo, hi, counts, d[lo:], s[lo:], _MEGATRON_BLOCK, state)
                bar.update(hi - lo)
        return BlendedIndex(_readonly(d), _readonly(s), _readonly(counts), _readonly(w), method, 0, n)

    if method == "smooth":
        from ._kernels.blend_smooth import smooth_fill

        if n >= 2**53:
            raise ValueError("size must be below 2**53 for method='smooth'")
        d = np.empty(n, dtype=dtype)
        s = np.empty(n, dtype=np.int64)
        counts = np.zeros(k, dtype=np.int64)
        threaded = _worker_count(n) >= 2 and n >= _SMOOTH_THREADED_FROM
        show = _progress_wanted(progress, 6.0 * n)  # ~6 ns per sample on one core
        if threaded or show is not False:
            with progress_bar(n, "blend (smooth)", show, unit="sample") as bar:
                missed = _smooth_blocks(w, n, counts, d, s, threaded, bar)
        else:
            missed = smooth_fill(w, n, counts, d, s)
        if missed:  # never observed; kept loud rather than silent
            raise RuntimeError(f"smooth blend missed {missed} quota windows; please report this input")
        return BlendedIndex(_readonly(d), _readonly(s), _readonly(counts), _readonly(w), method, 0, n)

    counts = largest_remainder(w, n)
    if not materialize:
        return BlendedIndex(None, None, _readonly(counts), _readonly(w), method, seed, n)
    d, s = _shuffled_range(counts, n, seed, 0, n, _progress_wanted(progress, 20.0 * n))
    return BlendedIndex(_readonly(d), _readonly(s), _readonly(counts), _readonly(w), method, seed, n)


def blend_exhaustive(sizes) -> BlendedIndex:
    """Megatron's exhaustive blend: dataset ``i`` used exactly ``sizes[i]`` times.

    The greedy of :func:`blend` with weights ``sizes / sum(sizes)``, skipping datasets that
    are used up; identical to Megatron-Core's ``build_exhaustive_blending_indices``
    except that a dataset of size 0 is simply never picked (Megatron's crashes on it).
    O(total * k).

    Parameters
    ----------
    sizes : array_like of int, shape (k,)
        Non-negative whole numbers, not all zero.

    Returns
    -------
    BlendedIndex
        ``method="exhaustive"``, ``counts == sizes``, ``size == sum(sizes)``.
    """
    sz = as_int_array(sizes, "sizes", allow_empty=False)
    if (sz < 0).any():
        i = int(np.flatnonzero(sz < 0)[0])
        raise ValueError(f"sizes must be >= 0, got {sz[i]} at index {i}")
    total = int(sz.sum())
    if total == 0:
        raise ValueError("sizes are all zero: nothing to blend")
    if sz.size > _INT32_LIMIT:
        raise ValueError(f"{sz.size} datasets do not fit an int32 dataset index")
    from ._kernels.blend import exhaustive_fill

    d = np.empty(total, dtype=_index_dtype(sz.size))
    s = np.empty(total, dtype=np.int64)
    exhaustive_fill(sz, d, s)
    w = sz / total
    return BlendedIndex(_readonly(d), _readonly(s), _readonly(sz.copy()), _readonly(w), "exhaustive", 0, total)
