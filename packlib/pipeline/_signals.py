"""Stop signals during a run: the handler records, the driver stops at safe points.

While a run is armed, SIGINT, SIGTERM and SIGHUP (those not ignored when it starts: ``nohup``
keeps SIGHUP away) only record the signal, and wake the driver if it is waiting on its
workers (a byte on a pipe, ``signal.set_wakeup_fd``). The driver raises
:class:`~packlib.pipeline.Interrupted` itself, at safe points: before and after every
step, in its waits on workers, and between the tasks and record batches it runs in this
process. A handler must not raise wherever the main thread happens to be: an exception
thrown from inside numba's boxing of a kernel's returned arrays leaves a NULL in the
result tuple (a segmentation fault when it is unpacked), one thrown inside a finalizer is
swallowed (the run goes on), one thrown inside a pool's bookkeeping leaves it half-built.

Once a run cleans up or publishes its output, a signal is only recorded: cleaning up is
what it asked for, and a published output is complete. The first signal is the one
reported; later ones change nothing.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time

from ._errors import Interrupted

__all__ = ["STOP_SIGNALS", "armed", "check", "deferred", "depth", "drain", "pause_at", "rearm", "received", "stop_point",
           "wakeup_fd"]

STOP_SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n))


class _Stops:
    """The process's one record of stop signals (runs may nest: a command around a run)."""

    def __init__(self):
        self.depth = 0  # armed runs
        self.received = None  # the first stop signal since the outermost run was armed
        self.count = 0  # stop signals since then
        self.deferring = 0  # cleaning up or publishing: record only
        self.saved = {}  # the caller's handlers
        self.pipe = None  # (read fd, write fd) of the wake-up pipe
        self.old_wakeup = -1

    def handler(self, signum, frame):  # noqa: ARG002 - signal's signature
        self.count += 1
        if self.received is None:
            self.received = signum

    def arm(self) -> bool:
        if threading.current_thread() is not threading.main_thread():
            return False  # only the main thread may set handlers: the caller's stay in force
        if self.depth == 0:
            self.received, self.deferring, self.count = None, 0, 0
            for s in STOP_SIGNALS:
                previous = signal.getsignal(s)
                if previous is signal.SIG_IGN:
                    continue  # ignored when the run started (nohup): it stays ignored
                self.saved[s] = previous
                signal.signal(s, self.handler)
            if os.name == "posix":
                r, w = os.pipe()
                os.set_blocking(r, False)
                os.set_blocking(w, False)
                self.pipe = (r, w)
                self.old_wakeup = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        self.depth += 1
        return True

    def rearm(self) -> None:
        """Install the handlers again (an engine such as Ray installs its own when it starts)."""
        if self.depth and threading.current_thread() is threading.main_thread():
            for s in self.saved:
                signal.signal(s, self.handler)

    def disarm(self) -> None:
        self.depth -= 1
        if self.depth:
            return
        for s, h in self.saved.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)
        self.saved.clear()
        if self.pipe is not None:
            signal.set_wakeup_fd(self.old_wakeup)
            for fd in self.pipe:
                os.close(fd)
            self.pipe = None


_STOPS = _Stops()


class armed:
    """``with armed():`` the stop signals are recorded (see the module docs); on leaving,
    the caller's handlers come back. ``.received`` is the first signal (or None)."""

    def __enter__(self):
        self._on = _STOPS.arm()
        if self._on and _STOPS.depth == 1:
            pause_at("armed")
        return self

    @property
    def received(self):
        return _STOPS.received if self._on else None

    def __exit__(self, *exc):
        if self._on:
            _STOPS.disarm()
        return False


def rearm() -> None:
    _STOPS.rearm()


def depth() -> int:
    """How many runs are armed (nested: a command around a run)."""
    return _STOPS.depth


def received():
    """The stop signal received during the armed run (None if none, or none armed)."""
    return _STOPS.received if _STOPS.depth else None


def check() -> None:
    """A safe point: raise :class:`Interrupted` if a stop signal came (not while deferring)."""
    if _STOPS.depth and _STOPS.received is not None and not _STOPS.deferring:
        raise Interrupted(_STOPS.received)


class deferred:
    """``with deferred():`` no safe point raises (cleaning up, publishing); signals are recorded."""

    def __enter__(self):
        _STOPS.deferring += 1
        return self

    def __exit__(self, *exc):
        _STOPS.deferring -= 1
        return False


def wakeup_fd():
    """A file descriptor that becomes readable when a stop signal arrives (None where there is
    none: the caller then waits with a timeout); :func:`drain` empties it."""
    return _STOPS.pipe[0] if _STOPS.depth and _STOPS.pipe is not None else None


def drain() -> None:
    if _STOPS.pipe is not None:
        try:
            while os.read(_STOPS.pipe[0], 512):
                pass
        except (BlockingIOError, InterruptedError):
            pass


def pause_at(point: str) -> None:
    """Test hook: with ``point`` in ``PACKLIB_TEST_PAUSE_AT`` (comma-separated; a step's
    ``<step>:start`` or ``<step>:end``; ``armed``: the signals are handled from here on;
    ``cleanup``: a failed or stopped run's clean-up),
    the driver says so (a line on stderr, and a line in the file ``PACKLIB_TEST_PAUSE_FILE``
    if set) and waits there until a stop signal comes, or ``PACKLIB_TEST_PAUSE_SECONDS``
    (default 60) pass, so that a test can signal it at exactly that point."""
    if point not in os.environ.get("PACKLIB_TEST_PAUSE_AT", "").split(","):
        return
    seen = _STOPS.count
    sys.stderr.write(f"packlib-test: at {point}\n")
    sys.stderr.flush()
    marker = os.environ.get("PACKLIB_TEST_PAUSE_FILE")
    if marker:
        with open(marker, "a", encoding="utf-8") as fh:
            fh.write(f"{point}\n")
    deadline = time.monotonic() + float(os.environ.get("PACKLIB_TEST_PAUSE_SECONDS", "60"))
    while time.monotonic() < deadline and _STOPS.count == seen:
        time.sleep(0.005)


def stop_point(point: str | None = None) -> None:
    """A named safe point: the test hook, then :func:`check`."""
    if point is not None:
        pause_at(point)
    check()
