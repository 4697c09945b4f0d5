"""GRPO, reward models, KTO and TRL's truncation on packed rows (packlib/torch/_logps.py's
token_logps, _scores.py, _columns.py, _truncate.py), checked against TRL 1.16's own code: its
GRPOTrainer per-token log-probs and default loss, RewardTrainer's loss, KTOTrainer's loss and
DataCollatorForPreference's truncation, each called without a trainer (a namespace holding the
attributes the method reads), on its own padded batch; and against plain references in
tests/naive_preference.py.

Tiny random transformers Llama models built from a config (no download). Needs torch and
transformers (TRL for the comparisons); without them the module skips with the reason.
"""
from __future__ import annotations

import collections
import contextlib
import types

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the RL tests run models: pip install torch==2.13.0")
transformers = pytest.importorskip("transformers", reason="the RL tests build transformers models")

from .naive_preference import dapo_loss, padded_groups_grpo, padded_logps, padded_pairs  # noqa: E402
from packlib.torch import (PackedCollator, model_inputs, sequence_logps, sequence_scores,  # noqa: E402
                           token_logps)

VOCAB = 97


def _config(**kw):
    return transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, **kw)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(_config(), attn_implementation="sdpa").train()


@pytest.fixture(scope="module")
def reward_model():
    torch.manual_seed(1)
    cfg = _config(num_labels=1, pad_token_id=0)
    return transformers.AutoModelForSequenceClassification.from_config(cfg, attn_implementation="sdpa").train()


def _ids(rng, n):
    return rng.integers(1, VOCAB, n).tolist()


def _groups(n, k, seed, prompt=(1, 30), answer=(1, 25)):
    rng = np.random.default_rng(seed)
    return [{"prompt_ids": _ids(rng, rng.integers(*prompt)),
             "completion_ids": [_ids(rng, rng.integers(*answer)) for _ in range(k)]} for _ in range(n)]


def _pairs(n, seed, prompt=(1, 30), answer=(1, 30)):
    rng = np.random.default_rng(seed)
    return [{"prompt_ids": _ids(rng, rng.integers(*prompt)), "chosen_ids": _ids(rng, rng.integers(*answer)),
             "rejected_ids": _ids(rng, rng.integers(*answer))} for _ in range(n)]


class _Accelerator:
    """What TRL's loss methods read of an Accelerator, on one process."""
    num_processes = 1
    is_main_process = True

    def autocast(self):
        return contextlib.nullcontext()

    def reduce(self, x, reduction="sum"):
        return x

    def gather(self, x):
        return x

    gather_for_metrics = gather


def _trainer(model, **attrs):
    ns = types.SimpleNamespace(accelerator=_Accelerator(), model=model, current_gradient_accumulation_steps=1,
                               _metrics=collections.defaultdict(lambda: collections.defaultdict(list)))
    ns.__dict__.update(attrs)
    return ns


def _grpo(model, per_token=None):
    """GRPOTrainer's ``_compute_loss`` with its defaults (``loss_type="dapo"``, token-level
    ratios, no KL), epsilon 0.2 / 0.28, as a function of the inputs; ``per_token``: its
    log-prob step replaced by ours. ``.trainer``: the namespace it runs on."""
    from trl.trainer.grpo_trainer import GRPOTrainer

    ns = _trainer(model, top_entropy_quantile=1.0, aux_loss_enabled=False, off_policy_mask_threshold=None,
                  importance_sampling_level="token", beta=0.0, loss_type="dapo", epsilon_low=0.2, epsilon_high=0.28,
                  args=types.SimpleNamespace(delta=None, use_bias_correction_kl=False, steps_per_generation=1),
                  use_vllm=False, _entropy_bonus_enabled=False)
    if per_token is None:
        ns._get_per_token_logps_and_entropies = types.MethodType(GRPOTrainer._get_per_token_logps_and_entropies, ns)
    else:
        ns._get_per_token_logps_and_entropies = lambda *a, **k: (per_token(), torch.zeros(1, 1), None)

    def loss(inputs):
        return GRPOTrainer._compute_loss(ns, model, inputs)

    loss.trainer = ns
    return loss


