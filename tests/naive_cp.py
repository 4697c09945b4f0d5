"""Plain-Python workloads and checks for packlib.context_parallel (no packlib inside):
seeded DP×CP steps, a validator of Megatron's ``sample_id_groups`` layout, and the
critical path of a layout computed rank by rank."""
import math

import numpy as np


def long_tail_step(world_size, cap, seed=0, max_length=131072):
    """About ``4 · world_size · cap`` tokens of documents 1k..``max_length`` (capped at
    ``world_size · cap``), Pareto-tailed: most documents a few thousand tokens, a few long."""
    rng = np.random.default_rng(seed)
    top = min(max_length, world_size * cap)
    out, total = [], 0
    while total < 4 * world_size * cap:
        n = int(min(top, 1024 * (1 + rng.pareto(1.2))))
        out.append(n)
        total += n
    return np.array(out, np.int64)


def sft_mix_step(world_size, cap, seed=0, max_length=131072):
    """About ``4 · world_size · cap`` tokens: 90 % of documents 1k..4k (chat turns), 10 %
    long documents uniform in 16k..``max_length`` (capped at ``world_size · cap``)."""
    rng = np.random.default_rng(seed)
    top = min(max_length, world_size * cap)
    out, total = [], 0
    while total < 4 * world_size * cap:
        n = int(rng.integers(16384, top + 1)) if rng.random() < 0.1 else int(rng.integers(1024, 4097))
        out.append(min(n, top))
        total += out[-1]
    return np.array(out, np.int64)


def megatron_group_sizes(dp_cp_size, min_cp_size=1):
    """The dynamic CP group sizes Megatron-LM builds, replayed from its source (dev branch,
    ``megatron/core/parallel_state.py``, ``initialize_model_parallel`` with
    ``dynamic_context_parallel``): ``create_dynamic_dp_cp_groups`` makes a group of every
    size ``2**i`` for ``i in range(int(log2(len(ranks))))`` with ``2**i >= min_cp_size``,
    over the ``dp × cp`` ranks in consecutive blocks, and ``get_dynamic_data_context_parallel_groups``
    answers the full size with the data-parallel-with-CP group. Any other size is a
    ``KeyError`` there."""
    sizes = [2**i for i in range(int(math.log2(dp_cp_size))) if 2**i >= min_cp_size]
    if dp_cp_size not in sizes:
        sizes.append(dp_cp_size)
    return sizes


def check_layout(groups, sample_id_seqlens, cap, world_size, min_cp_size=1, max_num_seqs=None, padding_sequence=False):
    """Raise AssertionError unless ``groups`` is a valid Megatron dynamic-CP layout: every
    id once, every GPU some ids in every micro-batch, each sequence on an aligned block of a
    group size Megatron builds whose GPUs hold the same ids, tokens per GPU within ``cap``,
    at most ``max_num_seqs`` sequences a GPU (one of them Megatron's padding sequence with
    ``padding_sequence``). Returns ``(cp, micro_batch, first_rank)`` dicts by sample id."""
    length = dict(sample_id_seqlens)
    assert len(length) == len(sample_id_seqlens), "duplicate ids in the input"
    sizes = megatron_group_sizes(world_size, min_cp_size)
    cp, mbs, firsts = {}, {}, {}
    for m, mb in enumerate(groups):
        assert len(mb) == world_size, f"micro-batch {m} has {len(mb)} lists, not {world_size}"
        r = 0
        while r < world_size:
            ids = mb[r]
            assert ids, f"GPU {r} holds nothing in micro-batch {m}"
            c = 1
            while r + c < world_size and ids[0] in mb[r + c]:
                c += 1
            assert c in sizes and r % c == 0, \
                f"micro-batch {m}: ids {ids} on GPUs {r}..{r + c - 1}: not an aligned group"
            for q in range(r, r + c):
                assert sorted(mb[q]) == sorted(ids), f"micro-batch {m}: GPUs of one group hold different ids"
            assert sum(length[i] for i in ids) <= c * cap, f"micro-batch {m}: GPUs {r}.. hold over {cap} tokens each"
            if max_num_seqs is not None:
                assert len(ids) + bool(padding_sequence) <= max_num_seqs, \
                    f"micro-batch {m}: GPU {r} holds {len(ids)} sequences (and the padding one: {padding_sequence})"
            for i in ids:
                assert i not in cp, f"id {i} appears twice"
                cp[i], mbs[i], firsts[i] = c, m, r
            r += c
    assert set(cp) == set(length), "some ids are missing"
    return cp, mbs, firsts


def critical_path(groups, sample_id_seqlens, cost):
    """The step's time when GPUs of a group start a micro-batch together, rank by rank."""
    a, b, e = cost
    length = dict(sample_id_seqlens)
    world = len(groups[0]) if groups else 0
    finish = [0.0] * world
    for mb in groups:
        new = list(finish)
        r = 0
        while r < world:
            ids = mb[r]
            c = 1
            while r + c < world and mb[r + c] == ids:
                c += 1
            start = max(finish[r:r + c])
            work = sum((a * length[i] + b * length[i] ** 2 + e * length[i] * (c - 1)) / c for i in ids)
            for q in range(r, r + c):
                new[q] = start + work
            r += c
        finish = new
    return max(finish) if finish else 0.0


def micro_batch_bound(lengths, world_size, cap):
    """``⌈Σ l / (world_size · cap)⌉``: no layout holds the step in fewer micro-batches."""
    return math.ceil(int(np.sum(lengths)) / (world_size * cap))


def evaluate(groups, lengths, cap, cost, sizes=None):
    """Figures of any scheduler's ``sample_id_groups`` (ids index ``lengths``), valid or not.

    A sample's CP size is the number of GPUs of its micro-batch listing it; a GPU's cost is
    ``Σ (a·l + b·l² + e·l·(c − 1)) / c`` over its samples. GPUs sharing a sample in a
    micro-batch (joined transitively) start it together, when the last of them has
    finished the micro-batch before. Returns a dict: ``path`` (that critical path),
    ``memory`` (most tokens on a GPU in a micro-batch, over ``cap``), ``misaligned``
    (samples not on an aligned block of an allowed size), ``empty`` (GPU lists with
    nothing), ``micro_batches``, ``ids`` (every id, as listed, once per micro-batch)."""
    a, b, e = cost
    world = len(groups[0]) if groups else 0
    finish = [0.0] * world
    memory, misaligned, empty, ids = 0.0, 0, 0, []
    for mb in groups:
        ranks_of = {}
        for r, lst in enumerate(mb):
            empty += not lst
            for i in lst:
                ranks_of.setdefault(i, []).append(r)
        parent = list(range(world))

        def root(x):
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        work, tokens = [0.0] * world, [0.0] * world
        for i, ranks in ranks_of.items():
            ids.append(i)
            c, n = len(ranks), int(lengths[i])
            if sizes is not None and (c not in sizes or ranks != list(range(ranks[0], ranks[0] + c)) or ranks[0] % c):
                misaligned += 1
            for r in ranks:
                work[r] += (a * n + b * n * n + e * n * (c - 1)) / c
                tokens[r] += n / c
                parent[root(r)] = root(ranks[0])
        start = {}
        for r in range(world):
            start[root(r)] = max(start.get(root(r), 0.0), finish[r])
        finish = [start[root(r)] + work[r] for r in range(world)]
        memory = max(memory, max(tokens) / cap if tokens else 0.0)
    return {"path": max(finish) if finish else 0.0, "memory": memory, "misaligned": misaligned, "empty": empty,
            "micro_batches": len(groups), "ids": ids}
