"""Folding the loss masks into ``labels``, so they survive a ``Trainer``'s column filter."""
from __future__ import annotations

import numpy as np

from ._columns import _pyarrow
from ._numpy import as_arrow, as_numpy

LABELS = "labels"
#: The per-token loss masks folded into ``labels`` (0: the token is not trained).
FOLDED_MASKS = ("completion_mask", "assistant_masks")
IGNORE_INDEX = -100


def _flat(array) -> np.ndarray:
    """The values of a list array's rows (its slice only), as numpy."""
    return as_numpy(array.flatten())


def _label_type(pa, base_type):
    """The labels' value type: the base column's when it can hold -100, else int64."""
    if pa.types.is_signed_integer(base_type) and base_type.bit_width >= 8:
        return base_type
    return pa.int64()


def folded_masks(columns) -> list[str]:
    """The loss masks among ``columns`` that :func:`fold_masks` folds into ``labels``."""
    return [name for name in FOLDED_MASKS if name in columns]


def _folded_batch(pa, batch, base: str, masks: list[str], list_type):
    """One record batch's ``labels``: the base column's values, -100 where a mask is 0."""
    column = batch.column(base)
    values = _flat(column).astype(list_type.value_type.to_pandas_dtype(), copy=True)
    for name in masks:
        values[_flat(batch.column(name)) == 0] = IGNORE_INDEX
    offsets = as_numpy(column.offsets)
    array_type = pa.LargeListArray if pa.types.is_large_list(list_type) else pa.ListArray
    return array_type.from_arrays(as_arrow(offsets - offsets[0]), as_arrow(values, list_type.value_type),
                                  type=list_type)


def fold_masks(table, columns) -> tuple:
    """``table`` with a ``labels`` column in which every token that ``completion_mask`` or
    ``assistant_masks`` marks 0 is -100 (the given ``labels``, else the ``input_ids``,
    elsewhere), and the names of the masks folded. A table with neither mask among
    ``columns`` comes back unchanged, with ``[]``."""
    masks = folded_masks(columns)
    if not masks:
        return table, []
    pa = _pyarrow()
    base = LABELS if LABELS in columns else "input_ids"
    base_type = table.schema.field(base).type
    value_type = _label_type(pa, base_type.value_type)
    list_type = (pa.large_list if pa.types.is_large_list(base_type) else pa.list_)(value_type)
    chunks = [_folded_batch(pa, b, base, masks, list_type) for b in table.to_batches() if b.num_rows]
    labels = pa.chunked_array(chunks, type=list_type)
    if LABELS in table.schema.names:
        return table.set_column(table.schema.get_field_index(LABELS), LABELS, labels), masks
    return table.append_column(LABELS, labels), masks
