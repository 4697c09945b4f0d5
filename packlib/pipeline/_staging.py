"""A run's staging: the work directory beside the output, the engine, and what stops them.

A run builds its output in a hidden work directory beside it (``.<name>.tmp-<id>``) and
publishes it with one rename. The work directory holds an owner file (pid, host, the
process's start time), so that:

- on any failure, SIGINT, SIGTERM and SIGHUP included (``_signals``: the handler records
  the signal, the driver stops at its next safe point), the engine stops first (no worker
  writes after that), then the work directory goes: a failed run leaves nothing;
- staging whose owner died without cleaning up (SIGKILL, the OOM killer) is recognised by
  the next run into the same parent directory and removed, with a line saying so; staging
  of a run that is still alive, or of another host, is never touched.

Workers never outlive the driver: each starts a watchdog on the driver's pid (see
``_tasks.worker_init``), so they exit within a second of its death however it died.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import uuid

from . import _signals
from ._errors import InputError, Interrupted

__all__ = ["Interrupted", "StagedRun", "check_output", "staging_dir"]

OWNER_FILE = "_owner.json"
_MARK = ".tmp-"

log = logging.getLogger("packlib.pipeline")


def check_output(output) -> str:
    """The absolute output directory; it must not exist, or be empty, and its parent must exist."""
    if not isinstance(output, (str, os.PathLike)):
        raise TypeError(f"output must be a directory path (str or os.PathLike), got {type(output).__name__}")
    out = os.path.abspath(os.fspath(output))
    if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        raise InputError(f"{out}: already exists{' and is not empty' if os.path.isdir(out) else ''}; "
                         "remove it or choose another output directory")
    parent = os.path.dirname(out)
    if not os.path.isdir(parent):
        raise InputError(f"{parent}: the output's parent directory does not exist; create it first")
    return out


def staging_dir(out: str) -> str:
    """A fresh work directory name beside ``out`` (hidden: readers of the parent skip it)."""
    return os.path.join(os.path.dirname(out), f".{os.path.basename(out)}{_MARK}{uuid.uuid4().hex[:12]}")


# ------------------------------------------------------------------------------ owners


def _start_time(pid: int) -> str | None:
    """The process's start time as the kernel tells it (Linux), to tell a reused pid apart."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return None
    return stat[stat.rindex(b")") + 2:].split()[19].decode()


def _owner() -> dict:
    return {"pid": os.getpid(), "host": socket.gethostname(), "start": _start_time(os.getpid())}


def _alive(owner: dict) -> bool:
    pid = owner.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return True  # not ours to judge
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, another user's
    recorded, now = owner.get("start"), _start_time(pid)
    return recorded is None or now is None or recorded == now


def remove_dead_staging(parent: str) -> list[str]:
    """Remove the work directories in ``parent`` whose owner (on this host) is dead."""
    removed = []
    host = socket.gethostname()
    try:
        names = os.listdir(parent)
    except OSError:
        return removed
    for name in names:
        path = os.path.join(parent, name)
        if not (name.startswith(".") and _MARK in name) or not os.path.isdir(path):
            continue
        try:
            with open(os.path.join(path, OWNER_FILE), encoding="utf-8") as fh:
                owner = json.load(fh)
        except (OSError, ValueError):
            continue  # no owner file (yet, or not a packlib run): leave it
        if not isinstance(owner, dict) or owner.get("host") != host or _alive(owner):
            continue
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.exists(path):
            removed.append(path)
            log.warning("packlib: removed %s, the staging of a run that died (pid %s on %s)",
                        path, owner.get("pid"), host)
    return removed


# ------------------------------------------------------------------------------ the run


def make_engine(engine: str, workers, ray_address):
    if engine == "ray":
        from ._ray import RayEngine

        return RayEngine(workers, ray_address)
    from ._local import LocalEngine

    return LocalEngine(workers if workers is not None else (os.cpu_count() or 1))


class StagedRun:
    """A run's engine and work directory (see the module docs). On any failure the engine
    is aborted first (workers killed: none writes after that), then the work directory
    goes; the engine is closed however the run ends, and the caller's signal handlers are
    restored. ``engine=None``: a work directory only (a run done in this process)."""

    def __init__(self, work: str, engine=None, workers=None, ray_address=None):
        self.work, self._args, self.engine = work, (engine, workers, ray_address), None
        self._stops = _signals.armed()

    def __enter__(self):
        self._stops.__enter__()
        try:
            remove_dead_staging(os.path.dirname(self.work))
            os.makedirs(os.path.join(self.work, "_spill") if self._args[0] else self.work)
            with open(os.path.join(self.work, OWNER_FILE), "w", encoding="utf-8") as fh:
                json.dump(_owner(), fh)
            if self._args[0]:
                self.engine = make_engine(*self._args)
                _signals.rearm()  # Ray's start replaces the handlers with its own
            _signals.check()
        except BaseException as exc:
            with _signals.deferred():
                shutil.rmtree(self.work, ignore_errors=True)
                self._close(True)
            received = self._stops.received
            self._stops.__exit__(None, None, None)
            if received is not None and not isinstance(exc, Interrupted):
                raise Interrupted(received) from None
            raise
        return self

    def publish(self, out: str, *, merge: bool = False) -> None:
        """Move the finished work directory to ``out`` (its owner file left behind). The
        last safe point is here: once publishing starts, a signal no longer stops the run."""
        with self.publishing():
            os.remove(os.path.join(self.work, OWNER_FILE))
            if not merge or not os.path.exists(out):
                if os.path.isdir(out):
                    os.rmdir(out)  # empty (checked at the start); another run's files make this fail
                os.replace(self.work, out)
                return
            for name in sorted(os.listdir(self.work)):
                os.replace(os.path.join(self.work, name), os.path.join(out, name))
            os.rmdir(self.work)

    def publishing(self):
        """The last safe point, then a block where a signal is only recorded: for a run that
        moves its files into place itself (the work directory goes when the run ends)."""
        _signals.check()
        return _signals.deferred()

    def _close(self, abort: bool) -> None:
        if self.engine is not None:
            engine, self.engine = self.engine, None
            engine.close(abort=abort)

    def __exit__(self, exc_type, exc, tb):
        try:
            with _signals.deferred():
                if exc_type is not None:
                    _signals.pause_at("cleanup")
                self._close(exc_type is not None)
                shutil.rmtree(self.work, ignore_errors=True)  # failed, or what is left after publishing
        finally:
            received, outermost = self._stops.received, _signals.depth() == 1
            self._stops.__exit__(None, None, None)
        if received is None:
            return False
        if exc_type is not None:
            if not isinstance(exc, Interrupted):
                raise Interrupted(received) from None  # the failure is the stop's doing (workers signalled too)
            return False
        if outermost:
            signal.raise_signal(received)  # published before the signal came: the caller's handler gets it
        return False
