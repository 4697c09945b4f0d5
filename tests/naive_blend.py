"""Plain-Python references for packlib.blending (slow; small inputs only)."""
from __future__ import annotations

import glob
import importlib.util
import math
import os
from fractions import Fraction

import numpy as np


def megatron_normalise(weights):
    """Megatron's Python: ``w / w.sum()`` in the builder, again in BlendedDataset."""
    w = np.asarray(weights, dtype=np.float64)
    w = w / w.sum()
    return w / w.sum()


def megatron_loop(w, size):
    """Line-by-line transcription of helpers.cpp ``build_blending_indices``."""
    k = len(w)
    counts = [0] * k
    di, si = [], []
    for s in range(size):
        t = max(float(s), 1.0)
        best = 0
        best_err = float(w[0]) * t - float(counts[0])
        for i in range(1, k):
            err = float(w[i]) * t - float(counts[i])
            if err > best_err:
                best_err = err
                best = i
        di.append(best)
        si.append(counts[best])
        counts[best] += 1
    return np.array(di, np.int64), np.array(si, np.int64)


def exhaustive_loop(sizes):
    """helpers.cpp ``build_exhaustive_blending_indices`` (exhausted datasets skipped)."""
    sizes = [int(x) for x in sizes]
    total = sum(sizes)
    w = [x / total for x in sizes]
    counts = [0] * len(sizes)
    di, si = [], []
    for s in range(total):
        t = max(float(s), 1.0)
        best, best_err = -1, 0.0
        for i in range(len(sizes)):
            if counts[i] >= sizes[i]:
                continue
            err = w[i] * t - counts[i]
            if best < 0 or err > best_err:
                best, best_err = i, err
        di.append(best)
        si.append(counts[best])
        counts[best] += 1
    return np.array(di, np.int64), np.array(si, np.int64)


def largest_remainder(weights, size):
    """Hamilton apportionment with exact rationals: floor of each quota
    ``size * w_i / sum(w)``, then one more to the largest remainders, lowest index first
    among equal remainders."""
    fr = [Fraction(float(x)) for x in weights]
    total = sum(fr)
    quotas = [q * size / total for q in fr]
    seats = [math.floor(q) for q in quotas]
    left = size - sum(seats)
    order = sorted(range(len(fr)), key=lambda i: (-(quotas[i] - seats[i]), i))
    for i in order[:left]:
        seats[i] += 1
    return np.array(seats, np.int64)


def is_quota_apportionment(weights, size, counts):
    """``counts`` sum to ``size`` and each is floor or ceil of ``size * w_i`` (exact
    rationals of the float weights, as the smooth prefix property uses them)."""
    if int(np.sum(counts)) != size:
        return False
    for x, c in zip(weights, counts):
        q = Fraction(float(x)) * size
        if not math.floor(q) <= int(c) <= math.ceil(q):
            return False
    return True


def quota_violations(weights, dataset_index):
    """Prefixes where some dataset's count is not floor or ceil of ``s*w_i`` (exact
    rationals of the float weights); returns a list of ``(s, i, count)``."""
    fr = [Fraction(float(x)) for x in weights]
    counts = [0] * len(fr)
    bad = []
    for s, d in enumerate(dataset_index, start=1):
        counts[int(d)] += 1
        for i, q in enumerate(fr):
            x = q * s
            if not (math.floor(x) <= counts[i] <= math.ceil(x)):
                bad.append((s, i, counts[i]))
    return bad


def sample_numbering_ok(dataset_index, dataset_sample_index, counts):
    """Every dataset ``i`` uses each of ``0..counts[i]-1`` exactly once."""
    di = np.asarray(dataset_index, np.int64)
    si = np.asarray(dataset_sample_index, np.int64)
    for i, c in enumerate(counts):
        got = np.sort(si[di == i])
        if not np.array_equal(got, np.arange(c)):
            return False
    return True


def megatron_helpers():
    """Megatron-Core's compiled helper: the file named by $MEGATRON_HELPERS_SO, or one
    extracted from the megatron-core wheel under /tmp/mcore (see docs/blending.md)."""
    env = os.environ.get("MEGATRON_HELPERS_SO")
    so = [env] if env else sorted(glob.glob("/tmp/mcore/**/helpers_cpp*.so", recursive=True))
    if not so:
        return None
    spec = importlib.util.spec_from_file_location("helpers_cpp", so[0])
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    except ImportError:
        return None
    return mod
