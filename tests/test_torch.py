"""Packed rows stay isolated in real models (packlib/torch/ and every adapter that feeds a
trainer): the per-token logits of a packed row equal those of each sequence run alone, and the
row's loss is the token-weighted loss of its sequences.

The models are tiny, randomly initialised transformers models built from a config (no
download), in training mode with the model's defaults, as a user's loop runs them. Needs
torch and transformers (CI installs both); without them the module skips with the reason.
"""
from __future__ import annotations

import pickle

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the isolation tests run models: pip install torch==2.13.0")
transformers = pytest.importorskip("transformers", reason="the isolation tests build transformers models")

from packlib.formats import varlen  # noqa: E402
from packlib.torch import PackedCollator, block_causal_mask  # noqa: E402

TOL = 1e-4
VOCAB = 97
LENGTHS = [7, 1, 12, 5, 9]  # a one-token sequence too: it has no loss term of its own


def _model(attn: str, family: str = "llama"):
    torch.manual_seed(0)
    if family == "llama":
        cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    else:
        cfg = transformers.Qwen2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=attn)
    return model.train()  # the defaults a training loop has: use_cache=True in the config


def _sequences(lengths=LENGTHS, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(1, VOCAB, n) for n in lengths]


def _alone(model, seqs):
    """Each sequence's logits and loss (with its token count) when run by itself."""
    out = []
    with torch.no_grad():
        for s in seqs:
            ids = torch.as_tensor(s)[None]
            r = model(input_ids=ids, labels=ids if len(s) > 1 else None)
            out.append((r.logits[0], None if r.loss is None else float(r.loss), len(s) - 1))
    return out


def _worst(model, batch, seqs, alone=None, offsets=None):
    """Largest |logit difference| between the packed row and the sequences alone; checks the loss."""
    alone = alone or _alone(model, seqs)
    with torch.no_grad():
        res = model(**batch)
    starts = np.cumsum([0] + [len(s) for s in seqs[:-1]]) if offsets is None else offsets
    worst = max(float((res.logits[0, a:a + len(s)] - al[0]).abs().max()) for s, a, al in zip(seqs, starts, alone))
    if "labels" in batch and worst <= TOL:
        weighted = sum(loss * n for _, loss, n in alone if loss is not None) / sum(n for *_, n in alone)
        assert float(res.loss) == pytest.approx(weighted, abs=1e-5)
    return worst


def _torch_batch(fields):
    return {k: torch.as_tensor(v) if isinstance(v, np.ndarray) else v for k, v in fields.items()}


# ------------------------------------------------------------------- the collator
@pytest.mark.parametrize("family", ["llama", "qwen2"])
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_collator_isolates_with_the_models_defaults(attn, family):
    model, seqs = _model(attn, family), _sequences()
    batch = PackedCollator()([{"input_ids": s} for s in seqs])
    assert batch["use_cache"] is False and batch["input_ids"].shape == (1, sum(LENGTHS))
    assert _worst(model, batch, seqs) <= TOL


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_the_4d_mask_isolates_even_with_a_cache(attn):
    """attention_mask="4d" needs no help from the model: the cache is built, the mask holds."""
    model, seqs = _model(attn), _sequences(seed=1)
    batch = PackedCollator(attention_mask="4d", use_cache=None, flash_attn_kwargs=False)([{"input_ids": s} for s in seqs])
    assert "use_cache" not in batch and batch["attention_mask"].shape == (1, 1, sum(LENGTHS), sum(LENGTHS))
    assert _worst(model, batch, seqs) <= TOL


def test_flex_attention_forward_isolates(monkeypatch):
    """flex_attention, forward only on a CPU (its backward needs a GPU). Run eagerly: what is
    checked is the block mask transformers builds from the packed row, which is the same
    compiled or not; compiling the CPU kernel would take a minute or more."""
    monkeypatch.setattr(torch, "compile", lambda fn=None, *args, **kwargs: fn if fn is not None else (lambda f: f))
    model, seqs = _model("flex_attention"), _sequences(seed=2)
    batch = PackedCollator()([{"input_ids": s} for s in seqs])
    assert _worst(model, batch, seqs) <= TOL


