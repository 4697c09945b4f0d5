"""Input validation: the one place where packlib checks what users give it.

The rule (``docs/design.md``, "Validation"): every public entry point converts its inputs
here exactly once, before any kernel runs; kernels then trust their arguments.

- **Integers are exact.** ``bool`` is never a number; floats are accepted in arrays only
  when every value is a finite whole number (``3.0``), never rounded; scalars must be
  integers (``int``, numpy integers, anything with ``__index__``).
- **Within the range the kernels handle.** Every integer and array is checked against
  explicit limits (``MAX_INT``; totals against ``MAX_TOTAL``) so no overflow, wrap-around or
  numba typing error can happen inside a kernel. Totals are computed exactly.
- **Arrays of the right rank**, contiguous, native-endian int64 (or float64) after conversion.
- **Errors**: the wrong kind of object is a ``TypeError``; a bad value is a ``ValueError``.
  Both name the argument, show the value, and say what to do.
"""
from __future__ import annotations

import functools
import numbers
import operator

import numpy as np

_INT64_MAX = np.iinfo(np.int64).max
#: Largest scalar integer (a capacity, depth, batch size, count, ...) a kernel is given.
MAX_INT = 2**62
#: Largest total (tokens, sequences, samples) a kernel may accumulate in int64.
MAX_TOTAL = 2**62

__all__ = [
    "MAX_INT",
    "MAX_TOTAL",
    "as_int",
    "as_positive_int",
    "as_nonnegative_int",
    "as_optional_int",
    "as_bool",
    "as_choice",
    "as_int_array",
    "as_float_array",
    "as_weights",
    "as_histogram",
    "as_lengths",
    "check_lengths_positive",
    "as_depth",
    "as_capacity",
    "as_seed",
    "seed_to_int64",
    "exact_sum",
    "check_total",
    "readonly",
    "as_bytes",
    "as_matrix",
    "allocate",
    "memory_errors_as_value_errors",
]


