"""Preference pairs and groups in packed rows (packlib/torch/_preference.py, _logps.py): every
completion sees its prompt and itself only, and the per-sequence log-probs equal those of
TRL's padded batch (tests/naive_preference.py, computed without packlib), with the prompt
laid out per sequence or once.

Tiny random transformers Llama models built from a config (no download). Needs torch and
transformers; without them the module skips with the reason.
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the preference tests run models: pip install torch==2.13.0")
transformers = pytest.importorskip("transformers", reason="the preference tests build transformers models")

from .naive_preference import alone_logps, padded_logps, padded_pairs, reference_logps  # noqa: E402
from packlib.torch import (PackedCollator, model_inputs, sequence_logps, shared_prompt_mask,  # noqa: E402
                           shared_prompt_block_mask)

VOCAB = 97
TOL = 5e-4  # float32, sequences up to 800 tokens


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024)
    return transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").train()


def _ids(rng, n):
    return rng.integers(1, VOCAB, n).tolist()


def _pairs(n, seed=0, prompt=(1, 60), answer=(1, 80)):
    rng = np.random.default_rng(seed)
    return [{"prompt_ids": _ids(rng, rng.integers(*prompt)), "chosen_ids": _ids(rng, rng.integers(*answer)),
             "rejected_ids": _ids(rng, rng.integers(*answer))} for _ in range(n)]


def _groups(n, k, seed=1, prompt=(1, 60), answer=(1, 60)):
    rng = np.random.default_rng(seed)
    return [{"prompt_ids": _ids(rng, rng.integers(*prompt)),
             "completion_ids": [_ids(rng, rng.integers(*answer)) for _ in range(k)]} for _ in range(n)]


def _packed(model, examples, **kw):
    batch = PackedCollator(**kw)(examples)
    with torch.no_grad():
        return sequence_logps(model(**model_inputs(batch)).logits, batch), batch


# ------------------------------------------------------------------------------ log-probs


@pytest.mark.parametrize("share", [False, True])
def test_pairs_log_probs_equal_trls_padded_batch(model, share):
    examples = _pairs(6, seed=2)
    examples[0]["chosen_ids"] = _ids(np.random.default_rng(3), 760)  # one sequence near 800 tokens
    with torch.no_grad():
        ref, padded_tokens = reference_logps(model, examples)
    got, batch = _packed(model, examples, share_prompt=share)
    assert got.dtype == torch.float32 and got.shape == (12,)
    assert float((got - ref).abs().max()) < TOL
    chosen, rejected = got.chunk(2)  # DPOTrainer's split: the B chosen, then the B rejected
    assert float((chosen - ref[:6]).abs().max()) < TOL and float((rejected - ref[6:]).abs().max()) < TOL
    p = sum(len(e["prompt_ids"]) for e in examples)
    answers = sum(len(e["chosen_ids"]) + len(e["rejected_ids"]) for e in examples)
    assert batch["input_ids"].shape == (1, answers + (p if share else 2 * p)) and batch["input_ids"].numel() < padded_tokens


@pytest.mark.parametrize("share", [False, True])
def test_groups_log_probs_equal_each_sequence_padded_and_alone(model, share):
    examples = _groups(3, 4, seed=4)
    with torch.no_grad():
        ref, _ = reference_logps(model, examples, "groups")
        alone = alone_logps(model, examples, "groups")
    got, batch = _packed(model, examples, share_prompt=share)
    assert got.shape == (12,)  # group-major: completion j of group g at g * 4 + j
    assert float((got - ref).abs().max()) < TOL and float((got - alone).abs().max()) < TOL
    assert batch["group_ids"][0].unique_consecutive().tolist() == [0, 1, 2]


def test_the_shared_prompt_layout_gives_the_unshared_layouts_log_probs(model):
    examples = _groups(4, 3, seed=5) + [{"prompt_ids": [5], "completion_ids": [[6], [7, 8]]}]
    examples[-1]["completion_ids"].append([9])
    unshared, _ = _packed(model, examples, ragged_groups=True)
    shared, batch = _packed(model, examples, ragged_groups=True, share_prompt=True)
    assert float((shared - unshared).abs().max()) < TOL
    p = batch["position_ids"][0][batch["group_ids"][0] == 4].tolist()
    assert p == [0, 1, 1, 2, 1]  # the prompt once; each completion's positions continue from it


def test_a_completion_never_sees_another(model):
    """Changing one completion's tokens leaves every other sequence's log-probs as they were."""
    for share in (False, True):
        examples = _pairs(4, seed=6)
        before, _ = _packed(model, examples, share_prompt=share)
        examples[1]["rejected_ids"] = [(t % (VOCAB - 1)) + 1 for t in examples[1]["rejected_ids"][::-1]] + [3, 4]
        after, _ = _packed(model, examples, share_prompt=share)
        changed = (after - before).abs() > 0
        assert changed.tolist() == [i == 4 + 1 for i in range(8)]


@pytest.mark.parametrize("share", [False, True])
def test_the_mask_lets_each_token_see_exactly_its_prompt_and_its_own_sequence(share):
    examples = _groups(2, 3, seed=7, prompt=(1, 6), answer=(1, 5)) + _groups(1, 3, seed=8, prompt=(1, 6), answer=(1, 5))
    batch = PackedCollator(share_prompt=share, attention_mask=None if share else "4d")(examples)
    allowed = (batch["attention_mask"][0, 0] == 0).numpy()
    # the naive mask, from the examples alone: (group, sequence or None for the shared prompt) per token
    owner = []
    for g, e in enumerate(examples):
        k = len(e["completion_ids"])
        if share:
            owner += [(g, None)] * len(e["prompt_ids"])
            owner += [(g, j) for j, c in enumerate(e["completion_ids"]) for _ in c]
        else:
            owner += [(g, j) for j, c in enumerate(e["completion_ids"]) for _ in range(len(e["prompt_ids"]) + len(c))]
        assert k == 3
    expect = np.array([[kv <= q and owner[kv][0] == owner[q][0] and owner[kv][1] in (None, owner[q][1])
                        for kv in range(len(owner))] for q in range(len(owner))])
    assert (allowed == expect).all()


def test_pairs_are_laid_out_as_trls_padded_batch_says(model):
    trl = pytest.importorskip("trl.trainer.dpo_trainer", reason="compares with TRL's own collator")
    examples = _pairs(5, seed=9)
    theirs = trl.DataCollatorForPreference(pad_token_id=0)(examples)
    ours = padded_pairs(examples)
    for key in ("input_ids", "attention_mask", "completion_mask"):
        assert torch.equal(theirs[key], ours[key])


def test_packed_sft_rows_give_one_sum_per_sequence(model):
    rng = np.random.default_rng(10)
    seqs = [_ids(rng, n) for n in (5, 1, 9, 3)]
    batch = PackedCollator()([{"input_ids": s} for s in seqs])
    with torch.no_grad():
        got = sequence_logps(model(**batch).logits, batch)
        want = []
        for s in seqs:
            ids = torch.tensor([s])
            lp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1).gather(1, ids[0, 1:, None])
            want.append(float(lp.sum()))
    assert got.shape == (4,) and float((got - torch.tensor(want)).abs().max()) < TOL


# ------------------------------------------------------------------------------ sequence_logps itself


def test_sequence_logps_gradient_equals_log_softmax_and_chunks_change_nothing():
    examples = _groups(3, 3, seed=11)
    batch = PackedCollator(share_prompt=True)(examples)
    T = batch["input_ids"].shape[1]
    logits = torch.randn(1, T, VOCAB + 3, dtype=torch.float64).float().requires_grad_()
    weights = torch.randn(9)
    outs, grads = [], []
    for chunk in (None, 1, 7):
        logits.grad = None
        out = sequence_logps(logits, batch, chunk_size=chunk)
        (out * weights).sum().backward()
        outs.append(out.detach()), grads.append(logits.grad.clone())
    # the naive form: the whole row's log_softmax, each token read from its predecessor's row
    logits.grad = None
    ids, prev = batch["input_ids"][0], batch["prev_index"][0]
    sel = (batch["completion_mask"][0] == 1) & (prev >= 0)
    logp = torch.log_softmax(logits[0].double(), -1)[prev[sel], ids[sel]]
    naive = torch.zeros(9, dtype=torch.float64).index_add(0, batch["sequence_ids"][0][sel], logp)
    (naive * weights.double()).sum().backward()
    for out, grad in zip(outs, grads):
        assert torch.allclose(out.double(), naive.detach(), atol=1e-4)
        assert torch.allclose(grad, logits.grad, atol=1e-5)
    assert torch.equal(outs[0], outs[1]) or torch.allclose(outs[0], outs[1], atol=1e-6)


def test_sequence_logps_refuses_what_it_cannot_read():
    batch = PackedCollator()(_pairs(2))
    T = batch["input_ids"].shape[1]
    with pytest.raises(ValueError, match="positions but the batch"):
        sequence_logps(torch.zeros(1, T + 1, VOCAB), batch)
    with pytest.raises(TypeError, match="logits must be"):
        sequence_logps(torch.zeros(2, T, VOCAB), batch)
    with pytest.raises(ValueError, match="token id"):
        sequence_logps(torch.zeros(1, T, 5), batch)
    with pytest.raises(ValueError, match="needs a batch from PackedCollator"):
        sequence_logps(torch.zeros(1, T, 5), {"input_ids": batch["input_ids"]})
    sft = PackedCollator()([[1, 2, 3], [4, 5]])
    sft["labels"][0, 3] = 5  # the second sequence's first label
    with pytest.raises(ValueError, match="first token"):
        sequence_logps(torch.zeros(1, 5, VOCAB), sft)


# ------------------------------------------------------------------------------ batch contents and bad input


def test_a_pair_batch_carries_what_the_model_and_the_loss_need():
    examples = [{"prompt_ids": [1, 2], "chosen_ids": [3], "rejected_ids": [4, 5], "ref_chosen_logps": -1.5,
                 "ref_rejected_logps": -2.0}]
    batch = PackedCollator()(examples)
    assert batch["input_ids"].tolist() == [[1, 2, 3, 1, 2, 4, 5]]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 0, 1, 2, 3]]
    assert batch["completion_mask"].tolist() == [[0, 0, 1, 0, 0, 1, 1]]
    assert batch["sequence_ids"].tolist() == [[0, 0, 0, 1, 1, 1, 1]]
    assert batch["pair_ids"].tolist() == [[0] * 7] and batch["cu_seq_lens_q"].tolist() == [0, 3, 7]
    assert batch["ref_chosen_logps"].tolist() == [-1.5] and batch["use_cache"] is False
    assert set(model_inputs(batch)) == {"input_ids", "position_ids", "cu_seq_lens_q", "cu_seq_lens_k",
                                        "max_length_q", "max_length_k", "use_cache"}
    shared = PackedCollator(share_prompt=True)(examples)
    assert shared["input_ids"].tolist() == [[1, 2, 3, 4, 5]] and shared["position_ids"].tolist() == [[0, 1, 2, 2, 3]]
    assert shared["sequence_ids"].tolist() == [[-1, -1, 0, 1, 1]] and "cu_seq_lens_q" not in shared
    assert shared["prev_index"].tolist() == [[-1, 0, 1, 1, 3]] and shared["attention_mask"].shape == (1, 1, 5, 5)


@pytest.mark.parametrize("examples, kw, error, match", [
    ([{"prompt_ids": [1], "chosen_ids": [2]}], {}, ValueError, r"examples\[0\] has no 'rejected_ids'"),
    ([{"prompt_ids": [1], "chosen_ids": [2], "rejected_ids": [3]}, {"prompt_ids": [1], "completion_ids": [[2]]}],
     {}, ValueError, r"examples\[1\] has no 'chosen_ids'"),
    ([{"prompt_ids": [], "chosen_ids": [2], "rejected_ids": [3]}], {}, ValueError, r"examples\[0\]\['prompt_ids'\] is empty"),
    ([{"prompt_ids": [1], "chosen_ids": [2], "rejected_ids": []}], {}, ValueError, r"\['rejected_ids'\] is empty"),
    ([{"prompt_ids": [1], "completion_ids": [[2], []]}], {}, ValueError, r"\['completion_ids'\]\[1\] is empty"),
    ([{"prompt_ids": [1], "completion_ids": []}], {}, ValueError, "a group needs at least one completion"),
    ([{"prompt_ids": [1], "completion_ids": [[2], [3]]}, {"prompt_ids": [1], "completion_ids": [[2]]}], {},
     ValueError, r"examples\[1\] has 1 completions but examples\[0\] has 2"),
    ([{"prompt_ids": [1, 2], "chosen_ids": [2], "rejected_ids": [3]}] * 2 + [
        {"prompt_ids": [1] * 5, "chosen_ids": [2] * 5, "rejected_ids": [3]}], {"max_sequence_length": 10},
     ValueError, r"examples\[2\] lays out 16 tokens, over max_sequence_length = 10"),
    ([{"prompt_ids": [1] * 5, "completion_ids": [[2] * 3] * 2}], {"max_sequence_length": 10, "share_prompt": True},
     ValueError, r"examples\[0\] lays out 11 tokens"),
    ([{"prompt_ids": [1], "chosen_ids": [2], "rejected_ids": [3]}], {"share_prompt": True, "flash_attn_kwargs": True},
     ValueError, "flash-attention's varlen kernels"),
    ([{"prompt_ids": [1], "chosen_ids": [2], "rejected_ids": [3.5]}], {}, ValueError, r"\['rejected_ids'\]"),
    ([{"prompt_ids": [1], "chosen_ids": [2], "rejected_ids": [3]}, [4, 5]], {}, TypeError, r"examples\[1\] is a list"),
])
def test_bad_input_is_refused_naming_the_example(examples, kw, error, match):
    with pytest.raises(error, match=match):
        PackedCollator(**kw)(examples)


def test_ragged_groups_when_allowed_and_one_completion_as_kto():
    batch = PackedCollator(ragged_groups=True)([{"prompt_ids": [1], "completion_ids": [[2], [3, 4]]},
                                                {"prompt_ids": [5], "completion_ids": [[6]]}])
    assert batch["sequence_ids"].tolist() == [[0, 0, 1, 1, 1, 2, 2]]
    kto = PackedCollator()([{"prompt_ids": [1, 2], "completion_ids": [3, 4], "label": True},
                            {"prompt_ids": [5], "completion_ids": [6], "label": False}])
    assert kto["input_ids"].tolist() == [[1, 2, 3, 4, 5, 6]] and kto["completion_mask"].tolist() == [[0, 0, 1, 1, 0, 1]]
    assert kto["label"].tolist() == [True, False] and "label" not in model_inputs(kto)
    with pytest.raises(ValueError, match="KL_completion_ids"):
        PackedCollator()([{"prompt_ids": [1], "completion_ids": [2], "KL_completion_ids": [3], "label": True}])


def test_the_flex_block_mask_is_the_4d_masks_pattern():
    pytest.importorskip("torch.nn.attention.flex_attention", reason="flex_attention needs torch >= 2.5")
    batch = PackedCollator(share_prompt=True)(_groups(2, 3, seed=12, prompt=(1, 40), answer=(1, 40)))
    block = shared_prompt_block_mask(batch, block_size=16)
    dense = shared_prompt_mask(batch)[0, 0] == 0
    T = dense.shape[0]
    q, k = torch.meshgrid(torch.arange(T), torch.arange(T), indexing="ij")
    assert torch.equal(block.mask_mod(0, 0, q, k), dense)
    assert block.shape[-2:] == (T, T)


def test_eager_attention_reads_the_tree_mask_too(model):
    eager = transformers.AutoModelForCausalLM.from_config(model.config, attn_implementation="eager").train()
    eager.load_state_dict(model.state_dict())
    examples = _pairs(3, seed=13)
    with torch.no_grad():
        ref, _ = reference_logps(model, examples)
    got, _ = _packed(eager, examples, share_prompt=True)
    assert float((got - ref).abs().max()) < TOL
