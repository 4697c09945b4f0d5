"""PyTorch adapter: packed rows a model cannot see across, and checkpointable iteration.

Needs the ``torch`` extra (``pip install packlib[torch]``); torch is imported only when an
object here is used, so ``import packlib.torch`` works without it.

- :class:`PackedCollator` turns a micro-batch (the samples one pack holds, or rows that
  :func:`packlib.formats.arrow.pack_table` packed) into one padding-free row of torch tensors
  **plus what the model needs to keep its sequences apart**: ``use_cache=False`` (Hugging Face
  models tell packed sequences apart from ``position_ids`` only when no KV cache is built,
  and a training forward builds one by default), flash-attention's ``cu_seq_lens_q/k``, and on
  request a 4-D block-diagonal causal mask. ``loss = model(**batch).loss`` is then the
  token-weighted loss of the row's sequences, each computed as if alone.
- :func:`block_causal_mask` is that mask on its own.
- :class:`CheckpointableDataset` wraps a checkpointable iterator as an ``IterableDataset``.

>>> from packlib.torch import PackedCollator
>>> batch = PackedCollator()([{"input_ids": [5, 6, 7]}, {"input_ids": [8, 9]}])
>>> batch["position_ids"].tolist(), batch["labels"].tolist(), batch["use_cache"]
([[0, 1, 2, 0, 1]], [[-100, 6, 7, -100, 9]], False)
>>> batch["cu_seq_lens_q"].tolist(), batch["max_length_q"]
([0, 3, 5], 3)
>>> from packlib.torch import CheckpointableDataset            # doctest: +SKIP
>>> ds = CheckpointableDataset(packlib.BucketedReadaheadBatchIterator(...))  # doctest: +SKIP
>>> loader = torch.utils.data.DataLoader(ds, batch_size=None)  # doctest: +SKIP
>>> checkpoint["data"] = ds.state_dict()                       # doctest: +SKIP
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ._validate import as_bool, as_choice, as_int, as_int_array
from .formats.varlen import hf_flattening_batch

__all__ = ["PackedCollator", "block_causal_mask", "CheckpointableDataset"]

_MASKS = ("4d",)  # besides None: no mask


def _torch():
    try:
        import torch
        import torch.utils.data  # noqa: F401  (the submodule DataLoader lives in)
    except ImportError as e:  # torch missing or broken
        raise ImportError(
            "packlib.torch needs PyTorch: pip install torch (or pip install packlib[torch])"
        ) from e
    return torch


def block_causal_mask(lengths, *, dtype=None):
    """The 4-D attention mask of one packed row: causal inside each sequence, nothing across.

    Shape ``(1, 1, T, T)`` for ``T = sum(lengths)``, additive as Hugging Face's eager and sdpa
    attention take a ready 4-D mask: 0 where a query may attend, the dtype's most negative
    value elsewhere. It costs ``T² × itemsize`` bytes (256 MiB at ``T = 8192`` in float32):
    prefer ``position_ids`` with ``use_cache=False``, or flash-attention's ``cu_seq_lens``,
    where the model supports them.

    Parameters
    ----------
    lengths : 1-D int array
        The sequences' lengths (>= 1), in row order.
    dtype : torch.dtype, optional
        Floating dtype of the mask (default ``torch.float32``); give the model's dtype for
        sdpa, which refuses a mask of another floating dtype.
    """
    torch = _torch()
    lens = as_int_array(lengths, "lengths", allow_empty=False, minimum=1)
    dtype = torch.float32 if dtype is None else dtype
    if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise TypeError(f"dtype must be a floating torch.dtype such as torch.float32, got {dtype!r}")
    low = torch.finfo(dtype).min
    total = int(lens.sum())
    mask = torch.full((total, total), low, dtype=dtype)
    start = 0
    for n in lens.tolist():  # each sequence's diagonal block: causal (0 on and below the diagonal)
        mask[start:start + n, start:start + n] = torch.full((n, n), low, dtype=dtype).triu_(1)
        start += n
    return mask[None, None]


def _example(example, k: int):
    """``(tokens, lengths, labels or None)`` of ``examples[k]``, checked."""
    if isinstance(example, Mapping):
        if "input_ids" not in example:
            raise ValueError(
                f"examples[{k}] has no 'input_ids' (its keys: {sorted(map(str, example))}): give each example "
                "its token ids under 'input_ids', or the ids themselves"
            )
        where = f"examples[{k}]['input_ids']"
        ids = as_int_array(example["input_ids"], where, minimum=0)
        labels, seq_lengths = example.get("labels"), example.get("seq_lengths")
    else:
        where = f"examples[{k}]"
        ids, labels, seq_lengths = as_int_array(example, where, minimum=0), None, None
    if ids.size == 0:
        raise ValueError(f"{where} is empty: every sequence needs at least one token")
    if seq_lengths is None:
        lens = np.array([ids.size], dtype=np.int64)
    else:
        lens = as_int_array(seq_lengths, f"examples[{k}]['seq_lengths']", allow_empty=False, minimum=1)
        if int(lens.sum()) != ids.size:
            raise ValueError(
                f"examples[{k}]['seq_lengths'] sum to {int(lens.sum())} but its input_ids hold {ids.size} tokens: "
                "seq_lengths must split the row's tokens exactly (as pack_table writes them)"
            )
    if labels is not None:
        labels = as_int_array(labels, f"examples[{k}]['labels']")
        if labels.size != ids.size:
            raise ValueError(f"examples[{k}]['labels'] holds {labels.size} values for {ids.size} input_ids: one label per token")
    return ids, lens, labels


class PackedCollator:
    """Collate a micro-batch into one packed row whose sequences the model keeps apart.

    Every example is one sequence (``{"input_ids": ...}``, optionally ``"labels"``, or the
    ids themselves) or one row that :func:`packlib.formats.arrow.pack_table` packed
    (``"seq_lengths"`` splits its ``input_ids``). All of them are laid end to end in one row
    of shape ``(1, T)``, with no padding. The batch holds torch tensors ``input_ids``,
    ``labels`` (each sequence's first label ``separator_id``, so no sequence predicts the next
    one's first token), ``position_ids`` (restarting at 0 for every sequence) and:

    - ``use_cache=False``: Hugging Face models (transformers 5) build a block-diagonal mask
      from ``position_ids`` for eager, sdpa and flex attention only when no KV cache is made,
      and a training forward makes one unless told not to. Without it the row's sequences
      attend to each other. Costs nothing.
    - ``cu_seq_lens_q/k`` and ``max_length_q/k`` (``flash_attn_kwargs=True``): what
      flash-attention's varlen kernels read; ignored by other attentions. Costs nothing.
    - ``attention_mask`` (``attention_mask="4d"``): the block-diagonal causal mask of
      :func:`block_causal_mask`, for eager and sdpa in models that do not detect packed rows
      from ``position_ids``; ``T² × itemsize`` bytes per row. Not for flash-attention.

    ``loss = model(**batch).loss`` is then the token-weighted mean of the sequences' own
    losses. Use it as a ``DataLoader``'s ``collate_fn`` (it pickles, so worker processes work).

    Parameters
    ----------
    flash_attn_kwargs : bool, default True
        Add ``cu_seq_lens_q/k`` (int32) and ``max_length_q/k`` (int).
    attention_mask : {None, "4d"}, default None
        ``"4d"`` adds the ``(1, 1, T, T)`` block-diagonal causal mask.
    mask_dtype : torch.dtype, optional
        The mask's floating dtype (default float32); the model's dtype for sdpa.
    use_cache : bool or None, default False
        The ``use_cache`` put into the batch; ``None`` leaves the key out (for a model whose
        ``forward`` takes no ``use_cache``; isolation is then the model's business).
    separator_id : int, default -100
        The label of each sequence's first token (ignored by the loss).
    """

    def __init__(self, *, flash_attn_kwargs: bool = True, attention_mask: str | None = None, mask_dtype=None,
                 use_cache: bool | None = False, separator_id: int = -100):
        self.flash_attn_kwargs = as_bool(flash_attn_kwargs, "flash_attn_kwargs")
        self.attention_mask = None if attention_mask is None else as_choice(attention_mask, "attention_mask", _MASKS)
        if mask_dtype is not None:
            torch = _torch()
            if not (isinstance(mask_dtype, torch.dtype) and mask_dtype.is_floating_point):
                raise TypeError(f"mask_dtype must be a floating torch.dtype such as torch.bfloat16, got {mask_dtype!r}")
        self.mask_dtype = mask_dtype
        self.use_cache = None if use_cache is None else as_bool(use_cache, "use_cache")
        self.separator_id = as_int(separator_id, "separator_id", minimum=-(2**63), maximum=2**63 - 1)

    def __repr__(self) -> str:
        return (f"PackedCollator(flash_attn_kwargs={self.flash_attn_kwargs}, attention_mask={self.attention_mask!r}, "
                f"mask_dtype={self.mask_dtype}, use_cache={self.use_cache}, separator_id={self.separator_id})")

    def __call__(self, examples) -> dict:
        torch = _torch()
        if isinstance(examples, (Mapping, str, bytes)) or not hasattr(examples, "__len__") or len(examples) == 0:
            raise ValueError("examples must be a non-empty list of samples (dicts with 'input_ids', or token id lists)")
        parts = [_example(e, k) for k, e in enumerate(examples)]
        tokens = np.concatenate([p[0] for p in parts])
        lens = np.concatenate([p[1] for p in parts])
        batch = hf_flattening_batch(tokens, lens, return_flash_attn_kwargs=self.flash_attn_kwargs,
                                    separator_id=self.separator_id)
        if any(p[2] is not None for p in parts):
            labels = np.concatenate([p[0] if p[2] is None else p[2] for p in parts])
            labels[np.cumsum(lens) - lens] = self.separator_id
            batch["labels"] = labels[None, :]
        out = {k: torch.from_numpy(np.ascontiguousarray(v)) if isinstance(v, np.ndarray) else v
               for k, v in batch.items()}
        if self.attention_mask == "4d":
            out["attention_mask"] = block_causal_mask(lens, dtype=self.mask_dtype)
        if self.use_cache is not None:
            out["use_cache"] = self.use_cache
        return out


class CheckpointableDataset:
    """Wrap a checkpointable iterator (``getstate``/``setstate``, e.g.
    :class:`packlib.BucketedReadaheadBatchIterator`, :func:`packlib.pack_stream` or an
    infinibatch pipeline) as a ``torch.utils.data.IterableDataset`` with ``state_dict()`` /
    ``load_state_dict()``.

    Each element the iterator yields (a batch or a pack) is one element of the dataset:
    use ``DataLoader(ds, batch_size=None, num_workers=0)``. Several DataLoader workers
    would each replay the whole stream, so they are refused; shard across data-parallel
    ranks with the iterator's ``rank`` / ``world_size`` instead.

    ``state_dict()`` describes the position of what the *caller* has consumed: take it
    in the training loop, between steps. The object is an instance of this class and of
    ``torch.utils.data.IterableDataset`` (which the class joins when first used, so that
    ``import packlib.torch`` needs no torch).

    Parameters
    ----------
    iterator : iterator with getstate() and setstate()
        The stream to serve.
    """

    def __new__(cls, iterator):
        return super().__new__(_iterable_dataset_class() if cls is CheckpointableDataset else cls)

    def __init__(self, iterator):
        super().__init__()
        if not all(hasattr(iterator, a) for a in ("getstate", "setstate", "__next__")):
            raise TypeError(
                f"iterator must have getstate(), setstate() and __next__, got {type(iterator).__name__}"
            )
        self._iterator = iterator

    def __iter__(self):
        info = _torch().utils.data.get_worker_info()
        if info is not None and info.num_workers > 1:
            raise ValueError(
                "CheckpointableDataset runs in one process: use DataLoader(num_workers=0 or 1); "
                "shard across ranks with the iterator's rank/world_size"
            )
        return self

    def __next__(self):
        return next(self._iterator)

    def state_dict(self) -> dict:
        """The position of the stream, to save in a checkpoint."""
        return {"iterator_state": self._iterator.getstate()}

    def load_state_dict(self, state_dict: dict) -> None:
        """Continue from a position that :meth:`state_dict` returned.

        Parameters
        ----------
        state_dict : dict
            From :meth:`state_dict`.
        """
        if not isinstance(state_dict, dict):
            raise TypeError(
                f"state_dict must be a dict from CheckpointableDataset.state_dict(), got {type(state_dict).__name__}"
            )
        if "iterator_state" not in state_dict:
            raise ValueError(
                f"state_dict must come from CheckpointableDataset.state_dict() (it has keys {sorted(map(str, state_dict))}, "
                "not 'iterator_state')"
            )
        self._iterator.setstate(state_dict["iterator_state"])


_ITERABLE = "_CheckpointableIterableDataset"


def _iterable_dataset_class():
    """CheckpointableDataset joined with torch's IterableDataset, made once (named in this
    module, so that its instances pickle)."""
    made = globals().get(_ITERABLE)
    if made is None:
        data = _torch().utils.data
        made = type(_ITERABLE, (CheckpointableDataset, data.IterableDataset), {"__module__": __name__})
        globals()[_ITERABLE] = made
    return made


def __getattr__(name):
    if name == _ITERABLE:  # unpickling in a fresh process
        return _iterable_dataset_class()
    raise AttributeError(f"module 'packlib.torch' has no attribute {name!r}")