def test_flash_attention_isolates_where_installed():
    pytest.importorskip("flash_attn", reason="flash-attention is not installed (it needs a CUDA GPU)")
    if not torch.cuda.is_available():
        pytest.skip("flash-attention needs a CUDA GPU")
    model, seqs = _model("flash_attention_2").to("cuda", torch.bfloat16), _sequences(seed=3)
    batch = {k: v.cuda() if torch.is_tensor(v) else v for k, v in PackedCollator()([{"input_ids": s} for s in seqs]).items()}
    alone = [(lo.float(), loss, n) for lo, loss, n in _alone(model, [torch.as_tensor(s).cuda() for s in seqs])]
    with torch.no_grad():
        logits = model(**batch).logits[0].float()
    starts = np.cumsum([0] + [len(s) for s in seqs[:-1]])
    assert max(float((logits[a:a + len(s)] - al[0]).abs().max()) for s, a, al in zip(seqs, starts, alone)) < 5e-2


def test_gradients_of_a_packed_row_are_the_sequences_gradients():
    """Backward too: the row's loss has the gradient of the token-weighted sum of the sequences' losses."""
    model, seqs = _model("sdpa"), _sequences(seed=4)
    model(**PackedCollator()([{"input_ids": s} for s in seqs])).loss.backward()
    packed = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    tokens = sum(len(s) - 1 for s in seqs)
    for s in seqs:
        if len(s) > 1:
            ids = torch.as_tensor(s)[None]
            (model(input_ids=ids, labels=ids).loss * (len(s) - 1) / tokens).backward()
    for a, b in zip(packed, (p.grad for p in model.parameters())):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_collator_labels_and_rows_from_pack_table():
    seqs = _sequences(seed=5)
    labels = [np.where(np.arange(len(s)) < 2, -100, s) for s in seqs]  # a prompt masked out
    batch = PackedCollator()([{"input_ids": s, "labels": lab} for s, lab in zip(seqs, labels)])
    want = np.concatenate(labels)
    want[np.cumsum(LENGTHS) - LENGTHS] = -100
    assert batch["labels"][0].tolist() == want.tolist()
    rows = [{"input_ids": np.concatenate(seqs[:2]), "seq_lengths": LENGTHS[:2]},
            {"input_ids": np.concatenate(seqs[2:]), "seq_lengths": LENGTHS[2:]}]
    from_rows, from_seqs = PackedCollator()(rows), PackedCollator()([{"input_ids": s} for s in seqs])
    assert from_rows.keys() == from_seqs.keys()
    for k in from_rows:
        assert (from_rows[k] == from_seqs[k]).all() if torch.is_tensor(from_rows[k]) else from_rows[k] == from_seqs[k]


def test_collator_in_a_dataloader_with_workers():
    seqs = _sequences(seed=6)
    loader = torch.utils.data.DataLoader([{"input_ids": s} for s in seqs], batch_size=2, num_workers=1,
                                         collate_fn=PackedCollator())
    got = [b["input_ids"][0] for b in loader]
    assert torch.cat(got).tolist() == np.concatenate(seqs).tolist()
    assert pickle.loads(pickle.dumps(PackedCollator(attention_mask="4d"))).attention_mask == "4d"


def test_block_causal_mask_matches_its_definition():
    lens = [3, 1, 2]
    mask = block_causal_mask(lens)[0, 0]
    seq = np.repeat(np.arange(len(lens)), lens)
    i, j = np.meshgrid(np.arange(6), np.arange(6), indexing="ij")
    allowed = (seq[i] == seq[j]) & (j <= i)
    assert ((mask == 0).numpy() == allowed).all() and (mask[~torch.as_tensor(allowed)] == torch.finfo(torch.float32).min).all()
    assert block_causal_mask(lens, dtype=torch.bfloat16).dtype == torch.bfloat16


