"""packlib.torch.calibrate_cost: rows of varied make-up timed on a step, fitted by fit_cost.

Most tests drive it with a fake clock that a synthetic step advances by a known
``a * sum(l) + b * sum(l**2) + c`` (exact, fast, no noise from the machine) and need no
torch; the last ones time a tiny torch model (skipped without torch / transformers).
"""
from __future__ import annotations

import pickle

import numpy as np
import pytest

import packlib
from packlib.torch import CostFit, calibrate_cost, calibration_rows

A, B, C = 2e-6, 1e-9, 1e-3


class FakeClock:
    """A clock a synthetic step advances by the row's known cost (plus, on some calls, a
    positive delay: interference, which the best of the repeats must see through)."""

    def __init__(self, a=A, b=B, c=C, *, delays=None, seed=0):
        self.now, self.calls = 0.0, []
        self.coef, self.delays, self.rng = (a, b, c), delays, np.random.default_rng(seed)

    def __call__(self):
        return self.now

    def step(self, lengths):
        assert isinstance(lengths, list) and all(isinstance(x, int) for x in lengths)
        self.calls.append(tuple(lengths))
        a, b, c = self.coef
        cost = a * sum(lengths) + b * sum(x * x for x in lengths) + c
        if self.delays is not None and self.rng.random() < 0.5:
            cost *= 1 + self.delays * self.rng.random()
        self.now += cost


def test_calibration_recovers_known_coefficients_exactly():
    clock = FakeClock()
    fit = calibrate_cost(clock.step, 8192, clock=clock)
    assert (fit.a, fit.b, fit.c) == pytest.approx((A, B, C), rel=1e-6)
    assert tuple(fit) == (fit.a, fit.b) and isinstance(fit, tuple) and len(fit) == 2
    assert fit.mean_error < 1e-6 and fit.max_error < 1e-6
    rows = calibration_rows(8192)
    assert [r.tolist() for r in fit.rows] == [r.tolist() for r in rows]
    assert len(clock.calls) == 4 * len(rows), "one warm-up and three timed runs per row"


def test_best_of_the_repeats_sees_through_interference():
    clock = FakeClock(delays=0.5, seed=3)  # half the runs up to 50 % slower
    fit = calibrate_cost(clock.step, 4096, clock=clock, repeats=8)
    assert (fit.a, fit.b, fit.c) == pytest.approx((A, B, C), rel=1e-6)
    clock = FakeClock(delays=0.5, seed=3)
    single = calibrate_cost(clock.step, 4096, clock=clock, repeats=1)
    assert single.max_error > 0  # sanity: the clocks above are not silent (a test that could not fail)


def test_without_constant_a_and_b_absorb_it_and_the_fit_is_worse():
    clock = FakeClock()
    fit = calibrate_cost(clock.step, 8192, clock=clock, constant=False)
    assert fit.c == 0.0 and fit.max_error > 0.01
    clock = FakeClock(c=0.0)
    fit = calibrate_cost(clock.step, 8192, clock=clock, constant=False)
    assert (fit.a, fit.b) == pytest.approx((A, B), rel=1e-6)


def test_rows_take_turns_after_the_warm_up_and_the_device_is_synchronised_around_each_run():
    clock, events = FakeClock(), []
    rows = [[64], [16] * 4, [32, 16, 8, 8], [8] * 2]
    calibrate_cost(lambda lengths: (events.append("step"), clock.step(lengths)), 64, rows=rows, repeats=2, warmup=2,
                   clock=clock, synchronize=lambda: events.append("sync"))
    assert clock.calls == [tuple(r) for r in rows] * 4
    timed = events[2 * len(rows):]
    assert timed == ["sync", "step", "sync"] * (2 * len(rows))


def test_the_fit_plans_a_balance():
    clock = FakeClock()
    fit = calibrate_cost(clock.step, 8192, clock=clock)
    lengths = np.random.default_rng(0).integers(1, 8192, 2000)
    s = packlib.balance(lengths, 8192, world_size=4, micro_batches=2, cost=fit)
    assert s.cost_coefficients == pytest.approx((A, B), rel=1e-6)
    again = pickle.loads(pickle.dumps(fit))
    assert tuple(again) == tuple(fit) and again.c == fit.c and np.array_equal(again.seconds, fit.seconds)
    assert "b/a=" in repr(fit)


def test_calibration_rows_vary_make_up_and_fill():
    for L in (8, 100, 8192, 16384):
        rows = calibration_rows(L)
        tokens = np.array([r.sum() for r in rows])
        assert tokens.max() <= L and (tokens == tokens.max()).sum() >= 3 and tokens.min() <= L // 4
        assert rows[0].tolist() == [L] and any(r.size >= min(L, 64) for r in rows)
        assert len({(r.astype(float) ** 2).sum() / r.sum() for r in rows}) >= 3
        packlib.fit_cost(rows, [A * t + C for t in tokens], constant=True)  # separable


# ------------------------------------------------------------------------------ bad input


async def _async_step(lengths):
    return None


def _generator_step(lengths):
    yield lengths


