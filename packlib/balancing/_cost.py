"""The cost model of a packed row: a sequence of ``l`` tokens costs ``a * l + b * l**2``
(linear layers, then attention). :func:`transformer_cost` derives ``(a, b)`` from a dense
transformer's shape, :func:`fit_cost` fits it to measured times."""
from __future__ import annotations

import numpy as np

from .._validate import as_bool, as_float_array, as_lengths, as_positive_int


def transformer_cost(hidden_size: int, *, causal: bool = True, ffn_multiplier: float = 4.0) -> tuple[float, float]:
    """Cost coefficients ``(a, b)`` of a sequence of ``l`` tokens, ``a * l + b * l**2``, for
    a dense transformer of hidden size ``h`` (per layer, forward; backward scales both terms
    alike, so the ratio holds):

    - linear layers: QKV ``6·h²``, output projection ``2·h²``, MLP ``4·f·h²`` FLOPs per
      token (``f = ffn_multiplier``), i.e. ``(8 + 4·f)·h²·l``;
    - attention: scores and weighted sum ``4·h·l²`` FLOPs, half of it causal.

    Normalised to ``a = 1``: ``b = 4 / ((8 + 4·f)·h)``, halved when causal (``1 / (12·h)``
    for ``f = 4``). Fit ``a`` and ``b`` to measured kernel times when you have them.

    Parameters
    ----------
    hidden_size : int
        The model's hidden size ``h``.
    causal : bool, default True
        Causal attention (a decoder) computes half the scores.
    ffn_multiplier : float, default 4.0
        MLP width over ``h``.

    Returns
    -------
    tuple of float

    See Also
    --------
    fit_cost : the coefficients fitted to measured times instead.

    Examples
    --------
    >>> transformer_cost(4096)
    (1.0, 2.0345052083333332e-05)
    >>> transformer_cost(4096, causal=False)[1] == 1 / (6 * 4096)
    True
    """
    h = as_positive_int(hidden_size, "hidden_size")
    causal = as_bool(causal, "causal")
    f = float(as_float_array([ffn_multiplier], "ffn_multiplier")[0])
    if f < 0:
        raise ValueError(f"ffn_multiplier must be >= 0, got {f}")
    b = 4.0 / ((8.0 + 4.0 * f) * h)
    return 1.0, (b / 2.0 if causal else b)


def fit_cost(rows, seconds, *, constant: bool = False) -> tuple[float, ...]:
    """Cost coefficients ``(a, b)`` fitted to measured times of packed rows: a row holding
    sequences of lengths ``l_1 .. l_k`` takes ``a * sum(l) + b * sum(l**2)`` seconds, the
    model :func:`balance` and :class:`~packlib.BalancedBatchSampler` take. Non-negative
    least squares (``scipy.optimize.nnls``) over the rows; time rows of varied make-up
    (one long sequence, many short ones, mixtures) so that both terms show.
    :func:`packlib.torch.calibrate_cost` times the rows on your model and fits them here.

    Parameters
    ----------
    rows : sequence of array_like of int
        The timed rows: for each, the lengths of the sequences it holds.
    seconds : array_like of float
        The measured time of each row (one forward and backward, say), ``>= 0``.
    constant : bool, default False
        Also fit a fixed cost ``c`` per row (``a * sum(l) + b * sum(l**2) + c``): kernel
        launches and other work that does not grow with the row. It needs rows of different
        token counts (some well short of full). Plan with ``(a, b)``: when every rank runs
        the same number of rows, ``c`` adds the same to every rank.

    Returns
    -------
    tuple of float
        ``(a, b)``, seconds per token and per squared token, both ``>= 0``; ``(a, b, c)``
        with ``constant=True`` (``c`` in seconds per row, ``>= 0``).

    Raises
    ------
    ValueError
        An empty row, a negative or non-finite time (naming the row), counts that differ,
        rows that cannot tell the terms apart (every row's ``sum(l**2) / sum(l)`` the same,
        e.g. rows of single sequences of one length; with ``constant=True`` also every row
        of the same number of tokens), or times that grow with no term (``a = b = 0``).

    See Also
    --------
    transformer_cost : the coefficients from a model's shape, without timing.

    Examples
    --------
    >>> rows = [[4096], [1024] * 4, [256] * 16, [2048, 1024, 512, 512]]
    >>> seconds = [2e-6 * sum(r) + 1e-9 * sum(l * l for l in r) for r in rows]   # a = 2e-6, b = 1e-9
    >>> a, b = fit_cost(rows, seconds)
    >>> round(a / 1e-6, 6), round(b / 1e-9, 6)
    (2.0, 1.0)
    >>> rows += [[1024], [256] * 4]                                               # rows short of full
    >>> seconds = [2e-6 * sum(r) + 1e-9 * sum(l * l for l in r) + 5e-4 for r in rows]  # c = 5e-4
    >>> a, b, c = fit_cost(rows, seconds, constant=True)
    >>> round(a / 1e-6, 6), round(b / 1e-9, 6), round(c / 1e-4, 6)
    (2.0, 1.0, 5.0)
    """
    from scipy.optimize import nnls

    constant = as_bool(constant, "constant")
    if isinstance(rows, (str, bytes)) or not hasattr(rows, "__len__"):
        raise TypeError(f"rows must be a sequence of rows, each the lengths of its sequences; got {type(rows).__name__}")
    secs = as_float_array(seconds, "seconds", allow_empty=False)
    if len(rows) != secs.size:
        raise ValueError(f"{len(rows)} rows but {secs.size} times: give one time per row")
    if (secs < 0).any():
        i = int(np.flatnonzero(secs < 0)[0])
        raise ValueError(f"seconds[{i}] = {secs[i]} is negative: row {i}'s time must be >= 0")
    features = np.ones((secs.size, 3 if constant else 2), np.float64)
    for i, row in enumerate(rows):
        lens = as_lengths(row, None, f"rows[{i}]").astype(np.float64)
        if lens.size == 0:
            raise ValueError(f"rows[{i}] is empty: every timed row holds at least one sequence")
        features[i, :2] = lens.sum(), (lens * lens).sum()
    _check_separable(features)
    scale = features.max(axis=0)
    coef, _ = nnls(features / scale, secs)
    coef = tuple(float(x) for x in coef / scale)
    if coef[0] == 0 and coef[1] == 0:
        found = f" and a fixed c = {coef[2]:.3g} s per row" if constant and coef[2] > 0 else ""
        raise ValueError(f"the fit gives a = b = 0{found}: the times do not grow with the rows' tokens (are they all "
                         "zero, or all alike?); time the work itself (a forward and backward of each row), then fit again")
    return coef


