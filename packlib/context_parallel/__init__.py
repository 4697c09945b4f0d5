"""Steps over data-parallel × context-parallel GPUs: which sequences share a CP group, in
which micro-batch, on which aligned ranks.

At 32k–128k context one document no longer fits one GPU and is split over a
context-parallel (CP) group while short documents still pack many to a GPU.
:func:`plan_cp_step` lays out one step over ``world_size = dp_size × cp_size`` GPUs so that
no GPU holds more than ``max_sequence_length`` tokens in a micro-batch and the step's
critical path (GPUs of a CP group start a micro-batch together) is near its lower bound
under a cost with linear, attention and ring-exchange terms. The result, :class:`CPStep`,
gives Megatron's ``sample_id_groups`` layout; :class:`packlib.formats.megatron_cp.DynamicCPScheduler`
plugs it into Megatron-LM's sequence-packing schedulers. docs/context-parallel.md has the
measurements against Megatron's own schedulers and what the bound leaves out.

>>> import numpy as np
>>> from packlib.context_parallel import plan_cp_step
>>> rng = np.random.default_rng(0)
>>> lengths = np.concatenate([rng.integers(1_000, 6_000, 400), [60_000, 40_000, 30_000, 20_000]])
>>> step = plan_cp_step(lengths, 16_384, world_size=32, cost=(1.0, 1 / (12 * 4096), 0.05))
>>> step.num_micro_batches, step.cp[-4:].tolist(), bool(step.rank_tokens().max() <= 16_384)
(4, [16, 8, 4, 2], True)
>>> round(step.efficiency, 3), round(step.balance, 3)    # bound / critical path; under l²/c
(0.968, 0.971)
"""
from __future__ import annotations

from ._cost import DEFAULT_COST, allowed_sizes, lower_bounds, seq_cost
from ._planner import plan_cp_step
from ._step import CPStep

__all__ = ["plan_cp_step", "CPStep", "DEFAULT_COST", "allowed_sizes", "lower_bounds", "seq_cost"]