def _first_bad(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# --------------------------------------------------------------------------- scalars


def as_int(value, name: str, *, minimum: int | None = None, maximum: int | None = MAX_INT, hint: str = "") -> int:
    """An exact integer in ``[minimum, maximum]`` (``bool`` and floats are refused).

    >>> as_int(3, "depth", minimum=1)
    3
    >>> as_int(2.0, "depth")
    Traceback (most recent call last):
    ...
    TypeError: depth must be a whole number (int), got float 2.0; pass int(value) if that is what you mean
    """
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a whole number (int), got bool {value!r}")
    if isinstance(value, numbers.Integral):
        value = int(value)
    else:
        try:
            value = operator.index(value)
        except TypeError:
            hint = "; pass int(value) if that is what you mean" if isinstance(value, (float, np.floating)) else ""
            raise TypeError(f"{name} must be a whole number (int), got {type(value).__name__} {_shown(value)}{hint}") from None
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        power = f" (2**{maximum.bit_length() - 1})" if maximum & (maximum - 1) == 0 else ""
        raise ValueError(f"{name} = {value} is too large: at most {maximum:,}{power} is supported" + (f"; {hint}" if hint else ""))
    return value


def as_positive_int(value, name: str, *, maximum: int | None = MAX_INT, hint: str = "") -> int:
    """A whole number ``>= 1``."""
    return as_int(value, name, minimum=1, maximum=maximum, hint=hint)


def as_nonnegative_int(value, name: str, *, maximum: int | None = MAX_INT) -> int:
    """A whole number ``>= 0``."""
    return as_int(value, name, minimum=0, maximum=maximum)


def as_optional_int(value, name: str, *, minimum: int | None = None, maximum: int | None = MAX_INT) -> int | None:
    """``None``, or an integer as :func:`as_int`."""
    return None if value is None else as_int(value, name, minimum=minimum, maximum=maximum)


def as_bool(value, name: str) -> bool:
    """``True`` or ``False`` (numpy booleans too); anything else is a ``TypeError``."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(f"{name} must be True or False, got {type(value).__name__} {_shown(value)}")


def as_time_limit(time_limit, name: str = "time_limit") -> float | None:
    """Seconds > 0 as a float, or ``None`` (no limit)."""
    if time_limit is None:
        return None
    if isinstance(time_limit, bool) or not isinstance(time_limit, numbers.Real):
        raise ValueError(f"{name} must be a number of seconds > 0 or None, got {time_limit!r}")
    t = float(time_limit)
    if not t > 0:  # also catches NaN
        raise ValueError(f"{name} must be > 0 seconds (or None for no limit), got {time_limit!r}")
    return t


def as_choice(value, name: str, choices) -> str:
    """One of the strings ``choices``."""
    choices = tuple(choices)
    if not isinstance(value, str):
        raise TypeError(f"{name} must be one of {', '.join(map(repr, choices))}, got {type(value).__name__} {_shown(value)}")
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value


def as_depth(max_sequences_per_pack, name: str = "max_sequences_per_pack") -> int | None:
    """A depth limit: a whole number ``>= 1``, or ``None`` for unlimited."""
    return as_optional_int(max_sequences_per_pack, name, minimum=1)


def as_capacity(max_sequence_length, seq_length=None) -> int:
    """The pack capacity, given as ``max_sequence_length`` (the house name) or as
    ``seq_length`` (TRL's name, accepted by the Arrow / datasets adapters and the pipeline)."""
    if seq_length is not None:
        if max_sequence_length is not None:
            raise TypeError("give the capacity once: max_sequence_length or seq_length (an alias), not both")
        return as_positive_int(seq_length, "seq_length")
    if max_sequence_length is None:
        raise TypeError("max_sequence_length (the pack capacity in tokens) is required")
    return as_positive_int(max_sequence_length, "max_sequence_length")


def as_seed(seed, name: str = "seed") -> int:
    """A seed: a whole number in ``[0, 2**64)``."""
    seed = as_int(seed, name, minimum=None, maximum=None)
    if not 0 <= seed < 2**64:
        raise ValueError(f"{name} must be in [0, 2**64), got {seed}; pick a non-negative seed")
    return seed


def seed_to_int64(seed: int) -> np.int64:
    """Map a validated seed to the int64 that kernels take (bit pattern preserved)."""
    return np.uint64(seed).view(np.int64) if seed >= 2**63 else np.int64(seed)


# --------------------------------------------------------------------------- arrays


def _as_1d(values, name: str) -> np.ndarray:
    if isinstance(values, (str, bytes, dict, set)) or values is None:
        raise TypeError(f"{name} must be a 1-D array of numbers, got {type(values).__name__} {_shown(values)}")
    try:
        arr = np.asarray(values)
    except (ValueError, TypeError) as exc:  # ragged nested lists and the like
        raise ValueError(f"{name} must be a 1-D array of numbers: {exc}") from None
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array, got shape {arr.shape}; flatten it or pass one row")
    return arr


def as_int_array(values, name: str, *, allow_empty: bool = True, minimum: int | None = None,
                 maximum: int | None = _INT64_MAX) -> np.ndarray:
    """Return ``values`` as a contiguous, native-endian, 1-D int64 array, or raise a clear error.

    Integer dtypes are taken as they are; float arrays only when every value is a finite
    whole number (``3.0``), never rounded; booleans, strings and objects that are not
    integers are a ``TypeError``. ``minimum``/``maximum`` bound every value.
    """
    arr = _as_1d(values, name)
    if arr.size == 0:
        if not allow_empty:
            raise ValueError(f"{name} is empty: give at least one value")
        if arr.dtype.kind not in "biufO" and arr.dtype != np.float64:
            raise TypeError(f"{name} must hold integers, got dtype {arr.dtype}")
        return np.zeros(0, dtype=np.int64)
    kind = arr.dtype.kind
    if kind == "b":
        raise TypeError(f"{name} must hold integers, got booleans; convert with .astype(int) if that is what you mean")
    if kind == "O":
        try:
            ints = [operator.index(v) for v in arr if not isinstance(v, (bool, np.bool_))]
        except TypeError:
            ints = None
        if ints is None or len(ints) != arr.size:
            bad = next(v for v in arr if isinstance(v, (bool, np.bool_)) or not hasattr(v, "__index__"))
            raise TypeError(f"{name} must hold integers, got {type(bad).__name__} {_shown(bad)}")
        lo, hi = min(ints), max(ints)
        if lo < -_INT64_MAX - 1 or hi > _INT64_MAX:
            i = next(k for k, v in enumerate(ints) if not -_INT64_MAX - 1 <= v <= _INT64_MAX)
            raise ValueError(f"{name}[{i}] = {ints[i]} does not fit in int64")
        out = np.array(ints, dtype=np.int64)
    elif kind in "iu":
        if kind == "u" and arr.dtype.itemsize == 8 and int(arr.max()) > _INT64_MAX:
            i = _first_bad(arr > _INT64_MAX)
            raise ValueError(f"{name}[{i}] = {arr[i]} does not fit in int64")
        out = np.ascontiguousarray(arr, dtype=np.int64)
    elif kind == "f":
        bad = ~np.isfinite(arr)
        if bad.any():
            i = _first_bad(bad)
            raise ValueError(f"{name} must hold whole numbers, got {arr[i]} at index {i}")
        bad = arr != np.floor(arr)
        if bad.any():
            i = _first_bad(bad)
            raise ValueError(
                f"{name} must hold whole numbers, got {arr[i]!r} at index {i}; "
                "round or cast the values yourself if that is what you mean"
            )
        if np.abs(arr).max() > 2.0**62:
            i = _first_bad(np.abs(arr) > 2.0**62)
            raise ValueError(f"{name}[{i}] = {arr[i]!r} is too large to be an exact integer")
        out = arr.astype(np.int64)
    else:
        raise TypeError(f"{name} must hold integers, got dtype {arr.dtype}")
    if minimum is not None and out.min() < minimum:
        i = _first_bad(out < minimum)
        raise ValueError(f"{name} must be >= {minimum}, got {out[i]} at index {i}")
    if maximum is not None and maximum < _INT64_MAX and out.max() > maximum:
        i = _first_bad(out > maximum)
        raise ValueError(f"{name}[{i}] = {out[i]} is too large: at most {maximum:,} is supported")
    return out


def as_float_array(values, name: str, *, allow_empty: bool = True) -> np.ndarray:
    """A contiguous 1-D float64 array of finite real numbers (booleans and strings refused)."""
    arr = _as_1d(values, name)
    if arr.size == 0 and not allow_empty:
        raise ValueError(f"{name} is empty: give at least one value")
    if arr.dtype.kind == "b" or (arr.size and arr.dtype.kind not in "iuf"):
        raise TypeError(f"{name} must hold real numbers, got dtype {arr.dtype}")
    out = np.ascontiguousarray(arr, dtype=np.float64)
    bad = ~np.isfinite(out)
    if bad.any():
        i = _first_bad(bad)
        raise ValueError(f"{name} must be finite, got {out[i]} at index {i}")
    return out


def as_weights(weights, name: str = "weights", *, allow_zero: bool = True) -> np.ndarray:
    """Mixture weights: finite, non-negative, at least one positive (float64)."""
    w = as_float_array(weights, name, allow_empty=False)
    if (w < 0).any():
        i = _first_bad(w < 0)
        raise ValueError(f"{name} must be >= 0, got {w[i]} at index {i}")
    if not (w > 0).any():
        raise ValueError(f"{name} are all zero: give at least one positive weight")
    if not allow_zero and (w == 0).any():
        i = _first_bad(w == 0)
        raise ValueError(f"{name}[{i}] is 0, which this method does not allow; drop that entry")
    return w


def exact_sum(arr: np.ndarray, weights: np.ndarray | None = None) -> int:
    """``sum(arr)`` (or ``sum(arr * weights)``) of int64 arrays as an exact Python int."""
    if weights is None:
        if arr.size == 0:
            return 0
        if int(np.abs(arr).max()) * arr.size < _INT64_MAX:
            return int(arr.sum())
        return sum(int(x) for x in arr.tolist())
    if arr.size == 0:
        return 0
    a_max, w_max = int(np.abs(arr).max()), int(np.abs(weights).max())
    if a_max * w_max * arr.size < _INT64_MAX:
        return int((arr * weights).sum())
    return sum(int(x) * int(y) for x, y in zip(arr.tolist(), weights.tolist()))


def check_total(total: int, name: str, what: str = "total") -> int:
    """Refuse a total the kernels could not hold in int64 (``> MAX_TOTAL``)."""
    if total > MAX_TOTAL:
        raise ValueError(f"{name}: the {what} is {total:,}, above the supported {MAX_TOTAL:,} (2**62); split the input")
    return total


def as_histogram(histogram, name: str = "histogram") -> np.ndarray:
    """A length histogram: 1-D, non-empty, whole, non-negative counts (``h[i]`` = count of
    length ``i+1``), whose sequence and token totals fit the kernels (at most ``2**62``)."""
    h = as_int_array(histogram, name, allow_empty=False)
    if (h < 0).any():
        i = _first_bad(h < 0)
        raise ValueError(f"{name} must be non-negative, got {h[i]} at index {i} (length {i + 1})")
    check_total(exact_sum(h), name, "number of sequences")
    check_total(exact_sum(h, np.arange(1, h.size + 1, dtype=np.int64)), name, "number of tokens")
    return h


def check_lengths_positive(arr: np.ndarray, name: str = "lengths") -> np.ndarray:
    """Refuse lengths below 1 (empty sequences) in an int64 array."""
    if arr.size and arr.min() < 1:
        i = _first_bad(arr < 1)
        raise ValueError(f"{name} must be >= 1, got {arr[i]} at index {i}; drop empty sequences first")
    return arr


def as_lengths(lengths, max_sequence_length: int | None, name: str = "lengths") -> np.ndarray:
    """Sequence lengths: 1-D whole numbers in ``[1, max_sequence_length]`` (no upper bound
    when ``max_sequence_length`` is ``None``; totals always within ``MAX_TOTAL``)."""
    arr = check_lengths_positive(as_int_array(lengths, name), name)
    if arr.size and max_sequence_length is not None and arr.max() > max_sequence_length:
        i = _first_bad(arr > max_sequence_length)
        raise ValueError(
            f"{name}[{i}] = {arr[i]} exceeds max_sequence_length = {max_sequence_length}; "
            "truncate or split long sequences first, or raise max_sequence_length"
        )
    check_total(exact_sum(arr), name, "number of tokens")
    return arr


def readonly(a: np.ndarray) -> np.ndarray:
    """Mark ``a`` read-only (result arrays are frozen like their dataclasses) and return it."""
    if a is not None and a.flags.writeable:
        a.flags.writeable = False
    return a


def readonly_view(a: np.ndarray) -> np.ndarray:
    """A read-only view of ``a`` (``a`` keeps its flags; no copy). Kernels that only read
    an input get it this way from every caller, so numba compiles them once, not once for
    writable and once for read-only (frozen result) arrays."""
    view = a.view()
    view.flags.writeable = False
    return view


# --------------------------------------------------------------------------- other shapes


def as_bytes(record, name: str) -> np.ndarray:
    """A bytes-like record as a uint8 array (no copy); anything that is not raw bytes
    (ints, str, float or other non-byte arrays) is a ``TypeError``: ``bytes(3)`` would be
    three zero bytes and ``bytes(float_array)`` its memory, both silently wrong."""
    if isinstance(record, (bytes, bytearray)):
        return np.frombuffer(record, dtype=np.uint8)
    if isinstance(record, np.ndarray):
        if record.dtype not in (np.uint8, np.int8) or record.ndim != 1:
            raise TypeError(
                f"{name} must be bytes or a 1-D uint8 array, got an array of dtype {record.dtype} and shape "
                f"{record.shape}; serialise it first (e.g. encode_example, or .astype(np.uint8) if it holds bytes)"
            )
        return np.ascontiguousarray(record).view(np.uint8)
    if isinstance(record, str):
        raise TypeError(f"{name} must be bytes, got str {record[:40]!r}; encode it first (e.g. s.encode())")
    try:
        mv = memoryview(record)  # any other buffer (mmap, memoryview, array.array('B'), ...)
    except TypeError:
        raise TypeError(
            f"{name} must be bytes-like (bytes, bytearray, memoryview or a uint8 array), got "
            f"{type(record).__name__} {record!r:.60}"
        ) from None
    if mv.itemsize != 1 or mv.ndim > 1:
        raise TypeError(f"{name} must be raw bytes, got a buffer of format {mv.format!r} and shape {mv.shape}; serialise it first")
    return np.frombuffer(mv if mv.contiguous else mv.tobytes(), dtype=np.uint8)


def as_matrix(values, name: str, dtype) -> np.ndarray:
    """A 2-D C-contiguous matrix of ``dtype`` (int64: integers, or whole floats, never
    rounded; float32: real numbers). Booleans and non-numbers are a ``TypeError``."""
    try:
        arr = np.asarray(values)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{name} must be a 2-D array of numbers: {exc}") from None
    if arr.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array (rows x columns), got shape {arr.shape}")
    if arr.dtype.kind == "b" or arr.dtype.kind not in "iuf":
        raise TypeError(f"{name} must hold numbers, got dtype {arr.dtype}")
    if dtype == np.int64:
        flat = as_int_array(arr.reshape(-1), name)  # exact: no rounding, no wrap-around
        return flat.reshape(arr.shape)
    return np.ascontiguousarray(arr, dtype=dtype)


# --------------------------------------------------------------------------- memory


def allocate(n: int, dtype, what: str, hint: str) -> np.ndarray:
    """``np.empty(n, dtype)``, with a ``ValueError`` saying what did not fit (and ``hint``:
    what to do) instead of numpy's ``MemoryError``."""
    try:
        return np.empty(n, dtype=dtype)
    except (MemoryError, ValueError):
        gib = n * np.dtype(dtype).itemsize / 2**30
        raise ValueError(f"{what}: {n:,} items need {gib:,.1f} GiB for one array and do not fit in memory; {hint}") from None


def memory_errors_as_value_errors(fn):
    """Decorator: numpy's ``MemoryError`` (an output too large to allocate, e.g.
    ``max_sequence_length=2**40``) becomes a ``ValueError`` naming the function."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except MemoryError:
            raise ValueError(
                f"{fn.__name__}: the output does not fit in memory; check the lengths / max_sequence_length "
                "(a row or batch this large is not what these fields are for)"
            ) from None

    return wrapper
