"""The ``python -m packlib mlperf-bert`` command: unpacked MLPerf BERT TFRecords in, packed
TFRecords out, on the out-of-core pipeline (:func:`packlib.pipeline.mlperf.pack_mlperf_bert`),
so memory stays bounded whatever the dataset size.

>>> import argparse
>>> parser = argparse.ArgumentParser()
>>> configure_parser(parser)
>>> args = parser.parse_args(["--input-glob", "data/part-*", "--output-dir", "packed"])
>>> args.method, args.max_sequences_per_pack, args.seed, args.records_per_file
('nnls', 3, 12345, 50000)
"""
from __future__ import annotations

import argparse
import glob

__all__ = ["configure_parser", "run"]


def _positive(text: str) -> int:
    v = int(text)
    if v < 1:
        raise argparse.ArgumentTypeError("must be >= 1")
    return v


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Add the ``mlperf-bert`` options to ``parser``.

    Parameters
    ----------
    parser : argparse.ArgumentParser
    """
    from ... import methods

    parser.add_argument("--input-glob", required=True, action="append",
                        help="unpacked TFRecord files (glob; repeatable); files are read in sorted order")
    parser.add_argument("--output-dir", required=True, help="directory for the packed files and packing_metadata.json")
    parser.add_argument("--method", default="nnls", choices=list(methods.names("histogram")))
    parser.add_argument("--max-sequences-per-pack", type=_positive, default=3)
    parser.add_argument("--seed", type=int, default=12345, help="seed for assigning and shuffling packs")
    parser.add_argument("--records-per-file", type=_positive, default=50_000)
    parser.add_argument("--workers", type=_positive, default=1,
                        help="processes for reading, writing and verifying files (the output is the same for any value)")
    parser.add_argument("--engine", choices=["local", "ray"], default="local",
                        help="local: a process pool on this machine; ray: Ray tasks (pip install 'packlib[ray]')")
    parser.add_argument("--ray-address", default=None, help="join this Ray cluster (implies --engine ray)")
    parser.add_argument("--prefix", default="packed", help="output file names: <prefix>-<i>-of-<n>.tfrecord")
    parser.add_argument("--compression", choices=["none", "gzip"], default="none",
                        help="gzip the output (and expect gzip input when the input name ends in .gz)")
    parser.add_argument("--verify", action=argparse.BooleanOptionalAction, default=True,
                        help="re-read the output and check that it holds every input sequence exactly once (default on)")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="progress bars (default: when stderr is a terminal)")


def run(args: argparse.Namespace) -> int:
    """Run the ``mlperf-bert`` command; returns the exit code (0 on success, 1 if the
    output fails verification). Bad input raises ``ValueError`` with a one-line message.

    Parameters
    ----------
    args : argparse.Namespace
        Parsed by a parser that :func:`configure_parser` set up.
    """
    import sys

    from .._errors import PipelineError, VerifyError
    from ._run import pack_mlperf_bert

    inputs = sorted({p for g in args.input_glob for p in glob.glob(g)})
    if not inputs:
        raise ValueError(f"--input-glob {args.input_glob} matches no files")
    engine = "ray" if getattr(args, "ray_address", None) else getattr(args, "engine", "local")
    try:
        pack_mlperf_bert(inputs, args.max_sequences_per_pack, output_dir=args.output_dir, method=args.method, seed=args.seed,
                         records_per_file=args.records_per_file, prefix=args.prefix,
                         compression=None if args.compression == "none" else "gzip", engine=engine,
                         workers=args.workers, ray_address=getattr(args, "ray_address", None),
                         progress=args.progress, verify=args.verify, log=lambda msg: print(msg, flush=True))
    except PipelineError as exc:  # a worker died, or the output failed verification: nothing was written
        if getattr(args, "debug", False):
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 1 if isinstance(exc, VerifyError) else 2
    return 0
