"""``python -m packlib compile``: the kernels of the first calls, compiled into the package.

A first call on a machine compiles its kernels (seconds) and numba caches them, in the
package's ``__pycache__``, in ``NUMBA_CACHE_DIR`` or in the user's ``~/.cache``. Where the
package is installed once and used elsewhere (an image whose containers start with a fresh
``HOME``, a CI job that sets a new ``NUMBA_CACHE_DIR``, a cluster's read-only install), that
cache is not where the first call looks, and every new process compiles again. This command,
run once where the package was installed (and is writable), compiles the kernels of the
first calls the README shows into ``_kernels/_built`` inside the package, where every later
process loads them first (:mod:`packlib._jit`): any user, any ``NUMBA_CACHE_DIR``,
read-only. Those kernels are keyed by their source's content, the numba version, the
Python version and this machine's CPU; anything else compiles on first use, as without them.

What it compiles (:data:`UNITS`): the histogram packers (SPFHP, LPFHP, NNLSHP at a depth
limit and unlimited, above NNLSHP's exact range too) and ``assign``; the lower bound and the
near-optimal packer (``compare``'s and the demo's); the per-sequence packers. ``--all`` adds
every other kernel family (what :func:`packlib.warmup` compiles).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time

from ._jit import BUILDING_ENV, BUILT_DIR

#: what the command compiles, in the order two processes share it best (each takes the next
#: unit when free): the costliest kernels first, one each (packlib._first_use.UNITS, for the
#: types the calls pass), then the calls themselves on tiny inputs (packlib._warmup's units),
#: which by then mostly load what is compiled
UNITS = (
    "kernel:exchange.repair_pass", "kernel:nnls.nnls_columns", "kernel:optimal.exact_fill",
    "kernel:exchange.pair_pass", "kernel:optimal.price", "kernel:greedy.lpfhp", "kernel:nnls.settle_dummies",
    "kernel:optimal.round_columns", "kernel:optimal.max_pack_value", "kernel:optimal.max_pack_value-int64",
    "kernel:optimal.pack_value_at_most", "kernel:greedy.spfhp", "kernel:nnls_grid.classes_to_lengths",
    "kernel:exchange.pack_arena", "kernel:exchange.kept_rows", "kernel:relaxed.expand_bucket_packs",
    "assign", "family:per-sequence packing", "family:histogram packing", "family:lower bounds and optimal packing",
)


def built_dir() -> str:
    """Where the compiled kernels go: ``_kernels/_built`` in this package."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "_kernels", BUILT_DIR)


def _check_writable(directory: str) -> None:
    try:
        os.makedirs(directory, exist_ok=True)
        tempfile.TemporaryFile(dir=directory).close()
    except OSError as exc:
        raise OSError(exc.errno, f"cannot write the compiled kernels into the package ({exc.strerror}): run "
                      "`python -m packlib compile` as the user who installed packlib, where it is installed (an "
                      "image's build step); or call packlib.warmup() in each environment, which writes numba's own "
                      "cache (NUMBA_CACHE_DIR)", directory) from None


def compile_into_package(units=None, *, processes: int | None = None) -> float:
    """Compile ``units`` (default :data:`UNITS`) into :func:`built_dir`, replacing what is
    there, in a fresh interpreter (``processes`` at once; default: two where there are two
    cores), and return the seconds it took."""
    from ._shared_compile import usable_cores
    from ._validate import as_positive_int

    processes = min(2, usable_cores()) if processes is None else as_positive_int(processes, "processes")
    directory = built_dir()
    _check_writable(directory)
    t0 = time.perf_counter()
    shutil.rmtree(directory, ignore_errors=True)
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.pathsep.join(p for p in (package_parent, os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, PYTHONPATH=path, **{BUILDING_ENV: "1"})
    done = subprocess.run([sys.executable, "-m", __name__, str(processes), *(units or UNITS)], env=env)
    if done.returncode != 0:
        shutil.rmtree(directory, ignore_errors=True)
        raise RuntimeError("compiling the kernels into the package failed (see above); nothing was kept, and "
                           "kernels compile on first use as before")
    return time.perf_counter() - t0


def _main(argv) -> int:
    """The interpreter :func:`compile_into_package` starts (``BUILDING_ENV`` set before any
    kernel is defined): ``argv`` is the number of processes, then the units."""
    if os.environ.get(BUILDING_ENV) != "1":
        raise RuntimeError(f"run through packlib._precompile.compile_into_package ({BUILDING_ENV} unset)")
    from ._warmup import run_unit, warm_in_processes

    units = list(argv[1:])
    warm_in_processes(units, int(argv[0]))  # shared with helpers (none where processes is 1)
    for unit in units:  # what the helpers compiled loads; what a failed helper left compiles here
        run_unit(unit)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
