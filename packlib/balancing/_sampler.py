""":class:`BalancedBatchSampler`: one rank's micro-batches of a :func:`packlib.balance`
schedule, as a ``batch_sampler`` for ``torch.utils.data.DataLoader`` (packlib does not
import torch: a batch sampler is any iterable of lists of indices with a ``len()``).

Every rank builds the same schedule from the same lengths, seed and epoch, alone, at
start-up; each then yields its own micro-batches, ``micro_batches`` per step, the same
number on every rank. ``state_dict()`` / ``load_state_dict()`` resume exactly mid-epoch, at
a step boundary; :meth:`BalancedBatchSampler.step_label_tokens` gives each micro-batch the
trained tokens of its whole step (every rank's), for a token-mean loss without a collective.

>>> import numpy as np
>>> lengths = np.random.default_rng(0).integers(1, 512, 1000)
>>> samplers = [BalancedBatchSampler(lengths, 512, rank=r, world_size=2, micro_batches=2) for r in range(2)]
>>> len(samplers[0]) == len(samplers[1])
True
>>> first = next(iter(samplers[0]))     # rank 0, step 0, micro-batch 0: sample ids
>>> int(sum(lengths[first])) <= 512
True
"""
from __future__ import annotations

import hashlib
import json
import numpy as np

from ._drawn import UNDECLARED, check_drawn, loader_drawing, undeclared_refusal
from ._planner import plan
from ._settings import DEFAULT_WINDOW, as_rank, balance_settings

__all__ = ["BalancedBatchSampler"]

# 2: the planner of spread packing and seeded order; a version-1 state's position is in
# another schedule of the same settings
_STATE_VERSION = 2


