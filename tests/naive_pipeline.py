"""A plain, in-memory reference for packlib.pipeline.pack_files: read every row into
Python lists, cut segments by hand, pack their lengths with the registry, shuffle the
packs from the seed, concatenate, split into files."""
from __future__ import annotations

import packlib
from tests.naive_arrow import folded_labels

MASKS = ("completion_mask", "assistant_masks")


def naive_pack_rows(rows, columns, L, *, depth=None, method="bfd", overflow="truncate", seed=0, rows_per_file,
                    position_ids=False, fold_masks=False):
    """``rows``: list of dicts (column -> list or None). Returns a list of files, each a
    list of packed rows (dicts with the columns and ``seq_lengths``; ``position_ids``
    counting from 0 in every segment if asked; ``labels`` with the masks folded in, token
    by token, if asked and a mask is among ``columns``)."""
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
        if position_ids:
            row["position_ids"] = [j for i in ids for j in range(lengths[i])]
        masks = [m for m in MASKS if m in columns] if fold_masks else []
        if masks:
            row["labels"] = [v for i in ids for v in folded_labels(
                segments[i]["input_ids"], segments[i].get("labels"), [segments[i][m] for m in masks])]
        out.append(row)
    return [out[a:a + rows_per_file] for a in range(0, len(out), rows_per_file)]
