"""MLPerf BERT pre-training data: read unpacked TFRecords, pack them, write packed TFRecords
for ``run_pretraining.py --enable_packed_data_mode`` (no TensorFlow needed).

Unpacked records hold one sequence pair each: ``input_ids``, ``input_mask``,
``segment_ids`` (``L`` = 512 values), ``masked_lm_positions``, ``masked_lm_ids``,
``masked_lm_weights`` (76 values, weights float), ``next_sentence_labels`` (1 value).

A packed record holds up to ``k`` (default 3) sequences:

========================  ======  =====================================================
feature                   length  content
========================  ======  =====================================================
input_ids                 L       the sequences' tokens concatenated, then 0
input_mask                L       sequence index ``1..k`` over each sequence, 0 = pad
segment_ids               L       concatenated
positions                 L       ``0..L1-1, 0..L2-1, ...``, then 0
masked_lm_positions       P + k   each prediction's position plus its sequence's offset
masked_lm_ids             P + k   concatenated
masked_lm_weights         P + k   (float) the prediction's sequence index, 0.0 = pad
next_sentence_positions   k       offset of each sequence ([CLS]), 0 = unused
next_sentence_labels      k       NSP label per sequence
next_sentence_weights     k       (float) 1.0 per present sequence
========================  ======  =====================================================

In memory, sequences are kept ragged (:class:`BertSequences`): only the real tokens and
real predictions, so a dataset takes about 5 bytes per token (int32 ids, int8 segments) instead of
24 bytes per padded slot: about 21 GB for the 4.16 G tokens of MLPerf's Wikipedia.

>>> import packlib
>>> from packlib.formats import mlperf_bert as mb
>>> seqs = mb.synthetic_sequences(100, seed=0)
>>> seqs
BertSequences(100 sequences, 28,536 tokens, 4,259 predictions, max_sequence_length=512, max_predictions=76)
>>> packs = packlib.pack(seqs.lengths, 512, 3, method="lpfhp")
>>> ints, floats = mb.build_packed_features(seqs, packs, 0, 2)
>>> ints.shape, floats.shape   # 4 x 512 token fields, 2 x 79 prediction slots, 2 x 3 NSP slots; 79 + 3 floats
((2, 2212), (2, 82))
"""
from __future__ import annotations

from ._io import encode_packed, read_packed, read_unpacked, write_packed, write_unpacked
from ._model import (BertSequences, build_packed_features, packed_schema, synthetic_sequences, unpack_packed,
                     unpacked_schema)

__all__ = [
    "BertSequences",
    "read_unpacked",
    "write_unpacked",
    "packed_schema",
    "unpacked_schema",
    "build_packed_features",
    "encode_packed",
    "unpack_packed",
    "write_packed",
    "read_packed",
    "synthetic_sequences",
]

