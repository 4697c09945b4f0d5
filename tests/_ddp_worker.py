"""One rank of docs/balance.md's "The training loop", as written, under real DistributedDataParallel
(gloo, CPU); started by tests/test_training.py::test_the_documented_loop_killed_and_resumed_on_two_ranks:

    python -m tests._ddp_worker WORLD_SIZE PORT OUT_DIR [KILL_AT]

imports torch and transformers once, then forks the ranks (POSIX), each of which runs the
loop's ```python block with the model wrapped in DDP and in a recorder that checks
every packed row against its sequences alone and logs, at every optimizer step, which samples
the step trained (``OUT_DIR/trained-RANK.jsonl``, one ``[epoch, sample]`` per line, written when
the optimizer has stepped). With ``KILL_AT``, the rank writes its process id to
``OUT_DIR/ready-RANK`` at its KILL_AT-th forward and waits there to be killed (the test sends
SIGKILL). At the end it writes its parameters (``params-RANK.pt``) and what it saw
(``seen-RANK.json``). The command exits 0 when every rank did.

Importable without torch (the test reads ``SETTINGS`` and ``samples``): torch is imported by
the functions that run the model.
"""
from __future__ import annotations

import json
import os
import pathlib
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
VOCAB = 97
#: The names the loop's block binds (besides model, optimizer, rank, world_size, path, dataset).
SETTINGS = {"max_sequence_length": 96, "accumulation": 2, "epochs": 2}
SAMPLES = 48


def samples():
    """``(lengths, token lists)``: distinct sequences, so a packed row tells which samples it holds."""
    lengths = np.random.default_rng(13).integers(2, 40, SAMPLES)
    seqs = [np.random.default_rng(1000 + i).integers(1, VOCAB, n) for i, n in enumerate(lengths)]
    assert len({tuple(s) for s in seqs}) == len(seqs)
    return lengths, seqs


def loop_block() -> str:
    sys.path.insert(0, str(ROOT))
    from tests.test_docs_blocks import python_blocks

    path = "docs/balance.md"
    blocks = [b.code for b in python_blocks((ROOT / path).read_text(), path) if b.heading == "The training loop"]
    assert len(blocks) == 1, f"{path} should hold one python block under 'The training loop'"
    return blocks[0]


def tiny_model():
    import torch
    import transformers

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    return transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").train()


class Recorder:
    """The model as the loop sees it: checks each packed row against its sequences alone, notes
    which samples it held, and stops at the ``kill_at``-th forward to be killed."""

    def __init__(self, ddp, seqs, out: pathlib.Path, rank: int, kill_at: int | None):
        self.ddp, self.out, self.rank, self.kill_at = ddp, out, rank, kill_at
        self.ids = {tuple(s.tolist()): i for i, s in enumerate(seqs)}
        self.calls, self.rows, self.worst, self.pending = 0, 0, 0.0, []
        self.sampler = None

    def __call__(self, **batch):
        import torch

        self.calls += 1
        if self.kill_at is not None and self.calls == self.kill_at:
            (self.out / f"ready-{self.rank}").write_text(str(os.getpid()))  # waiting for SIGKILL
            while True:
                time.sleep(1)
        out = self.ddp(**batch)
        ids, pos = batch["input_ids"][0], batch["position_ids"][0]
        starts = (pos == 0).nonzero().flatten().tolist() + [ids.numel()]
        with torch.no_grad():
            for a, b in zip(starts[:-1], starts[1:]):
                alone = self.ddp.module(input_ids=ids[a:b][None]).logits[0]
                self.worst = max(self.worst, float((out.logits[0, a:b] - alone).abs().max()))
                self.pending.append(self.ids[tuple(ids[a:b].tolist())])
        self.rows += 1
        return out

    def stepped(self, *args, **kwargs):
        """The optimizer stepped: the pending samples are trained (logged before the checkpoint)."""
        epoch = self.namespace["sampler"].epoch
        with open(self.out / f"trained-{self.rank}.jsonl", "a") as f:
            f.writelines(json.dumps([epoch, i]) + "\n" for i in self.pending)
        self.pending = []

    def state_dict(self, *args, **kwargs):
        return self.ddp.state_dict(*args, **kwargs)

    def load_state_dict(self, *args, **kwargs):
        return self.ddp.load_state_dict(*args, **kwargs)


def main(rank: int, world_size: int, port: int, out: str, kill_at: int | None = None) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)  # two ranks on a small machine
    out = pathlib.Path(out)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
    try:
        ddp = torch.nn.parallel.DistributedDataParallel(tiny_model())
        lengths, seqs = samples()
        rec = Recorder(ddp, seqs, out, rank, kill_at)
        optimizer = torch.optim.AdamW(ddp.parameters(), lr=1e-2)
        optimizer.register_step_post_hook(rec.stepped)
        namespace = {"lengths": lengths, "dataset": [{"input_ids": s} for s in seqs], "rank": rank,
                     "world_size": world_size, "model": rec, "optimizer": optimizer,
                     "path": str(out / f"checkpoint-{rank}.pt"), **SETTINGS}
        rec.namespace = namespace
        exec(compile(loop_block(), "docs/balance.md", "exec"), namespace)
        torch.save({k: v.detach().clone() for k, v in ddp.module.state_dict().items()}, out / f"params-{rank}.pt")
        (out / f"seen-{rank}.json").write_text(json.dumps({"rows": rec.rows, "worst": rec.worst}))
    finally:
        dist.destroy_process_group()


def launch(world_size: int, port: int, out: str, kill_at: int | None = None) -> int:
    """Fork the ranks after importing torch and transformers once; 0 when every rank succeeded."""
    import torch  # noqa: F401  (imported once, inherited by the ranks)
    import transformers.models.llama.modeling_llama  # noqa: F401

    return fork_ranks(world_size, lambda rank: main(rank, world_size, port, out, kill_at))


def fork_ranks(world_size: int, run) -> int:
    """Fork ``world_size`` processes, each calling ``run(rank)`` and exiting 1 if it raised;
    wait for them all; 0 when every rank succeeded (tests/_trainer_worker.py uses it too)."""
    import traceback

    pids = []
    for rank in range(world_size):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                run(rank)
                code = 0
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        pids.append(pid)
    codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]
    print(f"ranks exited with {codes}")
    return 0 if all(c == 0 for c in codes) else 1


if __name__ == "__main__":
    sys.exit(launch(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else None))