class BalancedBatchSampler:
    """Rank ``rank``'s micro-batches (lists of sample ids) of the balanced schedule of
    ``lengths``, in training order.

    Parameters
    ----------
    lengths, max_sequence_length, max_sequences_per_pack
        As for :func:`packlib.balance`.
    rank : int
        This process's data-parallel rank, in ``[0, world_size)``.
    world_size : int
        Data-parallel ranks.
    micro_batches : int, default 1
        Micro-batches per rank per step (gradient accumulation): one step is that many
        consecutive items of this sampler.
    cost, window, seed, drop_last
        As for :func:`packlib.balance`; ``cost`` defaults to tokens, ``(1.0, 0.0)``.
    label_tokens : array_like of int, optional
        How many of each sample's tokens carry a loss term (its labels that are not -100,
        after its masks), for :meth:`step_label_tokens`. Default: counted from the dataset of
        the ``DataLoader`` declared with :meth:`drawn_by` by that loader's collator, when it
        declares what it trains (a ``label_tokens(dataset)`` method:
        :class:`packlib.torch.PackedCollator` counts by :func:`packlib.torch.label_tokens`)
        and the examples carry more than ``input_ids`` (labels, masks, packed rows); else
        ``lengths - 1``: every token but the first, which is what the collator trains of a
        sample without ``labels`` or masks. With another collator, pass
        ``label_tokens=packlib.torch.label_tokens(dataset)`` (or your own counts).
    shared_prompt_lengths : array_like of int, optional
        As for :func:`packlib.balance` (with 2-D ``lengths``, whose items are then group ids).
    extra_costs : array_like of float, optional
        As for :func:`packlib.balance`: each sample's cost besides its tokens' (its images'
        vision-encoder cost, :func:`packlib.vision_cost`).
    padded : bool, default False
        As for :func:`packlib.balance`: micro-batches of unpacked sequences of similar
        lengths, at most ``max_sequence_length`` tokens each with their padding, for
        :class:`packlib.torch.PaddedCollator` (models that cannot pack).

    Notes
    -----
    ``set_epoch(epoch)`` before each epoch, as with ``DistributedSampler``: the schedule of
    each epoch is a new shuffle. Each iteration starts the epoch from its beginning, except
    the first after :meth:`load_state_dict`, which starts where the state was taken;
    ``set_epoch`` of the loaded epoch keeps that position (so ``load_state_dict`` and
    ``set_epoch`` may come in either order), and ``set_epoch`` of another epoch while a
    loaded position is pending is refused unless the loaded epoch was finished. ``len()`` is
    the number of micro-batches the next (or current) iteration yields: the whole epoch's,
    equal on every rank, or what remains of it after a resume.

    A ``DataLoader`` with ``num_workers >= 1`` draws micro-batches ahead of the loop, so
    this sampler's position is not what the loop consumed: :meth:`state_dict` refuses then
    (``RuntimeError``) when the loader was declared with :meth:`drawn_by`. torchdata's ``StatefulDataLoader`` accounts for what was consumed:
    checkpoint its ``state_dict()`` instead (it holds this sampler's).

    **Accelerate.** ``accelerator.prepare(loader)`` on ``n >= 2`` processes wraps every batch
    sampler in its ``BatchSamplerShard``, which deals batch ``i`` to process ``i mod n``.
    Declare it: ``loader = sampler.drawn_by(accelerator.prepare(loader))``; the sampler then
    yields every rank's micro-batches in the order it deals them, so each process gets exactly
    its own; ``len(loader)`` is the rank's count, ``loader.set_epoch(epoch)`` reaches
    :meth:`set_epoch` and ``accelerator.skip_first_batches`` skips the rank's own micro-batches.
    A process index or count other than ``rank`` / ``world_size`` is a ``ValueError`` naming
    both, as are ``dispatch_batches=True`` and ``split_batches=True`` (they cut packed rows
    apart). Undeclared, it yields its own rank's micro-batches (a plain ``DataLoader`` per
    process), and under an Accelerate state of two or more processes, where it cannot tell,
    its iteration is refused (``ValueError``) rather than lose or repeat samples.
    :func:`packlib.torch.balance_trainer` gives these steps to ``transformers.Trainer`` and
    TRL's trainers, and declares its loader.
    """

    def __init__(self, lengths, max_sequence_length, max_sequences_per_pack=None, *, rank, world_size,
                 micro_batches=1, cost=(1.0, 0.0), window=None, seed=0, drop_last=True, label_tokens=None,
                 shared_prompt_lengths=None, extra_costs=None, padded=False):
        window = DEFAULT_WINDOW if window is None else window
        self._settings = balance_settings(lengths, max_sequence_length, max_sequences_per_pack,
                                          world_size=world_size, micro_batches=micro_batches, cost=cost,
                                          window=window, seed=seed, epoch=0, drop_last=drop_last,
                                          shared_prompt_lengths=shared_prompt_lengths, extra_costs=extra_costs,
                                          padded=padded)
        self.padded = self._settings.padded
        self._W, self._M = self._settings.world_size, self._settings.micro_batches
        self.rank = as_rank(rank, self._W)
        self.world_size, self.micro_batches = self._W, self._M
        self.epoch = 0
        self._position = 0  # micro-batches of this epoch already yielded
        self._resume = 0  # where the next iteration starts (set by load_state_dict)
        self._loaded = False  # a loaded position waits for the next iteration
        self._start = 0  # where the current (or last) iteration started
        self._done = True  # the last iteration ran to the end (or none began)
        self._ahead = None  # why the position runs ahead of the loop (a DataLoader that draws ahead)
        self._dealt = False  # the current iteration yields every rank's micro-batches (Accelerate deals them)
        self._drawing = UNDECLARED  # how this sampler is drawn, as drawn_by() was told
        self._schedule = None
        self._step_tokens = None
        self._given_label_tokens = label_tokens is not None
        self._label_tokens = _as_label_tokens(label_tokens, self._settings.lengths)
        self._fingerprint = self._make_fingerprint()

    # -- the schedule ---------------------------------------------------------------------
    @property
    def schedule(self):
        """The whole :class:`~packlib.Schedule` of the current epoch (every rank's)."""
        if self._schedule is None:
            self._schedule = plan(self._settings._replace(epoch=self.epoch))
        return self._schedule

    def set_epoch(self, epoch: int) -> None:
        """Use the schedule of ``epoch`` from now on (from its start, or from a position
        :meth:`load_state_dict` loaded for this epoch).

        Parameters
        ----------
        epoch : int
            ``>= 0``. While a loaded position waits, another epoch than the loaded one is a
            ``ValueError`` (it would silently restart or skip the loaded epoch's rest),
            except the next one when the loaded epoch was finished.
        """
        from .._validate import as_nonnegative_int

        epoch = as_nonnegative_int(epoch, "epoch")
        if self._loaded:
            if epoch == self.epoch:
                return
            if not (epoch == self.epoch + 1 and self._resume == self._total()):
                raise ValueError(
                    f"set_epoch({epoch}) after load_state_dict loaded epoch {self.epoch} at micro-batch "
                    f"{self._resume} of {self._total()}: that would silently drop the loaded position; start the "
                    f"loop at the loaded epoch (for epoch in range(sampler.epoch, epochs)), or make a new sampler "
                    "to start over")
            self._loaded = False
        if epoch != self.epoch:
            self.epoch, self._schedule, self._step_tokens = epoch, None, None
        self._position = self._resume = self._start = 0
        self._done, self._ahead = True, None  # nothing drawn of this epoch yet

    def _schedule_of(self, epoch: int):
        """The schedule of ``epoch`` (the current one, or one other kept at a time)."""
        if epoch == self.epoch:
            return self.schedule
        other = self.__dict__.setdefault("_other", {})
        if epoch not in other:
            other.clear()
            other[epoch] = plan(self._settings._replace(epoch=epoch))
        return other[epoch]

    def _steps_of(self, epoch: int) -> int:
        """Steps of ``epoch``'s schedule (counted once per epoch)."""
        steps = self.__dict__.setdefault("_steps", {})
        if epoch not in steps:
            steps[epoch] = self._schedule_of(epoch).num_steps
        return steps[epoch]

    def _total(self) -> int:
        return self.schedule.num_steps * self._M

    def __len__(self) -> int:
        if self._loaded:
            n = self._total() - self._resume
        else:
            n = self._total() - (0 if self._done else self._start)
        if self._drawing.processes is not None:  # Accelerate deals every rank's micro-batches: it counts them all
            return n * self._W
        return n

    def __iter__(self):
        drawing = self._drawing
        if not drawing.declared and (why := undeclared_refusal(self._W)):
            raise ValueError(why)
        start, self._resume, self._loaded = self._resume, 0, False
        self._position = self._start = start
        self._done, self._dealt, self._ahead = False, drawing.processes is not None, drawing.ahead
        return self._micro_batches(start)

    def drawn_by(self, loader):
        """Declare the ``DataLoader`` that draws this sampler, and return it: the loader you
        iterate, after ``accelerator.prepare`` where Accelerate prepares it.

        What the sampler reads of it: whether Accelerate's ``BatchSamplerShard`` deals its
        micro-batches (then it yields every rank's, in the order dealt, so each process gets
        exactly its own), whether the loader draws ahead of the loop (workers, Accelerate's
        look-ahead: :meth:`state_dict` then refuses), and its dataset and collator (the default
        ``label_tokens``: what the collator declares it trains, ``collate_fn.label_tokens(dataset)``). Refused (``ValueError``): a loader that does not draw this sampler,
        Accelerate's ``dispatch_batches=True`` and ``split_batches=True`` (they cut packed rows
        apart), a process index or count other than ``rank`` / ``world_size``.
        :func:`packlib.torch.balance_trainer` declares its own loader.

        Parameters
        ----------
        loader : torch.utils.data.DataLoader
            With this sampler as its ``batch_sampler`` (prepared by Accelerate or not).

        Returns
        -------
        torch.utils.data.DataLoader
            ``loader`` itself: ``loader = sampler.drawn_by(accelerator.prepare(loader))``.
        """
        drawing = loader_drawing(loader, self)
        self._check_drawn(drawing)
        self._drawing = drawing
        return loader

    def _check_processes(self, num_processes, process_index, who: str) -> None:
        if (num_processes, process_index) != (self._W, self.rank):
            raise ValueError(
                f"this BalancedBatchSampler was built for rank {self.rank} of world_size {self._W}, but {who} runs it "
                f"as process {process_index} of {num_processes}: build it with rank=accelerator.process_index, "
                "world_size=accelerator.num_processes (in a Trainer: args.process_index, args.world_size)")

    def _check_drawn(self, drawn) -> None:
        """Refuse the ways of drawing this sampler that would train the wrong micro-batches."""
        check_drawn(drawn, self._check_processes)


    def _micro_batches(self, start: int):
        s = self.schedule
        o, ix, W, M, r = s.packs.offsets, s.packs.indices, self._W, self._M, self.rank
        ranks = range(W) if self._dealt else (r,)  # dealt: every rank's, in the order Accelerate deals them
        for i in range(start, s.num_steps * M):
            step, m = divmod(i, M)
            for q in ranks:
                k = (step * W + q) * M + m
                if q == r:
                    self._position = i + 1
                yield ix[o[k]:o[k + 1]].tolist()
        self._done = True  # the next iteration is the whole epoch again

    def step_label_tokens(self):
        """For each micro-batch of the current iteration, in order, the trained tokens of its
        whole step: every rank's micro-batches of that step together (``label_tokens`` of
        their samples). What makes a step's loss the token mean over all of them with no
        collective and no lookahead: ``model(**batch, num_items_in_batch=n).loss`` is the
        micro-batch's token-loss sum over ``n``, and DDP's average over ranks is undone by
        ``* world_size``. At least 1 (a step that trains no token has a loss sum of 0).

        An iterator, read lazily: zip it with the loader (``zip(loader, sampler.step_label_tokens())``),
        so that it starts where the loader's iteration of this sampler started (a resume
        included), whatever the loader's workers draw ahead.
        """
        if self._step_tokens is None:
            s = self.schedule
            o, ix = s.packs.offsets, s.packs.indices
            per_sample = np.concatenate([[0], np.cumsum(self._trained_tokens()[ix])])
            per_pack = per_sample[o[1:]] - per_sample[o[:-1]]
            self._step_tokens = per_pack.reshape(s.num_steps, self._W * self._M).sum(axis=1)
        tokens, start, M = self._step_tokens, self._start, self._M
        for i in range(start, tokens.size * M):
            yield max(int(tokens[i // M]), 1)  # a step that trains nothing: its sum is 0 too

    def _trained_tokens(self) -> np.ndarray:
        """``label_tokens`` as given; else, once, what the loader's collator declares it trains of
        the dataset the loader reads (when its examples carry labels or masks)."""
        d, count = self._drawing.dataset, self._drawing.count_labels
        if self._given_label_tokens or d is None or count is None or not hasattr(d, "__len__"):
            return self._label_tokens
        if len(d) != self._settings.lengths.size:
            raise ValueError(f"the DataLoader's dataset holds {len(d):,} examples for {self._settings.lengths.size:,} "
                             "lengths: build the sampler from the lengths of the dataset it draws from")
        if not _plain(d):
            counts = np.asarray(count(d))
            try:
                self._label_tokens = _as_label_tokens(counts, self._settings.lengths)
            except ValueError as e:
                raise ValueError(f"the trained tokens of the DataLoader's dataset do not fit the sampler's lengths: {e}"
                                 ) from None
        self._given_label_tokens = True  # counted once
        return self._label_tokens

    @property
    def sampler(self):
        """What Accelerate's ``DataLoaderShard.set_epoch`` reaches through its ``BatchSamplerShard``
        (``batch_sampler.batch_sampler.sampler.set_epoch``): this sampler's :meth:`set_epoch`."""
        return _EpochSetter(self)

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_drawing"] = self._drawing._replace(dataset=None, count_labels=None)  # the loader's, not this sampler's
        return state

    # -- checkpoints ----------------------------------------------------------------------
    def _make_fingerprint(self) -> str:
        s = self._settings
        h = hashlib.sha256(np.ascontiguousarray(s.lengths, dtype="<i8").tobytes())
        for groups in (s.group_lengths, s.shared_prompt_lengths):  # 2-D lengths: the groups' make-up
            if groups is not None:
                h.update(repr(groups.shape).encode() + np.ascontiguousarray(groups, dtype="<i8").tobytes())
        if s.extra_costs is not None:
            h.update(b"extra_costs" + np.ascontiguousarray(s.extra_costs, dtype="<f8").tobytes())
        if s.padded:  # another schedule of the same lengths (an unpadded state's fingerprint unchanged)
            h.update(b"padded")
        h.update(json.dumps([s.max_sequence_length, s.max_sequences_per_pack, s.world_size, s.micro_batches,
                             list(s.cost), s.window, s.seed, s.drop_last]).encode())
        return h.hexdigest()

    def state_dict(self) -> dict:
        """Where this rank is: the epoch and how many micro-batches of it were yielded,
        with a fingerprint of the lengths and settings (checked on load). Take it between
        optimizer steps (:meth:`load_state_dict` refuses a position inside a step).

        Raises ``RuntimeError`` while a ``torch.utils.data.DataLoader`` with workers draws
        this sampler: it runs ahead of what the loop consumed, so the position would skip
        micro-batches on resume (use torchdata's ``StatefulDataLoader`` and its state).
        """
        if self._ahead:
            raise RuntimeError(
                f"{self._ahead}: its position ({self._position}) is not what the loop consumed, and a resume from it "
                "would skip micro-batches. Use torchdata's StatefulDataLoader (a drop-in DataLoader) and checkpoint "
                "loader.state_dict(), which holds this sampler's state at what the loop consumed; or num_workers=0; "
                "under Accelerate, resume with loader.set_epoch(epoch) and accelerator.skip_first_batches(loader, "
                "micro-batches done in the epoch)")
        return {"version": _STATE_VERSION, "epoch": self.epoch, "position": self._position, "rank": self.rank,
                "fingerprint": self._fingerprint}

    def load_state_dict(self, state: dict) -> None:
        """Resume where :meth:`state_dict` was taken: the next item is the micro-batch that
        would have come next. Refuses a state of other lengths or settings (``ValueError``).

        Parameters
        ----------
        state : dict
            From :meth:`state_dict` of a sampler with the same lengths and settings.
        """
        from .._validate import as_nonnegative_int

        if isinstance(state, dict) and isinstance(state.get("version"), int) and "fingerprint" in state \
                and state["version"] != _STATE_VERSION:
            raise ValueError(f"this state was taken by another version of the planner (state version "
                             f"{state['version']}, this packlib's {_STATE_VERSION}): its schedule differs, so its "
                             "position cannot be resumed here; resume with the packlib that took it, or start "
                             "the epoch again")
        if not isinstance(state, dict) or state.get("version") != _STATE_VERSION:
            raise ValueError(f"not a BalancedBatchSampler state (version {_STATE_VERSION}): {state!r:.120}")
        if state.get("fingerprint") != self._fingerprint:
            raise ValueError("this state was taken with other lengths or settings (max_sequence_length, depth, "
                             "world_size, micro_batches, cost, window, seed, drop_last or padded): it cannot be resumed "
                             "here")
        if state.get("rank") != self.rank:
            raise ValueError(f"this state is rank {state.get('rank')}'s; this sampler is rank {self.rank}'s")
        epoch = as_nonnegative_int(state.get("epoch"), "state['epoch']")
        position = as_nonnegative_int(state.get("position"), "state['position']")
        self._loaded = False
        self.set_epoch(epoch)
        total = self._total()
        if position > total:
            raise ValueError(f"state['position'] = {position} is past the epoch's {total} micro-batches")
        if position % self._M and position != total:
            raise ValueError(f"state['position'] = {position} is inside a step ({self._M} micro-batches per step): "
                             "the micro-batches of the step before it were never applied by an optimizer step, so a "
                             "resume from here trains the wrong thing; take the state after optimizer.step()")
        self._position = self._resume = position
        self._loaded = True

    def __repr__(self) -> str:
        return (f"BalancedBatchSampler(rank {self.rank} of {self._W}, {self._M} micro-batches per step, "
                f"epoch {self.epoch}, {self._settings.lengths.size:,} samples{', padded' if self.padded else ''})")


def _as_label_tokens(label_tokens, lengths: np.ndarray) -> np.ndarray:
    """Each sample's trained tokens: ``lengths - 1`` by default, else checked against them."""
    if label_tokens is None:
        return lengths - 1
    from .._validate import as_int_array

    t = as_int_array(label_tokens, "label_tokens", minimum=0)
    if t.size != lengths.size:
        raise ValueError(f"label_tokens holds {t.size} counts for {lengths.size} lengths: one count per sample")
    bad = t >= lengths
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"label_tokens[{i}] = {t[i]} but sample {i} holds {lengths[i]} tokens: at most length - 1 "
                         "of a sample's tokens are trained (nothing predicts its first)")
    return t


_PLAIN_KEYS = frozenset({"input_ids"})  # an example of these keys only trains length - 1 tokens


def _plain(dataset) -> bool:
    """The dataset's examples hold token ids alone (so each trains ``length - 1`` tokens)."""
    names = getattr(dataset, "column_names", None)  # a datasets.Dataset: its columns, without reading a row
    if isinstance(names, (list, tuple)):
        return set(names) <= _PLAIN_KEYS
    first = dataset[0] if len(dataset) else None
    return not hasattr(first, "keys") or set(first.keys()) <= _PLAIN_KEYS


class _EpochSetter:
    """A sampler's ``set_epoch`` under the name Accelerate looks for."""

    def __init__(self, sampler):
        self.set_epoch = sampler.set_epoch


BalancedBatchSampler.__module__ = "packlib"  # pickles and reprs name the public path, which never moves
