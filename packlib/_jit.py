"""The one numba policy of packlib.

Every kernel in :mod:`packlib._kernels` is decorated with :func:`jit`; no other module
imports numba or passes numba options (``tests/test_lint.py`` checks it).

- ``cache=True``: compiled code is written next to the module (or to ``NUMBA_CACHE_DIR``),
  so only the first call on a machine pays for compilation.
- ``nogil=True``: kernels release the GIL, so callers may run them from threads (the
  threaded builds of :func:`packlib.blend` do; numba's ``parallel=True`` is not used: its
  cached code has crashed when the thread count changed, pynndescent #175).
- ``error_model="numpy"``: no Python exception machinery for float division in hot loops.
- No ``fastmath``: most kernels do integer bookkeeping where reassociation buys nothing, and
  the float kernels (NNLS) must give the same answer on every machine.
- Compilation is lazy: no signatures are given, nothing compiles at import.
"""
from __future__ import annotations

import numba

_SERIAL = dict(cache=True, nogil=True, error_model="numpy")


def jit(fn):
    """Compile ``fn`` as a serial, cached, GIL-free kernel."""
    return numba.njit(**_SERIAL)(fn)
