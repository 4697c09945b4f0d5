"""Two processes (gloo, CPU) of Accelerate and ``transformers.Trainer`` with balanced steps;
started by tests/test_trainer_balanced.py::test_two_processes_train_the_plan:

    python -m tests._trainer_worker PORT OUT_DIR

imports torch and transformers once, then forks the ranks (POSIX). Each rank, with the
environment a launcher gives it (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT):

1. ``sampler.drawn_by(Accelerator().prepare(DataLoader(batch_sampler=sampler)))``: the sample
   ids of every micro-batch it yields in epochs 0 and 1 (``loader.set_epoch``), and
   ``len(loader)``;
2. ``Trainer`` + ``packlib.torch.balance_trainer`` for ``EPOCHS`` epochs: the sample ids of
   every micro-batch the collator packs, in order, and the parameters at the end;
3. the same with TRL's ``SFTTrainer`` (where TRL is installed): the parameters at the end.

Writes ``OUT_DIR/rank-RANK.json``, ``OUT_DIR/params-RANK.pt`` and ``OUT_DIR/params-sft-RANK.pt``;
exits 0 when every rank did. ``python -m tests._trainer_worker PORT OUT_DIR ranks=N`` runs N
ranks of step 3 alone for ``SFT_STEPS`` optimizer steps (``OUT_DIR/params-sft-RANK.pt``).
Importable without torch (the test reads ``SETTINGS`` and ``samples``).
"""
from __future__ import annotations

import json
import os
import pathlib
import sys

import numpy as np

VOCAB = 64
SETTINGS = {"max_sequence_length": 64, "micro_batches": 2, "world_size": 2, "epochs": 2, "seed": 3}
SAMPLES = 40


def samples():
    """``(lengths, input_ids, labels)``: distinct sequences whose labels mask a prompt."""
    rng = np.random.default_rng(31)
    lengths = rng.integers(3, 30, SAMPLES)
    ids = [rng.integers(1, VOCAB, n).tolist() for n in lengths]
    assert len({tuple(x) for x in ids}) == SAMPLES
    labels = [[-100] * (len(x) // 3) + x[len(x) // 3:] for x in ids]
    return lengths, ids, labels


def tiny_model():
    import torch
    import transformers

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=128)
    return transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")


def sampler(lengths, rank, world_size=None):
    import packlib

    s = SETTINGS
    world_size = world_size or s["world_size"]
    return packlib.BalancedBatchSampler(lengths, s["max_sequence_length"], rank=rank, world_size=world_size,
                                        micro_batches=s["micro_batches"], cost=packlib.transformer_cost(4096),
                                        seed=s["seed"])


def trainer_args(out, **kw):
    import transformers

    s = SETTINGS
    settings = dict(per_device_train_batch_size=1, gradient_accumulation_steps=s["micro_batches"],
                    num_train_epochs=s["epochs"], learning_rate=1e-2, optim="sgd", lr_scheduler_type="constant",
                    max_grad_norm=0.0, report_to=[], use_cpu=True, save_strategy="no", disable_tqdm=True)
    return transformers.TrainingArguments(str(out), **{**settings, **kw})


def main(rank: int, out: pathlib.Path) -> None:
    import datasets
    import torch
    import transformers
    from accelerate import Accelerator

    from packlib.torch import PackedCollator, balance_trainer

    torch.set_num_threads(1)
    lengths, ids, labels = samples()
    index = {tuple(x): i for i, x in enumerate(ids)}
    seen = {"accelerate": [], "trainer": []}
    accelerator = Accelerator(cpu=True)
    plan = sampler(lengths, rank)
    loader = plan.drawn_by(accelerator.prepare(torch.utils.data.DataLoader(list(range(SAMPLES)), batch_sampler=plan,
                                                                           collate_fn=list)))
    seen["len"] = len(loader)
    for epoch in range(2):
        loader.set_epoch(epoch)
        seen["accelerate"].append([list(map(int, b)) for b in loader])

    def collator(examples):
        seen["trainer"].append([index[tuple(e["input_ids"])] for e in examples])
        return PackedCollator()(examples)

    args = trainer_args(out / "trainer")
    dataset = datasets.Dataset.from_dict({"input_ids": ids, "labels": labels})
    trainer = transformers.Trainer(model=tiny_model(), args=args, train_dataset=dataset, data_collator=collator)
    balance_trainer(trainer, sampler(lengths, args.process_index))
    trainer.train()
    seen["steps"] = trainer.state.global_step
    torch.save({k: v.detach().clone() for k, v in trainer.model.state_dict().items()}, out / f"params-{rank}.pt")
    sft = sft_run(out, lengths, ids, labels)
    if sft is not None:
        torch.save({k: v.detach().clone() for k, v in sft.items()}, out / f"params-sft-{rank}.pt")
    (out / f"rank-{rank}.json").write_text(json.dumps(seen))


def sft_run(out, lengths, ids, labels, **limits):
    """TRL's SFTTrainer with balance_trainer on the same data and plan (``limits``: the
    config's ``max_steps``): its parameters, or ``None`` without TRL."""
    try:
        import trl
    except ImportError:
        return None
    import datasets

    from packlib.torch import PackedCollator, balance_trainer
    from tests._preference_trainers import tokenizer

    s = SETTINGS
    args = trl.SFTConfig(str(out / "sft"), per_device_train_batch_size=1, gradient_accumulation_steps=s["micro_batches"],
                         num_train_epochs=s["epochs"], max_length=None, learning_rate=1e-2, optim="sgd",
                         lr_scheduler_type="constant", max_grad_norm=0.0, report_to=[], use_cpu=True,
                         save_strategy="no", disable_tqdm=True, bf16=False, **limits)
    dataset = datasets.Dataset.from_dict({"input_ids": ids, "labels": labels})
    trainer = trl.SFTTrainer(model=tiny_model(), args=args, train_dataset=dataset, processing_class=tokenizer(),
                             data_collator=PackedCollator())
    balance_trainer(trainer, sampler(lengths, args.process_index, args.world_size))
    trainer.train()
    return trainer.model.state_dict()


#: optimizer steps of the SFT run on more ranks (``ranks=N``)
SFT_STEPS = 3


def sft_ranks_main(rank: int, out: pathlib.Path) -> None:
    """TRL's SFTTrainer alone, with balance_trainer, for :data:`SFT_STEPS` steps: its parameters."""
    import torch

    torch.set_num_threads(1)
    lengths, ids, labels = samples()
    params = sft_run(out, lengths, ids, labels, max_steps=SFT_STEPS)
    torch.save({k: v.detach().clone() for k, v in params.items()}, out / f"params-sft-{rank}.pt")


def launch(port: int, out: str, world_size: int | None = None) -> int:
    """Fork the ranks after importing torch and transformers once; 0 when every rank succeeded.
    ``world_size`` (``ranks=N``): that many ranks of :func:`sft_ranks_main` alone."""
    import torch  # noqa: F401  (imported once, inherited by the ranks)
    import transformers.models.llama.modeling_llama  # noqa: F401

    from tests._ddp_worker import fork_ranks

    n = world_size or SETTINGS["world_size"]

    def run(rank):
        os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=str(port))
        (sft_ranks_main if world_size else main)(rank, pathlib.Path(out))

    return fork_ranks(n, run)


if __name__ == "__main__":
    ranks = [int(a.split("=")[1]) for a in sys.argv[3:] if a.startswith("ranks=")]
    sys.exit(launch(int(sys.argv[1]), sys.argv[2], ranks[0] if ranks else None))