@pytest.fixture(scope="module")
def fused(model):
    """A copy of the model with TRL's fused LM head (what GRPOTrainer adds)."""
    from trl.trainer.utils import add_fused_lm_head

    pytest.importorskip("trl.trainer.grpo_trainer", reason="compares with TRL's GRPOTrainer")
    twin = transformers.AutoModelForCausalLM.from_config(model.config, attn_implementation="sdpa").train()
    twin.load_state_dict(model.state_dict())
    add_fused_lm_head(twin, outputs=("log_probs", "entropy"))
    return twin


def _grads(model):
    return torch.cat([p.grad.reshape(-1) for p in model.parameters() if p.grad is not None])


# ------------------------------------------------------------------------------ token_logps and GRPO


@pytest.mark.parametrize("share", [False, True])
def test_token_logps_equal_grpo_trainers_per_token_logps(model, fused, share):
    examples = _groups(3, 4, seed=1)
    padded = padded_groups_grpo(examples)
    with torch.no_grad():
        theirs, _, _ = _grpo(fused).trainer._get_per_token_logps_and_entropies(
            fused, torch.cat([padded["prompt_ids"], padded["completion_ids"]], 1),
            torch.cat([padded["prompt_mask"], padded["completion_mask"]], 1), padded["completion_ids"].shape[1])
        batch = PackedCollator(share_prompt=share)(examples)
        ours, mask = token_logps(model(**model_inputs(batch)).logits, batch)
    assert ours.shape == theirs.shape == (12, padded["completion_ids"].shape[1])
    assert torch.equal(mask, padded["completion_mask"])
    assert float((ours - theirs * mask).abs().max()) < 1e-5


@pytest.mark.parametrize("share", [False, True])
def test_grpo_trainers_default_loss_on_token_logps_equals_trls(model, fused, share):
    examples = _groups(2, 4, seed=2)
    padded = padded_groups_grpo(examples)
    gen = torch.Generator().manual_seed(3)
    advantages = torch.randn(8, generator=gen)
    with torch.no_grad():  # old log-probs: the policy's, moved so that some ratios fall outside the clip range
        unshared = PackedCollator()(examples)
        now, mask = token_logps(model(**model_inputs(unshared)).logits, unshared)
        old = now + 0.3 * torch.randn(now.shape, generator=gen) * mask
    assert bool(((now - old).abs() > 0.25)[mask == 1].any())  # log(1.28) = 0.247: clipping is active
    assert torch.equal(mask, padded["completion_mask"])
    inputs = dict(padded, advantages=advantages, old_per_token_logps=old,
                  num_items_in_batch=padded["completion_mask"].sum())
    fused.zero_grad()
    theirs = _grpo(fused)(inputs)
    theirs.backward()
    theirs = theirs.detach()
    batch = PackedCollator(share_prompt=share)(examples)
    model.zero_grad()
    ours = _grpo(model, lambda: token_logps(model(**model_inputs(batch)).logits, batch)[0])(
        dict(inputs, completion_mask=mask))
    ours.backward()
    assert abs(float(ours.detach()) - float(theirs.detach())) < 1e-5
    assert torch.allclose(_grads(model), _grads(fused), atol=1e-5, rtol=1e-4)
    # the plain reference gives the same loss; the sum-based surrogate (no ratio, no clipping) does not
    with torch.no_grad():
        logps, mask = token_logps(model(**model_inputs(batch)).logits, batch)
        assert abs(float(dapo_loss(logps, old, advantages, mask, 0.2, 0.28)) - float(theirs)) < 1e-5
        sums = sequence_logps(model(**model_inputs(batch)).logits, batch)
        naive = -(advantages * sums / mask.sum(1)).mean()
    assert abs(float(naive) - float(theirs)) > 1e-3


