"""TRL's DPOTrainer, RewardTrainer and KTOTrainer on tiny models, padded (TRL's own run) and
packed (packlib.torch.PackedDPOTrainer, ...), with and without balanced steps; shared by
tests/test_trainer_preference.py and benchmarks/bench_trainer_paths_preference.py.

The reference of a balanced run is TRL's own code on TRL's own padded batches: each optimizer
step, the stock trainer's ``compute_loss`` on its padded batch of the step's micro-batches,
each weighted by its pairs (examples) over the step's, and plain SGD (what the Trainer does
with ``optim="sgd"``, a constant learning rate and no clipping).

Run as ``python -m tests._preference_trainers PORT OUT_DIR KIND [skewed] [kl] [ranks=N]`` it
forks N (default two) gloo ranks that train ``KIND`` (dpo, reward, kto) packed and balanced
(``skewed``: on data whose steps give the ranks different numbers of pairs; ``kl``: KTO with
its default loss, KL term included) and write their parameters (``params-RANK.pt``) and their
planned steps; exits 0 when every rank did. Importable without torch.
"""
from __future__ import annotations

import json
import os
import pathlib
import sys

import numpy as np

VOCAB = 64
LR = 0.5
L = 40  # the plan's row capacity: micro-batches of 1 to 4 pairs
SETTINGS = dict(learning_rate=LR, optim="sgd", lr_scheduler_type="constant", max_grad_norm=0.0, report_to=[],
                use_cpu=True, save_strategy="no", disable_tqdm=True, logging_steps=1, bf16=False, seed=0)


def tokenizer():
    """A word-level tokenizer of ``t0`` ... ``t63`` (pad ``t0``, eos ``t1``)."""
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(VOCAB)}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="t0", eos_token="t1")


def _config(**kw):
    import transformers

    return transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                    num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256, **kw)


def causal_lm(seed=0):
    import torch
    import transformers

    torch.manual_seed(seed)
    return transformers.AutoModelForCausalLM.from_config(_config(), attn_implementation="sdpa")


def reward_model(seed=0):
    import torch
    import transformers

    torch.manual_seed(seed)
    return transformers.AutoModelForSequenceClassification.from_config(_config(num_labels=1, pad_token_id=0),
                                                                       attn_implementation="sdpa")


def _words(rng, lo, hi):
    return " ".join(f"t{i}" for i in rng.integers(2, VOCAB, rng.integers(lo, hi)))


def dataset(kind: str, n: int = 16, seed: int = 0, skewed: bool = False):
    """TRL's data for ``kind``: DPO text pairs, reward pairs of token ids with a margin, KTO
    text examples with labels. ``skewed``: every fourth long enough to fill a row alone, the
    rest short, so that a balanced step gives one rank one long pair (example) where the other
    gets several short ones."""
    import datasets

    rng = np.random.default_rng(seed)
    long = [skewed and i % 4 == 0 for i in range(n)]
    if kind == "reward":
        size = [(16, 19) if b else ((2, 12) if not skewed else (2, 4)) for b in long]
        ids = [[rng.integers(2, VOCAB, rng.integers(*s)).tolist() for s in size] for _ in range(2)]
        return datasets.Dataset.from_dict({"chosen_ids": ids[0], "rejected_ids": ids[1],
                                           "margin": rng.random(n).round(3).tolist()})
    prompts = [_words(rng, 9, 11) if big else _words(rng, 2, 8 if not skewed else 3) for big in long]

    def completion(big):
        return " " + _words(rng, 4, 6) if big else " " + _words(rng, 1, 9 if not skewed else 3)

    if kind == "dpo":
        return datasets.Dataset.from_dict({"prompt": prompts, "chosen": [completion(b) for b in long],
                                           "rejected": [completion(b) for b in long]})
    if skewed:  # KTO's long examples fill a row alone
        prompts = [_words(rng, 25, 28) if big else _words(rng, 2, 5) for big in long]
    return datasets.Dataset.from_dict({"prompt": prompts, "completion": [completion(b) for b in long],
                                       "label": [bool(b) for b in rng.integers(0, 2, n)]})


def trainer(kind: str, cls=None, *, data=None, ref_model=None, **settings):
    """A TRL trainer of ``kind`` (``cls``: TRL's own by default, or a packlib class), on
    fresh tiny models (``ref_model``: the reference, else the policy's twin); ``settings`` go
    to its config, ``data_collator`` to the trainer."""
    import trl

    base = {"dpo": "DPO", "reward": "Reward", "kto": "KTO"}[kind]
    cls = cls or getattr(trl, f"{base}Trainer")
    collator = settings.pop("data_collator", None)
    out = settings.pop("output_dir", "/tmp/packlib-preference-trainers")
    args = getattr(trl, f"{base}Config")(out, **{**SETTINGS, **settings})
    kw = {"data_collator": collator} if collator is not None else {}
    if kind == "reward":
        return cls(model=reward_model(), args=args, train_dataset=data or dataset(kind), processing_class=tokenizer(),
                   **kw)
    ref = None if args.precompute_ref_log_probs else (ref_model or causal_lm())
    return cls(model=causal_lm(), ref_model=ref, args=args, train_dataset=data or dataset(kind),
               processing_class=tokenizer(), **kw)


def sharp_reference():
    """A reference model whose mismatched completions are less likely than the policy's (its
    logits scaled up): KTO's KL estimate is then above 0, where TRL's clamp keeps it."""
    import torch

    model = causal_lm(seed=1)
    with torch.no_grad():
        model.lm_head.weight.mul_(4)
    return model


def lengths(kind: str, rows):
    """The sampler's lengths of the trainer's (prepared) dataset: ``(n, 2)`` per pair, or
    ``(n, 1)`` per KTO example."""
    if kind == "reward":
        return np.array([[len(r["chosen_ids"]), len(r["rejected_ids"])] for r in rows])
    if kind == "dpo":
        return np.array([[len(r["prompt_ids"]) + len(r["chosen_ids"]), len(r["prompt_ids"]) + len(r["rejected_ids"])]
                         for r in rows])
    return np.array([[len(r["prompt_ids"]) + len(r["completion_ids"])] for r in rows])


def sampler(kind, trainer_, *, rank=0, world_size=1, micro_batches=2, seed=3):
    import packlib

    return packlib.BalancedBatchSampler(lengths(kind, trainer_.train_dataset), L, rank=rank, world_size=world_size,
                                        micro_batches=micro_batches, cost=packlib.transformer_cost(4096), seed=seed)


def planned_steps(sampler_, steps):
    """The first ``steps`` optimizer steps of the plan: per step, every rank's micro-batches
    (lists of dataset rows), in the order of ``(rank, micro-batch)``."""
    out, epoch = [], 0
    while len(out) < steps:
        schedule = sampler_._schedule_of(epoch)
        o, ix = schedule.packs.offsets, schedule.packs.indices
        per_step = sampler_.world_size * sampler_.micro_batches
        for s in range(schedule.num_steps):
            out.append([ix[o[k]:o[k + 1]].tolist() for k in range(s * per_step, (s + 1) * per_step)])
        epoch += 1
    return out[:steps]


def reference_run(stock, steps, micro_batches=2):
    """SGD on TRL's own loss over each step's padded micro-batches, each weighted by its
    pairs (examples) over the step's: the parameters after ``steps``. KTO with its KL term on
    several ranks (``steps`` holding ``micro_batches`` per rank): each micro-batch's KL
    estimate is the mean of the ranks' estimates of that micro-batch, as TRL gathers it."""
    import torch

    model = stock.model.train()
    rows = stock.train_dataset
    for step in steps:
        total = sum(len(mb) for mb in step)
        batches = [stock._prepare_inputs(stock.data_collator([rows[i] for i in mb])) for mb in step]
        kls = _kl_across_ranks(stock, model, batches, micro_batches)
        loss = 0
        for k, (mb, batch) in enumerate(zip(step, batches)):
            with _first_gather(stock, None if kls is None else kls[k % micro_batches]):
                loss = loss + stock.compute_loss(model, batch) * (len(mb) / total)
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                if p.grad is not None:
                    p -= LR * p.grad
                    p.grad = None
    return model


def _kl_across_ranks(stock, model, batches, micro_batches):
    """KTO with its KL term, ``batches`` of several ranks: for each micro-batch index, the KL
    estimates of every rank's micro-batch there (what TRL's ``gather_for_metrics`` of the KL
    gives each rank); ``None`` otherwise."""
    import torch

    if not getattr(stock, "calculate_KL", False) or len(batches) <= micro_batches:
        return None
    seen = []
    with torch.no_grad():
        for batch in batches:
            with _first_gather(stock, None, seen):
                stock.compute_loss(model, batch)
    return [torch.stack(seen[m::micro_batches]) for m in range(micro_batches)]


class _first_gather:
    """Within: the first ``gather_for_metrics`` of each loss (KTO's KL estimate) returns
    ``value`` (every rank's estimate), or records its argument in ``seen``."""

    def __init__(self, stock, value, seen=None):
        self.accelerator, self.value, self.seen, self.calls = stock.accelerator, value, seen, 0

    def gather(self, data, *args, **kwargs):
        self.calls += 1
        if self.calls > 1:
            return self.original(data, *args, **kwargs)
        if self.seen is not None:
            self.seen.append(data.detach())
            return data
        return self.value

    def __enter__(self):
        if self.value is not None or self.seen is not None:
            self.original = self.accelerator.gather_for_metrics
            self.accelerator.gather_for_metrics = self.gather
        return self

    def __exit__(self, *exc):
        self.accelerator.__dict__.pop("gather_for_metrics", None)


def max_difference(a, b) -> float:
    return max(float((x - y).abs().max()) for x, y in zip(a.parameters(), b.parameters()))


def settings_of(kind):
    """Each kind's settings for the balanced runs (KTO's per_device_train_batch_size only
    sets its KL pairs)."""
    return {"kto": {"per_device_train_batch_size": 4}}.get(kind, {"per_device_train_batch_size": 1})


# ------------------------------------------------------------------ gloo ranks
#: the settings of each kind on several ranks without ``kl``: KTO without its KL term (TRL
#: averages that over the ranks' micro-batches; ``reference_run`` does the same with ``kl``)
RANK_SETTINGS = {"kto": {"loss_type": "apo_zero_unpaired"}}


def rank_data(kind: str, skewed: bool, world_size: int):
    """The data of a run on ``world_size`` ranks: 8 examples (pairs) per rank."""
    return dataset(kind, n=8 * world_size, skewed=skewed)


def main(rank: int, out: pathlib.Path, kind: str, skewed: bool = False, world_size: int = 2, kl: bool = False) -> None:
    import torch

    from packlib.torch import PackedCollator, balance_trainer
    from packlib.torch.trainers import _trl_preference

    torch.set_num_threads(1)
    cls = _trl_preference.trainer_class({"dpo": "PackedDPOTrainer", "kto": "PackedKTOTrainer",
                                         "reward": "PackedRewardTrainer"}[kind])
    t = trainer(kind, cls, data=rank_data(kind, skewed, world_size), data_collator=PackedCollator(),
                gradient_accumulation_steps=2, max_steps=STEPS, output_dir=str(out / f"run-{rank}"),
                ref_model=sharp_reference() if kl else None, **settings_of(kind),
                **({} if kl else RANK_SETTINGS.get(kind, {})))
    s = sampler(kind, t, rank=t.args.process_index, world_size=t.args.world_size)
    balance_trainer(t, s)
    t.train()
    torch.save({k: v.detach().clone() for k, v in t.model.state_dict().items()}, out / f"params-{rank}.pt")
    (out / f"steps-{rank}.json").write_text(json.dumps(planned_steps(s, STEPS)))


STEPS = 3


def launch(port: int, out: str, kind: str, flags=()) -> int:
    """Fork the ranks (``flags``: ``skewed``, ``kl``, ``ranks=N``, default 2); 0 when every
    rank succeeded."""
    import torch  # noqa: F401  (imported once, inherited by the ranks)
    import trl  # noqa: F401
    import transformers.models.llama.modeling_llama  # noqa: F401

    from tests._ddp_worker import fork_ranks

    world_size = int(next((f.split("=")[1] for f in flags if f.startswith("ranks=")), 2))

    def run(rank):
        os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=str(port))
        main(rank, pathlib.Path(out), kind, "skewed" in flags, world_size, "kl" in flags)

    return fork_ranks(world_size, run)


if __name__ == "__main__":
    sys.exit(launch(int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:]))
