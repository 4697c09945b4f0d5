"""packlib.formats.arrow._numpy: Arrow arrays to numpy and back through their buffers, equal
to pyarrow's own conversions (which import pandas)."""
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pa = pytest.importorskip("pyarrow")

from packlib.formats.arrow._numpy import as_arrow, as_numpy, list_array, validity  # noqa: E402

DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64, np.float32,
          np.float64, np.bool_]


@st.composite
def sliced_arrays(draw):
    """An Arrow array of one of DTYPES, with or without nulls, sliced anywhere (bit offsets
    that do not start on a byte included); and its values as numpy."""
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    n = draw(st.integers(0, 40))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if dtype.kind == "b":
        values = rng.random(n) < 0.5
    elif dtype.kind == "f":
        values = rng.normal(size=n).astype(dtype)
    else:
        info = np.iinfo(dtype)
        values = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    mask = (rng.random(n) < 0.3) if draw(st.booleans()) else None
    array = pa.array(values, mask=mask)
    lo = draw(st.integers(0, n))
    return array.slice(lo, draw(st.integers(0, n - lo)))


@settings(max_examples=300, deadline=None)
@given(sliced_arrays())
def test_as_numpy_and_validity_equal_pyarrows_conversions(array):
    valid = array.is_valid().to_numpy(zero_copy_only=False)
    assert validity(array).dtype == bool and np.array_equal(validity(array), valid)
    got = as_numpy(array)
    want = array.fill_null(False if pa.types.is_boolean(array.type) else 0).to_numpy(zero_copy_only=False)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.array_equal(got[valid], want[valid])


@settings(max_examples=200, deadline=None)
@given(sliced_arrays())
def test_as_arrow_round_trips_and_equals_pyarrow_array(array):
    values = as_numpy(array)
    built = as_arrow(values)
    assert built.type == array.type and built.null_count == 0
    assert built.equals(pa.array(values, array.type))
    assert np.array_equal(as_numpy(built), values)


@settings(max_examples=100, deadline=None)
@given(st.lists(sliced_arrays(), max_size=3), st.integers(-5, 5))
def test_chunked_arrays_and_nulls_as(arrays, fill):
    """A ChunkedArray reads as its chunks one after the other; ``nulls_as`` fills the nulls."""
    arrays = [a for a in arrays if a.type == (arrays[0].type if arrays else None)]
    typ = arrays[0].type if arrays else pa.int64()
    chunked = pa.chunked_array(arrays, type=typ)
    valid = np.concatenate([a.is_valid().to_numpy(zero_copy_only=False) for a in arrays] or [np.zeros(0, bool)])
    assert np.array_equal(validity(chunked), valid)
    filler = bool(fill) if pa.types.is_boolean(typ) else abs(fill)
    want = np.concatenate([a.fill_null(filler).to_numpy(zero_copy_only=False) for a in arrays]
                          or [np.zeros(0, as_numpy(pa.chunked_array([], type=typ)).dtype)])
    got = as_numpy(chunked, nulls_as=filler)
    assert got.dtype == want.dtype and np.array_equal(got, want)


def test_list_array_equals_pyarrows():
    rows = [[1, 2, 3], [], [4]]
    for typ, large in ((pa.int32(), False), (pa.int64(), True)):
        built = list_array(rows, typ, large)
        assert built.equals(pa.array(rows, (pa.large_list if large else pa.list_)(typ)))
    assert list_array([[True], [False, True]], pa.bool_()).equals(pa.array([[True], [False, True]]))


def test_numbers_are_read_in_place_and_list_offsets_follow_the_slice():
    lists = pa.array([[1, 2], [3], [], [4, 5, 6]], pa.list_(pa.int64())).slice(1, 3)
    offsets = as_numpy(lists.offsets)
    assert offsets.tolist() == [2, 3, 3, 6] and offsets.base is not None and not offsets.flags.writeable
    assert as_numpy(lists.flatten()).tolist() == [3, 4, 5, 6]


def test_as_arrow_casts_what_fits_and_refuses_what_does_not():
    assert as_arrow(np.array([1, 2, 3]), pa.int8()).equals(pa.array([1, 2, 3], pa.int8()))
    assert as_arrow(np.array([True, False, True])).equals(pa.array([True, False, True]))
    with pytest.raises(ValueError, match="do not fit Arrow type int8"):
        as_arrow(np.array([1, 300]), pa.int8())
    with pytest.raises(ValueError, match="1-d"):
        as_arrow(np.zeros((2, 2)))


def test_other_types_fall_back_to_pyarrow():
    strings = pa.array(["a", None, "c"])
    assert as_numpy(strings).tolist() == ["a", None, "c"]
    assert validity(strings).tolist() == [True, False, True]
    assert validity(pa.nulls(3)).tolist() == [False] * 3


def test_no_conversion_imports_pandas():
    pytest.importorskip("pandas")  # else there is nothing to import
    code = """
import sys, numpy as np, pyarrow as pa
from packlib.formats.arrow._numpy import as_arrow, as_numpy, validity
lists = pa.ListArray.from_arrays(as_arrow(np.array([0, 2, 3], np.int32)), as_arrow(np.arange(3.0)))
as_numpy(lists.offsets); as_numpy(lists.flatten()); validity(lists); as_numpy(as_arrow(np.ones(9, bool)))
assert "pandas" not in sys.modules
pa.array(np.arange(3)).to_numpy()
assert "pandas" in sys.modules  # what pyarrow's own conversions do (else this test shows nothing)
"""
    subprocess.run([sys.executable, "-c", code], check=True)
