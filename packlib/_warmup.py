"""Explicit compilation: pay numba's compile (or cache-load) cost when you choose."""
from __future__ import annotations

import importlib.util
import sys
import time

import numpy as np

from . import _method_warmup
from ._method_warmup import method_unit  # noqa: F401 (the demo's and the tests' name for it)
from ._shared_compile import compile_in_processes, helper_main
from ._validate import as_positive_int

__all__ = ["warmup"]


def _step(name: str, verbose: bool, t0: float) -> None:
    if verbose:
        print(f"warmed {name} ({time.perf_counter() - t0:.2f} s so far)")


def warmup(verbose: bool = False, *, processes: int = 1) -> float:
    """Compile (or load from numba's on-disk cache) every kernel of packlib now.

    Kernels otherwise compile on their first call: a few seconds each the first time on a
    machine, much faster once cached (numba caches next to the package, or in
    ``NUMBA_CACHE_DIR`` when that is set, e.g. for a read-only install). Call this at
    start-up, before timing anything, or before forking data-loader workers.

    Each kernel family is compiled by calling its public functions on a tiny input, so the
    argument types compiled are the ones real calls use:

    - histogram packing: :func:`~packlib.spfhp_pack`, :func:`~packlib.lpfhp_pack`,
      :func:`~packlib.nnls_pack` (with a depth limit and unlimited, and above its exact range), then
      :meth:`PackingPlan.assign <packlib.PackingPlan.assign>` and
      :meth:`Packs.shuffled <packlib.Packs.shuffled>`;
    - per-sequence packing: :func:`~packlib.ffd_pack`, :func:`~packlib.bfd_pack`;
    - lower bounds and near-optimal packing: :func:`~packlib.lower_bound`,
      :func:`~packlib.optimal_pack`;
    - blended indices: :func:`~packlib.blend` with each method (``smooth`` both for
      small sizes and, on two threads, for large ones), and :func:`~packlib.blend_exhaustive`;
    - bucketing: :func:`~packlib.bucket` (by batch size and by token budget, shuffled),
      :class:`~packlib.BucketedReadaheadBatchIterator` and :func:`~packlib.pack_stream`;
    - compute-balanced steps: :func:`~packlib.balance` (with and without a depth limit, and
      padded);
    - formats: the TFRecord framing and CRC-32C kernels, ``tf.train.Example`` encoding and
      decoding, and MLPerf BERT packing and unpacking (all in memory, no files), and, when
      ``pyarrow`` is installed, Arrow table packing (:mod:`packlib.formats.arrow`);
    - the pipeline's exactly-once content hashes (:mod:`packlib.pipeline`);
    - prefix trees (``PackedCollator(share_prefix=True)``'s trie; no torch needed).

    Parameters
    ----------
    verbose : bool, default False
        Print each family as it is done, with the time so far.
    processes : int, default 1
        Compile in this many processes at once: ``processes - 1`` helper interpreters take
        families the caller has not started and write them to numba's cache, from which the
        caller then loads them. Pays on a machine with that many idle cores and a writable
        cache (a helper that cannot write it only costs the caller its own compile).

    Returns
    -------
    float
        The seconds it took.
    """
    processes = as_positive_int(processes, "processes")
    t0 = time.perf_counter()
    warm_in_processes(family_units(), processes)
    for name, warm in _FAMILIES:
        if warm() is not False:
            _step(name, verbose, t0)
    return time.perf_counter() - t0


def family_units() -> list[str]:
    """Every kernel family as a unit of :func:`run_unit`, in :func:`warmup`'s order."""
    return [f"family:{name}" for name, _ in _FAMILIES]


def warm_in_processes(units, processes: int) -> None:
    """Compile ``units`` (see :func:`run_unit`) in this process and ``processes - 1`` helpers."""
    compile_in_processes(units, run_unit, processes, __name__)


