"""Does what reaches the gradient equal what the data says, on every obvious path?

    python benchmarks/bench_training_paths.py                      # this checkout
    PYTHONPATH=/path/to/other/checkout python benchmarks/bench_training_paths.py   # another one

Each path a user takes with the README and docs/ is run as written, with a tiny random
transformers Llama (CPU, built from a config), and compared with a reference computed without
packlib (tests/naive_training.py: every sequence run alone, its trained tokens' losses summed,
divided by the step's trained tokens):

- Trainer defaults: ``pack_dataset`` rows, ``Trainer(data_collator=PackedCollator())`` with
  ``remove_unused_columns=True``; one batch of the Trainer's own dataloader;
- ``completion_mask`` / ``attention_mask`` zeros: rows through ``PackedCollator``;
- docs/balance.md's "The training loop" block, run as written (read from the checkout that is
  imported): its parameters after 2 epochs against a step-level token-weighted reference; then
  killed mid-step (an exception in the forward, in-process) and run again with a fresh model
  and optimizer as a restarted process would: samples trained twice or never, per rank;
- a plain ``DataLoader(num_workers=2)``: the sampler's state after 5 consumed micro-batches;
- ``len(loader)`` after a resume; token lists of strings / floats.

Prints a markdown table; "refused" means a clear error instead of a silent wrong answer.
"""
from __future__ import annotations

import contextlib
import io
import logging
import pathlib
import sys
import tempfile
import traceback
import warnings

import numpy as np
import torch
import transformers

import packlib
from packlib.torch import PackedCollator

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from tests import naive_training as ref  # noqa: E402

VOCAB = 97
CHECKOUT = pathlib.Path(packlib.__file__).resolve().parents[1]


def model(seed=0):
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    return transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").train()


def sequences(n, seed, low=2, high=40):
    rng = np.random.default_rng(seed)
    return [rng.integers(1, VOCAB, k) for k in rng.integers(low, high + 1, n)]


def grads_of(m, batch):
    m.zero_grad()
    loss = m(**batch).loss
    loss.backward()
    g = [p.grad.detach().clone() for p in m.parameters()]
    m.zero_grad()
    return float(loss), g


def compare(batch, refs):
    """(|loss difference|, max relative gradient difference) of a collated batch vs the reference."""
    m = model()
    loss, g = grads_of(m, batch)
    want, g_ref = ref.loss_and_grads(m, refs)
    return abs(loss - want), ref.max_relative(g, g_ref)


def fmt(x):
    return f"{x:.1e}" if x else "0"


# ------------------------------------------------------------------------- the paths
def trainer_defaults():
    import datasets
    from packlib.formats.arrow import pack_dataset

    seqs = sequences(40, 1)
    packed = pack_dataset(datasets.Dataset.from_dict({"input_ids": [s.tolist() for s in seqs]}), 128,
                          overflow="split")
    with tempfile.TemporaryDirectory() as tmp:
        args = transformers.TrainingArguments(tmp, per_device_train_batch_size=1, report_to=[], use_cpu=True)
        trainer = transformers.Trainer(model=model(), args=args, train_dataset=packed, data_collator=PackedCollator())
        batch = next(iter(trainer.get_train_dataloader()))
    row = next(r for r in packed if r["input_ids"] == batch["input_ids"][0].tolist())
    parts = np.split(np.asarray(row["input_ids"]), np.cumsum(row["seq_lengths"])[:-1])
    refs = [(p, ref.trained_tokens(len(p))) for p in parts]
    return compare(batch, refs), f"{len(parts)} sequences in the row; columns reaching the collator: " \
                                 + ", ".join(k for k in packed.column_names if k in batch or k == "position_ids" and "position_ids" in batch)


def completion_mask():
    import pyarrow as pa
    from packlib.formats.arrow import pack_table

    seqs, rng = sequences(30, 2), np.random.default_rng(3)
    prompts = [int(rng.integers(1, len(s))) for s in seqs]
    masks = [[0] * p + [1] * (len(s) - p) for s, p in zip(seqs, prompts)]
    rows = pack_table(pa.table({"input_ids": [s.tolist() for s in seqs], "completion_mask": masks}), 128,
                      overflow="split").to_pylist()[:2]
    refs = []
    for r in rows:
        cuts = np.cumsum(r["seq_lengths"])[:-1]
        for tok, m in zip(np.split(np.asarray(r["input_ids"]), cuts), np.split(np.asarray(r["completion_mask"]), cuts)):
            refs.append((tok, ref.trained_tokens(len(tok), m)))
    return compare(PackedCollator()(rows), refs), ""


