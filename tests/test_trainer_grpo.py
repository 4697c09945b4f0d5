"""TRL's GRPOTrainer on packed rows (packlib/torch/trainers/_trl_grpo.py), against TRL 1.16's
own GRPOTrainer on its padded batches: the per-token log-probs, entropies and gradients of one
padded batch (left-padded prompts, right-padded completions, prompts shared by several rows), and
two training steps end to end (its sampling, rewards, default loss, ``num_iterations=2`` so the
second pass is off-policy). And balance_trainer refusing GRPOTrainer before training.

A tiny random Llama built from a config, a word-level tokenizer, a fake reward. Needs torch,
transformers, accelerate, datasets and TRL.
"""
from __future__ import annotations

import random

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the GRPO tests run models: pip install torch")
transformers = pytest.importorskip("transformers", reason="the GRPO tests build transformers models")
datasets = pytest.importorskip("datasets", reason="GRPOTrainer reads a datasets.Dataset")
trl = pytest.importorskip("trl", reason="compares with TRL's GRPOTrainer")

import packlib  # noqa: E402
from packlib.torch import balance_trainer  # noqa: E402
from packlib.torch.trainers import PackedGRPOMixin, PackedGRPOTrainer  # noqa: E402

V, K = 16, 4  # a small vocabulary: the random policy samples the end token often, so completions differ in length


def _tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(V)}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="t0", eos_token="t1")


def _model():
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=V, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=128,
                                   pad_token_id=0, eos_token_id=1, bos_token_id=None)
    return transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")


def _reward(completions, **kwargs):
    return [len(c.split()) % 3 + 0.5 * (sum(int(w[1:]) for w in c.split()) % 2) for c in completions]


def _prompts(n=4):
    rng = random.Random(0)
    return datasets.Dataset.from_dict(
        {"prompt": [" ".join(f"t{rng.randrange(2, V)}" for _ in range(rng.randrange(2, 9))) for _ in range(n)]})


def _trainer(cls, out, **kw):
    settings = dict(per_device_train_batch_size=K, num_generations=K, max_completion_length=6, max_steps=2,
                    gradient_accumulation_steps=2, num_iterations=2, learning_rate=1e-2, optim="sgd",
                    lr_scheduler_type="constant", max_grad_norm=0.0, report_to=[], use_cpu=True, save_strategy="no",
                    disable_tqdm=True, bf16=False, logging_steps=1, seed=3)
    args = trl.GRPOConfig(str(out), **{**settings, **kw})
    return cls(model=_model(), reward_funcs=_reward, args=args, train_dataset=_prompts(), processing_class=_tokenizer())


def test_two_steps_equal_grpo_trainers_own(tmp_path, monkeypatch):
    """Two optimizer steps, sampling included: the same completions (so the same rewards and
    advantages), the same losses, parameters within float32 rounding of TRL's padded run, while
    the steps move them by far more; the packed rows hold each prompt once."""
    from packlib.torch.trainers import _trl_grpo

    theirs = _trainer(trl.GRPOTrainer, tmp_path / "trl")
    theirs.train()
    rows, seen = [], []
    original = _trl_grpo._groups

    def spy(input_ids, attention_mask, keep, chosen):
        examples, order = original(input_ids, attention_mask, keep, chosen)
        rows.append((len(examples), len(order), int(attention_mask[list(chosen)].sum()),
                     sum(len(e["prompt_ids"]) + sum(map(len, e["completion_ids"])) for e in examples)))
        seen.append(attention_mask[list(chosen), -keep:].sum(1).tolist())
        return examples, order

    monkeypatch.setattr(_trl_grpo, "_groups", spy)
    ours = _trainer(PackedGRPOTrainer, tmp_path / "ours")
    assert isinstance(ours, trl.GRPOTrainer) and isinstance(ours, PackedGRPOMixin)
    ours.train()
    assert [h.get("loss") for h in ours.state.log_history] == pytest.approx(
        [h.get("loss") for h in theirs.state.log_history], abs=1e-6)
    start = _model().state_dict()
    moved = max(float((a - start[k]).abs().max()) for k, a in theirs.model.state_dict().items())
    worst = max(float((a - b).abs().max()) for a, b in zip(ours.model.state_dict().values(),
                                                           theirs.model.state_dict().values()))
    assert worst < 1e-6 < 1e-4 < moved, (worst, moved)
    assert any(min(lengths) < 6 for lengths in seen)             # some completions ended early: ragged
    assert any(groups < n for groups, n, _, _ in rows)            # prompts shared by several rows
    assert all(packed < padded for _, _, padded, packed in rows)  # each such prompt laid out once