def run_unit(unit: str) -> None:
    """Compile (or load) one unit's kernels in this process, the unit named by a string that
    a helper interpreter can be given (:mod:`packlib._shared_compile`): ``"family:NAME"``,
    one kernel family of :func:`warmup`; ``"assign"``, :meth:`PackingPlan.assign` alone; or a
    method's unit of
    :func:`packlib._method_warmup.run_unit` (``"method:NAME:DEPTH"``,
    ``"optimal-kernels:optimal:DEPTH"``)."""
    kind, _, rest = unit.partition(":")
    if kind == "family":
        dict(_FAMILIES)[rest]()
    elif unit == "assign":  # PackingPlan.assign alone (the demo's)
        from .packing import lpfhp_pack

        lpfhp_pack(_H, max_sequence_length=_L).assign(_LENGTHS, seed=0)
    elif kind in ("method", "optimal-kernels", "kernel"):
        _method_warmup.run_unit(unit)
    else:
        raise ValueError(f"unknown compile unit {unit!r}: expected 'family:NAME', 'assign', "
                         "'method:NAME:DEPTH' or 'optimal-kernels:optimal:DEPTH'")


# a tiny histogram (L = 8) and its lengths
_L = 8
_H = np.array([0, 2, 0, 1, 0, 0, 1, 1], dtype=np.int64)
_LENGTHS = np.repeat(np.arange(1, _L + 1), _H)
# two sequences at a capacity above NNLSHP's exact range (it packs length classes there)
_LONG_H = np.zeros(4096, dtype=np.int64)
_LONG_H[[0, -1]] = 1


def _histogram_packing():
    from .packing import lpfhp_pack, nnls_pack, spfhp_pack

    for pack in (spfhp_pack, lpfhp_pack, nnls_pack):
        plan = pack(_H, max_sequence_length=_L, max_sequences_per_pack=3)
    nnls_pack(_H, max_sequence_length=_L, max_sequences_per_pack=None)
    nnls_pack(_LONG_H, max_sequence_length=_LONG_H.size, max_sequences_per_pack=None)  # its length classes
    plan.assign(_LENGTHS, seed=0).shuffled(seed=0)


def _sequence_packing():
    from .packing import bfd_pack, ffd_pack

    ffd_pack(_LENGTHS, max_sequence_length=_L, max_sequences_per_pack=None)
    bfd_pack(_LENGTHS, max_sequence_length=_L, max_sequences_per_pack=2)


def _optimal():
    from .optimal import lower_bound, optimal_pack

    # the heuristics stay a pack above the bound here, so optimal_pack rounds the LP
    # solution: it reaches round_columns and depth_repair
    ho = np.array([5, 5, 2, 2, 2, 5, 0, 5, 0, 1, 3, 0, 3, 0, 3, 1, 3, 3], dtype=np.int64)
    lower_bound(ho, max_sequence_length=ho.size, max_sequences_per_pack=3)
    optimal_pack(ho, max_sequence_length=ho.size, max_sequences_per_pack=3)
    from .optimal._relaxed import grid_plan  # the long-context route with a depth limit
    from .optimal._solver import depth_repair

    grid_plan(ho, ho.size, 3, 6, None)
    # six 2s too deep for 4, beside a (5, 3): no single length matches, a pair does (pair_pass)
    depth_repair(np.array([2, 2, 2, 2, 2, 2, 5, 3]), np.array([0, 6, 8]), np.array([1, 1]), 12, 4)


def _blending():
    from .blending import blend, blend_exhaustive

    for method in ("megatron", "smooth", "shuffled"):
        blend([0.5, 0.3, 0.2], 20, method=method)
    blend([0.5, 0.3, 0.2], 1 << 21, method="smooth")  # large: block by block, on two threads
    blend_exhaustive([3, 2, 1])


def _bucketing():
    from .bucketing import BucketedReadaheadBatchIterator, bucket, pack_stream

    bucket(_LENGTHS, read_ahead=4, batch_size=2, shuffle=True)
    bucket(_LENGTHS, read_ahead=4, max_tokens=_L, shuffle=False)
    list(BucketedReadaheadBatchIterator(list(range(2000)), 2000, key=lambda x: x % 7, batch_size=1))
    list(pack_stream(_LENGTHS.tolist(), _L, read_ahead=4, key=int))


def _balancing():
    from .balancing import balance, round_robin

    lengths = np.tile(_LENGTHS, 8)
    balance(lengths, _L, world_size=2, micro_batches=2, cost=(1.0, 0.01), window=2)
    balance(lengths, _L, 3, world_size=2, micro_batches=1, drop_last=False)
    balance(lengths, _L, world_size=2, micro_batches=2, window=2, padded=True)
    round_robin(lengths, _L, world_size=2, micro_batches=2)


