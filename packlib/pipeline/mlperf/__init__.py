"""MLPerf BERT packing on the out-of-core pipeline: unpacked TFRecords in, packed TFRecords
(``run_pretraining.py --enable_packed_data_mode``) out, what ``python -m packlib
mlperf-bert`` runs (its command is :mod:`packlib.pipeline.mlperf.cli`). Needs numpy only (no pyarrow).

Pass 1 decodes each input file once (its lengths go to the driver; its sequences are cached
uncompressed beside the output), the driver plans with a histogram method exactly as the
in-memory tool did (``plan.assign(lengths, seed).shuffled(seed)``, so the output is the
same, byte for byte), pass 2 spills each file's sequences to the buckets of their output
files, and each output file is assembled from its buckets. Workers hold one input file or
one output file at a time; the driver holds about 40 bytes per sequence (about 650 MB for
the 16.3 M sequences of MLPerf's Wikipedia, instead of the ~21 GB of tokens).

>>> import os, tempfile
>>> from packlib.formats import mlperf_bert as mb
>>> d = tempfile.mkdtemp()
>>> mb.write_unpacked(os.path.join(d, "part-00000"), mb.synthetic_sequences(100, seed=0))
100
>>> meta = pack_mlperf_bert([os.path.join(d, "part-00000")], 3, output_dir=os.path.join(d, "packed"), records_per_file=20)
>>> meta["original_number_of_samples"], meta["new_number_of_samples"], meta["output_files"][0]
(100, 57, 'packed-00000-of-00003.tfrecord')
"""
from __future__ import annotations

from ._run import pack_mlperf_bert

__all__ = ["pack_mlperf_bert"]
