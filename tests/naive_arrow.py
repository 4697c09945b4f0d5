"""Plain-Python reference for packlib.formats.arrow: segments, gathering, decoding.

Everything works on Python lists (``table.to_pydict()``), one row at a time, so it is
obviously right and independent of the Arrow layout (chunks, offsets, list kinds).
"""


def segments(lengths, L, overflow):
    """(row, start, length) for every segment, in row order; empty rows dropped."""
    out = []
    if overflow == "error" and any(n > L for n in lengths):
        raise ValueError("a row is longer than L")
    for r, n in enumerate(lengths):
        if n == 0:
            continue
        if overflow in ("error", "truncate"):
            out.append((r, 0, min(n, L)))
        else:
            s = 0
            while s < n:
                out.append((r, s, min(L, n - s)))
                s += L
    return out


def dropped_and_truncated(lengths, L, overflow):
    dropped = sum(1 for n in lengths if n == 0)
    truncated = sum(max(n - L, 0) for n in lengths) if overflow == "truncate" else 0
    return dropped, truncated


def gather(rows, columns, packs, position_ids=False):
    """The packed columns as lists: ``rows`` maps column -> list of rows (``None`` = null
    row), ``packs`` is a list of packs, each a list of (row, start, length)."""
    out = {c: [] for c in columns}
    out["seq_lengths"] = []
    if position_ids:
        out["position_ids"] = []
    for pack in packs:
        for c in columns:
            packed = []
            for r, s, n in pack:
                packed.extend(rows[c][r][s:s + n])
            out[c].append(packed)
        out["seq_lengths"].append([n for _, _, n in pack])
        if position_ids:
            out["position_ids"].append([j for _, _, n in pack for j in range(n)])
    return out


def split_packed(packed, column):
    """The segments of a packed column: a list (per packed row) of lists of value lists."""
    out = []
    for values, lens in zip(packed[column], packed["seq_lengths"]):
        segs, o = [], 0
        for n in lens:
            segs.append(values[o:o + n])
            o += n
        assert o == len(values), "seq_lengths must add up to the packed row's length"
        out.append(segs)
    return out



def folded_labels(row_ids, row_labels, masks):
    """``labels`` of one row with the loss masks folded in: -100 wherever a mask is 0, else
    the given label (the token id when there are no labels)."""
    base = row_labels if row_labels is not None else row_ids
    return [-100 if any(not m[k] for m in masks) else base[k] for k in range(len(row_ids))]
