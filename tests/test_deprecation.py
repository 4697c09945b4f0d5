"""Every deprecated spelling still works, with a ``DeprecationWarning`` that names the
version removing it, and gives what the current spelling gives (``packlib/_deprecation.py``);
the public signatures are the true ones (keyword-only options, required ones without a
default, no sentinel defaults)."""
import inspect
import warnings

import numpy as np
import pytest

import packlib
from packlib._deprecation import DEPRECATED_IN_0_2, REMOVED_IN, deprecate_positional_args, deprecated_call
from packlib.formats import varlen as vl
from packlib.formats.mlperf_bert import synthetic_sequences
from packlib.pipeline import pack_files
from packlib.pipeline.mlperf import pack_mlperf_bert

H = np.array([0, 3, 1, 2, 4, 0, 1, 5], dtype=np.int64)  # a histogram of L = 8


def _old(match, version=REMOVED_IN):
    """``pytest.warns`` for a deprecation whose message names ``match`` and the removal version."""
    return pytest.warns(DeprecationWarning, match=rf"(?s)(?=.*{match})(?=.*stops working in packlib {version})")


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the current spelling warns nothing
        return fn(*args, **kwargs)


def test_positional_options_of_blend_bucket_pack_stream_and_synthetic_sequences():
    with _old("passing method, seed to blend"):
        old = packlib.blend([1, 2], 30, "shuffled", 4)
    assert (old.dataset_index == _quiet(packlib.blend, [1, 2], 30, method="shuffled", seed=4).dataset_index).all()
    with _old("passing read_ahead, batch_size, max_tokens, shuffle to bucket"):
        old = packlib.bucket([3, 1, 2, 5], 4, 2, None, False)
    assert old.to_list() == _quiet(packlib.bucket, [3, 1, 2, 5], read_ahead=4, batch_size=2, shuffle=False).to_list()
    with _old("pass read_ahead=..., key=..., method=... by keyword"):
        old = list(packlib.pack_stream([3, 1, 2, 4], 5, 2, lambda x: x, "ffd"))
    assert old == list(_quiet(packlib.pack_stream, [3, 1, 2, 4], 5, read_ahead=2, key=lambda x: x, method="ffd"))
    with _old("passing seed to synthetic_sequences"):
        old = synthetic_sequences(20, 7)
    assert old.fingerprints().tolist() == _quiet(synthetic_sequences, 20, seed=7).fingerprints().tolist()


def test_positional_options_refuse_what_python_would():
    with pytest.raises(TypeError, match="multiple values for argument 'batch_size'"):
        packlib.bucket([3, 1], 4, 2, batch_size=2)
    with pytest.raises(TypeError, match="at most 5 deprecated"):
        packlib.bucket([3, 1], 4, 2, None, True, 0, 5)
    with pytest.raises(TypeError, match="read_ahead"):
        packlib.bucket([3, 1], batch_size=2)


def test_the_depth_second_of_a_histogram_packer_and_the_methods_second_of_compare():
    with _old(r"lpfhp_pack\(histogram, 3\)", DEPRECATED_IN_0_2):
        old = packlib.lpfhp_pack(H, 3)
    new = _quiet(packlib.lpfhp_pack, H, max_sequences_per_pack=3)
    assert old.strategy_items.tolist() == new.strategy_items.tolist() and old.counts.tolist() == new.counts.tolist()
    with _old(r"compare\(histogram, \['spfhp'\]", DEPRECATED_IN_0_2):
        table = packlib.compare(H, ["spfhp"], 2)
    assert [(r.method, r.depth, r.packs) for r in table] == \
        [(r.method, r.depth, r.packs) for r in _quiet(packlib.compare, H, max_sequences_per_pack=2, methods=["spfhp"])]