def _padded_batch(seed=0, B=8, P=5, C=6):
    """TRL's layout: prompts left-padded, completions right-padded; rows 0, 1 and 6 share a
    prompt, as do rows 3 and 7."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(2, V, (B, P + C), generator=g)
    mask = torch.ones(B, P + C, dtype=torch.long)
    mask[0, :2] = mask[1, :2] = mask[6, :2] = mask[2, :1] = 0
    mask[2, -3:] = mask[5, -1:] = mask[6, -5:] = mask[7, -2:] = 0
    ids[1, :P] = ids[6, :P] = ids[0, :P]
    ids[7, :P] = ids[3, :P]
    return ids * mask, mask, C


@pytest.mark.parametrize("attention", ["dense", "flash"])
def test_per_token_logps_entropies_and_gradients_equal_trls(tmp_path, monkeypatch, attention):
    """Both layouts: the prompt once (sdpa's 4-D mask) and, as for a flash-attention model, per
    completion (run here by sdpa, which reads the restarting position_ids)."""
    from packlib.torch.trainers import _trl_grpo

    monkeypatch.setattr(_trl_grpo, "_attention", lambda model: attention)
    trainer = _trainer(PackedGRPOTrainer, tmp_path)
    model = trainer.model
    ids, mask, C = _padded_batch()
    weights = torch.randn(ids.shape[0], C, generator=torch.Generator().manual_seed(1))
    keep = mask[:, -C:]
    got = {}
    for name, method in (("trl", trl.GRPOTrainer._get_per_token_logps_and_entropies),
                         ("ours", PackedGRPOMixin._get_per_token_logps_and_entropies)):
        for batch_size in (None, 3):
            model.zero_grad()
            logps, ent, _ = method(trainer, model, ids, mask, C, batch_size=batch_size, compute_entropy=True)
            (logps * keep * weights).sum().backward()
            got[name, batch_size] = (logps * keep, ent * keep, [p.grad.clone() for p in model.parameters()])
    for batch_size in (None, 3):
        a, b = got["trl", batch_size], got["ours", batch_size]
        assert float((a[0] - b[0]).abs().max()) < 1e-5
        assert float((a[1] - b[1]).abs().max()) < 1e-5
        top = max(float(g.abs().max()) for g in a[2])
        assert max(float((x - y).abs().max()) for x, y in zip(a[2], b[2])) < 1e-5 * top
    assert float(got["ours", None][0].abs().min()) == 0.0 and float(got["ours", None][0].abs().max()) > 1


def test_a_call_whose_completions_are_all_masked_still_has_a_graph(tmp_path):
    """mask_truncated_completions can mask every completion of a micro-batch: the log-probs are
    then zeros that still come from the model, so that TRL's backward runs (as with TRL's own
    forward) and leaves zero gradients."""
    trainer = _trainer(PackedGRPOTrainer, tmp_path)
    ids, mask, C = _padded_batch()
    masked = mask.clone()
    masked[:, -C:] = 0
    logps, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, masked, C)
    assert logps.requires_grad and float(logps.abs().max()) == 0.0
    trainer.model.zero_grad()
    logps.sum().backward()
    assert all(float(p.grad.abs().max()) == 0.0 for p in trainer.model.parameters() if p.grad is not None)
    with torch.no_grad():
        logps, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, masked, C)
    assert not logps.requires_grad


def test_what_the_packed_path_cannot_read_is_refused(tmp_path):
    trainer = _trainer(PackedGRPOTrainer, tmp_path)
    ids, mask, C = _padded_batch()
    with pytest.raises(ValueError, match=r"vision inputs \(pixel_values\): train it with trl.GRPOTrainer"):
        trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, C, pixel_values=torch.zeros(4, 3))
    holed = mask.clone()
    holed[4, -3] = 0
    with pytest.raises(ValueError, match="row 4's completion mask is not one run of ones"):
        trainer._get_per_token_logps_and_entropies(trainer.model, ids, holed, C)


@pytest.mark.parametrize("planned, cls", [(None, "GRPOTrainer"), (2, "GRPOTrainer"), (None, "PackedGRPOTrainer")])
def test_balance_trainer_refuses_grpo_trainers(tmp_path, planned, cls):
    trainer = _trainer(getattr(trl, cls, PackedGRPOTrainer), tmp_path, per_device_train_batch_size=1,
                       gradient_accumulation_steps=2, generation_batch_size=K)
    lengths = np.full(4, 5) if planned is None else np.full((4, planned), 5)
    sampler = packlib.BalancedBatchSampler(lengths, 64, rank=0, world_size=1, micro_batches=2)
    match = "GRPOTrainer draws prompts, .*use packlib.torch.PackedGRPOTrainer, which packs"
    if cls == "PackedGRPOTrainer":
        match = "GRPOTrainer draws prompts, .*balance_trainer on it: train it as it is, which packs"
    if planned:
        match = r"num_generations=4 but the sampler plans groups of 2 sequences"
    with pytest.raises(ValueError, match=match):
        balance_trainer(trainer, sampler)
