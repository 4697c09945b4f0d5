"""The one numba policy of packlib.

Every kernel in :mod:`packlib._kernels` is decorated with :func:`jit`; no other module
imports numba or passes numba options (``tests/test_lint.py`` checks it).

- ``cache=True``: compiled code is written next to the module (or to ``NUMBA_CACHE_DIR``;
  where the package is read-only, to numba's user-wide cache, ``~/.cache/numba``), so only
  the first call on a machine pays for compilation. Where no cache can be written at all,
  a one-line note says so and kernels compile uncached.
- Kernels compiled into the package: ``python -m packlib compile`` (:mod:`packlib._precompile`)
  compiles the kernels of the first calls into ``_kernels/_built``, and each kernel loads
  from there before numba's own cache is looked at: any user, any ``NUMBA_CACHE_DIR``,
  read-only or not. They are keyed by their module's content, the numba version, Python's
  bytecode and this machine's CPU: anything else compiles and caches as above.
- ``nogil=True``: kernels release the GIL, so callers may run them from threads (the
  threaded builds of :func:`packlib.blend` do; numba's ``parallel=True`` is not used: its
  cached code has crashed when the thread count changed, pynndescent #175).
- ``error_model="numpy"``: no Python exception machinery for float division in hot loops.
- No C-callable (cfunc) wrapper: no kernel is passed around as a first-class function.
- A kernel whose name starts with an underscore is called only by other kernels (numba links
  its code into theirs): it is compiled without a CPython entry point (compile work its
  callers never use), and a call from Python raises :class:`TypeError` instead of reaching
  the missing entry point. :func:`python_callable` gives tests a way in.
- No ``fastmath``: most kernels do integer bookkeeping where reassociation buys nothing, and
  the float kernels (NNLS) must give the same answer on every machine.
- Compilation is lazy: no signatures are given, nothing compiles at import. The first
  compilation in a process says so once on an interactive terminal or in a notebook (numba's
  compile event; a kernel loaded from the cache is no compilation), since that call takes
  seconds where later ones take milliseconds.
"""
from __future__ import annotations

import functools
import hashlib
import os
import sys

import numba
import numpy as np
from numba.core import caching as _caching
from numba.core import event as _event
from numba.core.registry import CPUDispatcher, cpu_target

_SERIAL = dict(cache=True, nogil=True, error_model="numpy", no_cfunc_wrapper=True)


class _CompileNotice(_event.Listener):
    """Prints one line when the first packlib kernel of the process starts compiling."""

    said = False

    def on_start(self, event):
        if self.said or not _interactive():
            return
        dispatcher = event.data.get("dispatcher") if isinstance(event.data, dict) else None
        if getattr(getattr(dispatcher, "py_func", None), "__module__", "").startswith("packlib."):
            type(self).said = True
            print("packlib: compiling kernels for their first use on this machine (seconds; numba caches them, "
                  "so later runs load them quickly; `python -m packlib compile` compiles the first calls' kernels "
                  "into the package once, for every process here)", file=sys.stderr, flush=True)

    def on_end(self, event):
        pass


def _interactive() -> bool:
    """A person is watching: a terminal, or a Jupyter / IPython kernel (not a test's pipe)."""
    stream = sys.stderr
    return "ipykernel" in sys.modules or bool(getattr(stream, "isatty", lambda: False)())


_event.register("numba:compile", _CompileNotice())


class _InnerKernel(CPUDispatcher):
    """A kernel that only other kernels call (it has no CPython entry point)."""

    def __call__(self, *args, **kwargs):
        raise TypeError(f"{self.py_func.__module__}.{self.py_func.__name__} is called only by other kernels "
                        "(it has no entry point from Python); call a public kernel, or wrap it with "
                        "packlib._jit.python_callable in a test")


def jit(fn):
    """Compile ``fn`` as a serial, cached, GIL-free kernel; without a CPython entry point when
    its name is private (``_name``: called only by other kernels)."""
    inner = fn.__name__.startswith("_")
    options = dict(_SERIAL, **({"no_cpython_wrapper": True} if inner else {}))
    try:
        kernel = numba.njit(**options)(fn)
    except RuntimeError as err:  # numba: "cannot cache function ...: no locator available"
        if "cannot cache" not in str(err):
            raise
        _note_no_cache()
        kernel = numba.njit(**dict(options, cache=False))(fn)
    if isinstance(kernel, CPUDispatcher):  # not under NUMBA_DISABLE_JIT
        if inner:
            kernel.__class__ = _InnerKernel
        _use_built(kernel)
    return kernel


_no_cache_noted = False


def _note_no_cache() -> None:
    """Say once, in one line, that nothing can be cached here (the kernels still work)."""
    global _no_cache_noted
    if not _no_cache_noted:
        _no_cache_noted = True
        print("packlib: numba can write its cache nowhere here (NUMBA_CACHE_DIR, the package's __pycache__ and "
              "~/.cache are read-only): kernels compile in every new process; set NUMBA_CACHE_DIR to a writable "
              "directory to keep them", file=sys.stderr, flush=True)


# ------------------------------------------------ kernels compiled into the package
BUILT_DIR = "_built"
#: set in the interpreter packlib._precompile starts: what compiles goes to BUILT_DIR, only there
BUILDING_ENV = "PACKLIB_COMPILING_INTO_PACKAGE"


def _building() -> bool:
    return os.environ.get(BUILDING_ENV) == "1"


