"""The planned epochs end to end, as ``packlib.torch.balance_trainer`` hands them to a trainer
that counts every epoch as long as its first (no torch needed: the stream is plain Python)."""
from __future__ import annotations

import numpy as np
import pytest

import packlib
from packlib.balancing._epochs import EpochStream


def _sampler(rank=0):
    lengths = np.random.default_rng(4).integers(3, 60, 40)  # planned epochs of 7, 6 and 6 steps
    return packlib.BalancedBatchSampler(lengths, 64, rank=rank, world_size=2, micro_batches=2, window=2)


def _planned(sampler, epochs):
    out = []
    for epoch in epochs:
        sampler.set_epoch(epoch)
        out += list(sampler)
    return out


@pytest.mark.parametrize("rank", [0, 1])
def test_the_trainer_epochs_cut_the_planned_epochs_end_to_end(rank):
    s = _sampler(rank)
    steps = [s._steps_of(e) for e in range(3)]
    assert len(set(steps)) > 1                      # the planned epochs differ: the stream matters
    stream = EpochStream(s, epochs=3)
    assert stream.total_steps == sum(steps)
    drawn = []
    for epoch in range(-(-sum(steps) // steps[0])):  # the trainer's epochs, each of the first's length
        stream.set_epoch(epoch)
        assert len(stream) == steps[0] * 2
        drawn += list(stream)
    assert drawn == _planned(_sampler(rank), range(3))   # every planned micro-batch once, in order


def test_a_fraction_of_an_epoch_and_a_step_count():
    s = _sampler()
    half = EpochStream(s, epochs=1.5)
    assert half.total_steps == s._steps_of(0) + -(-s._steps_of(1) // 2)
    n = s._steps_of(0)
    stream = EpochStream(s, total_steps=n + 1)
    planned = _planned(_sampler(), [0, 1])
    assert list(stream) == planned[:2 * n]
    stream.set_epoch(1)
    assert list(stream) == planned[2 * n:2 * n + 2]  # one step of the next planned epoch, then the end
    stream.set_epoch(2)
    assert list(stream) == []