def trainer_defaults_completion_mask():
    """pack_dataset rows with a completion_mask, through the Trainer's own data loader with
    every argument its default: the mask column is dropped before the collator; what the
    collator trains is compared with the unpacked examples' prompts masked."""
    import datasets
    from packlib.formats.arrow import pack_dataset

    seqs, rng = sequences(30, 5), np.random.default_rng(6)
    seqs = [np.r_[i + 1, s[1:]] for i, s in enumerate(seqs)]          # first token: the example's index + 1
    masks = [[0] * (p := int(rng.integers(1, len(s)))) + [1] * (len(s) - p) for s in seqs]
    packed = pack_dataset(datasets.Dataset.from_dict({"input_ids": [s.tolist() for s in seqs],
                                                      "completion_mask": masks}), 128)
    with tempfile.TemporaryDirectory() as tmp:
        args = transformers.TrainingArguments(tmp, per_device_train_batch_size=1, report_to=[], use_cpu=True)
        trainer = transformers.Trainer(model=model(), args=args, train_dataset=packed, data_collator=PackedCollator())
        batch = next(iter(trainer.get_train_dataloader()))
    ids, pos = batch["input_ids"][0].numpy(), batch["position_ids"][0].numpy()
    refs = [(seqs[int(ids[a]) - 1], ref.trained_tokens(len(seqs[int(ids[a]) - 1]), masks[int(ids[a]) - 1]))
            for a in np.flatnonzero(pos == 0)]
    return compare(batch, refs), f"{len(refs)} sequences in the row; the batch: {', '.join(sorted(batch))}"


def attention_mask_zeros():
    seqs = sequences(6, 4)
    examples, refs = [], []
    for k, s in enumerate(seqs):
        pad = 3 + k % 3
        examples.append({"input_ids": np.concatenate([s, np.zeros(pad, np.int64)]),
                         "attention_mask": np.r_[np.ones(len(s), np.int64), np.zeros(pad, np.int64)]})
        refs.append((s, ref.trained_tokens(len(s))))
    return compare(PackedCollator()(examples), refs), "right padding, 3-5 tokens per sequence"


# ------------------------------------------------------------ the documented loop
def docs_loop():
    from tests.test_docs_blocks import python_blocks

    text = (CHECKOUT / "docs" / "balance.md").read_text()
    (block,) = [b.code for b in python_blocks(text, "docs/balance.md") if b.heading == "The training loop"]
    return block


class Killed(Exception):
    pass


class Recorder:
    """The model and optimizer a run sees: records which samples each optimizer step trained
    (a step's samples count once the optimizer stepped), and raises ``Killed`` at a forward."""

    def __init__(self, m, dataset, ns, kill_at=None):
        self.m, self.ns, self.kill_at, self.calls = m, ns, kill_at, 0
        self.pending, self.trained = [], []
        self.by_tokens = {tuple(d["input_ids"].tolist()): i for i, d in enumerate(dataset)}

    def __call__(self, **batch):
        self.calls += 1
        if self.kill_at is not None and self.calls == self.kill_at:
            raise Killed
        ids, pos = batch["input_ids"][0], batch["position_ids"][0]
        starts = (pos == 0).nonzero().flatten().tolist() + [ids.numel()]
        self.pending += [self.by_tokens[tuple(ids[a:b].tolist())] for a, b in zip(starts[:-1], starts[1:])]
        return self.m(**batch)

    def __getattr__(self, name):
        return getattr(self.m, name)

    def step_hook(self, *args, **kwargs):
        self.trained += [(self.ns["sampler"].epoch, i) for i in self.pending]
        self.pending = []


