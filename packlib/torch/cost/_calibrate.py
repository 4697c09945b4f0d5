"""Cost coefficients measured on your model: :func:`calibrate_cost` times packed rows of
varied make-up and fits ``a * sum(l) + b * sum(l**2) + c`` to them (:func:`packlib.fit_cost`)."""
from __future__ import annotations

import inspect
import sys
import time

import numpy as np

from ..._validate import as_bool, as_int, as_lengths, as_positive_int
from ...balancing import fit_cost

__all__ = ["CostFit", "calibrate_cost", "calibration_rows"]


class CostFit(tuple):
    """The cost :func:`calibrate_cost` measured: the tuple ``(a, b)`` (pass it as ``cost`` to
    :func:`packlib.balance` or :class:`packlib.BalancedBatchSampler`), with, as attributes,
    the fixed cost per row and the timings it comes from (as ``os.stat_result`` carries
    more than its tuple).

    Attributes
    ----------
    a, b : float
        Seconds per token and per squared token: a row holding sequences of lengths
        ``l_1 .. l_k`` takes ``a * sum(l) + b * sum(l**2) + c`` seconds.
    c : float
        Seconds per row whatever it holds (0.0 when not fitted); it adds the same to every
        rank when every rank runs the same number of rows, so planning leaves it out.
    rows : list of int64 arrays
        The timed rows' sequence lengths.
    seconds : float64 array
        Each row's time, the best of the repeats.
    predicted : float64 array
        Each row's time as the fit predicts it.
    """

    def __new__(cls, coefficients, rows, seconds):
        a, b = coefficients[0], coefficients[1]
        self = super().__new__(cls, (a, b))
        self.a, self.b = a, b
        self.c = coefficients[2] if len(coefficients) > 2 else 0.0
        self.rows = rows
        self.seconds = np.asarray(seconds, dtype=np.float64)
        tokens = np.array([r.sum() for r in rows], dtype=np.float64)
        squares = np.array([(r.astype(np.float64) ** 2).sum() for r in rows])
        self.predicted = a * tokens + b * squares + self.c
        return self

    def __getnewargs__(self):  # pickling and copying rebuild the attributes
        return ((self.a, self.b, self.c), self.rows, self.seconds)

    @property
    def errors(self) -> np.ndarray:
        """Each row's relative error, ``predicted / seconds - 1``."""
        return self.predicted / self.seconds - 1

    @property
    def mean_error(self) -> float:
        """The mean of the rows' absolute relative errors."""
        return float(np.abs(self.errors).mean())

    @property
    def max_error(self) -> float:
        """The largest of the rows' absolute relative errors."""
        return float(np.abs(self.errors).max())

    def __repr__(self) -> str:
        return (f"CostFit(a={self.a:.4g}, b={self.b:.4g}, c={self.c:.4g}, b/a={self.b / self.a if self.a else float('inf'):.4g}, "
                f"{len(self.rows)} rows, error {100 * self.mean_error:.1f} % mean, {100 * self.max_error:.1f} % largest)")



CostFit.__module__ = "packlib.torch"  # pickles and reprs name the public path, which never moves