def test_plan_depth_and_varlen_row_length():
    plan = packlib.nnls_pack(H)
    with _old(r"PackingPlan.depth", DEPRECATED_IN_0_2):
        assert plan.depth == plan.max_pack_size
    for fn in (vl.mlperf_input_mask, vl.attention_span, vl.torchtune_seq_lens, vl.torchtune_input_pos):
        with _old(rf"{fn.__name__}\(row_length=...\)"):
            old = fn([3, 2], row_length=6)
        assert old.tolist() == _quiet(fn, [3, 2], 6).tolist()
    with _old(r"torchtune_pack\(row_length=...\)"):
        assert vl.torchtune_pack([1, 2, 3], [3], row_length=4)["tokens"].tolist() == [1, 2, 3, 0]
    with pytest.raises(TypeError, match="twice"):
        vl.attention_span([3, 2], 6, row_length=6)


def test_the_output_second_of_pack_files_and_pack_mlperf_bert(monkeypatch, tmp_path):
    """The old order maps onto the new one (the runs themselves are stubbed: the pipeline's
    tests run them)."""
    from packlib.pipeline import _pack_files
    from packlib.pipeline.mlperf import _run

    class Run:
        def __init__(self, *args, **kwargs):
            self.args = args, kwargs

        def run(self):
            return self.args

    monkeypatch.setattr(_pack_files, "_FilesRun", Run)
    monkeypatch.setattr(_run, "_BertRun", Run)
    out = tmp_path / "out"
    with _old(r"pack_files\(inputs, output, max_sequence_length\)"):
        old = pack_files(["a.parquet"], str(out), 64, workers=1)
    assert old == _quiet(pack_files, ["a.parquet"], 64, output=str(out), workers=1)
    with _old(r"pack_mlperf_bert\(inputs, output_dir"):
        old = pack_mlperf_bert(["u.tfrecord"], out)
    assert old == _quiet(pack_mlperf_bert, ["u.tfrecord"], 3, output_dir=out)


def test_signatures_tell_the_truth():
    def sig(fn):
        return inspect.signature(fn).parameters

    assert sig(packlib.bucket)["read_ahead"].default is inspect.Parameter.empty
    assert sig(packlib.bucket)["read_ahead"].kind is inspect.Parameter.KEYWORD_ONLY
    assert sig(packlib.pack_stream)["read_ahead"].default is inspect.Parameter.empty
    assert sig(pack_files)["output"].default is inspect.Parameter.empty
    assert sig(pack_mlperf_bert)["output_dir"].default is inspect.Parameter.empty
    assert all(p.kind is not p.VAR_POSITIONAL for p in sig(packlib.blend).values())
    assert sig(vl.attention_span)["max_sequence_length"].default is inspect.Parameter.empty


def _public_callables():
    import importlib

    for modname in ["packlib", "packlib.methods", "packlib.formats.varlen", "packlib.formats.mlperf_bert",
                    "packlib.formats.tfrecord", "packlib.pipeline", "packlib.pipeline.mlperf", "packlib.plot"]:
        mod = importlib.import_module(modname)
        for name in getattr(mod, "__all__", []):
            obj = getattr(mod, name)
            if inspect.isfunction(obj):  # (result classes are built by packlib, not called)
                yield f"{modname}.{name}", obj


def test_no_public_signature_shows_a_sentinel_default():
    plain = (type(None), bool, int, float, str, tuple, frozenset)
    seen, odd = 0, []
    for name, fn in _public_callables():
        try:
            params = inspect.signature(fn).parameters.values()
        except (TypeError, ValueError):
            continue
        seen += 1
        odd += [f"{name}({p.name}={p.default!r})" for p in params
                if p.default is not p.empty and not isinstance(p.default, plain) and not callable(p.default)]
    assert seen > 30 and odd == []


def test_the_helper_on_its_own():
    @deprecate_positional_args
    def f(data, *, a=1, b=2):
        return data, a, b

    with _old("passing a, b to f"):
        assert f(0, 5, 6) == (0, 5, 6)
    assert _quiet(f, 0, b=3) == (0, 1, 3)
    assert list(inspect.signature(f).parameters) == ["data", "a", "b"]

    @deprecated_call(lambda args, kwargs: None if "old" not in kwargs else (args, {"new": kwargs["old"]}, "old=", "new="))
    def g(*, new):
        return new

    with _old("old="):
        assert g(old=4) == 4