def run_loop(block, lengths, dataset, rank, world_size, path, kill_at=None, epochs=2, lr=1e-2):
    m = model()
    ns = {"lengths": lengths, "dataset": dataset, "max_sequence_length": 96, "rank": rank,
          "world_size": world_size, "accumulation": 2, "epochs": epochs, "path": str(path)}
    rec = Recorder(m, dataset, ns, kill_at)
    opt = torch.optim.SGD(m.parameters(), lr=lr)
    opt.register_step_post_hook(rec.step_hook)
    ns.update(model=rec, optimizer=opt)
    with contextlib.suppress(Killed):
        exec(compile(block, "docs/balance.md", "exec"), ns)
    return m, rec.trained


def loop_accumulation(block):
    """Parameters after 2 epochs of the docs' loop vs a step-level token-weighted reference."""
    lengths = np.random.default_rng(5).integers(2, 40, 60)
    seqs = sequences(len(lengths), 6)
    seqs = [np.random.default_rng(100 + i).integers(1, VOCAB, n) for i, n in enumerate(lengths)]
    dataset = [{"input_ids": s} for s in seqs]
    with tempfile.TemporaryDirectory() as tmp:
        trained_model, trained = run_loop(block, lengths, dataset, 0, 1, pathlib.Path(tmp) / "ckpt.pt")
    sampler = packlib.BalancedBatchSampler(lengths, 96, rank=0, world_size=1, micro_batches=2,
                                           cost=packlib.transformer_cost(4096), seed=0)
    m = model()
    opt = torch.optim.SGD(m.parameters(), lr=1e-2)
    steps = []
    for epoch in range(2):
        sampler.set_epoch(epoch)
        mbs = list(iter(sampler))
        steps += [[(seqs[i], ref.trained_tokens(len(seqs[i]))) for mb in mbs[k:k + 2] for i in mb]
                  for k in range(0, len(mbs), 2)]
    ref.train_steps(m, opt, steps)
    diff = max(float((a - b).abs().max()) for a, b in zip(trained_model.parameters(), m.parameters()))
    return diff, f"{len(steps)} steps (SGD, lr 1e-2)"


