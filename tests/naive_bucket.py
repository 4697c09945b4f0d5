"""Plain-Python reference for readahead bucketing (infinibatch 0.1.1 semantics), written
from the description in shared/reference/bucketing.md, for checking packlib.bucketing."""
import random


def naive_bucket(items, read_ahead, key, batch_size, boundary_key=None, shuffle=True, seed=0):
    """All batches of a finite list, in serving order."""
    rnd = random.Random(seed) if shuffle else None
    out = []
    start = 0
    while True:
        window = list(items[start : start + read_ahead])
        start += read_ahead
        if key is not None:
            # stable, longest first: decorate with negative position-free key via reverse sort
            window = sorted(window, key=key, reverse=True)
        batches = []
        cur, size, prev = [], None, None
        for x in window:
            b = boundary_key(x) if boundary_key else None
            if cur and boundary_key and b != prev:
                batches.append(cur)
                cur = []
            if not cur:
                size = batch_size if isinstance(batch_size, int) else batch_size(x)
            cur.append(x)
            prev = b
            if len(cur) >= size:
                batches.append(cur)
                cur = []
        if cur:
            batches.append(cur)
        if rnd is not None:
            rnd.shuffle(batches)
        out.extend(batches)
        if len(window) < read_ahead:
            return out


def naive_bucket_lengths(lengths, read_ahead, batch_size=None, max_tokens=None, shuffle=True, seed=0):
    """Batches of sample ids for an array of lengths."""
    lengths = [int(v) for v in lengths]
    bs = batch_size if batch_size is not None else (lambda i: max_tokens // lengths[i])
    return naive_bucket(list(range(len(lengths))), read_ahead, lengths.__getitem__, bs, shuffle=shuffle, seed=seed)


def naive_shard(window_batches, rank, world_size, remainder):
    """One rank's share of one window's batches."""
    nb = len(window_batches)
    if remainder == "drop":
        k = nb // world_size
        return [window_batches[rank + world_size * j] for j in range(k)]
    k = -(-nb // world_size)
    return [window_batches[(rank + world_size * j) % nb] for j in range(k)]
