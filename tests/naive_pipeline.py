"""A plain, in-memory reference for packlib.pipeline.pack_files: read every row into
Python lists, cut segments by hand, pack their lengths with the registry, shuffle the
packs from the seed, concatenate, split into files."""
from __future__ import annotations

import packlib


def naive_pack_rows(rows, columns, L, *, depth=None, method="bfd", overflow="truncate", seed=0, rows_per_file):
    """``rows``: list of dicts (column -> list or None). Returns a list of files, each a
    list of packed rows (dicts with the columns and ``seq_lengths``)."""
    segments = []
    for r in rows:
        n = len(r[columns[0]] or [])
        if n == 0:
            continue
        if overflow == "split":
            for a in range(0, n, L):
                segments.append({c: list(r[c][a:a + L]) for c in columns})
        else:
            segments.append({c: list(r[c][:L]) for c in columns})
    lengths = [len(s[columns[0]]) for s in segments]
    packs = packlib.methods.pack(lengths, L, depth, method=method, seed=seed).shuffled(seed)
    out = []
    for ids in packs:
        row = {c: [v for i in ids for v in segments[i][c]] for c in columns}
        row["seq_lengths"] = [lengths[i] for i in ids]
        out.append(row)
    return [out[a:a + rows_per_file] for a in range(0, len(out), rows_per_file)]