@functools.lru_cache(maxsize=None)
def _content_hash(path: str, mtime_ns: int, size: int) -> str:
    """The module's content hash (read once per version of the file in a process)."""
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


_Locator = getattr(_caching, "_CacheLocator", object)  # numba's; where a numba lacks them,
_Impl = getattr(_caching, "CompileResultCacheImpl", object)  # _use_built does nothing
_Function = getattr(_caching, "FunctionCache", object)


class _BuiltLocator(_Locator):
    """``BUILT_DIR`` beside the kernel's module, stamped with the module's content (not its
    time stamp: an install or a copy changes that)."""

    def __init__(self, py_func, py_file):
        self._py_file = py_file
        self._lineno = py_func.__code__.co_firstlineno
        self._path = os.path.join(os.path.dirname(py_file), BUILT_DIR)

    def ensure_cache_path(self):
        if _building():  # read-only otherwise: only packlib._precompile writes here
            super().ensure_cache_path()

    def get_cache_path(self):
        return self._path

    def get_source_stamp(self):
        st = os.stat(self._py_file)
        return _content_hash(self._py_file, st.st_mtime_ns, st.st_size)

    def get_disambiguator(self):
        return str(self._lineno)

    @classmethod
    def from_function(cls, py_func, py_file):
        self = cls(py_func, py_file)
        return self if _building() or os.path.isdir(self._path) else None


class _BuiltImpl(_Impl):
    _locator_classes = [_BuiltLocator]


class _BuiltCache(_Function):
    _impl_class = _BuiltImpl


class _BuiltThenOwn:
    """numba's cache interface (what a dispatcher calls): load from the kernels compiled into
    the package, then from numba's own cache; save to numba's own."""

    def __init__(self, built, own):
        self.built, self.own = built, own

    @property
    def cache_path(self):
        return self.own.cache_path

    def load_overload(self, sig, target_context):
        data = self.built.load_overload(sig, target_context)
        return data if data is not None else self.own.load_overload(sig, target_context)

    def save_overload(self, sig, data):
        self.own.save_overload(sig, data)

    def enable(self):
        self.built.enable()
        self.own.enable()

    def disable(self):
        self.built.disable()
        self.own.disable()

    def flush(self):
        self.own.flush()


def _use_built(kernel) -> None:
    """Let ``kernel`` load what was compiled into the package (or, compiling into it, save there)."""
    if _Function is object:
        return
    try:
        built = _BuiltCache(kernel.py_func)
    except (RuntimeError, OSError, AttributeError, TypeError):  # none here, or another numba
        return
    kernel._cache = built if _building() else _BuiltThenOwn(built, kernel._cache)


def _built_usable(kernel) -> bool:
    """Whether ``kernel`` was compiled into the package for this machine, numba and source."""
    cache = getattr(kernel, "_cache", None)
    if not isinstance(cache, _BuiltThenOwn):
        return False
    try:
        index = cache.built._cache_file._load_index()
    except (OSError, EOFError, ValueError, AttributeError):
        return False
    host = cpu_target.target_context.codegen().magic_tuple()
    return any(key[1] == host for key in index)


def compile_for(kernel, *sample_args) -> None:
    """Compile ``kernel`` (or load it from the cache) for the types of ``sample_args``,
    without running it: how a helper process compiles a kernel for another's first call."""
    if isinstance(kernel, CPUDispatcher):  # not under NUMBA_DISABLE_JIT
        kernel.compile(tuple(numba.typeof(a) for a in sample_args))


def is_compiled(kernel) -> bool:
    """Whether ``kernel`` is compiled in this process or has an index in numba's on-disk
    cache (the index may not hold every signature: a cheap look, not a promise)."""
    if not isinstance(kernel, CPUDispatcher) or kernel.signatures or _built_usable(kernel):
        return True
    own = getattr(kernel._cache, "own", kernel._cache)
    try:
        return os.path.exists(own._cache_file._index_path)  # numba's FunctionCache
    except AttributeError:  # another numba's cache, or caching off: say compiled, and compile as usual
        return True


def python_callable(kernel):
    """A kernel that calls ``kernel`` with its arguments and returns its result: how a test
    reaches a private kernel from Python (compiled per use, not cached)."""
    def call(*args):
        return kernel(*args)

    return numba.njit(nogil=True, error_model="numpy")(call)


# Intrinsics kernels may use, re-exported here so that no other module imports numba.
try:  # llvm.cttz (one tzcnt instruction), inlined; numba-internal, so a portable fallback
    from numba.cpython.unsafe.numbers import trailing_zeros
except ImportError:  # pragma: no cover - numba versions without it
    _DEBRUIJN = np.uint64(0x03F79D71B4CB0A89)
    _DEBRUIJN_TABLE = np.array(
        [0, 1, 48, 2, 57, 49, 28, 3, 61, 58, 50, 42, 38, 29, 17, 4,
         62, 55, 59, 36, 53, 51, 43, 22, 45, 39, 33, 30, 24, 18, 12, 5,
         63, 47, 56, 27, 60, 41, 37, 16, 54, 35, 52, 21, 44, 32, 23, 11,
         46, 26, 40, 15, 34, 20, 31, 10, 25, 14, 19, 9, 13, 8, 7, 6],
        dtype=np.int64,
    )

    @jit
    def trailing_zeros(x):
        """Index of the lowest set bit of a non-zero uint64 (de Bruijn multiply)."""
        return _DEBRUIJN_TABLE[np.int64(((x & (np.uint64(0) - x)) * _DEBRUIJN) >> np.uint64(58))]