def calibration_rows(max_sequence_length) -> list[np.ndarray]:
    """Rows of varied make-up for timing a model at capacity ``L``: full rows of one
    sequence, of 2, 4, ... 64 equal ones, mixtures of long and short sequences, and rows
    filled to a half, a quarter and an eighth (which tell a fixed cost per row apart).

    Parameters
    ----------
    max_sequence_length : int
        The row capacity ``L`` (at least 8).

    Returns
    -------
    list of int64 arrays
        Each row's sequence lengths, at most ``L`` tokens in all.

    Examples
    --------
    >>> [r.tolist() for r in calibration_rows(8)][:4]
    [[8], [4, 4], [2, 2, 2, 2], [1, 1, 1, 1, 1, 1, 1, 1]]
    """
    L = as_positive_int(max_sequence_length, "max_sequence_length")
    if L < 8:
        raise ValueError(f"max_sequence_length = {L} is too short to time rows of varied make-up: give at least 8")
    rows = [[L // k] * k for k in (1, 2, 4, 8, 16, 32, 64) if L // k >= 1]
    rows += [[L // 2, L // 4, L // 8, L // 8], [L // 2] + [L // 32] * 16, [3 * L // 4] + [L // 64] * 16,
             [L // 4] * 2 + [L // 16] * 8]
    rows += [[L // 2], [L // 8] * 4, [L // 4], [L // 32] * 8, [L // 8], [L // 4, L // 16, L // 16]]
    out, seen = [], set()
    for r in rows:
        r = tuple(x for x in r if x > 0)
        if r and r not in seen:
            seen.add(r)
            out.append(np.array(r, dtype=np.int64))
    return out


def _synchronizer(synchronize):
    """The device barrier before and after each timing: ``synchronize`` if given, else
    CUDA's while CUDA is in use (decided at each call, so a first step may bring it up)."""
    if synchronize is not None:
        if not callable(synchronize):
            raise TypeError(f"synchronize must be a callable (e.g. torch.cuda.synchronize) or None, got {synchronize!r}")
        return synchronize

    def auto():
        torch = sys.modules.get("torch")  # a step that never imported torch has no device to wait for
        if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()

    return auto


def _model_step(model, collator, seed):
    """``step(lengths)`` for a torch model: random tokens in one packed row from ``collator``
    (:class:`packlib.torch.PackedCollator` by default), ``model(**batch).loss.backward()``."""
    from ..collate._collator import PackedCollator

    collator = PackedCollator() if collator is None else collator
    config = getattr(model, "config", None)
    vocab = getattr(config, "vocab_size", None) or model.get_input_embeddings().num_embeddings
    device = next(model.parameters()).device
    rng = np.random.default_rng(seed)

    def step(lengths):
        batch = collator([{"input_ids": rng.integers(1, vocab, n)} for n in lengths])
        batch = {k: v.to(device) if hasattr(v, "to") else v for k, v in batch.items()}
        out = model(**batch)
        loss = out.loss if hasattr(out, "loss") else out[0]
        loss.backward()
        model.zero_grad(set_to_none=True)

    return step


def _run(step, row, i):
    """One call of ``step`` on row ``i``; what it raises, or returns undone, named."""
    try:
        out = step(row.tolist())
    except Exception as exc:  # noqa: BLE001 - re-raised with the row and what to change
        raise ValueError(f"step raised {type(exc).__name__} on calibration row {i} ({row.size} sequences, "
                         f"{int(row.sum())} tokens): {exc}. step(lengths) must run one forward and backward of a "
                         "packed row holding sequences of these lengths (lower max_sequence_length if the row does "
                         "not fit the device)") from exc
    if inspect.isawaitable(out) or inspect.isgenerator(out) or (hasattr(out, "done") and hasattr(out, "result")):
        if inspect.iscoroutine(out):
            out.close()
        raise TypeError(f"step returned {type(out).__name__}, work not yet done: step(lengths) must run the forward "
                        "and backward before it returns (a plain function, not async, a generator or a future), "
                        "so that the clock measures the work")


def calibrate_cost(step, max_sequence_length, *, rows=None, constant: bool = True, repeats: int = 3,
                   warmup: int = 1, synchronize=None, collator=None, clock=None) -> CostFit:
    """Measure a row's cost on your model in one call: time packed rows of varied make-up
    (:func:`calibration_rows`) and fit ``a * sum(l) + b * sum(l**2) + c`` to them
    (:func:`packlib.fit_cost`). The result is the pair ``(a, b)`` to plan with, carrying the
    fixed cost per row ``c`` and the timings.

    Every row runs ``warmup`` times untimed, then ``repeats`` times timed, the rows taking
    turns (so a drift of the clock speed touches them alike); a row's time is its best.
    The device is synchronised before the clock is read, both before and after each run.

    Parameters
    ----------
    step : callable or torch.nn.Module
        ``step(lengths)`` runs one forward and backward of one packed row holding sequences
        of these lengths (a list of int) and returns once the work is done (or queued on
        CUDA: the device is synchronised). A torch model instead: each row is random tokens
        collated by ``collator`` and ``model(**batch).loss.backward()`` runs.
    max_sequence_length : int
        The row capacity ``L`` the model trains at.
    rows : sequence of array_like of int, optional
        The rows to time, each at most ``L`` tokens (default :func:`calibration_rows`).
    constant : bool, default True
        Fit a fixed cost per row ``c`` too (the default rows include rows short of full,
        which tell it apart); else ``c = 0`` and ``(a, b)`` take what it would explain.
    repeats : int, default 3
        Timed runs per row; the best counts.
    warmup : int, default 1
        Untimed runs per row first (compilation, allocator, autotuning).
    synchronize : callable, optional
        Called before each clock reading; default ``torch.cuda.synchronize`` while CUDA is
        in use, else nothing.
    collator : callable, optional
        With a model as ``step``: examples -> batch (default :class:`PackedCollator`).
    clock : callable, optional
        Seconds, as ``time.perf_counter`` (the default) gives them.

    Returns
    -------
    CostFit
        ``(a, b)``, with ``c``, ``rows``, ``seconds``, ``predicted`` and the errors.

    Raises
    ------
    TypeError
        ``step`` not callable, or returning work not yet done (a coroutine, a generator, a
        future).
    ValueError
        ``step`` raising (named with the row), rows over ``L`` or unable to tell the terms
        apart, a row taking no measurable time, or times that do not grow with the rows'
        tokens.

    Examples
    --------
    >>> def step(lengths):                   # yours: one forward and backward of this row
    ...     clock.now += 2e-6 * sum(lengths) + 1e-9 * sum(l * l for l in lengths) + 1e-3
    >>> clock = lambda: clock.now
    >>> clock.now = 0.0
    >>> fit = calibrate_cost(step, 8192, clock=clock)
    >>> [round(x, 6) for x in (fit.a / 1e-6, fit.b / 1e-9, fit.c / 1e-3)]
    [2.0, 1.0, 1.0]
    >>> tuple(round(x / 1e-9, 3) for x in fit)   # the pair to plan with, in ns per token and per token²
    (2000.0, 1.0)
    """
    if "torch" in sys.modules and isinstance(step, sys.modules["torch"].nn.Module):
        step = _model_step(step, collator, 0)
    elif not callable(step):
        raise TypeError(f"step must be a callable step(lengths) running one forward and backward of a packed row, "
                        f"or a torch model; got {type(step).__name__}")
    L = as_positive_int(max_sequence_length, "max_sequence_length")
    constant = as_bool(constant, "constant")
    repeats = as_int(repeats, "repeats", minimum=1)
    warmup = as_int(warmup, "warmup", minimum=0)
    clock = time.perf_counter if clock is None else clock
    if not callable(clock):
        raise TypeError(f"clock must be a callable returning seconds (e.g. time.perf_counter), got {clock!r}")
    sync = _synchronizer(synchronize)
    if rows is None:
        rows = calibration_rows(L)
    else:
        if isinstance(rows, (str, bytes)) or not hasattr(rows, "__len__"):
            raise TypeError(f"rows must be a sequence of rows, each the lengths of its sequences; got {type(rows).__name__}")
        rows = [as_lengths(r, L, f"rows[{i}]") for i, r in enumerate(rows)]
        for i, r in enumerate(rows):
            if r.size == 0 or int(r.sum()) > L:
                raise ValueError(f"rows[{i}] holds {int(r.sum())} tokens: every row holds 1 to max_sequence_length = {L}")
    # can the rows tell the terms apart? asked of times that hold every term, before any run
    fit_cost(rows, [r.sum() + (r.astype(np.float64) ** 2).sum() / L + 1.0 for r in rows], constant=constant)
    for _ in range(warmup):
        for i, r in enumerate(rows):
            _run(step, r, i)
    times = np.full((repeats, len(rows)), np.inf)
    for k in range(repeats):
        for i, r in enumerate(rows):
            sync()
            t0 = clock()
            _run(step, r, i)
            sync()
            times[k, i] = clock() - t0
    best = times.min(axis=0)
    if not (np.isfinite(best) & (best > 0)).all():
        i = int(np.flatnonzero(~(np.isfinite(best) & (best > 0)))[0])
        raise ValueError(f"calibration row {i} ({int(rows[i].sum())} tokens) took {best[i]} s: no measurable time. "
                         "step(lengths) must do the row's forward and backward before it returns (on a device "
                         "other than CUDA, pass synchronize=...); a clock must return seconds that grow")
    coef = fit_cost(rows, best, constant=constant)
    fit = CostFit(coef, rows, best)
    full = max(range(len(rows)), key=lambda i: rows[i].sum())
    if fit.c > 0 and fit.predicted[full] - fit.c < 0.01 * fit.predicted[full]:
        raise ValueError(f"the rows' times hardly grow with their tokens: the fit puts {fit.c:.3g} s of a full row's "
                         f"{fit.predicted[full]:.3g} s in a fixed cost per row, so a and b are noise. Does step run "
                         "the model on the row it is given? If a fixed overhead hides the model's work, time a "
                         "larger max_sequence_length")
    return fit
