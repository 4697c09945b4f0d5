"""What :func:`packlib.pipeline.pack_files` returns and writes beside the packed files."""
from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["PackResult", "METADATA_NAME", "LEGACY_METADATA_NAME", "read_metadata"]

#: The run's metadata file in the output directory: its name starts with "_" so that readers
#: of the directory (pyarrow, Polars, DuckDB, Spark) skip it as they skip "_SUCCESS".
METADATA_NAME = "_packing_metadata.json"
#: The name packlib 0.2 wrote; packlib still reads it.
LEGACY_METADATA_NAME = "packing_metadata.json"


@dataclass(frozen=True, eq=False, repr=False)
class PackResult:
    """What :func:`pack_files` wrote, and how the run went.

    Attributes
    ----------
    output : str
        The output directory.
    files : tuple of str
        The part files, in order.
    num_rows, num_sequences, num_packs, num_tokens : int
        Input rows, packed sequences (segments: non-empty rows, or their pieces with
        ``overflow="split"``), packs (output rows) and tokens.
    max_sequence_length : int
    dropped_rows, truncated_tokens : int
        Empty rows left out (null rows among them); tokens cut off by ``overflow="truncate"``.
    null_rows : int
        Null rows (dropped, and counted in ``dropped_rows``).
    columns, left_out_columns : tuple of str
        The packed list columns; the input columns not in the output.
    seconds : dict
        Wall time of each pass (``lengths``, ``plan``, ``spill``, ``assemble``, ``verify``) and ``total``.
    peak_memory : int
        Sum over the driver and every worker process of its peak resident bytes.
    verified : bool
        Whether the exactly-once check ran (it raises when it fails).
    packs : Packs
        The packs over sequence ids (input order), before shuffling into files.
    position_ids : bool
        Whether the output has ``position_ids``.
    folded_masks : tuple of str
        The masks folded into the output's ``labels`` (empty: none were).
    carried_columns : tuple of str
        The columns carried whole with their rows (``carry=``; empty: none).
    """

    output: str
    files: tuple
    num_rows: int
    num_sequences: int
    num_packs: int
    num_tokens: int
    max_sequence_length: int
    max_sequences_per_pack: int | None
    method: str
    dropped_rows: int
    truncated_tokens: int
    columns: tuple
    left_out_columns: tuple
    engine: str
    workers: int
    seconds: dict
    peak_memory: int
    peak_memory_by_process: dict = field(default_factory=dict)
    verified: bool = False
    packs: object = None
    null_rows: int = 0
    position_ids: bool = False
    folded_masks: tuple = ()
    carried_columns: tuple = ()

    @property
    def output_columns(self) -> tuple:
        """The columns of every output file, in order."""
        return _output_columns(self.columns, self.position_ids, self.folded_masks, self.carried_columns)

    @property
    def efficiency(self) -> float:
        """Tokens / (packs x max_sequence_length)."""
        slots = self.num_packs * self.max_sequence_length
        return self.num_tokens / slots if slots else 1.0

    @property
    def lower_bound(self) -> int:
        """``ceil(tokens / max_sequence_length)``: no packing has fewer packs."""
        return -(-self.num_tokens // self.max_sequence_length)

    def summary(self) -> str:
        """A few lines for people: sizes, efficiency, time per pass, peak memory."""
        s = self.seconds
        lines = [
            f"packed {self.num_sequences:,} sequences ({self.num_tokens:,} tokens) from {self.num_rows:,} rows "
            f"into {self.num_packs:,} packs of {self.max_sequence_length:,} ({self.method}"
            f"{'' if self.max_sequences_per_pack is None else f', at most {self.max_sequences_per_pack} per pack'}): "
            f"{100 * self.efficiency:.3f} % efficiency, {self.num_packs - self.lower_bound:,} packs above "
            f"ceil(tokens/L) = {self.lower_bound:,}",
            f"wrote {_count(len(self.files), 'file')} to {self.output} (columns {', '.join(self.output_columns)})",
        ]
        if self.folded_masks:
            lines.append(f"labels: -100 wherever {' or '.join(self.folded_masks)} is 0 (kept through a Trainer's "
                         "column filter, which drops the masks)")
        if self.carried_columns:
            lines.append(f"carried whole with their rows: {', '.join(self.carried_columns)}")
        if self.left_out_columns:
            lines.append(f"left out (not list columns, or not selected): {', '.join(self.left_out_columns)}")
        if self.dropped_rows or self.truncated_tokens:
            nulls = f" ({self.null_rows:,} of them null)" if self.null_rows else ""
            lines.append(f"dropped {self.dropped_rows:,} empty rows{nulls}; truncated {self.truncated_tokens:,} tokens")
        if self.verified:
            lines.append("verified: every input sequence appears exactly once in the output")
        lines.append("seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in s.items()))
        lines.append(f"peak memory: {self.peak_memory / 2**20:,.0f} MiB (sum of the peak resident memory of "
                     f"{_count(len(self.peak_memory_by_process), 'process').replace('processs', 'processes')}; "
                     f"{self.engine} engine, {_count(self.workers, 'worker')})")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__ if k not in ("packs", "peak_memory_by_process")}
        d.update(files=list(self.files), columns=list(self.columns), left_out_columns=list(self.left_out_columns),
                 folded_masks=list(self.folded_masks), carried_columns=list(self.carried_columns),
                 efficiency=self.efficiency)
        return d

    def __repr__(self) -> str:
        return (f"PackResult({self.num_sequences:,} sequences -> {self.num_packs:,} packs in {_count(len(self.files), 'file')}, "
                f"efficiency={100 * self.efficiency:.3f}%, output={self.output!r})")


def _count(n: int, unit: str) -> str:
    return f"{n:,} {unit}{'' if n == 1 else 's'}"


def _output_columns(cols, position_ids, folded_masks, carried=()) -> tuple:
    """The packed columns, ``seq_lengths``, ``position_ids`` if added, the carried columns,
    ``labels`` if folding adds it (the order of :func:`packlib.formats.arrow.pack_table`)."""
    extra = ("position_ids",) if position_ids else ()
    extra += tuple(carried)
    extra += ("labels",) if folded_masks and "labels" not in cols else ()
    return (*cols, "seq_lengths", *extra)


def _metadata(shards, row_counts, cols, left_out, L, depth, method, overflow, seed, R, packs, segs, names, stats,
              null_rows=0, position_ids=False, folded_masks=(), carried=()):
    tokens = int(packs.num_tokens)
    P = packs.num_packs
    return {
        "format": "packlib packed parquet",
        "columns": list(_output_columns(cols, position_ids, folded_masks, carried)),
        "position_ids": bool(position_ids),
        "folded_masks": list(folded_masks),
        "carried_columns": list(carried),
        "left_out_columns": list(left_out),
        "inputs": [{"path": s.path, "rows": int(n)} for s, n in zip(shards, row_counts)],
        "options": {"max_sequence_length": L, "max_sequences_per_pack": depth, "method": method,
                    "overflow": overflow, "seed": seed, "rows_per_file": R},
        "plan": {
            "rows": int(row_counts.sum()), "sequences": int(packs.num_sequences), "packs": P, "tokens": tokens,
            "efficiency": tokens / (P * L) if P else 1.0, "padding_tokens": P * L - tokens,
            "lower_bound_packs": -(-tokens // L), "dropped_empty_rows": int(segs.dropped_rows), "dropped_null_rows": int(null_rows),
            "truncated_tokens": int(segs.truncated_tokens),
        },
        "files": [{"name": n, "packs": int(s[0]), "sequences": int(s[1]), "tokens": int(s[2])}
                  for n, s in zip(names, stats)],
    }


def read_metadata(directory) -> dict:
    """The metadata :func:`~packlib.pipeline.pack_files` wrote beside the packed files.

    Parameters
    ----------
    directory : str or os.PathLike
        An output directory of ``pack_files``. ``_packing_metadata.json`` is read, or, from
        an output of packlib 0.2, ``packing_metadata.json``.

    Returns
    -------
    dict
        The inputs, options, plan figures and files of the run.
    """
    import json
    import os

    from ._errors import InputError

    for name in (METADATA_NAME, LEGACY_METADATA_NAME):
        path = os.path.join(os.fspath(directory), name)
        if os.path.exists(path):
            try:
                with open(path, encoding="utf-8") as fh:
                    return json.load(fh)
            except ValueError as exc:
                raise InputError(f"{path}: not valid JSON ({exc}); the output directory is damaged") from None
    raise InputError(f"{os.fspath(directory)}: no {METADATA_NAME} (or {LEGACY_METADATA_NAME}): not an output of pack_files")


PackResult.__module__ = "packlib.pipeline"  # pickles and reprs name the public path, which never moves