def test_token_logps_gradient_equals_the_full_log_softmax_with_temperature_and_chunks():
    examples = _groups(2, 3, seed=4)
    batch = PackedCollator(share_prompt=True)(examples)
    T = batch["input_ids"].shape[1]
    logits = torch.randn(1, T, VOCAB, dtype=torch.float64).float().requires_grad_()
    weights = torch.randn(6, 25)
    # the naive form: the whole row's log_softmax, each completion token read at its predecessor
    full = torch.log_softmax(logits[0].double() / 0.7, -1)
    prev, ids = batch["prev_index"][0], batch["input_ids"][0]
    naive = torch.zeros(6, 25, dtype=torch.float64)
    for s in range(6):
        where = torch.nonzero(batch["sequence_ids"][0] == s).reshape(-1)
        naive[s, :where.numel()] = full[prev[where], ids[where]]
    (naive * weights.double()).sum().backward()
    want = logits.grad.clone()
    for chunk in (None, 1, 5):
        logits.grad = None
        got, mask = token_logps(logits, batch, chunk_size=chunk, temperature=0.7)
        width = got.shape[1]
        (got * weights[:, :width]).sum().backward()
        assert torch.allclose(got.double(), naive[:, :width], atol=1e-5)
        assert torch.allclose(logits.grad, want, atol=1e-5)
        assert torch.equal(mask.bool(), naive[:, :width] != 0)


@pytest.mark.parametrize("share", [False, True])
def test_token_logps_rows_are_trls_order_and_sum_to_sequence_logps(share):
    examples = _pairs(3, seed=12) + [{"prompt_ids": [1], "chosen_ids": [2, 3, 4, 5], "rejected_ids": [6]}]
    batch = PackedCollator(share_prompt=share)(examples)
    logits = torch.randn(1, batch["input_ids"].shape[1], VOCAB)
    logps, mask = token_logps(logits, batch)
    lengths = [len(e["chosen_ids"]) for e in examples] + [len(e["rejected_ids"]) for e in examples]
    assert mask.sum(1).tolist() == lengths and logps.shape == (8, max(lengths))  # the B chosen, then the B rejected
    assert torch.allclose(logps.sum(1), sequence_logps(logits, batch), atol=1e-4)


def test_token_logps_refuses_what_it_cannot_read():
    batch = PackedCollator()(_groups(1, 2, seed=5))
    T = batch["input_ids"].shape[1]
    sft = PackedCollator()([[1, 2, 3]])
    with pytest.raises(ValueError, match="no 'prev_index', 'sequence_ids', 'completion_mask'"):
        token_logps(torch.zeros(1, 3, VOCAB), sft)
    with pytest.raises(ValueError, match="positions but the batch"):
        token_logps(torch.zeros(1, T + 2, VOCAB), batch)
    with pytest.raises(ValueError, match="temperature must be > 0"):
        token_logps(torch.zeros(1, T, VOCAB), batch, temperature=0)


# ------------------------------------------------------------------------------ sequence_scores and RewardTrainer


def _reward_loss(model, inputs, trained=None):
    """RewardTrainer's ``compute_loss`` (center_rewards_coefficient 0.01); ``model`` may stand in
    for the ``trained`` one, returning our scores as its logits."""
    from trl.trainer.reward_trainer import RewardTrainer

    ns = _trainer(model if trained is None else trained, args=types.SimpleNamespace(center_rewards_coefficient=0.01), _total_train_tokens=0,
                  _tp_size=1)
    return RewardTrainer.compute_loss(ns, model, inputs)