@pytest.mark.parametrize("examples, match", [
    ([], "non-empty"),
    ({"input_ids": [1]}, "non-empty"),
    ([{"tokens": [1, 2]}], "has no 'input_ids'"),
    ([{"input_ids": []}], "empty"),
    ([{"input_ids": [1, 2.5]}], "examples\\[0\\]\\['input_ids'\\]"),
    ([{"input_ids": [1, 2]}, {"input_ids": [3], "labels": [3, 4]}], "examples\\[1\\]\\['labels'\\] holds 2"),
    ([{"input_ids": [1, 2, 3], "seq_lengths": [2, 2]}], "sum to 4"),
    ([{"input_ids": [1, 2, 3], "seq_lengths": [3, 0]}], "seq_lengths"),
    ([[1, -2]], "examples\\[0\\]"),
])
def test_collator_bad_input(examples, match):
    with pytest.raises((ValueError, TypeError), match=match):
        PackedCollator()(examples)


def test_collator_bad_settings():
    with pytest.raises(ValueError, match="attention_mask"):
        PackedCollator(attention_mask="2d")
    with pytest.raises(TypeError, match="mask_dtype"):
        PackedCollator(mask_dtype=torch.int64)
    with pytest.raises(TypeError, match="use_cache"):
        PackedCollator(use_cache="no")
    with pytest.raises(TypeError, match="dtype"):
        block_causal_mask([2], dtype="float32")


# ------------------------------------------------- the fields of packlib.formats.varlen
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("flash", [False, True])
def test_hf_flattening_batch_isolates_with_use_cache_false(attn, flash):
    model, seqs = _model(attn), _sequences(seed=7)
    batch = _torch_batch(varlen.hf_flattening_batch(np.concatenate(seqs), LENGTHS, return_flash_attn_kwargs=flash))
    assert _worst(model, dict(batch, use_cache=False), seqs) <= TOL


def test_hf_flattening_batch_alone_is_not_isolated_with_the_defaults():
    """Why PackedCollator puts use_cache=False in the batch: transformers 5 builds a KV cache in a
    training forward by default and then ignores the packing in position_ids (and the flash keyword
    arguments mean nothing to sdpa). If this starts passing, transformers changed: update docs/formats.md."""
    model, seqs = _model("sdpa"), _sequences(seed=7)
    batch = _torch_batch(varlen.hf_flattening_batch(np.concatenate(seqs), LENGTHS, return_flash_attn_kwargs=True))
    assert _worst(model, batch, seqs) > 1e-2


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_varlen_fields_isolate(attn):
    model, seqs = _model(attn), _sequences(seed=8)
    f = varlen.varlen_fields(LENGTHS)
    batch = {"input_ids": torch.as_tensor(np.concatenate(seqs))[None], "position_ids": torch.as_tensor(f["position_ids"])[None],
             "cu_seq_lens_q": torch.as_tensor(f["cu_seqlens"]), "cu_seq_lens_k": torch.as_tensor(f["cu_seqlens"]),
             "max_length_q": f["max_seqlen"], "max_length_k": f["max_seqlen"], "use_cache": False}
    assert _worst(model, batch, seqs) <= TOL


def test_torchtune_pack_isolates():
    pytest.importorskip("torchtune", reason="torchtune is not installed")
    from torchtune.models.llama3 import llama3
    from torchtune.modules.attention_utils import packed_block_causal_mask

    torch.manual_seed(0)
    model = llama3(vocab_size=VOCAB, num_layers=2, num_heads=4, num_kv_heads=2, embed_dim=32, max_seq_len=64).eval()
    seqs = _sequences(seed=9)
    row = varlen.torchtune_pack(np.concatenate(seqs), LENGTHS, 40)
    mask = packed_block_causal_mask([torch.as_tensor(row["seq_lens"])])
    with torch.no_grad():
        packed = model(torch.as_tensor(row["tokens"])[None], mask=mask, input_pos=torch.as_tensor(row["input_pos"])[None])[0]
        starts = np.cumsum([0] + LENGTHS[:-1])
        worst = max(float((packed[a:a + len(s)] - model(torch.as_tensor(s)[None])[0]).abs().max()) for s, a in zip(seqs, starts))
    assert worst <= TOL


