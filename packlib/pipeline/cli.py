"""``python -m packlib pack-dataset INPUT... --output DIR --max-sequence-length N ...``.

Every expected failure prints one line ``error: ...`` on stderr and exits with status 2
(1 when the output fails verification), with no traceback (``--debug`` shows it) and
nothing written to the output directory.

>>> import argparse
>>> parser = argparse.ArgumentParser()
>>> configure_parser(parser)
>>> args = parser.parse_args(["data/*.parquet", "--output", "packed", "--seq-length", "2048", "--overflow", "split"])
>>> args.max_sequence_length, args.overflow, args.engine, args.format
(2048, 'split', 'local', 'parquet')
"""
from __future__ import annotations

import argparse
import sys

__all__ = ["configure_parser", "run"]


def _positive(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {v}")
    return v


def _names(text: str) -> list:
    names = [n.strip() for n in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(f"must be column names separated by commas, got {text!r}")
    return names


def _depth(text: str):
    if text.lower() in ("none", "unlimited"):
        return None
    return _positive(text)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Add the ``pack-dataset`` arguments to ``parser``.

    Parameters
    ----------
    parser : argparse.ArgumentParser
        The sub-command's parser (``python -m packlib pack-dataset``).
    """
    from .. import methods

    parser.description = ("Pack Parquet files, datasets save_to_disk directories or unpacked MLPerf BERT TFRecords "
                          "into packed Parquet files (part-NNNNN-of-NNNNN.parquet + _packing_metadata.json), in "
                          "bounded memory, on this machine or a Ray cluster. The output is the same whatever the "
                          "engine and worker count. With --format megatron-sft: Megatron-Bridge's packed .npy file "
                          "and its metadata list instead (packed in memory).")
    parser.add_argument("inputs", nargs="+", metavar="INPUT", help="Parquet / Arrow / TFRecord files, directories or globs")
    parser.add_argument("--output", "-o", required=True, metavar="DIR", help="output directory (must not exist, or be empty)")
    parser.add_argument("--max-sequence-length", "--seq-length", dest="max_sequence_length", type=_positive,
                        required=True, metavar="N", help="pack capacity in tokens (--seq-length: TRL's name)")
    parser.add_argument("--columns", nargs="+", metavar="C", help="list columns to pack together (default: every list column)")
    parser.add_argument("--carry", type=_names, action="extend", default=None, metavar="C[,C...]",
                        help="columns carried whole with their rows, not packed token by token (e.g. "
                             "pixel_values,image_grid_thw, or encoded images); needs --overflow error")
    parser.add_argument("--method", default=None, choices=list(methods.names()) + ["nnlshp"],
                        help="packing method (default bfd; optimal with --format megatron-sft)")
    parser.add_argument("--max-sequences-per-pack", type=_depth, default=None, metavar="K",
                        help="at most K sequences per pack (default unlimited)")
    parser.add_argument("--overflow", choices=["error", "truncate", "split"], default="error",
                        help="rows longer than N: stop with an error naming the file and row (default, as in "
                             "pack_files and pack_table), keep the first N tokens, or cut them into pieces")
    parser.add_argument("--position-ids", action=argparse.BooleanOptionalAction, default=True,
                        help="add position_ids restarting at every packed sequence (default on: a Trainer with "
                             "remove_unused_columns=True drops seq_lengths, and PackedCollator then splits rows "
                             "by position_ids; --no-position-ids: TRL's columns only)")
    parser.add_argument("--fold-masks", action=argparse.BooleanOptionalAction, default=True,
                        help="where completion_mask or assistant_masks is packed, also write labels with -100 "
                             "wherever a mask is 0 (default on: a Trainer drops the masks; --no-fold-masks: the "
                             "masks alone)")
    parser.add_argument("--engine", choices=["local", "ray"], default="local",
                        help="local: a process pool on this machine; ray: Ray tasks (pip install 'packlib[ray]')")
    parser.add_argument("--workers", type=_positive, default=None, metavar="N",
                        help="worker processes (default: CPU count; with ray and no address, the local Ray's CPUs)")
    parser.add_argument("--ray-address", default=None, metavar="ADDR", help="join this Ray cluster (e.g. auto)")
    parser.add_argument("--rows-per-file", type=_positive, default=None, metavar="N",
                        help="packs per output file (default: about 32 MiB of tokens per file)")
    parser.add_argument("--seed", type=int, default=0, help="seed for the packs' order (default 0)")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="progress bars per pass (default: when stderr is a terminal)")
    parser.add_argument("--verify", action=argparse.BooleanOptionalAction, default=True,
                        help="re-read the output and check every input sequence appears exactly once (default on)")
    parser.add_argument("--format", choices=["parquet", "megatron-sft"], default="parquet",
                        help="parquet: a directory of packed Parquet files (default); megatron-sft: Megatron-Bridge's "
                             "packed .npy file (--output FILE.npy; input_ids and loss_mask or answer_start_idx "
                             "columns), packed in this process")
    parser.add_argument("--metadata-output", default=None, metavar="FILE",
                        help="with --format megatron-sft: the packing metadata JSON list to append to")
    if not any("--debug" in a.option_strings for a in parser._actions):  # the main parser may share it
        parser.add_argument("--debug", action="store_true", help="show tracebacks")


def run(args: argparse.Namespace) -> int:
    """Run ``pack-dataset``; returns the exit status.

    Parameters
    ----------
    args : argparse.Namespace
        Parsed by a parser that :func:`configure_parser` set up.
    """
    from ._signals import armed

    if args.ray_address and args.engine != "ray":
        args.engine = "ray"
    megatron = getattr(args, "format", "parquet") == "megatron-sft"
    if not megatron and getattr(args, "metadata_output", None) is not None:
        print("error: --metadata-output goes with --format megatron-sft", file=sys.stderr)
        return 2
    if megatron and not (getattr(args, "position_ids", True) and getattr(args, "fold_masks", True)):
        print("error: --no-position-ids and --no-fold-masks go with --format parquet (megatron-sft writes "
              "Megatron-Bridge's own columns)", file=sys.stderr)
        return 2
    if megatron and getattr(args, "carry", None):
        print("error: --carry goes with --format parquet (Megatron-Bridge's packed file holds tokens only)",
              file=sys.stderr)
        return 2
    args.method = args.method or ("optimal" if megatron else "bfd")
    with armed():  # SIGINT, SIGTERM, SIGHUP: one line and 128 + signal; after publishing, the command ends as it would
        return _run_megatron_sft(args) if megatron else _run_files(args)


def _run_files(args: argparse.Namespace) -> int:
    from . import PipelineError, VerifyError, pack_files
    from ._errors import report_interrupt

    try:
        result = pack_files(args.inputs, args.max_sequence_length, args.max_sequences_per_pack, output=args.output,
                            columns=args.columns, carry=getattr(args, "carry", None), method=args.method, overflow=args.overflow,
                            position_ids=getattr(args, "position_ids", True),
                            fold_masks=getattr(args, "fold_masks", True), engine=args.engine, workers=args.workers,
                            ray_address=args.ray_address,
                            rows_per_file=args.rows_per_file, seed=args.seed, progress=args.progress,
                            verify=args.verify)
    except (PipelineError, ValueError, TypeError, OSError, MemoryError) as exc:
        if getattr(args, "debug", False):
            raise
        msg = " ".join(str(exc).split()) or type(exc).__name__
        if isinstance(exc, OSError) and getattr(exc, "filename", None) and str(exc.filename) not in msg:
            msg = f"{exc.filename}: {msg}"
        print(f"error: {msg}", file=sys.stderr)
        return 1 if isinstance(exc, VerifyError) else 2
    except KeyboardInterrupt as exc:
        return report_interrupt(exc)
    print(result.summary())
    return 0


def _run_megatron_sft(args: argparse.Namespace) -> int:
    """``--format megatron-sft``: one .npy file (and the metadata list), written in this process."""
    from ._megatron_sft import pack_files_megatron_sft

    if args.engine != "local" or args.rows_per_file is not None or args.workers is not None:
        print("error: --format megatron-sft writes one file in this process; leave out --engine, --workers, "
              "--ray-address and --rows-per-file", file=sys.stderr)
        return 2
    from ._errors import report_interrupt

    try:
        r = pack_files_megatron_sft(args.inputs, args.max_sequence_length, args.max_sequences_per_pack,
                                    output=args.output, metadata_output=args.metadata_output,
                                    method=args.method, overflow=args.overflow, seed=args.seed)
    except (ValueError, TypeError, OSError, MemoryError) as exc:
        if getattr(args, "debug", False):
            raise
        print(f"error: {' '.join(str(exc).split()) or type(exc).__name__}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        return report_interrupt(exc)
    meta = f"; metadata appended to {r['metadata_output']}" if r["metadata_output"] else ""
    print(f"{r['packs']:,} packs of {r['sequences']:,} sequences ({r['packs_over_bound']:,} above "
          f"ceil(tokens / {args.max_sequence_length:,}) = {r['bound']:,}) from {r['files']:,} file(s) "
          f"written to {r['output']}{meta}")
    return 0