@pytest.mark.parametrize("layout", ["no prompt", "packed", "prompt once"])
def test_reward_trainers_loss_on_sequence_scores_equals_trls(reward_model, layout):
    trl = pytest.importorskip("trl.trainer.reward_trainer", reason="compares with TRL's RewardTrainer")
    pairs = _pairs(4, seed=6)
    for i, e in enumerate(pairs):
        e["margin"] = 0.25 * i
    whole = [{"chosen_ids": e["prompt_ids"] + e["chosen_ids"], "rejected_ids": e["prompt_ids"] + e["rejected_ids"],
              "margin": e["margin"]} for e in pairs]
    reward_model.zero_grad()
    theirs = _reward_loss(reward_model, trl.DataCollatorForPreference(pad_token_id=0)(whole))
    theirs.backward()
    theirs = theirs.detach()
    want = _grads(reward_model).clone()
    batch = PackedCollator(share_prompt=layout == "prompt once")(whole if layout == "no prompt" else pairs)
    assert batch["margin"].tolist() == [0.0, 0.25, 0.5, 0.75]
    reward_model.zero_grad()
    scores = sequence_scores(reward_model, batch)
    assert scores.shape == (8, 1)
    ours = _reward_loss(lambda **kw: types.SimpleNamespace(logits=scores),
                        {"margin": batch["margin"], "attention_mask": torch.ones(1)}, reward_model)
    ours.backward()
    assert abs(float(ours.detach()) - float(theirs.detach())) < 1e-5
    assert torch.allclose(_grads(reward_model), want, atol=1e-5, rtol=1e-4)
    without = _reward_loss(lambda **kw: types.SimpleNamespace(logits=scores.detach()), {"attention_mask": torch.ones(1)},
                           reward_model)
    assert abs(float(without) - float(theirs)) > 1e-3  # the margin counts


def test_a_reward_models_own_forward_pools_one_score_per_row(reward_model):
    batch = PackedCollator()(_pairs(3, seed=7))
    with torch.no_grad():
        assert reward_model(**model_inputs(batch)).logits.shape == (1, 1)
        assert sequence_scores(reward_model, batch).shape == (6, 1)


def test_sequence_scores_refuses_a_model_without_a_score_head_and_a_foreign_batch(model, reward_model):
    batch = PackedCollator()(_pairs(1, seed=8))
    with pytest.raises(ValueError, match=r"LlamaForCausalLM has no score head \(model.score\)"):
        sequence_scores(model, batch)
    with pytest.raises(ValueError, match="with 'input_ids' and 'sequence_ids'"):
        sequence_scores(reward_model, PackedCollator()([[1, 2, 3]]))


# ------------------------------------------------------------------------------ KTO


def test_kto_trainers_loss_on_packed_sums_equals_trls(model):
    kto = pytest.importorskip("trl.trainer.kto_trainer", reason="compares with TRL's KTOTrainer")
    rng = np.random.default_rng(9)
    examples = [{"prompt_ids": _ids(rng, rng.integers(1, 20)), "completion_ids": _ids(rng, rng.integers(1, 20)),
                 "label": bool(i % 3), "ref_logps": float(-60 + 5 * i)} for i in range(6)]
    attrs = dict(calculate_KL=False, precompute_ref_logps=True, loss_type="kto", beta=0.1, desirable_weight=1.0,
                 undesirable_weight=1.3, aux_loss_enabled=False, _total_train_tokens=0, _tp_size=1,
                 accelerator=types.SimpleNamespace(**{k: getattr(_Accelerator(), k) for k in ("gather", "gather_for_metrics")},
                                                   device=torch.device("cpu")))
    padded = kto.DataCollatorForUnpairedPreference(pad_token_id=0)(examples)
    labels = padded["input_ids"].masked_fill(padded["completion_mask"] == 0, -100)
    with torch.no_grad():
        logits = model(input_ids=padded["input_ids"], attention_mask=padded["attention_mask"]).logits
        sums = padded_logps(logits, padded)
    assert torch.equal(labels[:, 1:] != -100, padded["completion_mask"][:, 1:].bool())

    def fake_model(values):  # a fused-head output whose per-token log-probs sum to `values`
        def call(**kw):
            n = kw["input_ids"].shape[1] - 1
            lp = torch.zeros(values.shape[0], n)
            lp[:, 0] = values
            return types.SimpleNamespace(log_probs=lp, entropy=torch.zeros(values.shape[0], n),
                                         mean_logits=torch.zeros(values.shape[0], n))
        return call

    def trainer():
        ns = _trainer(model, **attrs)
        ns._compute_kl_logps = types.MethodType(kto.KTOTrainer._compute_kl_logps, ns)
        return ns

    theirs = kto.KTOTrainer._compute_loss(trainer(), fake_model(sums), padded, False)
    batch = PackedCollator()(examples)
    assert batch["label"].dtype == torch.bool and batch["ref_logps"].dtype == torch.float32
    with torch.no_grad():
        ours_sums = sequence_logps(model(**model_inputs(batch)).logits, batch)
    assert float((ours_sums - sums).abs().max()) < 1e-4
    inputs = {"input_ids": padded["input_ids"], "attention_mask": padded["attention_mask"],
              "completion_mask": padded["completion_mask"], "label": batch["label"], "ref_logps": batch["ref_logps"]}
    ours = kto.KTOTrainer._compute_loss(trainer(), fake_model(ours_sums), inputs, False)
    assert abs(float(ours) - float(theirs)) < 1e-6