def loop_resume(block):
    """Killed mid-step, run again: per rank, samples trained twice / never, and the parameters
    against the uninterrupted run's."""
    lengths = np.random.default_rng(7).integers(2, 40, 80)
    seqs = [np.random.default_rng(200 + i).integers(1, VOCAB, n) for i, n in enumerate(lengths)]
    dataset = [{"input_ids": s} for s in seqs]
    out = []
    for rank in range(2):
        with tempfile.TemporaryDirectory() as tmp:
            full, want = run_loop(block, lengths, dataset, rank, 2, pathlib.Path(tmp) / "a.pt")
            path = pathlib.Path(tmp) / "b.pt"
            _, first = run_loop(block, lengths, dataset, rank, 2, path, kill_at=len(want) // 3 + 2)
            try:
                second_model, second = run_loop(block, lengths, dataset, rank, 2, path)
            except Exception as e:  # a refusal is an answer
                out.append(f"rank {rank}: resume refused ({type(e).__name__}: {str(e)[:80]})")
                continue
        got = first + second
        twice = sum(max(0, got.count(x) - 1) for x in set(want))
        never = sum(1 for x in set(want) if x not in got)
        equal = all(torch.equal(a, b) for a, b in zip(full.parameters(), second_model.parameters()))
        diff = max(float((a - b).abs().max()) for a, b in zip(full.parameters(), second_model.parameters()))
        out.append(f"rank {rank}: {twice} trained twice, {never} never; parameters "
                   + ("bitwise equal" if equal else f"off by {diff:.1e}"))
    return "; ".join(out)


# --------------------------------------------------------------------- data loading
def workers_state():
    lengths = np.random.default_rng(8).integers(2, 40, 200)
    dataset = [{"input_ids": np.random.default_rng(i).integers(1, VOCAB, n)} for i, n in enumerate(lengths)]
    sampler = packlib.BalancedBatchSampler(lengths, 96, rank=0, world_size=1, micro_batches=1)
    loader = torch.utils.data.DataLoader(dataset, batch_sampler=sampler, num_workers=2, collate_fn=PackedCollator())
    it = iter(loader)
    for _ in range(5):
        next(it)
    try:
        state = sampler.state_dict()
        answer = f"state_dict() position {state['position']} after 5 consumed"
    except Exception as e:
        answer = f"refused: {type(e).__name__}: {str(e)[:90]}..."
    del it
    try:
        from torchdata.stateful_dataloader import StatefulDataLoader
    except ImportError:
        return answer + "; torchdata not installed"
    sampler = packlib.BalancedBatchSampler(lengths, 96, rank=0, world_size=1, micro_batches=1)
    full = [b["input_ids"].tolist() for b in StatefulDataLoader(dataset, batch_sampler=sampler, num_workers=2,
                                                              collate_fn=PackedCollator())]
    loader = StatefulDataLoader(dataset, batch_sampler=sampler, num_workers=2, collate_fn=PackedCollator())
    it = iter(loader)
    head = [next(it)["input_ids"].tolist() for _ in range(5)]
    state = loader.state_dict()
    del it
    sampler2 = packlib.BalancedBatchSampler(lengths, 96, rank=0, world_size=1, micro_batches=1)
    loader2 = StatefulDataLoader(dataset, batch_sampler=sampler2, num_workers=2, collate_fn=PackedCollator())
    loader2.load_state_dict(state)
    tail = [b["input_ids"].tolist() for b in loader2]
    return answer + f"; StatefulDataLoader: resume {'exact' if head + tail == full else 'NOT exact'}"


def len_after_resume():
    lengths = np.random.default_rng(9).integers(2, 40, 400)
    sampler = packlib.BalancedBatchSampler(lengths, 96, rank=0, world_size=1, micro_batches=2)
    total = len(sampler)
    it = iter(sampler)
    for _ in range(20):
        next(it)
    state = sampler.state_dict()
    again = packlib.BalancedBatchSampler(lengths, 96, rank=0, world_size=1, micro_batches=2)
    again.load_state_dict(state)
    loader = torch.utils.data.DataLoader(list(range(len(lengths))), batch_sampler=again)
    return f"len(loader) {len(loader)} while {total - 20} remain (of {total})"


def bad_tokens():
    import datasets
    from packlib.formats.arrow import pack_dataset

    out = []
    for what, rows in (("strings", [["a", "b"], ["c"]]), ("floats", [[1.0, 2.0], [3.0]])):
        try:
            pack_dataset(datasets.Dataset.from_dict({"input_ids": rows}), 8)
            out.append(f"pack_dataset {what}: packed")
        except Exception as e:
            out.append(f"pack_dataset {what}: {type(e).__name__}")
        try:
            PackedCollator()([{"input_ids": r} for r in rows])
            out.append(f"collator {what}: collated")
        except Exception as e:
            out.append(f"collator {what}: {type(e).__name__}")
    return "; ".join(out)


def main():
    transformers.logging.set_verbosity_error()
    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")
    print(f"packlib from {CHECKOUT}\n")
    print("| path | loss difference | gradient difference (max relative) | notes |")
    print("|---|---|---|---|")
    for name, fn in (("`Trainer` defaults, `pack_dataset` rows, `PackedCollator()`", trainer_defaults),
                     ("`completion_mask` column", completion_mask),
                     ("`completion_mask` column, `Trainer` defaults", trainer_defaults_completion_mask),
                     ("`attention_mask` zeros (right padding)", attention_mask_zeros)):
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                (dl, dg), note = fn()
            print(f"| {name} | {fmt(dl)} | {fmt(dg)} | {note} |")
        except Exception as e:
            print(f"| {name} | error | | {type(e).__name__}: {str(e)[:100]} |")
    block = docs_loop()
    rows = (("docs loop, accumulation: parameters vs step-level token-weighted reference", lambda: loop_accumulation(block)),
            ("docs loop killed mid-step, run again", lambda: loop_resume(block)),
            ("plain `DataLoader(num_workers=2)`", workers_state),
            ("`len(loader)` after a resume", len_after_resume),
            ("token lists of strings / floats", bad_tokens))
    print("\n| path | measured |\n|---|---|")
    for name, fn in rows:
        try:
            r = fn()
            r = f"parameters off by {fmt(r[0])} ({r[1]})" if isinstance(r, tuple) else r
        except Exception as e:
            r = f"error {type(e).__name__}: {str(e)[:120]}"
            traceback.print_exc(file=sys.stderr)
        print(f"| {name} | {r} |")


if __name__ == "__main__":
    main()