@pytest.mark.parametrize("step, error, match", [
    ("model", TypeError, "step must be a callable step"),
    (_async_step, TypeError, "returned coroutine, work not yet done"),
    (_generator_step, TypeError, "returned generator, work not yet done"),
    (lambda lengths: None, ValueError, "took 0.0 s: no measurable time"),
])
def test_steps_that_do_nothing_timeable_are_refused(step, error, match):
    with pytest.raises(error, match=match):
        calibrate_cost(step, 1024, clock=FakeClock())


def test_a_step_that_raises_is_named_with_its_row():
    def step(lengths):
        if sum(lengths) > 512:
            raise RuntimeError("CUDA out of memory")
        return None

    with pytest.raises(ValueError, match=r"step raised RuntimeError on calibration row 0 \(1 sequences, 1024 tokens\): "
                                         "CUDA out of memory.*lower max_sequence_length") as info:
        calibrate_cost(step, 1024)
    assert isinstance(info.value.__cause__, RuntimeError)


def test_times_that_do_not_grow_with_tokens_are_refused_not_fitted_to_zeros():
    clock = FakeClock(a=0.0, b=0.0, c=1e-3)  # a step with a fixed overhead and no work
    with pytest.raises(ValueError, match="(do not|hardly) grow with (the rows'|their) tokens"):
        calibrate_cost(clock.step, 1024, clock=clock)
    clock = FakeClock(a=1e-12, b=0.0, c=1e-3)  # the work far under the noise of a fixed overhead
    with pytest.raises(ValueError, match="hardly grow with their tokens"):
        calibrate_cost(clock.step, 1024, clock=clock)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(rows=[[256], [256] * 2, [256] * 3]), ValueError, "cannot determine both a and b"),
    (dict(rows=[[1024], [512] * 2, [256] * 4]), ValueError, "every row holds 1024 tokens.*well short of full"),
    (dict(rows=[[1024], [512] * 3]), ValueError, "rows\\[1\\] holds 1536 tokens"),
    (dict(rows=[[2048], [512]]), ValueError, "exceeds max_sequence_length = 1024"),
    (dict(rows=[[1024], []]), ValueError, "rows\\[1\\] holds 0 tokens"),
    (dict(rows="abc"), TypeError, "rows must be a sequence of rows"),
    (dict(repeats=0), ValueError, "repeats must be >= 1"),
    (dict(warmup=-1), ValueError, "warmup must be >= 0"),
    (dict(constant="yes"), TypeError, "constant must be"),
    (dict(synchronize="cuda"), TypeError, "synchronize must be a callable"),
    (dict(clock=3.0), TypeError, "clock must be a callable"),
])
def test_bad_settings_are_refused_before_any_run(kwargs, error, match):
    clock = FakeClock()
    kwargs.setdefault("clock", clock)
    with pytest.raises(error, match=match):
        calibrate_cost(clock.step, 1024, **kwargs)
    assert clock.calls == [], "refused before the step ran"


def test_a_capacity_too_short_for_varied_rows_is_refused():
    with pytest.raises(ValueError, match="too short to time rows of varied make-up"):
        calibrate_cost(FakeClock().step, 4)
    with pytest.raises(ValueError, match="max_sequence_length must be >= 1"):
        calibration_rows(0)


# ------------------------------------------------------------------------------ on a model


def test_calibration_on_a_tiny_torch_model_and_through_the_collator():
    torch = pytest.importorskip("torch", reason="times a model: pip install torch==2.13.0")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny kernels: threads only wait for each other on a shared machine
    try:
        _time_models(torch)
    finally:
        torch.set_num_threads(threads)


def _time_models(torch):
    import torch.nn.functional as F

    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True)

    def step(lengths):  # one forward and backward, each sequence on its own
        sum(layer(torch.randn(1, n, 32)).sum() for n in lengths).backward()

    fit = calibrate_cost(step, 64, repeats=1)
    assert isinstance(fit, CostFit) and fit.a > 0 and np.isfinite(fit.max_error)
    assert (fit.seconds > 0).all() and len(fit.rows) == len(calibration_rows(64))

    class Tiny(torch.nn.Module):  # a model taking PackedCollator's batch, as a transformers model does
        def __init__(self):
            super().__init__()
            self.embed, self.head = torch.nn.Embedding(101, 32), torch.nn.Linear(32, 101)
            self.seen = []

        def get_input_embeddings(self):
            return self.embed

        def forward(self, input_ids, labels, position_ids, use_cache, **flash):
            self.seen.append(flash["cu_seq_lens_q"].tolist())
            assert use_cache is False and position_ids.shape == input_ids.shape
            logits = self.head(self.embed(input_ids))[0, :-1]
            return type("Out", (), {"loss": F.cross_entropy(logits, labels[0, 1:], ignore_index=-100)})()

    model = Tiny()
    rows = [[64], [16] * 4, [32, 16, 8, 8], [32], [8] * 2]
    fit = calibrate_cost(model, 64, repeats=1, rows=rows, constant=False)
    assert fit.a + fit.b > 0 and all(p.grad is None for p in model.parameters()), "grads cleared after each row"
    assert model.seen[:len(rows)] == [np.concatenate(([0], np.cumsum(r))).tolist() for r in rows]