# ------------------------------------------------------------------------------ the example keys


def test_every_example_key_reaches_the_batch_in_trls_order():
    examples = [{"prompt_ids": [1, 2], "chosen_ids": [3], "rejected_ids": [4, 5], "margin": 0.5, "idx": 7,
                 "keep": True, "prompt": "a b", "scores": [0.1, 0.2], "meta": {"s": 1}},
                {"prompt_ids": [6], "chosen_ids": [7, 8], "rejected_ids": [9], "margin": 1, "idx": 3,
                 "keep": False, "prompt": "c", "scores": np.array([0.3, 0.4]), "meta": None}]
    batch = PackedCollator()(examples)
    assert batch["margin"].dtype == torch.float32 and batch["margin"].tolist() == [0.5, 1.0]
    assert batch["idx"].dtype == torch.int64 and batch["idx"].tolist() == [7, 3]
    assert batch["keep"].tolist() == [True, False] and batch["prompt"] == ["a b", "c"]
    assert batch["scores"].shape == (2, 2) and batch["meta"] == [{"s": 1}, None]
    assert set(batch["carried_keys"]) == {"margin", "idx", "keep", "prompt", "scores", "meta"}
    assert not set(model_inputs(batch)) & {"margin", "idx", "keep", "prompt", "scores", "meta", "carried_keys"}


@pytest.mark.parametrize("second, match", [
    ({"margin": [0.1, 0.2]}, r"examples\[1\]\['margin'\] is a float array of shape \(2,\) but examples\[0\]\['margin'\] "
                             r"is a float"),
    ({"margin": "high"}, r"examples\[1\]\['margin'\] is not a number"),
    ({"margin": True}, r"examples\[1\]\['margin'\] is a bool"),
    ({}, r"examples\[0\] has the key 'margin' but examples\[1\] has not"),
    ({"margin": 0.1, "extra": 1}, r"examples\[1\] has the key 'extra' but examples\[0\] has not"),
    ({"margin": 0.1, "input_ids": [1]}, None),
])
def test_a_key_that_cannot_be_batched_is_refused_by_name(second, match):
    first = {"prompt_ids": [1], "chosen_ids": [2], "rejected_ids": [3], "margin": 0.5}
    if "input_ids" in second:
        first["input_ids"] = [1]
        match = "has the key 'input_ids', which a batch of pairs or groups writes itself"
    with pytest.raises(ValueError, match=match):
        PackedCollator()([first, {"prompt_ids": [1], "chosen_ids": [2], "rejected_ids": [3], **second}])
    ragged = [{"prompt_ids": [1], "completion_ids": [[2]], "old": [[0.1], [0.2, 0.3]]}]
    with pytest.raises(ValueError, match=r"examples\[0\]\['old'\] holds numbers of uneven shape"):
        PackedCollator()(ragged)


# ------------------------------------------------------------------------------ TRL's truncation


