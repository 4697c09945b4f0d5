"""GRPO, reward-model and truncation paths on packed rows against TRL 1.16's own code.

Each row of the table is measured against TRL's own functions called on TRL's own padded
batch, as tests/test_torch_rl.py calls them (its helpers are reused: ``GRPOTrainer``'s per-token
log-probs through its fused LM head and its default ``_compute_loss``, ``RewardTrainer``'s
``compute_loss``, ``DataCollatorForPreference``'s truncation), on a tiny random Llama (hidden
64, 2 layers, vocabulary 97, sdpa, float32, CPU), at a larger size than the tests: groups of 8
completions of up to 120 tokens under prompts of up to 200, pairs of up to 300 + 300 tokens.

    PYTHONPATH=$PWD python3 benchmarks/bench_trl_equivalence.py
"""
from __future__ import annotations

import argparse
import pathlib
import sys
import types

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _rel(a, b):
    return float((a - b).abs().max() / b.abs().max())


def grpo_rows(t, torch, model, fused, share):
    from packlib.torch import PackedCollator, model_inputs, sequence_logps, token_logps

    examples = t._groups(4, 8, seed=21, prompt=(1, 200), answer=(1, 120))
    padded = t.padded_groups_grpo(examples)
    n = sum(len(e["completion_ids"]) for e in examples)
    gen = torch.Generator().manual_seed(5)
    advantages = torch.randn(n, generator=gen)
    unshared = PackedCollator()(examples)
    with torch.no_grad():
        now, mask = token_logps(model(**model_inputs(unshared)).logits, unshared)
        old = now + 0.3 * torch.randn(now.shape, generator=gen) * mask
        theirs_tok, _, _ = t._grpo(fused).trainer._get_per_token_logps_and_entropies(
            fused, torch.cat([padded["prompt_ids"], padded["completion_ids"]], 1),
            torch.cat([padded["prompt_mask"], padded["completion_mask"]], 1), padded["completion_ids"].shape[1])
    inputs = dict(padded, advantages=advantages, old_per_token_logps=old,
                  num_items_in_batch=padded["completion_mask"].sum())
    fused.zero_grad()
    theirs = t._grpo(fused)(inputs)
    theirs.backward()
    want = t._grads(fused).clone()
    batch = PackedCollator(share_prompt=share)(examples)
    model.zero_grad()
    ours = t._grpo(model, lambda: token_logps(model(**model_inputs(batch)).logits, batch)[0])(
        dict(inputs, completion_mask=mask))
    ours.backward()
    got = t._grads(model).clone()
    with torch.no_grad():
        tok, _ = token_logps(model(**model_inputs(batch)).logits, batch)
    model.zero_grad()  # the sum-based surrogate of the earlier example: no ratio, no clipping
    sums = sequence_logps(model(**model_inputs(batch)).logits, batch)
    (-(advantages * sums / mask.sum(1)).mean()).backward()
    naive = t._grads(model)
    scale = (naive.abs() / want.abs().clamp(min=1e-12))[want.abs() > 1e-3 * want.abs().max()]
    return {"per-token log-probs, max abs diff": float((tok - theirs_tok * mask).abs().max()),
            "default loss (dapo, off-policy, clipped), abs diff": abs(float(ours.detach()) - float(theirs.detach())),
            "gradients, max diff / max |gradient|": _rel(got, want),
            "sum-based example's gradient / TRL's, per parameter (median)": float(scale.median())}


def reward_rows(t, torch, trl, reward_model, share):
    from packlib.torch import PackedCollator, sequence_scores

    pairs = t._pairs(8, seed=22, prompt=(1, 200), answer=(1, 200))
    for i, e in enumerate(pairs):
        e["margin"] = 0.5 * (i % 3)
    whole = [{"chosen_ids": e["prompt_ids"] + e["chosen_ids"], "rejected_ids": e["prompt_ids"] + e["rejected_ids"],
              "margin": e["margin"]} for e in pairs]
    padded = trl.DataCollatorForPreference(pad_token_id=0)(whole)
    reward_model.zero_grad()
    theirs = t._reward_loss(reward_model, dict(padded))
    theirs.backward()
    want = t._grads(reward_model).clone()
    with torch.no_grad():
        their_scores = reward_model(input_ids=padded["input_ids"], attention_mask=padded["attention_mask"]).logits
    batch = PackedCollator(share_prompt=share)(pairs)
    reward_model.zero_grad()
    scores = sequence_scores(reward_model, batch)
    ours = t._reward_loss(lambda **kw: types.SimpleNamespace(logits=scores),
                          {"margin": batch["margin"], "attention_mask": torch.ones(1)}, reward_model)
    ours.backward()
    without = t._reward_loss(lambda **kw: types.SimpleNamespace(logits=scores.detach()),
                             {"attention_mask": torch.ones(1)}, reward_model)
    return {"scores, max abs diff": float((scores.detach() - their_scores).abs().max()),
            "loss with margin, abs diff": abs(float(ours.detach()) - float(theirs.detach())),
            "gradients, max diff / max |gradient|": _rel(t._grads(reward_model), want),
            "loss without the margin (the key dropped), abs diff": abs(float(without) - float(theirs.detach()))}


def truncation_rows(t, torch, dpo, model, L, share):
    from packlib.torch import PackedCollator, model_inputs, sequence_logps

    examples = t._pairs(8, seed=23, prompt=(1, 200), answer=(1, 300))
    kept = [e for e in examples if len(e["prompt_ids"]) < L]
    padded = dpo.DataCollatorForPreference(pad_token_id=0, max_length=L)(kept)
    with torch.no_grad():
        theirs = t.padded_logps(model(input_ids=padded["input_ids"], attention_mask=padded["attention_mask"]).logits,
                                padded)
        cut = PackedCollator(max_length=L, share_prompt=share)(examples)
        ours = sequence_logps(model(**model_inputs(cut)).logits, cut)
        whole = PackedCollator(share_prompt=share)(kept)
        full = sequence_logps(model(**model_inputs(whole)).logits, whole)
    return {f"sums, truncated as TRL (max_length {L}), max abs diff": float((ours - theirs).abs().max()),
            "sums, not truncated (the same pairs), max abs diff": float((full - theirs).abs().max()),
            "pairs dropped (prompt fills max_length)": f"{cut['dropped'].numel()} of {len(examples)}"}


def _fmt(v):
    return v if isinstance(v, str) else f"{v:.3g}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max-length", type=int, default=128)
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    import torch
    import transformers
    import trl.trainer.dpo_trainer as dpo
    import trl.trainer.reward_trainer as reward
    from trl.trainer.utils import add_fused_lm_head

    import tests.test_torch_rl as t
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=t.VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").train()
    fused = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").train()
    fused.load_state_dict(model.state_dict())
    add_fused_lm_head(fused, outputs=("log_probs", "entropy"))
    rcfg = transformers.LlamaConfig(**{**cfg.to_dict(), "num_labels": 1, "pad_token_id": 0})
    reward_model = transformers.AutoModelForSequenceClassification.from_config(rcfg).train()
    print(f"# packed rows against TRL {__import__('trl').__version__}'s code (torch {torch.__version__}, "
          f"transformers {transformers.__version__}; CPU, float32)\n")
    print("| path | quantity | packed | prompt once |\n|---|---|---:|---:|")
    for name, rows in (("GRPO (GRPOTrainer)", lambda s: grpo_rows(t, torch, model, fused, s)),
                       ("reward model (RewardTrainer)", lambda s: reward_rows(t, torch, reward, reward_model, s)),
                       ("DPO truncation (DataCollatorForPreference)",
                        lambda s: truncation_rows(t, torch, dpo, model, args.max_length, s))):
        packed, shared = rows(False), rows(True)
        for key, value in packed.items():
            print(f"| {name} | {key} | {_fmt(value)} | {_fmt(shared[key])} |")


if __name__ == "__main__":
    main()
