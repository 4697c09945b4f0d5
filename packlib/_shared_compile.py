"""Compiling kernels in several processes at once, through numba's on-disk cache.

numba compiles one function at a time in a process, and a cold compile of packlib's kernels
takes most of a minute. Several processes can share that work: each *claims* units of work
(a file created exclusively in a directory they all see), compiles the units it claimed, and
says it is done; once every participant is done, the units the others claimed load from
numba's cache in milliseconds. The compiled code is the same as a serial warm-up's.

A unit is a string that a ``run`` function resolves in any interpreter (for packlib's units:
``packlib._warmup.run_unit``, whose module is also the helpers' entry point). Nothing here is
needed for correctness: a helper that fails or cannot write the cache only leaves its units
to be compiled again where they are used.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

__all__ = ["compile_claimed", "compile_in_processes"]


def _claim(directory: str, unit: str) -> bool:
    path = os.path.join(directory, "claim-" + unit.replace(":", "-").replace(" ", "-"))
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def compile_claimed(directory: str, units, run, participant: str, participants: int, *,
                    timeout: float = 900.0) -> list:
    """``run`` every unit of ``units`` that no other participant claimed first, then wait (at
    most ``timeout`` seconds) until ``participants`` participants are done.

    ``units`` are tried in their order, so list the costly ones first. Returns the units this
    participant ran. Every participant passes the same ``directory`` and ``participants``.
    """
    mine = []
    try:
        for unit in units:
            if _claim(directory, unit):
                run(unit)
                mine.append(unit)
    finally:
        with open(os.path.join(directory, "done-" + participant), "w"):
            pass
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sum(name.startswith("done-") for name in os.listdir(directory)) >= participants:
            break
        time.sleep(0.05)
    return mine


def compile_in_processes(units, run, processes: int, entry_module: str) -> None:
    """Run ``units`` in this process and ``processes - 1`` helper interpreters together
    (``python -m entry_module DIRECTORY PARTICIPANTS PARTICIPANT UNIT...``, which calls
    :func:`helper_main`). When it returns, the units the helpers ran load from numba's cache."""
    units = list(units)
    helpers = min(processes, len(units)) - 1
    if helpers <= 0:
        return
    # the helpers import this very package, wherever it was imported from
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    with tempfile.TemporaryDirectory(prefix="packlib-compile-") as directory:
        procs = [
            subprocess.Popen([sys.executable, "-m", entry_module, directory, str(helpers + 1), f"helper{i}", *units],
                             env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for i in range(helpers)
        ]
        try:
            compile_claimed(directory, units, run, "caller", helpers + 1)
        finally:
            for proc in procs:
                proc.wait()


def helper_main(argv: list[str], run) -> int:
    """A helper interpreter's part: ``argv`` as :func:`compile_in_processes` passes it."""
    directory, participants, participant, units = argv[0], int(argv[1]), argv[2], argv[3:]
    compile_claimed(directory, units, run, participant, participants)
    return 0
