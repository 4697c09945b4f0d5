"""The planned epochs of a :class:`~packlib.BalancedBatchSampler` as one stream of steps, cut
into pieces of equal length: what a trainer that counts every epoch as long as its first
(``transformers.Trainer``) can draw without losing or repeating a micro-batch.

A balanced schedule's epochs may differ by a step or two (each epoch is packed anew), while
the Trainer takes ``len(loader)`` once and runs that many steps in every epoch of its own.
:class:`EpochStream` lays the planned epochs end to end (epoch 0's steps, then epoch 1's, ...)
and its "epoch" ``t`` is the stream's steps ``[t * n, (t + 1) * n)``, ``n`` the first planned
epoch's steps, ending with the stream at ``total_steps``: every planned step is drawn once,
whole and in order, and a trainer that stops after ``total_steps`` optimizer steps has
trained every planned epoch exactly once. A loader declared with :meth:`EpochStream.drawn_by`
is met as the sampler meets it (Accelerate's ``BatchSamplerShard``: every rank's micro-batches,
in the order it deals them).

>>> import numpy as np, packlib
>>> sampler = packlib.BalancedBatchSampler(np.arange(1, 200), 256, rank=0, world_size=1, micro_batches=2)
>>> stream = EpochStream(sampler, epochs=2)
>>> stream.total_steps == sampler._steps_of(0) + sampler._steps_of(1)
True
>>> stream.set_epoch(0); len(stream) == 2 * sampler._steps_of(0)
True
"""
from __future__ import annotations

import math

from ._drawn import UNDECLARED, check_drawn, loader_drawing, undeclared_refusal

__all__ = ["EpochStream"]


class EpochStream:
    """Planned epochs ``0 .. epochs`` of ``sampler`` end to end, drawn ``len()`` micro-batches
    (the first planned epoch's) per :meth:`set_epoch`.

    Parameters
    ----------
    sampler : packlib.BalancedBatchSampler
        The schedule's settings and this process's rank.
    epochs : float, optional
        Planned epochs to stream (a fraction takes that share of the last one's steps).
    total_steps : int, optional
        Or the stream's steps (optimizer steps), whatever epochs they span.
    """

    def __init__(self, sampler, *, epochs=None, total_steps=None):
        self.source, self.epoch = sampler, 0
        self.steps_per_epoch = sampler._steps_of(0)
        if total_steps is None:
            whole = math.floor(epochs)
            total_steps = sum(sampler._steps_of(e) for e in range(whole))
            if epochs > whole:
                total_steps += math.ceil((epochs - whole) * sampler._steps_of(whole))
        self.total_steps = int(total_steps)
        self._drawing = UNDECLARED

    def drawn_by(self, loader):
        """Declare the loader that draws this stream, and return it: as
        :meth:`packlib.BalancedBatchSampler.drawn_by`."""
        drawing = loader_drawing(loader, self)
        check_drawn(drawing, self.source._check_processes)
        self._drawing = drawing
        return loader

    def set_epoch(self, epoch: int) -> None:
        """Draw the stream's ``epoch``-th piece next.

        Parameters
        ----------
        epoch : int
            The trainer's epoch.
        """
        self.epoch = int(epoch)

    @property
    def sampler(self):
        """This stream, where Accelerate's ``DataLoaderShard.set_epoch`` looks for a ``set_epoch``
        behind its ``BatchSamplerShard`` (``batch_sampler.batch_sampler.sampler``)."""
        return self

    def _span(self):
        n = self.steps_per_epoch
        start = min(self.epoch * n, self.total_steps)
        return start, min(start + n, self.total_steps)

    def __len__(self) -> int:
        n = self.steps_per_epoch * self.source.micro_batches
        return n * self.source.world_size if self._drawing.processes is not None else n

    def __iter__(self):
        if not self._drawing.declared and (why := undeclared_refusal(self.source.world_size)):
            raise ValueError(why)
        return self._micro_batches(*self._span(), self._drawing.processes is not None)

    def _micro_batches(self, start: int, stop: int, dealt: bool):
        s = self.source
        W, M, r = s.world_size, s.micro_batches, s.rank
        ranks = range(W) if dealt else (r,)
        epoch, first = 0, 0  # the planned epoch holding stream step `step`, and its first step
        for step in range(start, stop):
            while step - first >= s._steps_of(epoch):
                first += s._steps_of(epoch)
                epoch += 1
            packs = s._schedule_of(epoch).packs
            o, ix = packs.offsets, packs.indices
            for m in range(M):
                for q in ranks:
                    k = ((step - first) * W + q) * M + m
                    yield ix[o[k]:o[k + 1]].tolist()

    def __repr__(self) -> str:
        return (f"EpochStream({self.total_steps:,} steps of {self.source!r}, {self.steps_per_epoch:,} per trainer "
                f"epoch, epoch {self.epoch})")
