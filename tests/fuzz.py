"""Shared fuzz harness for the robustness suites (issue 15).

Every public entry point must end in one of two outcomes on any input: a ``ValueError`` /
``TypeError`` with a non-empty message, or a result that passes the caller's consistency
check (e.g. every sample exactly once). Anything else -- another exception, an empty
message, a wrong result, a crash -- fails the test.

API (stable; the core suites reuse it):

- :data:`BAD_SCALARS`: ``(label, value)`` pairs of bad or extreme scalar inputs;
  :func:`bad_scalars` is a hypothesis strategy drawing the values.
- :data:`HUGE_INTS`: the huge integers (2**62, 2**63 - 1, 2**64, 2**70, and negatives).
- :func:`bad_int_arrays`: a strategy of bad or extreme "1-D int array" inputs (wrong types,
  bool, float, NaN/inf, negative, zero, huge, empty, 2-D, non-contiguous, big-endian,
  read-only, object arrays); :data:`BAD_INT_ARRAYS` is the same as a fixed list of
  ``(label, value)`` pairs (built fresh by :func:`bad_int_array_cases`).
- :func:`assert_clear_error_or(fn, check)`: run ``fn()``; return ``("error", exc)`` for a
  ``ValueError``/``TypeError`` with a message, or ``("ok", result)`` after ``check(result)``
  passes (``check`` may assert or return False to fail).
- :func:`run_isolated(code)`: run Python source in a fresh interpreter and fail (not crash
  the test run) on a signal such as SIGSEGV; returns the ``CompletedProcess``.
"""
from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap

import numpy as np

try:  # the harness itself works without hypothesis (lists only)
    from hypothesis import strategies as st
except ImportError:  # pragma: no cover
    st = None

__all__ = [
    "HUGE_INTS",
    "BAD_SCALARS",
    "bad_scalars",
    "bad_int_array_cases",
    "BAD_INT_ARRAYS",
    "bad_int_arrays",
    "assert_clear_error_or",
    "run_isolated",
]

HUGE_INTS = (2**62, 2**63 - 1, 2**63, 2**64, 2**70, -(2**62), -(2**63), -(2**64), -(2**70))


class _Weird:
    """An object that is neither a number nor a sequence."""

    def __repr__(self):
        return "<weird>"


BAD_SCALARS = [
    ("None", None),
    ("True", True),
    ("False", False),
    ("np.True_", np.True_),
    ("float 1.5", 1.5),
    ("float 2.0", 2.0),
    ("nan", math.nan),
    ("inf", math.inf),
    ("-inf", -math.inf),
    ("np.float64 3.0", np.float64(3.0)),
    ("zero", 0),
    ("minus one", -1),
    ("minus three", -3),
    ("str", "3"),
    ("bytes", b"3"),
    ("list", [3]),
    ("tuple", (3,)),
    ("dict", {"a": 3}),
    ("complex", 3 + 0j),
    ("array 0-d", np.array(3)),
    ("array 1-d", np.array([3])),
    ("object", _Weird()),
] + [(f"huge {v}", v) for v in HUGE_INTS] + [
    ("np.int64 max", np.int64(2**63 - 1)),
    ("np.uint64 max", np.uint64(2**64 - 1)),
]


def bad_scalars():
    """Hypothesis strategy: the values of :data:`BAD_SCALARS` plus random huge/negative ints."""
    if st is None:  # pragma: no cover
        raise ImportError("hypothesis is needed for bad_scalars()")
    return st.one_of(
        st.sampled_from([v for _, v in BAD_SCALARS]),
        st.integers(min_value=2**62 - 4, max_value=2**80),
        st.integers(max_value=0, min_value=-(2**80)),
        st.floats(allow_nan=True, allow_infinity=True),
    )


def _ro(a):
    a = np.array(a)
    a.flags.writeable = False
    return a