# -------------------------------------- pack_table / pack_dataset columns, TRL's collator
def _packed_rows(seqs, capacity=20, via="pack_table"):
    pa = pytest.importorskip("pyarrow")
    from packlib.formats.arrow import pack_dataset, pack_table

    table = pa.table({"input_ids": [s.tolist() for s in seqs]})
    if via == "pack_dataset":
        datasets = pytest.importorskip("datasets")
        return list(pack_dataset(datasets.Dataset(table), capacity, method="optimal"))
    return pack_table(table, capacity, method="optimal").to_pylist()


@pytest.mark.parametrize("via", ["pack_table", "pack_dataset"])
def test_packed_rows_through_trls_padding_free_collator(via):
    trl_sft = pytest.importorskip("trl.trainer.sft_trainer", reason="TRL is not installed (pip install --no-deps trl)")
    model, seqs = _model("sdpa"), _sequences(seed=10)
    rows = _packed_rows(seqs, via=via)
    batch = trl_sft.DataCollatorForLanguageModeling(pad_token_id=0, padding_free=True)(rows)
    order = [s for r in rows for s in np.split(np.asarray(r["input_ids"]), np.cumsum(r["seq_lengths"])[:-1])]
    # SFTTrainer.compute_loss passes use_cache=False itself; a plain loop must too
    assert _worst(model, dict(batch, use_cache=False), order) <= TOL


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_pack_table_rows_through_the_collator(attn):
    model, seqs = _model(attn), _sequences(seed=11)
    rows = _packed_rows(seqs)
    order = [s for r in rows for s in np.split(np.asarray(r["input_ids"]), np.cumsum(r["seq_lengths"])[:-1])]
    assert _worst(model, PackedCollator()(rows), order) <= TOL


# ------------------------------------------------------------ the loops the docs show
ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


def _python_blocks(path, heading):
    """The ```python blocks of the section of ``path`` that starts at ``heading``."""
    text = (ROOT / path).read_text()
    section = text[text.index(heading):]
    section = section[:section.find("\n## ", len(heading))] if "\n## " in section[len(heading):] else section
    return [b.split("```", 1)[0] for b in section.split("```python\n")[1:]]


class _CheckedModel:
    """The model, with every packed row it is called on checked against its sequences alone."""

    def __init__(self, model, alone=None):
        self.model, self.alone, self.rows, self.worst = model, alone or model, 0, 0.0

    def __call__(self, **batch):
        out = self.model(**batch)
        ids, pos = batch["input_ids"][0], batch["position_ids"][0]
        starts = (pos == 0).nonzero().flatten().tolist() + [ids.numel()]
        with torch.no_grad():
            for a, b in zip(starts[:-1], starts[1:]):
                alone = self.alone(input_ids=ids[a:b][None]).logits[0]
                self.worst = max(self.worst, float((out.logits[0, a:b] - alone).abs().max()))
        self.rows += 1
        return out

    def state_dict(self):
        return self.model.state_dict()

    def load_state_dict(self, state):
        return self.model.load_state_dict(state)


def test_the_documented_training_loop_keeps_sequences_apart(tmp_path):
    (loop,) = _python_blocks("docs/balance.md", "## The training loop")
    lengths = np.random.default_rng(12).integers(1, 40, 80)
    model = _model("sdpa")
    checked = _CheckedModel(model)
    namespace = {"lengths": lengths, "dataset": [{"input_ids": s} for s in _sequences(lengths, seed=12)],
                 "max_sequence_length": 96, "rank": 1, "world_size": 2, "accumulation": 2, "epochs": 2,
                 "model": checked, "optimizer": torch.optim.SGD(model.parameters(), lr=1e-3),
                 "path": tmp_path / "checkpoint.pt"}
    exec(compile(loop, "docs/balance.md", "exec"), namespace)
    assert checked.rows >= 8 and checked.worst <= TOL
    assert "sampler" in torch.load(namespace["path"], weights_only=False)


def test_the_readme_collator_example_keeps_sequences_apart():
    (block,) = [b for b in _python_blocks("README.md", "## Packed rows stay apart in the model")]
    checked = _CheckedModel(_model("eager"))
    exec(compile(block, "README.md", "exec"), {"model": checked})
    assert checked.rows == 1 and checked.worst <= TOL
