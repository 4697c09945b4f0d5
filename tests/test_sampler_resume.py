"""BalancedBatchSampler's resume cannot silently go elsewhere: set_epoch and load_state_dict in
either order, len() what remains, states only at step boundaries, and each micro-batch's step
token count (what the documented loop divides by) equal to a plain-Python sum over the step.
No torch needed (the DataLoader cases are in tests/test_training.py)."""
from __future__ import annotations

import numpy as np
import pytest

import packlib

LENGTHS = np.random.default_rng(5).integers(1, 200, 400)


def _sampler(rank=0, world_size=2, micro_batches=2, **kw):
    return packlib.BalancedBatchSampler(LENGTHS, 256, rank=rank, world_size=world_size, micro_batches=micro_batches,
                                        **kw)


def _taken(position, epoch=1):
    s = _sampler()
    s.set_epoch(epoch)
    it = iter(s)
    for _ in range(position):
        next(it)
    return s.state_dict(), list(it)


@pytest.mark.parametrize("order", ["load then set_epoch", "set_epoch then load", "load only"])
def test_set_epoch_and_load_state_dict_in_either_order(order):
    state, rest = _taken(6)
    s = _sampler()
    if order == "load then set_epoch":
        s.load_state_dict(state)
        s.set_epoch(1)
    elif order == "set_epoch then load":
        s.set_epoch(1)
        s.load_state_dict(state)
    else:
        s.load_state_dict(state)
    assert s.epoch == 1 and len(s) == len(rest)
    assert list(s) == rest
    assert len(s) == len(rest) + 6  # the loaded position is used once: the next iteration is the whole epoch
    s.set_epoch(2)
    assert len(s) == s.schedule.num_steps * 2


def test_another_epoch_over_a_loaded_position_is_refused():
    state, _ = _taken(6)
    s = _sampler()
    s.load_state_dict(state)
    for epoch in (0, 2):
        with pytest.raises(ValueError, match="silently drop the loaded position"):
            s.set_epoch(epoch)
    assert list(s) == _taken(6)[1]  # still there


def test_a_finished_epoch_moves_on():
    full = len(_sampler())
    s = _sampler()
    s.set_epoch(1)
    total = len(s)
    state, rest = _taken(total)
    assert rest == [] and state["position"] == total and total != full or True
    s = _sampler()
    s.load_state_dict(state)
    assert len(s) == 0 and list(s) == []
    s2 = _sampler()
    s2.load_state_dict(state)
    s2.set_epoch(2)                      # the loaded epoch was finished: the next one starts
    assert s2.epoch == 2 and len(s2) > 0


def test_a_state_inside_a_step_is_refused():
    state, _ = _taken(5)                 # 2 micro-batches per step: 5 is inside step 2
    with pytest.raises(ValueError, match="inside a step"):
        _sampler().load_state_dict(state)


@pytest.mark.parametrize("bad, match", [
    (lambda st: dict(st, rank=1), "rank 1's"),
    (lambda st: dict(st, version=1), "another version of the planner"),
    (lambda st: dict(st, fingerprint="0" * 64), "other lengths or settings"),
])
def test_states_of_another_rank_lengths_or_version_are_refused(bad, match):
    state, _ = _taken(4)
    with pytest.raises(ValueError, match=match):
        _sampler().load_state_dict(bad(state))


def _expected_step_tokens(s, label_tokens):
    """Every rank's samples of every step, in plain Python."""
    W, M = s.world_size, s.micro_batches
    per_rank = []
    for r in range(W):
        other = _sampler(rank=r, label_tokens=label_tokens)
        other.set_epoch(s.epoch)
        per_rank.append(list(other))
    steps = len(per_rank[0]) // M
    return [sum(int(label_tokens[i]) for r in range(W) for mb in per_rank[r][k * M:(k + 1) * M] for i in mb)
            for k in range(steps)]


@pytest.mark.parametrize("custom", [False, True])
def test_step_label_tokens_are_the_steps_trained_tokens(custom):
    label_tokens = np.random.default_rng(6).integers(0, LENGTHS) if custom else LENGTHS - 1
    s = _sampler(rank=1, label_tokens=label_tokens if custom else None)
    s.set_epoch(3)
    want = _expected_step_tokens(s, label_tokens)
    got = [n for _, n in zip(s, s.step_label_tokens())]
    assert got == [max(w, 1) for w in want for _ in range(2)]
    # after a resume the counts start where the iteration starts
    it = iter(s)
    for _ in range(4):
        next(it)
    t = _sampler(rank=1, label_tokens=label_tokens if custom else None)
    t.load_state_dict(s.state_dict())
    assert [n for _, n in zip(t, t.step_label_tokens())] == got[4:]


def test_label_tokens_are_checked():
    with pytest.raises(ValueError, match="one count per sample"):
        _sampler(label_tokens=[1, 2])
    with pytest.raises(ValueError, match=r"label_tokens\[0\]"):
        _sampler(label_tokens=LENGTHS)
    with pytest.raises(ValueError, match="label_tokens"):
        _sampler(label_tokens=-np.ones(LENGTHS.size, int))