def _formats():
    from .formats import mlperf_bert, tfrecord
    from .packing import bfd_pack

    tfrecord.crc32c(b"123456789", "numba")
    seqs = mlperf_bert.synthetic_sequences(6, seed=0, max_sequence_length=32, max_predictions=4)
    seqs.fingerprints()
    packs = bfd_pack(seqs.lengths, max_sequence_length=32, max_sequences_per_pack=3)
    data, offsets = mlperf_bert.encode_packed(seqs, packs, max_sequences_per_pack=3)
    framed = tfrecord.frame_records(data, offsets, crc="numba")
    records = tfrecord.parse_tfrecord_bytes(framed.tobytes(), crc="numba")
    schema = mlperf_bert.packed_schema(32, 4, 3)
    mlperf_bert.unpack_packed(*schema.decode(records), schema)


def _arrow():
    if importlib.util.find_spec("pyarrow") is None:
        return False
    import pyarrow as pa

    from .formats.arrow import gather_packs, pack_table
    from .formats.arrow._numpy import list_array

    t = pa.table({"input_ids": list_array([[1, 2, 3, 4, 5], [6, 7], [8, 9, 10], [11]], pa.int64())})
    pack_table(t, max_sequence_length=4, position_ids=True, overflow="truncate")
    pack_table(t, max_sequence_length=4, overflow="split")
    two_chunks = pa.Table.from_batches(t.to_batches(max_chunksize=2))
    pack_table(two_chunks, max_sequence_length=4, overflow="truncate")
    pack_table(pa.table({"flags": list_array([[True, False], [True]], pa.bool_())}), max_sequence_length=4)
    # segments in any order (the pipeline's spill files): the row-ordering kernel
    gather_packs(t, ["input_ids"], np.array([2, 0]), np.array([0, 0]), np.array([3, 2]), np.array([0, 2]))
    _megatron_sft(pa)


def _megatron_sft(pa):
    import os
    import tempfile

    from .formats.arrow._numpy import as_arrow, list_array
    from .formats.megatron_sft import write_packed

    with tempfile.TemporaryDirectory() as d:
        for ids_type in (pa.int32(), pa.int64()):
            ids = list_array([[1, 2, 3], [4, 5]], ids_type)
            for mask in ({"loss_mask": list_array([[True, False, True], [False, True]], pa.bool_())},
                         {"answer_start_idx": as_arrow(np.array([1, 0]))}):
                write_packed(pa.table({"input_ids": ids, **mask}), 4, output=os.path.join(d, "w.npy"))


def _pipeline_hashes():
    from .pipeline._hash import hash_into, hash_packed_into

    for dtype in (np.int32, np.int64):
        hash_into(np.zeros(1, dtype=np.uint64), np.zeros(1, np.int64), np.ones(1, np.int64), np.ones(2, dtype=dtype))
        hash_packed_into(np.zeros(1, dtype=np.uint64), np.array([0, 2]), np.array([0, 1]), np.array([2]),
                         np.ones(2, dtype=dtype))


def warm_histogram_methods() -> float:
    """Compile (or load) the kernels of the histogram methods (SPFHP, LPFHP, NNLSHP and
    ``optimal``, its long-context route with a depth limit included) and return the
    seconds it took: what the demo reports apart from the steady-state times."""
    t0 = time.perf_counter()
    _histogram_packing()
    _optimal()
    return time.perf_counter() - t0


# every kernel family, in the order warmup() compiles them (a family returns False when
# its optional dependency is missing). Processes sharing the work take them in this order:
# the costly ones first, and the optimal packer after the histogram packers whose kernels
# it calls (by then compiled where it runs, or in the cache)
def _prefix_trees():
    from .torch.collate._trie import build_trie

    build_trie([np.array([1, 2, 3], np.int64), np.array([1, 2, 4], np.int64), np.array([1], np.int64)])


_FAMILIES = (
    ("histogram packing", _histogram_packing),
    ("blending", _blending),
    ("compute-balanced steps", _balancing),
    ("lower bounds and optimal packing", _optimal),
    ("formats", _formats),
    ("arrow", _arrow),
    ("bucketing", _bucketing),
    ("per-sequence packing", _sequence_packing),
    ("pipeline", _pipeline_hashes),
    ("prefix trees", _prefix_trees),
)


if __name__ == "__main__":  # a helper of compile_in_processes
    sys.exit(helper_main(sys.argv[1:], run_unit))
