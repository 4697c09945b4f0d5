"""Balanced steps through Accelerate and ``transformers.Trainer``: what each rank trains, how
balanced its steps are, and whether the parameters are the reference's.

    python benchmarks/bench_trainer_balanced.py                 # every part (CPU, a few minutes)
    python benchmarks/bench_trainer_balanced.py --part prepare  # one part: prepare, balance, params
    python benchmarks/bench_trainer_balanced.py --part balance --gpu   # step times measured (CUDA)
    PYTHONPATH=/path/to/before python benchmarks/bench_trainer_balanced.py --part prepare

- ``prepare``: ``accelerator.prepare`` (``accelerate.data_loader.prepare_data_loader``, the
  function ``Accelerator.prepare`` and the Trainer call, with ``num_processes=2`` and each
  ``process_index`` in turn) on a ``DataLoader(batch_sampler=BalancedBatchSampler(..., rank,
  world_size=2, micro_batches=2))`` over 299 samples: per epoch, the scheduled samples never
  trained and trained twice, and ``len(loader)`` against the rank's planned count, with
  Accelerate's defaults and ``even_batches=False``. "before" is a per-rank sampler that
  Accelerate's wrapper cannot see through (what every batch sampler was before: run the
  script on the old checkout to see the old sampler itself);
- ``balance``: the Trainer's data on 8 ranks x 2 micro-batches (``per_device_train_batch_size=1``,
  ``gradient_accumulation_steps=2``), one epoch of long documents (tests/balance_workloads.py,
  L = 16384): the Trainer's default (``pack_dataset``'s rows, packed best-fit decreasing,
  shuffled by its ``RandomSampler`` and dealt by Accelerate) against ``balance_trainer``'s
  loader (the planned epoch, dealt by Accelerate as the Trainer prepares it). Each rank's
  micro-batches are read from the prepared loaders; a step's cost on a rank is the sum of
  ``a * l + b * l**2`` over its sequences (``transformer_cost(2048)``); balance = total cost /
  (ranks x sum over steps of the largest rank cost); the epoch's modelled time is the sum over
  steps of the largest rank cost. With ``--gpu`` every row of ``--steps`` steps of each plan is
  also timed on benchmarks/bench_balance_gpu.py's Llama-shaped model (forward and backward,
  one row at a time, best of 2; its GPU size on CUDA, else its toy model and workload) and
  the measured balance and mean step time are printed;
- ``params``: parameters after training against a reference computed without packlib
  (tests/naive_training.py: each sequence alone, token mean over each step): docs/balance.md's
  loop as written on data whose labels mask every prompt (2 epochs, accumulation 2), the
  Trainer with ``balance_trainer`` on one process (2 epochs, accumulation 2), and two gloo
  processes (tests/_trainer_worker.py).

Prints markdown tables. The machine may be loaded by other work: no figure here is a time.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import logging
import pathlib
import socket
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import torch

import packlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


# ------------------------------------------------------------------------------ prepare
class Opaque:
    """A per-rank batch sampler that yields its own micro-batches whoever draws it: what
    ``BalancedBatchSampler`` did before it saw Accelerate's wrapper."""

    def __init__(self, inner):
        self.inner = inner

    def __len__(self):
        return self.inner._total()

    def __iter__(self):
        return iter(list(self.inner._micro_batches(0)))


def _declared(loader):
    """A prepared loader declared to the BalancedBatchSampler it draws (``drawn_by``), where
    the checkout has the declaration and the loader draws one."""
    inner = getattr(loader.batch_sampler, "batch_sampler", None)
    return inner.drawn_by(loader) if hasattr(inner, "drawn_by") else loader


def through_prepare(lengths, wrap, epochs=2, **kw):
    """Per epoch: (never trained, trained twice, len(loader) per rank, planned per rank)."""
    from accelerate.data_loader import prepare_data_loader

    W, M = 2, 2
    out = []
    samplers = [packlib.BalancedBatchSampler(lengths, 96, rank=r, world_size=W, micro_batches=M,
                                             cost=packlib.transformer_cost(4096)) for r in range(W)]
    loaders = [prepare_data_loader(torch.utils.data.DataLoader(list(range(lengths.size)), batch_sampler=wrap(s),
                                                               collate_fn=list), num_processes=W, process_index=r, **kw)
               for r, s in enumerate(samplers)]
    loaders = [_declared(loader) for loader in loaders]
    for epoch in range(epochs):
        counts = np.zeros(lengths.size, np.int64)
        for s, loader in zip(samplers, loaders):
            s.set_epoch(epoch)
            loader.set_epoch(epoch)
            for mb in loader:
                counts[mb] += 1
        scheduled = np.setdiff1d(np.arange(lengths.size), samplers[0].schedule.dropped)
        out.append((int((counts[scheduled] == 0).sum()), int((counts > 1).sum()), [len(x) for x in loaders],
                    [len(s) for s in samplers]))
    return out


