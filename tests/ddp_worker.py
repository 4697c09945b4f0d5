"""One rank of the documented training loop under real DistributedDataParallel (gloo, CPU),
started by tests/test_torch.py::test_the_documented_loop_on_real_ranks:

    python -m tests.ddp_worker RANK WORLD_SIZE PORT OUT_JSON

It runs the ```python block of docs/balance.md's "The training loop" as written, with the
model wrapped in DDP and every packed row checked against its sequences alone, and writes what
it saw (rows, worst logit difference, a checksum of the trained weights) to OUT_JSON.
"""
from __future__ import annotations

import json
import sys

import numpy as np
import torch
import torch.distributed as dist

from tests.test_torch import _CheckedModel, _model, _python_blocks, _sequences


def main(rank: int, world_size: int, port: int, out: str) -> None:
    torch.set_num_threads(1)  # two ranks on a 2-core machine
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
    try:
        model = torch.nn.parallel.DistributedDataParallel(_model("sdpa"))
        checked = _CheckedModel(model, alone=model.module)
        lengths = np.random.default_rng(13).integers(1, 40, 80)
        (loop,) = _python_blocks("docs/balance.md", "## The training loop")
        namespace = {"lengths": lengths, "dataset": [{"input_ids": s} for s in _sequences(lengths, seed=13)],
                     "max_sequence_length": 96, "rank": rank, "world_size": world_size, "accumulation": 2,
                     "epochs": 2, "model": checked, "optimizer": torch.optim.SGD(model.parameters(), lr=1e-2),
                     "path": f"{out}.pt"}
        exec(compile(loop, "docs/balance.md", "exec"), namespace)
        checksum = float(sum(p.double().sum() for p in model.module.parameters()))
        with open(out, "w") as f:
            json.dump({"rows": checked.rows, "worst": checked.worst, "checksum": checksum}, f)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
