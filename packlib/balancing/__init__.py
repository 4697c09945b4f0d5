"""Compute-balanced steps for data-parallel training: every rank equally busy, every step.

With padding-free attention a packed row's cost is not its token count: a sequence of
``l`` tokens costs about ``a * l + b * l**2`` (linear layers, then attention), so a row
holding one 32k-token document costs about twice a row of thirty-two 1k documents, and
data-parallel ranks wait at every optimizer step for the slowest one. :func:`balance`
plans one epoch as steps of ``world_size`` ranks x ``micro_batches`` packed rows in which
every rank's cost is as equal as the data allows, rows stay full (steps keep a near-constant
number of tokens), and the epoch's random order is kept up to a window of steps:

1. the epoch is a seeded shuffle of the samples (``seed``, ``epoch``);
2. it is cut into windows of ``window`` steps' worth of tokens; each window is packed into
   exactly ``window * world_size * micro_batches`` rows by best-fit decreasing, the long
   sequences first into rows filled only up to a reserve for the short ones, which then
   spread over the rows instead of filling rows of their own (a row of a hundred short
   sequences would make its step one of far more sequences than the others); sequences a
   window cannot fit wait for the next one;
3. the window's rows, sorted by cost, are cut into steps of neighbours, dealt to ranks
   (largest first, to the least loaded rank with a free micro-batch), and each step's most
   and least loaded ranks exchange sequences while that evens them out and the rows'
   capacity and depth allow;
4. the window's steps come out in a random order (from the seed) in which every run of
   steps keeps the epoch's mean sequence length: the next step is one of two drawn at random
   (one of many short sequences, one of few long ones), the one that brings the running
   count of sequences closer to tokens so far / mean length. What may be random is: ties
   in cost, which rank takes which load, the order of a step's micro-batch rounds and of
   the sequences in a row. The epoch's order thus keeps no pattern of the planner's: each
   tenth of it is as close to the epoch's mean length as the steps allow.

Every rank computes the same :class:`Schedule` from the same lengths, seed and epoch, in
any process, on any machine, without communicating.

``padded=True`` plans for unpacked rows instead (``packlib.torch.PaddedCollator``, for models
that cannot pack): each window's samples sorted by length and cut into micro-batches of
similar lengths, ``sequences x longest <= max_sequence_length`` each, balanced by their padded
cost (:mod:`packlib.balancing._padded`).

>>> import numpy as np, packlib
>>> lengths = np.clip(np.random.default_rng(0).lognormal(5.5, 1.0, 4000).astype(int), 1, 2048)
>>> s = packlib.balance(lengths, 2048, world_size=4, micro_batches=2, cost=packlib.transformer_cost(1024))
>>> s
Schedule(93 steps x 4 ranks x 2 micro-batches, 3,992 samples, 8 dropped, balance=0.9988, efficiency=0.9988)
>>> [len(mb) for mb in next(s.rank(0))]   # rank 0, first step: its micro-batches of sample ids
[4, 7]
>>> round(s.micro_batch_balance, 4)       # when ranks meet at every micro-batch (FSDP, ZeRO-3)
0.9983
"""
from __future__ import annotations

from ._cost import fit_cost, transformer_cost, vision_cost
from ._planner import balance
from ._round_robin import round_robin
from ._sampler import BalancedBatchSampler
from ._schedule import Schedule
from ._settings import DEFAULT_WINDOW

__all__ = ["balance", "Schedule", "transformer_cost", "fit_cost", "vision_cost", "round_robin", "BalancedBatchSampler"]
