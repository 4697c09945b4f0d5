"""The one numba policy of packlib.

Every kernel in :mod:`packlib._kernels` is decorated with :func:`jit` (or, for the rare
multi-threaded kernel, :func:`jit_parallel`); no other module passes numba options.

- ``cache=True``: compiled code is written next to the module (or to ``NUMBA_CACHE_DIR``),
  so only the first call on a machine pays for compilation.
- ``nogil=True``: kernels release the GIL, so callers may run them from threads.
- ``error_model="numpy"``: no Python exception machinery for float division in hot loops.
- No ``fastmath``: most kernels do integer bookkeeping where reassociation buys nothing, and
  the float kernels (NNLS) must give the same answer on every machine.
- Compilation is lazy: no signatures are given, nothing compiles at import.
"""
from __future__ import annotations

import numba

_SERIAL = dict(cache=True, nogil=True, error_model="numpy")
# Cached parallel code has segfaulted when the thread count changed (pynndescent #175),
# so parallel kernels are never cached.
_PARALLEL = dict(cache=False, nogil=True, error_model="numpy", parallel=True)


def jit(fn):
    """Compile ``fn`` as a serial, cached, GIL-free kernel."""
    return numba.njit(**_SERIAL)(fn)


def jit_parallel(fn):
    """Compile ``fn`` as a multi-threaded (``prange``) kernel; not cached."""
    return numba.njit(**_PARALLEL)(fn)
