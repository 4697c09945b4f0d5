"""A micro-batch as a prefix tree (trie): the examples read as trajectories, each distinct
token prefix laid out once, depth-first (numpy only; the torch batch is ``_tree.py``).

A *trajectory* is one token sequence with the tokens it trains: ``prompt + completion`` of
a group (``prompt_ids``, ``completion_ids``: one completion or a list) or of a pair
(``prompt_ids``, ``chosen_ids``, ``rejected_ids``), or a whole multi-turn sequence
(``input_ids`` with ``completion_mask``, ``labels`` or ``assistant_masks``: several trained
spans). Its *completion* runs from its first trained token to its end; the tokens of it that
are not trained (a tool's output between two turns) are masked, as TRL masks them.

The trie is laid out in depth-first pre-order, so a token's row position is its pre-order
index and its subtree is the run of positions ``[i, end[i])``: token ``j`` attends to ``i``
iff ``i <= j < end[i]`` (``i`` is an ancestor of ``j``, or ``j`` itself). Its position id is
its depth. Two tokens are one node only when their whole prefixes (themselves included) are
equal, so a template that rewrites an earlier turn forks the tree there; a sequence that is
a prefix of another lies inside it.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ..._validate import as_int_array
from ._examples import _ints, _token_ids, read_example


@dataclass(frozen=True)
class Trajectories:
    """The trajectories of a micro-batch, in TRL's order (group-major; pairs: the chosen,
    then the rejected), each with where it came from."""

    sequences: list          # int64 token ids, one array per trajectory
    starts: np.ndarray       # int64: where each trajectory's completion starts
    trained: list            # bool arrays, one per trajectory, over its completion
    example: np.ndarray      # int64: the example each trajectory came from
    member: np.ndarray       # int64: its place in its example (completion j of a group; 0 / 1 of a pair)
    kind: str                # "groups", "pairs" or "trajectories"


@dataclass(frozen=True)
class Trie:
    """A trie laid out depth-first (see the module's docstring)."""

    ids: np.ndarray          # (T,) token ids
    depth: np.ndarray        # (T,) depths (position ids)
    parent: np.ndarray       # (T,) parent's row position, -1 at a root
    end: np.ndarray          # (T,) subtree ends (exclusive)
    node_of: list            # per trajectory, the row position of each of its tokens


def kind_of(example) -> str:
    """``"groups"``, ``"pairs"`` or ``"trajectories"``: how ``examples[0]`` is read."""
    from ._preference import _kind, is_preference

    if is_preference(example):
        return _kind(example)
    return "trajectories"


def read_trajectories(examples, *, ragged_groups: bool = True) -> Trajectories:
    """The trajectories of ``examples`` (all of one kind, that of ``examples[0]``), checked:
    every example trains at least one token."""
    kind = kind_of(examples[0])
    seqs, starts, trained, where, member = [], [], [], [], []
    if kind == "trajectories":
        for k, e in enumerate(examples):
            ids, flags = _read_trajectory(e, k)
            first = int(np.argmax(flags))
            seqs.append(ids)
            starts.append(first)
            trained.append(flags[first:])
            where.append(k)
            member.append(0)
    else:
        from ._preference import _group, _output_order

        with_prompt = kind == "groups" or "prompt_ids" in examples[0]
        groups = [_group(e, k, kind, with_prompt) for k, e in enumerate(examples)]
        sizes = np.array([len(c) for _, c in groups], np.int64)
        if kind == "groups" and not ragged_groups and (sizes != sizes[0]).any():
            j = int(np.flatnonzero(sizes != sizes[0])[0])
            raise ValueError(f"examples[{j}] has {sizes[j]} completions but examples[0] has {sizes[0]}: groups of one "
                             "batch must have the same number of completions (so that token_logps(...) rows view as "
                             "(groups, k)), or pass ragged_groups=True")
        outs = _output_order(kind, sizes)
        slots = [None] * int(sizes.sum())
        for k, ((prompt, comps), out) in enumerate(zip(groups, outs)):
            for j, (c, o) in enumerate(zip(comps, out.tolist())):
                seq = np.concatenate((prompt, c))
                first = max(prompt.size, 1)  # a sequence's first token is predicted by nothing
                flags = np.ones(seq.size - first, bool)
                if flags.size == 0:
                    raise ValueError(f"examples[{k}] has a completion of one token and no prompt: nothing predicts "
                                     "it, so it trains nothing; give the pair a prompt, or leave it out")
                slots[o] = (seq, first, flags, k, j)
        for seq, first, flags, k, j in slots:
            seqs.append(seq)
            starts.append(first)
            trained.append(flags)
            where.append(k)
            member.append(j)
    return Trajectories(seqs, np.array(starts, np.int64), trained, np.array(where, np.int64),
                        np.array(member, np.int64), kind)


def _read_trajectory(example, k: int):
    """``(ids, trained)`` of a whole multi-turn sequence ``examples[k]``."""
    if isinstance(example, Mapping):
        mask = example.get("attention_mask")
        if mask is not None and not (_ints(mask, f"examples[{k}]['attention_mask']", flags=True) != 0).all():
            raise ValueError(f"examples[{k}]['attention_mask'] marks padding: share_prefix lays out trajectories, not "
                             "padded rows; drop the padding (and its completion_mask / labels) before collating")
        if example.get("seq_lengths") is not None:
            raise ValueError(f"examples[{k}] has 'seq_lengths' (a packed row of several sequences): share_prefix "
                             "takes one trajectory per example; give the sequences as separate examples")
        ids, lens, labels = read_example(example, k)
        if lens.size != 1:
            raise ValueError(f"examples[{k}]['position_ids'] restart at 0 (a packed row): share_prefix takes one "
                             "trajectory per example; give the sequences as separate examples")
    else:
        ids = _token_ids(example, f"examples[{k}]")
        labels = ids
    flags = labels != -100
    flags[0] = False  # nothing in the sequence predicts its first token
    if not flags.any():
        raise ValueError(f"examples[{k}] trains no token (its completion_mask / labels / assistant_masks mark none, "
                         "or only its first token, which nothing predicts): mark the tokens to train, or leave the "
                         "example out of the batch")
    return ids, flags


def build_trie(sequences) -> Trie:
    """The trie of ``sequences`` (int64 arrays of at least one token)."""
    from ..._kernels.trie import sorted_lcp, trie_layout

    lengths = np.array([s.size for s in sequences], np.int64)
    offsets = np.zeros(lengths.size + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    tokens = np.concatenate(sequences).astype(np.int64, copy=False) if sequences else np.zeros(0, np.int64)
    order = np.array(sorted(range(len(sequences)), key=lambda i: sequences[i].tolist()), np.int64)
    lcp = sorted_lcp(tokens, offsets, order)
    ids, depth, parent, end, node_of = trie_layout(tokens, offsets, order, lcp)
    return Trie(ids, depth, parent, end, np.split(node_of, offsets[1:-1]))


def token_key(example, key: str, k: int, lengths: list, nested: bool) -> list:
    """``examples[k][key]``, a per-token key, as one float or int array per trajectory of the
    example (``lengths``: how many values each must hold; ``nested``: a list per completion),
    checked."""
    if not isinstance(example, Mapping) or key not in example:
        raise ValueError(f"examples[{k}] has no {key!r}, one of token_keys: every example needs one value per token "
                         "under it")
    value = example[key]
    parts = list(value) if nested else [value]
    if len(parts) != len(lengths):
        raise ValueError(f"examples[{k}][{key!r}] holds {len(parts)} lists for {len(lengths)} completions: give one "
                         "list of per-token values per completion")
    out = []
    for j, (part, n) in enumerate(zip(parts, lengths)):
        where = f"examples[{k}][{key!r}]" + (f"[{j}]" if nested else "")
        arr = _values(part, where)
        if arr.size != n:
            raise ValueError(f"{where} holds {arr.size} values for {n} tokens: a token_keys key holds one value per "
                             "token (of input_ids for a trajectory, of the completion for prompt_ids + "
                             "completion_ids)")
        out.append(arr)
    return out


def _values(part, where: str) -> np.ndarray:
    if hasattr(part, "detach"):
        part = part.detach().cpu().numpy()
    arr = np.asarray(part)
    if arr.ndim != 1 or arr.dtype.kind not in "biuf":
        raise ValueError(f"{where} must be a flat list of numbers (one per token), got "
                         f"{'shape ' + str(arr.shape) if arr.dtype.kind in 'biuf' else arr.dtype}")
    if arr.dtype.kind == "f":
        return arr.astype(np.float32)
    return as_int_array(arr, where) if arr.dtype.kind != "b" else arr.astype(np.int64)


def tree_sizes_of(examples, tree_ids=None):
    """``(tokens, attention pairs)`` of each tree (see :func:`packlib.torch.tree_sizes`)."""
    n = len(examples)
    if tree_ids is None:
        tree_ids = np.arange(n, dtype=np.int64)
    else:
        tree_ids = as_int_array(tree_ids, "tree_ids", minimum=0)
        if tree_ids.size != n:
            raise ValueError(f"tree_ids holds {tree_ids.size} values for {n} examples: give one tree id per example")
    uniq, inv = np.unique(tree_ids, return_inverse=True)
    trajs = read_trajectories(examples)  # checked once, errors naming the example's own index
    of_tree = inv[trajs.example]
    tokens = np.zeros(uniq.size, np.int64)
    pairs = np.zeros(uniq.size, np.int64)
    order = np.argsort(of_tree, kind="stable")
    members = np.split(order, np.cumsum(np.bincount(of_tree, minlength=uniq.size))[:-1])
    for t, mine in enumerate(members):
        trie = build_trie([trajs.sequences[i] for i in mine.tolist()])
        tokens[t] = trie.ids.size
        pairs[t] = int(trie.depth.sum()) + trie.ids.size
    return tokens, pairs


def split_trees_of(examples, max_sequence_length: int, tree_ids=None) -> np.ndarray:
    """New tree ids: every tree whose trie exceeds ``max_sequence_length`` cut at nodes (see
    :func:`packlib.torch.split_trees`)."""
    from ..._kernels.trie import sorted_lcp
    from ..._validate import as_positive_int

    L = as_positive_int(max_sequence_length, "max_sequence_length")
    n = len(examples)
    tree_ids = np.arange(n, dtype=np.int64) if tree_ids is None else as_int_array(tree_ids, "tree_ids", minimum=0)
    if tree_ids.size != n:
        raise ValueError(f"tree_ids holds {tree_ids.size} values for {n} examples: give one tree id per example")
    trajs = read_trajectories(examples)
    seqs = [[] for _ in range(n)]
    for i, k in enumerate(trajs.example.tolist()):
        seqs[k].append(trajs.sequences[i])
    own = np.array([build_trie(s).ids.size for s in seqs], np.int64)  # each example's own trie
    if (own > L).any():
        k = int(np.flatnonzero(own > L)[0])
        raise ValueError(f"examples[{k}] alone lays out {own[k]:,} tokens, over max_sequence_length = {L:,}: a tree is "
                         "cut between examples, never inside one; truncate it, or raise max_sequence_length")
    out = np.empty(n, np.int64)
    next_id = 0
    for t in np.unique(tree_ids).tolist():
        mine = np.flatnonzero(tree_ids == t)
        if build_trie([q for k in mine.tolist() for q in seqs[k]]).ids.size <= L:  # fits: stays whole
            out[mine] = next_id
            next_id += 1
            continue
        order = sorted(mine.tolist(), key=lambda k: seqs[k][0].tolist())  # siblings next to each other
        firsts = [seqs[k][0] for k in order]
        offsets = np.zeros(len(order) + 1, np.int64)
        np.cumsum([f.size for f in firsts], out=offsets[1:])
        lcp = sorted_lcp(np.concatenate(firsts), offsets, np.arange(len(order), dtype=np.int64))
        used = 0
        for r, k in enumerate(order):
            # an example of one trajectory adds its tokens below the node it shares with the previous
            # one; an example of several, its own trie (a bound: it may share more)
            add = int(own[k]) - (int(lcp[r]) if len(seqs[k]) == 1 and r > 0 else 0)
            if r > 0 and used + add > L:  # cut at the node of depth lcp[r]: the next part repeats its path
                next_id += 1
                add = int(own[k])
                used = 0
            used += add
            out[k] = next_id
        next_id += 1
    return out