def part_prepare():
    lengths = np.random.default_rng(0).integers(2, 40, 299)
    print("\n## Samples through accelerator.prepare (2 processes, 299 samples, micro_batches=2)\n")
    print("| sampler | Accelerate | epoch | never trained | trained twice | len(loader) per rank | planned per rank |")
    print("|---|---|---|---|---|---|---|")
    for name, wrap in (("before (a sampler Accelerate cannot see into)", Opaque),
                       ("BalancedBatchSampler, this checkout", lambda s: s)):
        for acc, kw in (("defaults", {}), ("even_batches=False", {"even_batches": False})):
            try:
                rows = through_prepare(lengths, wrap, **kw)
            except Exception as e:  # an old checkout, a refusal: say so
                print(f"| {name} | {acc} | — | {type(e).__name__}: {e} | | | |")
                continue
            for epoch, (lost, twice, got, want) in enumerate(rows):
                print(f"| {name} | {acc} | {epoch} | {lost} of 299 | {twice} | {got} | {want} |")


# ------------------------------------------------------------------------------ balance
def rank_plans(make_loader, W):
    """Each rank's micro-batches (sample ids), read from its prepared loader."""
    return [list(make_loader(r)) for r in range(W)]


def default_trainer_plan(lengths, L, W, M, seed=0):
    """The Trainer's default: pack_dataset's rows (bfd), RandomSampler, batch 1, dealt by Accelerate."""
    from accelerate.data_loader import prepare_data_loader

    packs = packlib.pack(lengths, L)  # pack_dataset's packing (method "bfd")
    rows = [packs.indices[packs.offsets[k]:packs.offsets[k + 1]] for k in range(len(packs.offsets) - 1)]

    def loader(r):
        g = torch.Generator().manual_seed(seed)  # every rank draws the same shuffle (the Trainer's seed)
        dl = torch.utils.data.DataLoader(list(range(len(rows))), batch_size=1, shuffle=True, generator=g,
                                         collate_fn=lambda b: rows[b[0]])
        return prepare_data_loader(dl, num_processes=W, process_index=r)

    return _steps(rank_plans(loader, W), M)


def balanced_trainer_plan(lengths, L, W, M, cost):
    """balance_trainer's loader: the planned epoch, dealt by Accelerate as the Trainer prepares it."""
    from accelerate.data_loader import prepare_data_loader

    from packlib.balancing._epochs import EpochStream

    def loader(r):
        s = packlib.BalancedBatchSampler(lengths, L, rank=r, world_size=W, micro_batches=M, cost=cost)
        stream = EpochStream(s, epochs=1)
        dl = torch.utils.data.DataLoader(list(range(lengths.size)), batch_sampler=stream, collate_fn=np.asarray)
        return stream.drawn_by(prepare_data_loader(dl, num_processes=W, process_index=r))

    return _steps(rank_plans(loader, W), M)


def _steps(per_rank, M):
    S = min(len(x) for x in per_rank) // M  # Accelerate gives every rank as many micro-batches
    return [[[np.asarray(per_rank[r][s * M + m]) for m in range(M)] for r in range(len(per_rank))] for s in range(S)]


def modelled(plan, lengths, cost):
    a, b = cost
    c = np.array([[sum(a * lengths[ids].sum() + b * np.square(lengths[ids].astype(np.float64)).sum()
                       for ids in rows) for rows in ranks] for ranks in plan])
    counts = np.bincount(np.concatenate([ids for ranks in plan for rows in ranks for ids in rows]),
                         minlength=lengths.size)
    return {"balance": c.sum() / (c.shape[1] * c.max(axis=1).sum()), "time": c.max(axis=1).sum(), "steps": len(plan),
            "never": int((counts == 0).sum()), "twice": int((counts > 1).sum())}


def part_balance(gpu, steps):
    from tests import balance_workloads

    L, W, M, hidden, docs = 16384, 8, 2, 2048, 8000
    if gpu and not torch.cuda.is_available():  # rows to time on a CPU: bench_balance_gpu's toy sizes
        import bench_balance_gpu as g

        L, W, hidden, docs = (g.TOY[k] for k in ("max_sequence_length", "ranks", "hidden", "documents"))
    lengths = balance_workloads.long_documents_at(docs, L, 2027)
    cost = packlib.transformer_cost(hidden)
    plans = {"Trainer default: pack_dataset rows, RandomSampler": default_trainer_plan(lengths, L, W, M),
             "balance_trainer (transformer_cost)": balanced_trainer_plan(lengths, L, W, M, cost)}
    print(f"\n## Per-step balance through the Trainer's loaders ({lengths.size} long documents, L = {L}, "
          f"{W} ranks x {M} micro-batches, cost a·l + b·l² = transformer_cost({hidden}))\n")
    print("| plan | steps | balance (modelled) | epoch time (modelled, relative) | samples never / twice |")
    print("|---|---|---|---|---|")
    figs = {name: modelled(plan, lengths, cost) for name, plan in plans.items()}
    base = figs[next(iter(figs))]["time"]
    for name, f in figs.items():
        print(f"| {name} | {f['steps']} | {f['balance']:.4f} | {f['time'] / base:.3f} | {f['never']} / {f['twice']} |")
    if gpu:
        measured(plans, lengths, L, steps)


