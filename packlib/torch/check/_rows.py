"""Where each sequence of a collated batch lies, for :func:`packlib.torch.check_packing`.

A sequence is its *path*: the flat positions (row-major over the batch's ``input_ids``) of
its tokens in order, and which of them are trained. The token at ``path[j]`` is predicted
by the logits at ``path[j - 1]`` in every layout packlib collates: a packed row of
sequences (consecutive positions, each sequence's start where ``position_ids`` is 0), pairs
and groups (``prev_index``: a completion's first token follows its prompt, laid out once
or per sequence), a prefix tree (``prev_index`` is the parent in the trie) and the padded
rows of :class:`packlib.torch.PaddedCollator` (one row per sequence).
"""
from __future__ import annotations


def _walk(prev, end: int) -> list[int]:
    path = []
    while end >= 0:
        path.append(end)
        end = int(prev[end])
    return path[::-1]


def sequence_paths(batch) -> list[tuple[list[int], list[bool]]]:
    """``[(path, trained), ...]``, one per sequence of ``batch`` (in the order
    :func:`packlib.torch.token_logps` gives them for pairs, groups and trees)."""
    ids = batch["input_ids"]
    if "tree_index" in batch:
        return _tree_paths(batch)
    if "prev_index" in batch:
        return _pair_paths(batch)
    if (ids.dim() == 2 and ids.shape[0] > 1) or _is_padded(batch):
        return _padded_paths(batch)
    labels = batch["labels"].reshape(-1).tolist()
    starts = [i for i, p in enumerate(batch["position_ids"].reshape(-1)[: len(labels)].tolist()) if p == 0]
    ends = starts[1:] + [len(labels)]
    return [(list(range(s, e)), [j > s and labels[j] != -100 for j in range(s, e)]) for s, e in zip(starts, ends)]


def _is_padded(batch) -> bool:
    mask = batch.get("attention_mask")
    return mask is not None and mask.dim() == 2 and not mask.is_floating_point()


def _padded_paths(batch):
    ids, labels = batch["input_ids"], batch["labels"]
    mask = batch.get("attention_mask")
    width = ids.shape[1]
    out = []
    for r in range(ids.shape[0]):
        n = int(mask[r].sum()) if mask is not None else width
        row = labels[r].tolist()
        out.append(([r * width + j for j in range(n)], [j > 0 and row[j] != -100 for j in range(n)]))
    return out


def _pair_paths(batch):
    prev = batch["prev_index"].reshape(-1).tolist()
    sid = batch["sequence_ids"].reshape(-1).tolist()
    cm = batch["completion_mask"].reshape(-1).tolist()
    out = []
    for s in range(max(sid) + 1 if sid else 0):
        comp = [p for p in range(len(sid)) if sid[p] == s and cm[p] != 0]
        if not comp:
            continue
        path = _walk(prev, comp[-1])
        scored = set(p for p in comp if prev[p] >= 0)
        out.append((path, [p in scored for p in path]))
    return out


def _tree_paths(batch):
    prev = batch["prev_index"].reshape(-1).tolist()
    index = batch["tree_index"].tolist()
    offsets = batch["tree_offsets"].tolist()
    trained = batch["tree_trained"].tolist()
    out = []
    for i in range(len(offsets) - 1):
        nodes = index[offsets[i]:offsets[i + 1]]
        if not nodes:
            continue
        path = _walk(prev, nodes[-1])
        scored = {p for p, t in zip(nodes, trained[offsets[i]:offsets[i + 1]]) if t and prev[p] >= 0}
        out.append((path, [p in scored for p in path]))
    return out
