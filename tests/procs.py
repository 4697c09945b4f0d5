"""The processes a test can see through ``/proc``: what the pipeline's stop tests check a
stopped run leaves behind (Linux only, as those tests are)."""
from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import tempfile
import time


def live_processes():
    """``(pid, command line, stat fields after the name)`` of every process that is not a zombie."""
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as fh:
                cmd = fh.read()
            with open(f"/proc/{d}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2:].split()
        if fields[0] != b"Z":
            yield int(d), cmd, fields


def session_processes(sid: int) -> list[int]:
    """The live processes of session ``sid`` (a run started with ``start_new_session=True``)."""
    return [pid for pid, _, fields in live_processes() if int(fields[3]) == sid]


def ray_processes() -> list[int]:
    """Live Ray processes (its workers, raylet and GCS server)."""
    return [pid for pid, cmd, _ in live_processes() if b"ray::" in cmd or b"raylet" in cmd or b"gcs_server" in cmd]


@contextlib.contextmanager
def ray_to_itself(wait_s: float = 30.0):
    """Hold this machine's one turn at running a local Ray: test processes (pytest-xdist
    workers, other test runs) take turns through a lock file, so no test sees another's Ray
    processes, whatever the schedule. Inside, no Ray process is left from before (waited for
    up to ``wait_s``); a Ray that these tests did not start still running skips the test."""
    import pytest

    path = os.path.join(tempfile.gettempdir(), f"packlib-tests-ray-{os.getuid()}.lock")
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            deadline = time.monotonic() + wait_s
            while ray_processes() and time.monotonic() < deadline:
                time.sleep(0.1)
            if ray_processes():
                pytest.skip("a Ray instance already runs on this machine")
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (for a test's process group)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