@pytest.mark.parametrize("mode", ["keep_start", "keep_end"])
def test_truncation_lays_out_trls_sequences_and_drops_what_it_drops(model, mode):
    trl = pytest.importorskip("trl.trainer.dpo_trainer", reason="compares with TRL's DataCollatorForPreference")
    examples = _pairs(5, seed=10, prompt=(1, 30), answer=(1, 40))
    examples[2]["prompt_ids"] = _ids(np.random.default_rng(11), 40)  # its prompt alone fills max_length
    L = 32
    kept = [e for e in examples if mode == "keep_end" or len(e["prompt_ids"]) < L]  # DPOTrainer's filter
    padded = trl.DataCollatorForPreference(pad_token_id=0, max_length=L, truncation_mode=mode)(kept)
    with torch.no_grad():
        logits = model(input_ids=padded["input_ids"], attention_mask=padded["attention_mask"]).logits
        theirs = padded_logps(logits, padded)
        batch = PackedCollator(max_length=L, truncation_mode=mode)(examples)
        ours = sequence_logps(model(**model_inputs(batch)).logits, batch)
    assert batch["dropped"].tolist() == ([2] if mode == "keep_start" else [])
    assert sorted(batch["input_ids"][0].tolist()) == sorted(padded["input_ids"][padded["attention_mask"] == 1].tolist())
    assert float((ours - theirs).abs().max()) < 1e-4
    with torch.no_grad():  # untruncated, the same over-long pairs give other sums
        full = sequence_logps(model(**model_inputs(PackedCollator()(kept))).logits, PackedCollator()(kept))
    assert float((full - theirs).abs().max()) > 1.0
    if mode == "keep_start":
        shared = PackedCollator(max_length=L, share_prompt=True)(examples)
        with torch.no_grad():
            got = sequence_logps(model(**model_inputs(shared)).logits, shared)
        assert float((got - theirs).abs().max()) < 1e-4


def test_pairs_without_a_prompt_are_whole_sequences_and_a_batch_has_all_or_none():
    batch = PackedCollator()([{"chosen_ids": [1, 2, 3], "rejected_ids": [4, 5]}])
    assert batch["input_ids"].tolist() == [[1, 2, 3, 4, 5]] and batch["completion_mask"].tolist() == [[1] * 5]
    assert batch["prev_index"].tolist() == [[-1, 0, 1, -1, 3]] and batch["sequence_ids"].tolist() == [[0, 0, 0, 1, 1]]
    with pytest.raises(ValueError, match=r"examples\[1\] has 'prompt_ids' but examples\[0\] has none"):
        PackedCollator()([{"chosen_ids": [1], "rejected_ids": [2]}, {"prompt_ids": [3], "chosen_ids": [1],
                                                                    "rejected_ids": [2]}])


def test_truncation_drop_mode_refusals_and_a_batch_with_nothing_left():
    pairs = [{"chosen_ids": [1] * 5, "rejected_ids": [2] * 3}, {"chosen_ids": [1] * 3, "rejected_ids": [2] * 4}]
    batch = PackedCollator(max_length=4, truncation_mode="drop")(pairs)  # RewardTrainer's filter
    assert batch["dropped"].tolist() == [0] and batch["input_ids"].numel() == 7
    with pytest.raises(ValueError, match="every example of this batch is dropped by max_length = 2"):
        PackedCollator(max_length=2)([{"prompt_ids": [1, 2], "chosen_ids": [3], "rejected_ids": [4]}])
    with pytest.raises(ValueError, match="keep_end' cuts each sequence's prompt"):
        PackedCollator(max_length=8, truncation_mode="keep_end", share_prompt=True)
    with pytest.raises(ValueError, match="truncation_mode"):
        PackedCollator(max_length=8, truncation_mode="left")
    with pytest.raises(ValueError, match="over max_sequence_length = 6"):
        PackedCollator(max_length=4, max_sequence_length=6)([{"prompt_ids": [1], "chosen_ids": [2] * 9,
                                                               "rejected_ids": [3] * 9}])
    assert "dropped" not in PackedCollator()(pairs)
