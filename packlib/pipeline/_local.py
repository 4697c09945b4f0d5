"""The ``local`` engine: tasks in this process (one worker) or in a pool of worker processes."""
from __future__ import annotations

import os

from .._progress import progress_bar
from . import _signals

__all__ = ["LocalEngine"]


class LocalEngine:
    """Runs ``fn(*args)`` for each task: in this process when ``workers == 1`` (a stop
    signal is acted on between tasks and between the record batches of a task), else in a
    :class:`~packlib.pipeline._pool.WorkerPool` of ``workers`` processes. A worker that
    dies fails the run (WorkerDied)."""

    name = "local"

    def __init__(self, workers: int):
        self.workers = int(workers)
        self._pool = None

    def map(self, fn, tasks, desc: str, progress=None, unit: str = "task"):
        """``[fn(*t) for t in tasks]``, in order; the first failure stops the rest and is raised."""
        tasks = list(tasks)
        with progress_bar(len(tasks), desc, progress, unit=unit) as bar:
            if self.workers <= 1:
                out = []
                for t in tasks:
                    _signals.check()
                    out.append(fn(*t))
                    bar.update(1)
                return out
            if self._pool is None:
                from ._pool import WorkerPool
                from ._tasks import worker_init

                self._pool = WorkerPool(self.workers, worker_init, (os.getpid(),))
            try:
                return self._pool.map(fn, tasks, on_done=lambda: bar.update(1))
            except BaseException as exc:
                from ._errors import WorkerDied

                self.close(abort=True)
                if isinstance(exc, WorkerDied):
                    raise WorkerDied(f"a worker process died during {desc} (killed, out of memory or crashed); "
                                     "nothing was written. Run again, with fewer --workers if memory ran out") from None
                raise

    def close(self, abort: bool = False) -> None:
        """Stop the pool; with ``abort``, kill the workers at once (a failed or interrupted
        run: whatever they were writing is removed with the work directory)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close(abort=abort)