def _check_separable(features: np.ndarray) -> None:
    """Refuse timed rows whose features (``sum(l)``, ``sum(l**2)``, and 1 when a per-row
    constant is fitted) cannot determine every coefficient."""
    n = features.shape[0]
    ratio = features[:, 1] / features[:, 0]  # the row's mean length, weighted by tokens
    if ratio.max() <= ratio.min() * (1 + 1e-9):
        raise ValueError(f"the {n} rows cannot determine both a and b: every row has the same "
                         f"sum(l**2) / sum(l) = {ratio[0]:g}, so their features are proportional; time rows of "
                         "different make-up (one long sequence, many short ones)")
    if features.shape[1] == 2:
        return
    tokens = features[:, 0]
    if tokens.max() <= tokens.min() * (1 + 1e-9):
        raise ValueError(f"the {n} rows cannot determine a fixed cost per row: every row holds {tokens[0]:g} tokens, so "
                         "c cannot be told from a * sum(l); time some rows well short of full too (or fit without "
                         "constant=True)")
    s = np.linalg.svd(features / features.max(axis=0), compute_uv=False)
    if n < 3 or s[-1] <= s[0] * 1e-9:
        raise ValueError(f"the {n} rows cannot determine a, b and a fixed cost per row: their (sum(l), sum(l**2), 1) "
                         "are linearly dependent; time more rows of varied make-up and fill (one long sequence, many "
                         "short ones, some rows well short of full)")


def vision_cost(image_patches, *, cost) -> np.ndarray:
    """Each sample's vision-encoder cost: an image of ``p`` patches costs ``c1 * p + c2 * p**2``
    (the tower's linear layers, then its attention over the image's own patches: every image
    is encoded apart), a sample the sum over its images. Pass it as ``extra_costs`` to
    :func:`balance`, beside the language model's ``cost``, in the same unit.

    Windowed attention blocks (Qwen2.5-VL's) cost about ``p * w`` for windows of ``w``
    patches, which is linear in ``p``: ``c1`` holds them, ``c2`` the full-attention blocks.
    :func:`packlib.torch.calibrate_vision_cost` measures ``(c1, c2)`` on your model's tower,
    in seconds, like :func:`packlib.torch.calibrate_cost` measures ``(a, b)``.

    Parameters
    ----------
    image_patches : sequence of sequences of int
        For each sample, its images' patch counts (``t * h * w`` of each row of its
        ``image_grid_thw``; an empty list for a text-only sample).
    cost : pair of float
        ``(c1, c2)``, each ``>= 0``.

    Returns
    -------
    numpy.ndarray
        float64, one cost per sample.

    Raises
    ------
    ValueError
        A negative coefficient or patch count (naming the sample).

    Examples
    --------
    >>> vision_cost([[1024, 256], [], [4096]], cost=(1.0, 1e-3))
    array([ 2394.112,     0.   , 20873.216])
    """
    if isinstance(cost, (str, bytes)) or not hasattr(cost, "__len__") or len(cost) != 2:
        raise TypeError(f"cost must be a pair (c1, c2): an image of p patches costs c1*p + c2*p**2; got {cost!r}")
    c1, c2 = (float(x) for x in as_float_array(list(cost), "cost"))
    if c1 < 0 or c2 < 0:
        raise ValueError(f"cost must be non-negative, got {(c1, c2)}")
    if isinstance(image_patches, (str, bytes)) or not hasattr(image_patches, "__len__"):
        raise TypeError("image_patches must be a sequence with, for each sample, its images' patch counts; got "
                        f"{type(image_patches).__name__}")
    out = np.zeros(len(image_patches), np.float64)
    for i, patches in enumerate(image_patches):
        p = as_float_array(patches, f"image_patches[{i}]")
        if (p < 0).any():
            raise ValueError(f"image_patches[{i}] holds a negative patch count ({p.min():g}): give t*h*w of each image")
        out[i] = c1 * p.sum() + c2 * (p * p).sum()
    return out

