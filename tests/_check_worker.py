"""Two processes (gloo, CPU) of ``transformers.Trainer`` with ``balance_trainer``, whose packing
check runs on every rank before the first step; started by
tests/test_torch_check.py::test_two_ranks_agree_on_the_check:

    python -m tests._check_worker PORT OUT_DIR

Each rank trains a model that leaks across packed sequences (refused before any step: it
records the message and whether its parameters changed), then an exact one (trained for its
planned steps; a rank left behind would hang the gradient all-reduce), then the leaking one
unpacked (``PaddedCollator`` over a sampler built with ``padded=True``: the check passes and it
trains), and writes ``OUT_DIR/rank-RANK.json`` and the unpacked model's parameters,
``OUT_DIR/params-unpacked-RANK.pt``. Exits 0 when every rank did. Importable without torch.
"""
from __future__ import annotations

import json
import os
import pathlib
import sys

from tests import _trainer_worker as base


def main(rank: int, out: pathlib.Path) -> None:
    import datasets
    import torch
    import transformers

    import packlib
    from packlib.torch import PackedCollator, PaddedCollator, balance_trainer
    from tests._check_models import running_mean_llama

    torch.set_num_threads(1)
    lengths, ids, labels = base.samples()
    dataset = datasets.Dataset.from_dict({"input_ids": ids, "labels": labels})
    seen = {}
    runs = (("leaking", running_mean_llama(vocab=base.VOCAB), PackedCollator()),
            ("exact", base.tiny_model(), PackedCollator()),
            ("unpacked", running_mean_llama(vocab=base.VOCAB), PaddedCollator()))
    for name, model, collator in runs:
        before = [p.detach().clone() for p in model.parameters()]
        args = base.trainer_args(out / name, num_train_epochs=1)
        trainer = transformers.Trainer(model=model, args=args, train_dataset=dataset, data_collator=collator)
        sampler = packlib.BalancedBatchSampler(lengths, **unpacked_settings(args.process_index)) \
            if name == "unpacked" else base.sampler(lengths, args.process_index)
        balance_trainer(trainer, sampler)
        try:
            trainer.train()
            seen[name] = {"steps": trainer.state.global_step}
        except ValueError as e:
            seen[name] = {"refused": str(e)}
        seen[name]["changed"] = any(not torch.equal(a, p) for a, p in zip(before, model.parameters()))
        seen[name]["params"] = float(sum(p.double().sum() for p in model.parameters()))
    (out / f"rank-{rank}.json").write_text(json.dumps(seen))
    torch.save([p.detach() for p in runs[2][1].parameters()], out / f"params-unpacked-{rank}.pt")


def unpacked_settings(rank: int) -> dict:
    """The padded sampler of the unpacked run (the test plans the same schedule)."""
    s = base.SETTINGS
    return dict(max_sequence_length=s["max_sequence_length"], rank=rank, world_size=s["world_size"],
                micro_batches=s["micro_batches"], seed=s["seed"], padded=True)


def launch(port: int, out: str) -> int:
    """Fork the ranks after importing torch and transformers once; 0 when every rank succeeded."""
    import torch  # noqa: F401  (imported once, inherited by the ranks)
    import transformers.models.llama.modeling_llama  # noqa: F401

    from tests._ddp_worker import fork_ranks

    def run(rank):
        os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(base.SETTINGS["world_size"]),
                          MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        main(rank, pathlib.Path(out))

    return fork_ranks(base.SETTINGS["world_size"], run)


if __name__ == "__main__":
    sys.exit(launch(int(sys.argv[1]), sys.argv[2]))
