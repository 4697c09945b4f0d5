"""Inputs and timing helpers shared by the benchmarks, so their figures are comparable."""
import statistics
import time

import numpy as np


def lognormal_lengths(n: int = 2_000_000, seed: int = 0, max_length: int = 512) -> np.ndarray:
    """``n`` lognormal sequence lengths (mu 4.71, sigma 0.8: mean ~147 tokens) clipped to
    ``[3, max_length]``; at n = 2 M their lower bound is 574,031 packs of 512, close to the
    574,815 of the reference measurements in shared/reference/packing.md."""
    x = np.random.default_rng(seed).lognormal(4.71, 0.8, n)
    return np.clip(np.rint(x), 3, max_length).astype(np.int64)


def timed(fn, repeat=3):
    """Median wall time of ``repeat`` calls of ``fn`` (and its last result)."""
    times = []
    out = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def fmt(seconds):
    """A duration for a table: µs, ms or s; '—' for None."""
    if seconds is None:
        return "—"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


def old_kernels(old_root: str, names):
    """Load kernel modules of another checkout (e.g. ``git archive`` of an earlier commit)
    as ``old_kernels.<name>``, compiled by this checkout's ``_jit``: to time a kernel
    change in one process, interleaved, on a shared and noisy machine."""
    import sys
    import types

    pkg = types.ModuleType("old_kernels")
    pkg.__path__ = [f"{old_root}/packlib/_kernels"]
    sys.modules["old_kernels"] = pkg
    out = {}
    for name in names:
        origin = f"{old_root}/packlib/_kernels/{name}.py"
        mod = types.ModuleType(f"old_kernels.{name}")
        mod.__file__, mod.__package__ = origin, "old_kernels"
        sys.modules[mod.__name__] = mod
        src = open(origin).read().replace("from .._jit import jit", "from packlib._jit import jit")
        exec(compile(src, origin, "exec"), mod.__dict__)
        out[name] = mod
    return out


def interleaved(calls, repeat: int):
    """Best-of-``repeat`` times of each ``(old, new)`` pair of calls, alternating."""
    best = [float("inf"), float("inf")]
    for _ in range(repeat):
        for k, call in enumerate(calls):
            t0 = time.perf_counter()
            call()
            best[k] = min(best[k], time.perf_counter() - t0)
    return best


def rss_bytes() -> int:
    """This process's resident memory now (Linux)."""
    import os

    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class PeakRss:
    """``with PeakRss() as m: ...`` samples the resident memory every ``interval`` seconds in a
    thread; afterwards ``m.peak`` is the peak above the start (bytes), ``m.seconds`` the wall time."""

    def __init__(self, interval: float = 0.001):
        self.interval, self.peak, self.seconds = interval, 0, 0.0

    def __enter__(self):
        import gc
        import threading

        gc.collect()
        self._start = self._top = rss_bytes()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        self._t0 = time.perf_counter()
        return self

    def _sample(self):
        while not self._stop.is_set():
            self._top = max(self._top, rss_bytes())
            time.sleep(self.interval)

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self._t0
        self._stop.set()
        self._thread.join()
        self.peak = max(self._top, rss_bytes()) - self._start
        return False
