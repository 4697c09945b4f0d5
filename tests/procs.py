"""The processes a test can see through ``/proc``: what the pipeline's stop tests check a
stopped run leaves behind (Linux only, as those tests are)."""
from __future__ import annotations

import os


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
