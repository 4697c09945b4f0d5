"""Adapters from :class:`packlib.Packs` to the files and batches trainers read.

Submodules (each imported on first use; optional dependencies only inside them):

- :mod:`~packlib.formats.tfrecord`: TFRecord files with masked CRC-32C, no TensorFlow.
- :mod:`~packlib.formats.example`: ``tf.train.Example`` encode/decode by hand (the codec
  TFRecord and MLPerf BERT use).
- :mod:`~packlib.formats.mlperf_bert`: unpacked -> packed MLPerf BERT records, and the
  ``python -m packlib mlperf-bert`` command.
- :mod:`~packlib.formats.hdf5`: Cerebras-style GPT HDF5 files (needs ``h5py``).
- :mod:`~packlib.formats.varlen`: padding-free fields (``cu_seqlens``, ``position_ids``,
  ``seq_idx``; Hugging Face, Megatron ``thd`` and torchtune batches).
- :mod:`~packlib.formats.arrow`: pack Arrow tables and Hugging Face datasets whole, with
  TRL's ``seq_lengths`` column (needs ``pyarrow``; ``datasets`` for datasets).
- :mod:`~packlib.formats.megatron_sft`: Megatron-Bridge / NeMo packed SFT files (the
  ``.npy`` ``GPTSFTPackedDataset`` reads, and its metadata; needs ``pyarrow``).
- :mod:`~packlib.formats.megatron_cp`: Megatron-LM's dynamic context parallelism scheduled by
  :func:`packlib.plan_cp_step` (``DynamicCPScheduler``, Megatron's scheduler interface).

>>> import packlib
>>> packlib.formats.varlen.cu_seqlens([3, 5, 2]).tolist()
[0, 3, 8, 10]
"""
from __future__ import annotations

from importlib import import_module

_SUBMODULES = ("tfrecord", "example", "mlperf_bert", "hdf5", "varlen", "arrow", "megatron_sft", "megatron_cp")
_EXPORTS = {
    "read_tfrecord": "tfrecord",
    "write_tfrecord": "tfrecord",
    "iter_tfrecord": "tfrecord",
    "masked_crc32c": "tfrecord",
    "crc32c": "tfrecord",
    "encode_example": "_example",
    "decode_example": "_example",
    "Schema": "_example",
    "BertSequences": "mlperf_bert",
    "write_hdf5": "hdf5",
    "read_hdf5": "hdf5",
    "cu_seqlens": "varlen",
    "position_ids": "varlen",
    "seq_idx": "varlen",
    "varlen_fields": "varlen",
    "torchtune_seq_lens": "varlen",
    "torchtune_input_pos": "varlen",
    "max_seqlen": "varlen",
    "row_lengths": "varlen",
    "batch_lengths": "varlen",
    "hf_flattening_batch": "varlen",
    "megatron_thd": "varlen",
    "torchtune_pack": "varlen",
    "mlperf_input_mask": "varlen",
    "attention_span": "varlen",
    "pack_table": "arrow",
    "pack_dataset": "arrow",
    "packing_report": "arrow",
}
# the short names above are conveniences; the API reference documents each submodule once
__all__ = list(_SUBMODULES)
__submodules__ = _SUBMODULES  # documented one by one in docs/api.md


def __getattr__(name: str):
    if name in _SUBMODULES:
        value = import_module(f".{name}", __name__)
    elif name in _EXPORTS:
        value = getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
    else:
        raise AttributeError(f"module 'packlib.formats' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__) | set(_EXPORTS))
