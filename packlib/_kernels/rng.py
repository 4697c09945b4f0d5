"""A small, explicit random generator for kernels: SplitMix64 with unbiased bounded draws.

packlib owns its randomness instead of relying on numpy's or numba's global generators, so
results depend only on the seed: the same on every run, machine and numba version.
"""
import numpy as np

from .._jit import jit
from .splitmix import GAMMA, MIX1, MIX2

_GAMMA = np.uint64(GAMMA)
_M1 = np.uint64(MIX1)
_M2 = np.uint64(MIX2)
_LOW32 = np.uint64(0xFFFFFFFF)


@jit
def mix64(z):
    """SplitMix64's finaliser: a bijective scramble of a uint64."""
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


@jit
def stream_seed(seed, stream):
    """An independent generator state for sub-stream ``stream`` of ``seed``."""
    return mix64(np.uint64(seed) ^ mix64(np.uint64(stream) + _GAMMA))


@jit
def next_below(state, bound):
    """Advance ``state`` (a 1-element uint64 array) and draw uniformly from ``[0, bound)``.

    Lemire's multiply-shift with rejection for bounds below 2**32, modulo with rejection
    above: exactly uniform either way.
    """
    b = np.uint64(bound)
    if b <= _LOW32:
        threshold = (np.uint64(0x100000000) - b) % b
        while True:
            state[0] += _GAMMA
            m = (mix64(state[0]) >> np.uint64(32)) * b
            if (m & _LOW32) >= threshold:
                return np.int64(m >> np.uint64(32))
    threshold = (np.uint64(0) - b) % b
    while True:
        state[0] += _GAMMA
        x = mix64(state[0])
        if x >= threshold:
            return np.int64(x % b)


@jit
def shuffle_range(a, start, stop, state):
    """Fisher-Yates shuffle of ``a[start:stop]`` in place."""
    for i in range(stop - start - 1, 0, -1):
        j = next_below(state, i + 1)
        t = a[start + i]
        a[start + i] = a[start + j]
        a[start + j] = t


@jit
def permutation(n, seed):
    """A uniformly random permutation of ``0 .. n-1`` drawn from ``seed``."""
    out = np.arange(n)
    state = np.empty(1, np.uint64)
    zero = np.int64(0)  # not a literal: the callees' compilations for int64 serve here too
    state[0] = stream_seed(seed, zero)
    shuffle_range(out, zero, n, state)
    return out
