"""Worker processes fed by the driver itself.

Each worker has one duplex pipe to the driver, which sends it a task, reads the result
and sends the next. Nothing else is shared: no helper thread in the driver, no queue, no
semaphore, so stopping at any moment (a signal, a failed task, a dead worker) is always
the same: kill the workers, reap them, close the pipes. Workers start with SIGINT,
SIGTERM and SIGHUP blocked (blocked in the driver around the start, and inherited) and
then ignore them: a Ctrl-C or a scheduler's signal to the whole process group is the
driver's to act on, and the driver kills its workers. (Workers also watch the driver and
end with it however it dies: see ``_tasks.worker_init``.)
"""
from __future__ import annotations

import multiprocessing as mp
import pickle
import signal
import sys
import traceback
from multiprocessing.connection import wait

from . import _signals
from ._errors import PipelineError, WorkerDied

__all__ = ["WorkerPool"]


class RemoteTraceback(Exception):
    """The traceback of an exception raised in a worker (its ``__cause__``)."""

    def __str__(self):
        return self.args[0]


def serve(conn, initializer, initargs) -> None:
    """A worker's life: ``(fn, args)`` in, ``(True, result)`` or ``(False, error)`` out, until
    the driver closes the pipe."""
    for s in _signals.STOP_SIGNALS:
        signal.signal(s, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _signals.STOP_SIGNALS)
    if initializer is not None:
        initializer(*initargs)
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return  # the driver is done with this worker (or gone)
        if task is None:
            return
        fn, args = task
        try:
            reply = (True, fn(*args))
        except BaseException as exc:  # noqa: BLE001 - every failure goes back to the driver
            reply = (False, _portable(exc))
        try:
            conn.send(reply)
        except (EOFError, OSError):
            return
        except Exception as exc:  # noqa: BLE001 - a result that does not pickle
            conn.send((False, _portable(exc)))


def _portable(exc: BaseException) -> tuple:
    """An exception as ``(pickled exception or None, one-line text, traceback text)``."""
    text = f"{type(exc).__name__}: {exc}"
    tb = "".join(traceback.format_exception(exc))
    try:
        blob = pickle.dumps(exc)
        pickle.loads(blob)
    except Exception:  # noqa: BLE001 - sent as text instead
        blob = None
    return blob, text, tb


def _error(portable: tuple) -> BaseException:
    blob, text, tb = portable
    exc = None
    if blob is not None:
        try:
            exc = pickle.loads(blob)
        except Exception:  # noqa: BLE001
            exc = None
    if not isinstance(exc, BaseException):
        exc = PipelineError(f"a task failed in a worker: {text}")
    exc.__cause__ = RemoteTraceback(f'\n"""\n{tb}"""')
    return exc


class _Blocked:
    """The stop signals blocked in this thread for the block (so processes started in it
    inherit them blocked); a signal that comes meanwhile is delivered when it ends."""

    def __enter__(self):
        self.old = None
        if hasattr(signal, "pthread_sigmask"):
            self.old = signal.pthread_sigmask(signal.SIG_BLOCK, _signals.STOP_SIGNALS)
        return self

    def __exit__(self, *exc):
        if self.old is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, self.old)
        return False


class WorkerPool:
    """``size`` worker processes (forkserver on Linux, spawn elsewhere; never fork, which
    would copy the driver's memory and threads), started at the first :meth:`map`."""

    def __init__(self, size: int, initializer=None, initargs=()):
        self.size, self._init = int(size), (initializer, tuple(initargs))
        self._workers = []  # (process, connection)

    def _start(self) -> None:
        method = "forkserver" if sys.platform.startswith("linux") else "spawn"
        ctx = mp.get_context(method)
        if method == "forkserver":
            ctx.set_forkserver_preload(["packlib.pipeline._warm"])
        with _Blocked():
            for _ in range(self.size):
                here, there = ctx.Pipe(duplex=True)
                proc = ctx.Process(target=serve, args=(there, *self._init), daemon=True, name="packlib-worker")
                self._workers.append((proc, here))
                try:
                    proc.start()
                finally:
                    there.close()

    def map(self, fn, tasks: list, on_done=None) -> list:
        """``[fn(*t) for t in tasks]`` in the workers, in order. The first failure is raised
        (the caller then closes the pool with ``abort``); a dead worker raises WorkerDied."""
        if not self._workers:
            self._start()
        results, n, sent, done = [None] * len(tasks), len(tasks), 0, 0
        idle, busy = list(self._workers), {}
        wake = _signals.wakeup_fd()
        while done < n:
            _signals.check()
            while idle and sent < n:
                proc, conn = idle.pop()
                try:
                    conn.send((fn, tasks[sent]))
                except (OSError, EOFError):
                    raise WorkerDied("a worker process died (killed, out of memory or crashed)") from None
                busy[conn] = (sent, proc)
                sent += 1
            watch = list(busy) + [p.sentinel for _, p in busy.values()] + ([wake] if wake is not None else [])
            ready = wait(watch, timeout=None if wake is not None else 0.1)
            if wake is not None and wake in ready:
                _signals.drain()
            _signals.check()
            for conn in [c for c in ready if c in busy]:
                i, proc = busy.pop(conn)
                try:
                    ok, value = conn.recv()
                except (EOFError, OSError):
                    raise WorkerDied("a worker process died (killed, out of memory or crashed)") from None
                if not ok:
                    raise _error(value)
                results[i] = value
                done += 1
                idle.append((proc, conn))
                if on_done is not None:
                    on_done()
            dead = [p for c, (_, p) in busy.items() if p.sentinel in ready]
            if dead:
                raise WorkerDied(f"a worker process died (exit status {dead[0].exitcode}; killed, out of memory "
                                 "or crashed)")
        return results

    def close(self, abort: bool = False) -> None:
        """Stop the workers: let them finish (their pipe closes), or with ``abort`` kill them at
        once; either way every one is reaped before this returns."""
        workers, self._workers = self._workers, []
        with _signals.deferred():
            for proc, conn in workers:
                if abort and proc.pid is not None:
                    proc.kill()
                conn.close()
            for proc, _ in workers:
                if proc.pid is None:
                    continue  # never started
                proc.join(None if abort else 10)
                if proc.exitcode is None:
                    proc.kill()
                    proc.join()
