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
