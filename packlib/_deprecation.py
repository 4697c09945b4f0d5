"""Deprecations, all through one helper (in the manner of scipy's
``_deprecate_positional_args``).

A deprecated spelling keeps working until the version :data:`REMOVED_IN` names, with a
``DeprecationWarning`` that says what is deprecated, that version, and what to write
instead. Signatures stay true: a decorated function shows its real parameters
(``inspect.signature`` follows ``functools.wraps``), keyword-only options are keyword-only
and required ones have no default; the old spelling is recognised before the call binds,
rewritten to the new one, and the function runs on that.

- :func:`deprecate_positional_args`: options now keyword-only, passed by position;
- :func:`deprecated_call`: any other old call form (arguments in another order, a renamed
  keyword), recognised and rewritten by a function of ``(args, kwargs)``;
- :func:`warn_deprecated`: the warning itself (a deprecated attribute calls it directly).
"""
from __future__ import annotations

import functools
import inspect
import warnings

__all__ = ["REMOVED_IN", "DEPRECATED_IN_0_2", "deprecate_positional_args", "deprecated_call", "warn_deprecated"]

# A spelling works for one release after the one that deprecates it (docs/design.md,
# "Deprecations"):
REMOVED_IN = "0.4.0"  # the spellings deprecated in 0.3 (the default)
DEPRECATED_IN_0_2 = "0.3.0"  # ... and those deprecated in 0.2


def warn_deprecated(old: str, instead: str, *, removed_in: str = REMOVED_IN, stacklevel: int = 2) -> None:
    """Warn that ``old`` is deprecated and stops working in ``removed_in``; ``instead``
    says what to write. ``stacklevel`` counts from the caller of this function (2: the
    line that called the function calling this one)."""
    warnings.warn(f"{old} is deprecated and stops working in packlib {removed_in}; {instead}",
                  DeprecationWarning, stacklevel=stacklevel + 1)


def deprecated_call(rewrite, *, removed_in: str = REMOVED_IN):
    """Decorator: calls in an old form still work, with a warning.

    ``rewrite(args, kwargs)`` returns ``None`` for a call in the current form, or
    ``(args, kwargs, old, instead)``: the call rewritten to the current form, what was
    deprecated and what to write instead (for :func:`warn_deprecated`). It may raise
    ``TypeError`` for a call that mixes the two forms."""

    def decorate(f):
        @functools.wraps(f)
        def wrapper(*args, **kwargs):
            old = rewrite(args, kwargs)
            if old is not None:
                args, kwargs, what, instead = old
                warn_deprecated(what, instead, removed_in=removed_in, stacklevel=2)
            return f(*args, **kwargs)

        return wrapper

    return decorate


def deprecate_positional_args(func=None, *, names: tuple | None = None, removed_in: str = REMOVED_IN):
    """Decorator: options that are keyword-only in ``func``'s signature may still be passed
    by position after its positional parameters, with a warning.

    ``names`` is the order the old signature took them in (default: the keyword-only
    parameters in their order). Too many positional arguments, or one also given by
    keyword, is a ``TypeError``, as Python would raise.

    Examples
    --------
    >>> import warnings
    >>> @deprecate_positional_args
    ... def f(data, *, seed=0):
    ...     return data, seed
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     f(1, 2)
    (1, 2)
    >>> print(caught[0].message)
    passing seed to f() by position is deprecated and stops working in packlib 0.4.0; pass seed=... by keyword
    """

    def decorate(f):
        params = list(inspect.signature(f).parameters.values())
        n_pos = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
        order = tuple(names) if names is not None else tuple(p.name for p in params if p.kind is p.KEYWORD_ONLY)

        def rewrite(args, kwargs):
            extra = args[n_pos:]
            if not extra:
                return None
            if len(extra) > len(order):
                raise TypeError(f"{f.__name__}() takes {n_pos} positional arguments and at most {len(order)} "
                                f"deprecated positional options after them, but {len(args)} were given")
            moved = order[:len(extra)]
            for name in moved:
                if name in kwargs:
                    raise TypeError(f"{f.__name__}() got multiple values for argument {name!r}")
            return (args[:n_pos], {**kwargs, **dict(zip(moved, extra))},
                    f"passing {', '.join(moved)} to {f.__name__}() by position",
                    f"pass {', '.join(f'{n}=...' for n in moved)} by keyword")

        return deprecated_call(rewrite, removed_in=removed_in)(f)

    return decorate if func is None else decorate(func)