def bad_int_array_cases(good=(3, 1, 2)):
    """Fresh ``(label, value)`` pairs of bad or extreme 1-D int-array inputs.

    ``good`` is a small valid array for the entry point; the odd-layout cases (non-contiguous,
    big-endian, read-only, other int dtypes) are made from it and must be *accepted* with the
    same result as ``good`` -- callers can compare.
    """
    g = np.asarray(good, dtype=np.int64)
    doubled = np.repeat(g, 2)
    be = g.astype(">i8")
    return [
        ("None", None),
        ("str", "123"),
        ("bytes", b"\x01\x02"),
        ("dict", {0: 1}),
        ("set", {1, 2}),
        ("scalar", 3),
        ("bool list", [True, False, True]),
        ("bool array", np.array([True, False])),
        ("float whole", [3.0, 1.0]),
        ("float fraction", [1.5, 2.0]),
        ("nan", [1.0, math.nan]),
        ("inf", [math.inf, 1.0]),
        ("negative", [3, -1, 2]),
        ("zero", [0, 1]),
        ("all zero", [0, 0, 0]),
        ("huge 2**62", [2**62, 1]),
        ("huge 2**62 x4", [2**62] * 4),
        ("huge int64 max", [2**63 - 1, 1]),
        ("huge int64 max x2", [2**63 - 1, 2**63 - 1, 3]),
        ("huge 2**64", [2**64, 1]),
        ("huge 2**70", [2**70]),
        ("int64 min", [-(2**63), 1]),
        ("uint64 max", np.array([2**64 - 1, 1], dtype=np.uint64)),
        ("empty list", []),
        ("empty float", np.zeros(0)),
        ("2-D", np.ones((2, 2), dtype=np.int64)),
        ("ragged", [[1, 2], [3]]),
        ("strings", ["1", "2"]),
        ("objects", [_Weird(), 1]),
        ("complex", np.array([1 + 1j])),
        ("non-contiguous", doubled[::2]),
        ("big-endian", be),
        ("read-only", _ro(g)),
        ("int8", g.astype(np.int8)),
        ("uint32", g.astype(np.uint32)),
        ("float32 whole", g.astype(np.float32)),
    ]


BAD_INT_ARRAYS = bad_int_array_cases()


def bad_int_arrays(good=(3, 1, 2)):
    """Hypothesis strategy: :func:`bad_int_array_cases` values, plus random int lists that
    mix huge and non-positive values."""
    if st is None:  # pragma: no cover
        raise ImportError("hypothesis is needed for bad_int_arrays()")
    # no mid-size values (2**31 ... 2**40): a valid length of 2**31 asks for a 16 GB
    # per-token output, which overcommit grants and the OOM killer then ends
    extreme = st.sampled_from([0, -1, 1, 2, 2**62, 2**63 - 1, -(2**62), -(2**63)])
    return st.one_of(
        st.sampled_from([v for _, v in bad_int_array_cases(good)]),
        st.lists(st.one_of(extreme, st.integers(-5, 50)), min_size=0, max_size=12),
    )


def assert_clear_error_or(fn, check=None):
    """Run ``fn()``; accept a ``ValueError``/``TypeError`` with a non-empty message, or a
    result for which ``check(result)`` neither raises nor returns False.

    Returns ``("error", exc)`` or ``("ok", result)``. Any other exception propagates (with
    a note) so the test fails, as does an error with an empty message.
    """
    try:
        result = fn()
    except (ValueError, TypeError) as exc:
        msg = str(exc)
        assert msg.strip(), f"{type(exc).__name__} with an empty message"
        return "error", exc
    if check is not None:
        verdict = check(result)
        assert verdict is not False, f"result failed its consistency check: {result!r}"
    return "ok", result


def run_isolated(code: str, *, timeout: float = 300, expect_ok: bool = True, env: dict | None = None):
    """Run ``code`` in a fresh interpreter; fail on a crash (negative return code / signal)
    or, with ``expect_ok``, on any non-zero exit. Returns the ``CompletedProcess``."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True, text=True, timeout=timeout, env=full_env,
    )
    assert proc.returncode >= 0, (
        f"the interpreter crashed (signal {-proc.returncode});\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    )
    if expect_ok:
        assert proc.returncode == 0, f"exit {proc.returncode};\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc
