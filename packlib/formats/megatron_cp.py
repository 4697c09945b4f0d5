"""Megatron-LM's dynamic context parallelism, scheduled by packlib: :class:`DynamicCPScheduler`.

Megatron-LM (dev branch, ``megatron/core/datasets/data_schedule.py``) gathers each step's
sequence lengths from all data-parallel ranks and asks a scheduler from its
``scheduler_map`` for ``sample_id_groups``: one list per micro-batch, each a list of
``dp_size * cp_size`` per-GPU lists of sample ids, where a sequence split over a CP group
of ``c`` GPUs appears in the lists of all ``c`` (an aligned block of ranks; the group size
is read back as the number of lists holding a GPU's first id, so no list may be empty).
:class:`DynamicCPScheduler` takes Megatron's constructor arguments and returns that
layout, planned by :func:`packlib.plan_cp_step` (memory cap never exceeded, the step
balanced as a whole under a cost with linear, attention and ring-exchange terms); its
``run`` is Megatron's own. Megatron is needed only for ``run`` and :func:`register`.

>>> from packlib.formats.megatron_cp import DynamicCPScheduler
>>> scheduler = DynamicCPScheduler(8192, 2, 2, None)          # cap, cp_size, dp_size, vpp group
>>> lengths = [20_000, 6_000, 5_000, 4_000, 4_000, 3_000, 3_000, 2_000, 2_000, 2_000, 1_000, 1_000]
>>> scheduler.get_groups_and_subsamples(list(enumerate(lengths)))
[[[0], [0], [0], [0]], [[2, 9], [1], [3, 6], [4, 5]], [[11], [10], [8], [7]]]
"""
from __future__ import annotations

import numpy as np

from .._validate import as_bool, as_int_array, as_lengths, as_optional_int, as_positive_int, as_seed
from ..context_parallel._cost import as_cp_cost, check_min_cp_size
from ..context_parallel._planner import MAX_WORLD_SIZE, _plan

__all__ = ["DynamicCPScheduler", "register"]

#: The first Megatron-LM with the registry :func:`register` writes to and dynamic context
#: parallelism in it: the dev branch from commit 2d6e946b (2026-04-07, "Dynamic CP (part 2)");
#: checked end to end on commit d48bd6be. No megatron-core wheel up to 0.16 has it.
NEEDS_MEGATRON = ("Megatron-LM's dev branch from commit 2d6e946b (2026-04-07) on (checked on d48bd6be), whose "
                  "megatron/core/datasets/data_schedule.py has scheduler_map with 'default_dynamic_cp'")

#: The keys Megatron's packing schedulers require of every sample.
REQUIRED_SAMPLE_KEYS = ("tokens", "labels", "loss_mask", "position_ids", "original_seq_len", "padded_seq_len")


class DynamicCPScheduler:
    """A drop-in for Megatron-LM's ``DefaultDynamicCPScheduler``, constructed as Megatron
    constructs its schedulers (``scheduler_map[name](max_seqlen_per_dp_cp_rank, cp_size,
    dp_size, microbatch_group_size_per_vp_stage, max_num_seqs=..., min_cp_size=...)``).

    Parameters
    ----------
    max_seqlen_per_dp_cp_rank : int
        The memory cap: tokens per GPU per micro-batch.
    cp_size, dp_size : int
        Context- and data-parallel sizes; the step is laid out over ``dp_size * cp_size`` GPUs.
    microbatch_group_size_per_vp_stage : int or None, default None
        With virtual pipeline stages, the number of micro-batches is a multiple of it.
    max_num_seqs : int or None, default None
        At most this many sequences on a GPU in a micro-batch, the padding sequence
        included (Megatron passes ``thd_max_packed_sequences``, which counts it).
    min_cp_size : int, default 1
        The smallest CP group (Megatron's ``min_dynamic_context_parallel_size``): one of
        the sizes Megatron builds groups for (:func:`packlib.context_parallel.allowed_sizes`).
    padding_sequence : bool, default True
        Whether ``max_num_seqs`` counts a padding sequence beside the real ones: with
        ``pad_packed_seq_alignment`` set and ``thd_tail_padding_policy`` ``"append_dummy_seq"``
        (its default), Megatron covers a GPU's padding tail with a dummy sequence, so at
        most ``max_num_seqs - 1`` real sequences go on a GPU. :meth:`run` sets it from
        Megatron's config (``False`` without ``pad_packed_seq_alignment`` or with
        ``"extend_last"``).
    cost : tuple of float, optional
        ``(a, b)`` or ``(a, b, e)`` as for :func:`packlib.plan_cp_step`.
    attention_balance : bool, default True
        As for :func:`packlib.plan_cp_step`.
    seed : int, default 0
        As for :func:`packlib.plan_cp_step`.

    Attributes
    ----------
    last_step : CPStep or None
        The plan of the last :meth:`get_groups_and_subsamples` call (its critical path,
        bound and balance).
    """

    is_dynamic_cp = True

    def __init__(self, max_seqlen_per_dp_cp_rank, cp_size, dp_size, microbatch_group_size_per_vp_stage=None,
                 max_num_seqs=None, *, min_cp_size=1, padding_sequence=True, cost=None, attention_balance=True,
                 seed=0):
        self.max_seqlen_per_dp_cp_rank = as_positive_int(max_seqlen_per_dp_cp_rank, "max_seqlen_per_dp_cp_rank")
        self.cp_size = as_positive_int(cp_size, "cp_size")
        self.dp_size = as_positive_int(dp_size, "dp_size")
        self.microbatch_group_size_per_vp_stage = as_optional_int(
            microbatch_group_size_per_vp_stage, "microbatch_group_size_per_vp_stage", minimum=1)
        self.max_num_seqs = as_optional_int(max_num_seqs, "max_num_seqs", minimum=1)
        self.total_hdp_gpus = as_positive_int(self.dp_size * self.cp_size, "dp_size * cp_size", maximum=MAX_WORLD_SIZE,
                                              hint="plan for fewer GPUs")
        self.min_cp_size = as_positive_int(min_cp_size, "min_cp_size")
        check_min_cp_size(self.min_cp_size, self.total_hdp_gpus, "dp_size * cp_size")
        self.padding_sequence = as_bool(padding_sequence, "padding_sequence")
        self.cost = as_cp_cost(cost)
        self.attention_balance = as_bool(attention_balance, "attention_balance")
        self.seed = as_seed(seed)
        self.last_step = None

    def get_required_sample_keys(self) -> list:
        """The keys every sample must hold, as Megatron's packing schedulers require."""
        return list(REQUIRED_SAMPLE_KEYS)

    def get_groups_and_subsamples(self, sample_id_seqlens) -> list:
        """Megatron's ``sample_id_groups`` for one step.

        Parameters
        ----------
        sample_id_seqlens : sequence of (int, int)
            ``(sample_id, length)`` of every sequence of the step (ids distinct).

        Returns
        -------
        list
            One list per micro-batch, each a list of ``dp_size * cp_size`` lists of sample ids.
        """
        ids, lengths = _pairs(sample_id_seqlens, self.total_hdp_gpus * self.max_seqlen_per_dp_cp_rank)
        vpp = self.microbatch_group_size_per_vp_stage
        multiple = vpp if vpp and vpp > 1 else 1
        step = _plan(lengths, self.max_seqlen_per_dp_cp_rank, self._real_seqs(), self.total_hdp_gpus,
                     self.min_cp_size, self.cost, None, multiple, self.attention_balance, self.seed)
        self.last_step = step
        return step.sample_id_groups(ids)

    def _real_seqs(self):
        """The most real sequences on a GPU in a micro-batch (None: no limit)."""
        if self.max_num_seqs is None or not self.padding_sequence:
            return self.max_num_seqs
        if self.max_num_seqs < 2:
            raise ValueError(f"max_num_seqs = {self.max_num_seqs} leaves no room for a real sequence beside the "
                             "padding sequence Megatron appends (thd_max_packed_sequences counts it): give 2 or more, "
                             "or padding_sequence=False where Megatron appends none")
        return self.max_num_seqs - 1

    def run(self, data_iterator, num_microbatches, dp_group, tp_group, pp_group, dp_cp_group, dev, config):
        """Megatron's own ``run`` (it fetches the step, calls
        :meth:`get_groups_and_subsamples`, reroutes the samples and builds the packed
        micro-batches): needs Megatron-LM with dynamic context parallelism.

        Parameters
        ----------
        data_iterator, num_microbatches, dp_group, tp_group, pp_group, dp_cp_group, dev, config
            As Megatron's ``BasePackingScheduler.run`` takes them.
        """
        from megatron.core.datasets.data_schedule import DpBalancedScheduler

        self.padding_sequence = _appends_padding_sequence(config, self.padding_sequence)
        return DpBalancedScheduler.run(self, data_iterator, num_microbatches, dp_group, tp_group, pp_group,
                                       dp_cp_group, dev, config)


def register(name: str = "default_dynamic_cp"):
    """Put :class:`DynamicCPScheduler` in Megatron-LM's ``scheduler_map`` under ``name``
    (Megatron's configuration requires ``"default_dynamic_cp"`` with dynamic CP, and passes
    ``min_cp_size`` only to that name) and return the class it replaces, or None.

    Parameters
    ----------
    name : str, default "default_dynamic_cp"
        The scheduler's name in ``scheduler_map``.

    Raises
    ------
    ImportError
        Where Megatron-LM is not installed, or has no dynamic context parallelism in its
        scheduler registry (the megatron-core wheels up to 0.16 have no ``scheduler_map``;
        its main branch one without ``"default_dynamic_cp"``): the message names the
        Megatron-LM it needs (:data:`NEEDS_MEGATRON`).
    """
    import sys

    from megatron.core.datasets import data_schedule

    registry = getattr(data_schedule, "scheduler_map", None)
    if not isinstance(registry, dict) or "default_dynamic_cp" not in registry:
        version = getattr(sys.modules.get("megatron.core"), "__version__", "of unknown version")
        what = "no scheduler_map" if registry is None else "a scheduler_map without 'default_dynamic_cp'"
        raise ImportError(f"packlib's DynamicCPScheduler plugs into Megatron's dynamic context parallelism, but the "
                          f"installed megatron.core ({version}) has {what}: install {NEEDS_MEGATRON}")
    old = registry.get(name)
    registry[name] = DynamicCPScheduler
    return old


def _appends_padding_sequence(config, default: bool) -> bool:
    """Whether Megatron's batch builder appends a dummy sequence to cover a GPU's padding
    tail under ``config``: with ``pad_packed_seq_alignment`` set and the tail-padding policy
    ``"append_dummy_seq"`` (the default); ``default`` without a config."""
    if config is None:
        return default
    if getattr(config, "pad_packed_seq_alignment", None) is None:
        return False
    return (getattr(config, "thd_tail_padding_policy", None) or "append_dummy_seq") == "append_dummy_seq"


def _pairs(sample_id_seqlens, most):
    """Sample ids and lengths of ``(id, length)`` pairs: whole numbers, ids distinct, each
    length in ``[1, most]``."""
    if isinstance(sample_id_seqlens, (str, bytes)) or not hasattr(sample_id_seqlens, "__len__"):
        raise TypeError(f"sample_id_seqlens must be a list of (sample_id, length) pairs, got "
                        f"{type(sample_id_seqlens).__name__}")
    for k, pair in enumerate(sample_id_seqlens):
        if not hasattr(pair, "__len__") or len(pair) != 2:
            raise TypeError(f"sample_id_seqlens[{k}] = {pair!r} is not a (sample_id, length) pair")
    ids = as_int_array([p[0] for p in sample_id_seqlens], "sample ids")
    lengths = as_lengths([p[1] for p in sample_id_seqlens], None)
    uniq, first, counts = np.unique(ids, return_index=True, return_counts=True)
    if (counts > 1).any():
        dup = int(uniq[np.argmax(counts > 1)])
        where = [k for k in range(ids.size) if ids[k] == dup][:2]
        raise ValueError(f"sample id {dup} appears twice (sample_id_seqlens[{where[0]}] and [{where[1]}]): "
                         "every sequence needs its own id")
    if lengths.size and lengths.max() > most:
        k = int(np.argmax(lengths > most))
        raise ValueError(f"sample {ids[k]} has length {lengths[k]} > dp_size * cp_size * max_seqlen_per_dp_cp_rank = "
                         f"{most}: no CP group holds it; split it, or raise max_seqlen_per_dp_cp_rank")
    return ids, lengths
