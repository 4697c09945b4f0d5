"""Plain-Python references for the figures of a balanced schedule (no numpy, no packlib)."""


def sequence_cost(length, a, b):
    return a * length + b * length * length


def rank_costs(steps, lengths, a, b):
    """``steps``: per step, per rank, per micro-batch, the sample ids. Cost per (step, rank)."""
    return [[sum(sequence_cost(lengths[i], a, b) for mb in rank for i in mb) for rank in step] for step in steps]


def balance(costs):
    """Total cost / (ranks x the sum over steps of the slowest rank's cost)."""
    worst = sum(max(step) for step in costs)
    total = sum(sum(step) for step in costs)
    return total / (len(costs[0]) * worst) if worst else 1.0


def efficiency(steps, lengths, max_sequence_length):
    slots = sum(len(rank) for step in steps for rank in step) * max_sequence_length
    tokens = sum(lengths[i] for step in steps for rank in step for mb in rank for i in mb)
    return tokens / slots if slots else 1.0


def micro_batch_balance(steps, lengths, a, b):
    """Total cost / (ranks x the sum over steps and micro-batch rounds of the slowest rank's
    micro-batch): ranks meet at every micro-batch."""
    total, worst = 0.0, 0.0
    for step in steps:
        for m in range(len(step[0])):
            costs = [sum(sequence_cost(lengths[i], a, b) for i in rank[m]) for rank in step]
            total += sum(costs)
            worst += max(costs)
    return total / (len(steps[0]) * worst) if worst else 1.0


def least_squares_cost(rows, seconds):
    """``(a, b)`` minimising sum((a * sum(l) + b * sum(l**2) - t)**2), unconstrained (the
    normal equations of two unknowns)."""
    x = [sum(r) for r in rows]
    y = [sum(l * l for l in r) for r in rows]
    sxx = sum(v * v for v in x)
    syy = sum(v * v for v in y)
    sxy = sum(u * v for u, v in zip(x, y))
    sxt = sum(u * t for u, t in zip(x, seconds))
    syt = sum(v * t for v, t in zip(y, seconds))
    det = sxx * syy - sxy * sxy
    return (sxt * syy - syt * sxy) / det, (syt * sxx - sxt * sxy) / det


def least_squares_cost_constant(rows, seconds):
    """``(a, b, c)`` minimising sum((a * sum(l) + b * sum(l**2) + c - t)**2), unconstrained
    (the normal equations of three unknowns, by Cramer's rule)."""
    feats = [(sum(r), sum(l * l for l in r), 1) for r in rows]
    m = [[sum(f[i] * f[j] for f in feats) for j in range(3)] for i in range(3)]
    v = [sum(f[i] * t for f, t in zip(feats, seconds)) for i in range(3)]

    def det(a):
        return (a[0][0] * (a[1][1] * a[2][2] - a[1][2] * a[2][1]) - a[0][1] * (a[1][0] * a[2][2] - a[1][2] * a[2][0])
                + a[0][2] * (a[1][0] * a[2][1] - a[1][1] * a[2][0]))

    d = det(m)
    return tuple(det([[v[i] if j == k else m[i][j] for j in range(3)] for i in range(3)]) / d for k in range(3))


def padded_micro_batches(lengths, max_sequence_length, depth=None):
    """Lengths cut into micro-batches of unpacked, right-padded rows: sorted longest first,
    each micro-batch opens at the longest length left and takes the next ones while
    ``sequences x longest <= max_sequence_length`` (and ``sequences <= depth``)."""
    rest = sorted(lengths, reverse=True)
    out = []
    while rest:
        take = max_sequence_length // rest[0]
        if depth is not None:
            take = min(take, depth)
        out.append(rest[:take])
        rest = rest[take:]
    return out


def fewest_padded_micro_batches(lengths, max_sequence_length, depth=None):
    """The fewest micro-batches any partition of ``lengths`` needs (``sequences x longest <=
    max_sequence_length``, ``sequences <= depth``): every partition tried (a few lengths)."""
    from .naive import min_packs_bruteforce

    return min_packs_bruteforce(lengths, max_sequence_length, depth, size=lambda g: len(g) * max(g))


def padded_rank_costs(steps, lengths, a, b):
    """Like :func:`rank_costs`, each micro-batch costing ``sequences x`` the cost of its longest."""
    return [[sum(len(mb) * sequence_cost(max(lengths[i] for i in mb), a, b) for mb in rank if mb) for rank in step]
            for step in steps]


def padded_micro_batch_balance(steps, lengths, a, b):
    """Like :func:`micro_batch_balance`, each micro-batch costing ``sequences x`` the cost of its longest."""
    total, worst = 0.0, 0.0
    for step in steps:
        for m in range(len(step[0])):
            costs = [len(rank[m]) * sequence_cost(max(lengths[i] for i in rank[m]), a, b) if rank[m] else 0.0
                     for rank in step]
            total += sum(costs)
            worst += max(costs)
    return total / (len(steps[0]) * worst) if worst else 1.0