def measured(plans, lengths, L, steps):
    """Every row of ``steps`` steps of each plan timed on bench_balance_gpu's model (forward and backward)."""
    import bench_balance_gpu as g

    cuda = torch.cuda.is_available()
    cfg = g.GPU if cuda else g.TOY
    device, dtype = torch.device("cuda" if cuda else "cpu"), torch.bfloat16 if cuda else torch.float32
    kernel, model = g.build_model(cfg["vocab"], cfg["hidden"], cfg["layers"], cfg["heads"], cfg["ffn"], device, dtype)
    runner = g.Runner(model, cfg["vocab"], device)
    runner.time_rows([[L], [max(1, L // 64)] * 64], 1)
    where = torch.cuda.get_device_name(device) if cuda else "CPU (a toy model and workload: not GPU figures)"
    print(f"\nmeasured on {where}, attention {kernel}, hidden {cfg['hidden']}, {cfg['layers']} layers, {steps} steps "
          "of each plan spread over the epoch, best of 2:\n")
    print("| plan | balance (measured) | mean step time | tokens/s |")
    print("|---|---|---|---|")
    for name, plan in plans.items():
        plan = g.spread_steps(plan, steps)
        rows = [ids for ranks in plan for rs in ranks for ids in rs]
        times = runner.time_rows([lengths[ids] for ids in rows], 2).min(axis=0)
        f = g.figures(plan, lengths, times)
        print(f"| {name} | {f['balance']:.3f} | {f['step']:.4f} s | {f['tokens_per_s']:,.0f} |")


# ------------------------------------------------------------------------------ params
def part_params():
    from tests import test_trainer_balanced as t

    print("\n## Parameters against the reference (each sequence alone, token mean per step)\n")
    print("| path | largest parameter difference |")
    print("|---|---|")
    from packlib.torch import PackedCollator

    lengths, ids, labels = t._sft()
    with tempfile.TemporaryDirectory() as tmp:
        count = PackedCollator.label_tokens
        for name, declared in (("before: every sample's length - 1", False), ("this checkout", True)):
            if not declared:
                del PackedCollator.label_tokens  # a collator that declares nothing: length - 1 per sample
            where = pathlib.Path(tmp) / name[:6]
            where.mkdir()
            try:
                trained, sampler = t._docs_loop(lengths, ids, labels, where)
            finally:
                PackedCollator.label_tokens = count
            print(f"| docs/balance.md loop as written, prompts masked, 2 epochs ({name}) | "
                  f"{_diff(trained, t, sampler, ids, labels)} |")
        lengths, ids, labels = t._sft(30, seed=15, high=60)
        trainer, sampler = t._trainer(pathlib.Path(tmp) / "t", lengths, ids, labels)
        with contextlib.redirect_stdout(io.StringIO()):
            trainer.train()
        print(f"| Trainer + balance_trainer, 1 process, 2 epochs | {_diff(trainer.model, t, sampler, ids, labels)} |")
        print(f"| Trainer + balance_trainer, 2 gloo processes, 2 epochs | {two_processes(pathlib.Path(tmp))} |")


def _diff(model, t, sampler, ids, labels):
    m = t.worker.tiny_model()
    t.ref.train_steps(m, torch.optim.SGD(m.parameters(), lr=1e-2), t._steps(sampler, ids, labels, range(2)))
    return f"{max(float((a - b).abs().max()) for a, b in zip(model.parameters(), m.parameters())):.1e}"


def two_processes(tmp):
    from tests import _trainer_worker as worker
    from tests import test_trainer_balanced as t

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.run([sys.executable, "-m", "tests._trainer_worker", str(port), str(tmp)], cwd=ROOT,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode:
        return f"failed: {proc.stdout[-300:]}"
    lengths, ids, labels = worker.samples()
    params = torch.load(tmp / "params-0.pt")
    m = worker.tiny_model()
    t.ref.train_steps(m, torch.optim.SGD(m.parameters(), lr=1e-2),
                      t._steps(worker.sampler(lengths, 0), [np.asarray(x) for x in ids],
                               [np.asarray(y) for y in labels], range(2)))
    return f"{max(float((params[k] - v).abs().max()) for k, v in m.state_dict().items()):.1e}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", default="prepare,balance,params",
                    help="a comma-separated subset of prepare,balance,params")
    ap.add_argument("--gpu", action="store_true", help="also time the balance part's rows (CUDA; a toy model on a CPU)")
    ap.add_argument("--steps", type=int, default=10, help="steps of each plan timed with --gpu")
    args = ap.parse_args(argv)
    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")
    import packlib.torch  # noqa: F401  (the Trainer path and the label counter)

    print(f"packlib from {pathlib.Path(packlib.__file__).parent}")
    parts = args.part.split(",")
    if "prepare" in parts:
        part_prepare()
    if "balance" in parts:
        part_balance(args.gpu, args.steps)
    if "params" in parts:
        with contextlib.redirect_stderr(io.StringIO()):
            part_params()


if __name__ == "__main__":
    main()
