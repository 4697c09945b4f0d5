"""Inputs shared by the benchmarks, so their figures are comparable."""
import numpy as np


def lognormal_lengths(n: int = 2_000_000, seed: int = 0, max_length: int = 512) -> np.ndarray:
    """``n`` lognormal sequence lengths (mu 4.71, sigma 0.8: mean ~147 tokens) clipped to
    ``[3, max_length]``; at n = 2 M their lower bound is 574,031 packs of 512, close to the
    574,815 of the reference measurements in shared/reference/packing.md."""
    x = np.random.default_rng(seed).lognormal(4.71, 0.8, n)
    return np.clip(np.rint(x), 3, max_length).astype(np.int64)
