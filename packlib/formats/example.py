"""``tf.train.Example`` encode/decode by hand (no TensorFlow, no protobuf): the public names
of the codec the TFRecord and MLPerf BERT adapters use (it lives in ``formats/_example.py``).

- :func:`encode_example` / :func:`decode_example`: one record, any features, numpy in/out.
- :class:`Schema` with :meth:`Schema.encode` / :meth:`Schema.decode`: many records of fixed
  int64/float list lengths, in one compiled pass (the MLPerf writer's fast path).

>>> from packlib.formats.example import decode_example, encode_example
>>> decode_example(encode_example({"ids": [3, 1, 4]}))["ids"].tolist()
[3, 1, 4]
"""
from __future__ import annotations

from ._example import Schema, decode_example, encode_example

__all__ = ["encode_example", "decode_example", "Schema"]
