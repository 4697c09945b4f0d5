"""The ``local`` engine: tasks in this process (one worker) or in a process pool."""
from __future__ import annotations

import multiprocessing as mp
import os
import sys
from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

from .._progress import progress_bar
from ._errors import WorkerDied

__all__ = ["LocalEngine"]


class LocalEngine:
    """Runs ``fn(*args)`` for each task: in this process when ``workers == 1``, else in a
    pool of ``workers`` processes (forkserver on Linux, spawn elsewhere; never fork, which
    would copy the driver's memory and threads). A worker that dies fails the run."""

    name = "local"

    def __init__(self, workers: int):
        self.workers = int(workers)
        self._pool = None

    def _executor(self):
        if self._pool is None:
            method = "forkserver" if sys.platform.startswith("linux") else "spawn"
            ctx = mp.get_context(method)
            if method == "forkserver":
                ctx.set_forkserver_preload(["packlib.pipeline._warm"])
            from ._tasks import worker_init

            self._pool = ProcessPoolExecutor(self.workers, mp_context=ctx, initializer=worker_init,
                                             initargs=(os.getpid(),))
        return self._pool

    def map(self, fn, tasks, desc: str, progress=None, unit: str = "task"):
        """``[fn(*t) for t in tasks]``, in order; the first failure cancels the rest and is raised."""
        tasks = list(tasks)
        with progress_bar(len(tasks), desc, progress, unit=unit) as bar:
            if self.workers <= 1:
                out = []
                for t in tasks:
                    out.append(fn(*t))
                    bar.update(1)
                return out
            pool = self._executor()
            futures = [pool.submit(fn, *t) for t in tasks]
            pending = set(futures)
            try:
                while pending:
                    done, pending = wait(pending, return_when=FIRST_EXCEPTION)
                    bar.update(len(done))
                    for fut in done:
                        if fut.exception() is not None:
                            raise fut.exception()
            except BrokenProcessPool:
                self.close(abort=True)
                raise WorkerDied(f"a worker process died during {desc} (killed, out of memory or crashed); "
                                 "nothing was written. Run again, with fewer --workers if memory ran out") from None
            except BaseException:
                for fut in pending:
                    fut.cancel()
                raise
            return [f.result() for f in futures]

    def close(self, abort: bool = False) -> None:
        """Stop the pool; with ``abort``, kill the workers at once (a failed or interrupted
        run: whatever they were writing is removed with the work directory)."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        if abort:
            for proc in list((getattr(pool, "_processes", None) or {}).values()):
                proc.kill()
        pool.shutdown(wait=True, cancel_futures=True)
