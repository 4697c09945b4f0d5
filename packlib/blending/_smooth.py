"""The two-thread build of ``blend(method="smooth")``: a producer thread generates and
sorts the jobs of the next deadline blocks while the calling thread places the current
one (the kernels of :mod:`packlib._kernels.blend_smooth`, in ``smooth_fill``'s order, so the
index is identical to the single-kernel build)."""
from __future__ import annotations

import numpy as np

THREADED_FROM = 1 << 20  # below this, handing blocks between threads does not pay


def smooth_blocks(w, n, counts, out_d, out_s, threaded: bool, bar) -> int:
    """``smooth_fill`` block by block from Python, for a progress bar and, when
    ``threaded``, on two threads: a producer generates and sorts the jobs of the next
    blocks while this thread places the current one. Four buffers, not two, let either
    side run ahead through scheduling hiccups (see docs/blending.md). The kernels and their order are those of ``smooth_fill``, so
    the result is identical. Returns the missed windows."""
    import threading

    from .._kernels.blend_smooth import block_deadlines, block_jobs, finish, place_block, smooth_setup

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
