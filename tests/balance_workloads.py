"""Workloads and order measures shared by tests/test_balancing.py and benchmarks/bench_balance.py."""
import numpy as np


def long_documents(n, seed=0):
    """A long-document epoch (issue 29's shape): 85 % lognormal around 2,500 tokens, 15 %
    uniform in 8k..60k, cut to L = 32k. Shared by the tests and benchmarks/bench_balance.py."""
    rng = np.random.default_rng(seed)
    docs = np.concatenate([rng.lognormal(np.log(2500), 1.1, int(n * 0.85)), rng.uniform(8000, 60000, n - int(n * 0.85))])
    rng.shuffle(docs)
    return np.clip(np.rint(docs), 16, 32768).astype(np.int64)


def long_documents_at(n, max_sequence_length, seed=2027):
    """:func:`long_documents` scaled to ``max_sequence_length`` (the same shape at any L):
    85 % lognormal around ``L / 13`` tokens, 15 % uniform in ``L / 4 .. 1.8 L``, cut to ``L``."""
    docs = long_documents(n, seed).astype(np.float64) * max_sequence_length / 32768
    return np.clip(np.rint(docs), 1, max_sequence_length).astype(np.int64)


def tenth_deviations(lengths, order):
    """Each tenth of ``order``'s mean sample length, relative to the whole's."""
    mean = lengths[order].mean()
    return np.array([lengths[t].mean() / mean - 1 for t in np.array_split(order, 10)])
