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

__all__ = ["compile_claimed", "compile_in_processes", "in_helper", "usable_cores"]

# set in a helper interpreter's environment, and in this process while it shares a compile:
# a call there compiles what it needs itself, never starting helpers of its own
_HELPER_ENV = "PACKLIB_COMPILE_HELPER"
_sharing = False


def in_helper() -> bool:
    """Whether this process is a compile helper, or is sharing a compile with helpers now."""
    return _sharing or os.environ.get(_HELPER_ENV) == "1"


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS tells it)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _marker(directory: str, kind: str, unit: str) -> str:
    return os.path.join(directory, kind + "-" + unit.replace(":", "-").replace(" ", "-"))


def _claim(directory: str, unit: str) -> bool:
    try:
        os.close(os.open(_marker(directory, "claim", unit), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def compile_claimed(directory: str, units, run, *, others_alive=None, timeout: float = 900.0) -> list:
    """``run`` every unit of ``units`` that no other participant claimed first, in their order
    (list the costly ones first); returns the units run here.

    With ``others_alive`` (a function: does any other participant still run?), then waits
    until the units claimed elsewhere are done, as long as someone is there to do them and
    for at most ``timeout`` seconds. Every participant passes the same ``directory``.
    """
    mine = []
    for unit in units:
        if _claim(directory, unit):
            try:
                run(unit)
            finally:  # done, or failed: either way nobody waits for it any longer
                with open(_marker(directory, "done", unit), "w"):
                    pass
            mine.append(unit)
    deadline = time.monotonic() + timeout
    while others_alive is not None and others_alive() and time.monotonic() < deadline:
        if all(os.path.exists(_marker(directory, "done", unit)) for unit in units):
            break
        time.sleep(0.05)
    return mine


def compile_in_processes(units, run, processes: int, entry_module: str) -> None:
    """Run ``units`` in this process and ``processes - 1`` helper interpreters together
    (``python -m entry_module DIRECTORY UNIT...``, which calls :func:`helper_main`). When it
    returns, the units the helpers ran load from numba's cache. A helper that has not
    claimed a unit by then (the cache was warm: this process was quicker) is stopped."""
    global _sharing
    units = list(units)
    helpers = min(processes, len(units)) - 1
    if helpers <= 0 or in_helper():
        return
    # the helpers import this very package, wherever it was imported from
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])),
               **{_HELPER_ENV: "1"})
    with tempfile.TemporaryDirectory(prefix="packlib-compile-") as directory:
        try:
            procs = [subprocess.Popen([sys.executable, "-m", entry_module, directory, *units], env=env,
                                      stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                     for _ in range(helpers)]
        except OSError:  # no helper can start here: compile alone
            return
        _sharing = True
        try:
            compile_claimed(directory, units, run, others_alive=lambda: any(p.poll() is None for p in procs))
        finally:
            _sharing = False
            for proc in procs:  # every unit is claimed and done: a helper left has nothing to do
                proc.kill()
                proc.wait()


def helper_main(argv: list[str], run) -> int:
    """A helper interpreter's part: ``argv`` as :func:`compile_in_processes` passes it."""
    compile_claimed(argv[0], argv[1:], run)
    return 0
