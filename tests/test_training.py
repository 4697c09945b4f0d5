"""What reaches the gradient is what the data says, on every documented path: the Trainer's
defaults, the collator's masks, the training loop's token-weighted steps and its resume (one
process and two real ranks killed with SIGKILL), DataLoader workers.

Every check is against a reference computed without packlib (tests/naive_training.py: each
sequence alone, token-weighted over the step). Tiny random transformers models built from a
config (no download). Needs torch and transformers; without them the module skips.
"""
from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the training tests run models: pip install torch==2.13.0")
transformers = pytest.importorskip("transformers", reason="the training tests build transformers models")

import packlib  # noqa: E402
from packlib.torch import PackedCollator  # noqa: E402
from tests import _ddp_worker as worker  # noqa: E402
from tests.procs import free_port  # noqa: E402
from tests import naive_training as ref  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
VOCAB = 97


def _model(seed=0):
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    return transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").train()


def _sequences(lengths, seed=0):
    return [np.random.default_rng(seed * 1000 + i).integers(1, VOCAB, n) for i, n in enumerate(lengths)]


def _assert_exact(batch, refs, model=None):
    """The collated batch's loss and gradient equal the reference's (each sequence alone)."""
    model = model or _model()
    model.zero_grad()
    out = model(**batch)
    out.loss.backward()
    grads = [p.grad.detach().clone() for p in model.parameters()]
    loss, want = ref.loss_and_grads(model, refs)
    assert float(out.loss) == pytest.approx(loss, abs=1e-5)
    assert ref.max_relative(grads, want) < 1e-4


# ------------------------------------------------------------ what the collator trains
def _masked_rows(seed=0, n=24, L=64):
    """Rows packed by pack_table with completion_mask, assistant_masks, attention_mask zeros
    (right padding) and labels with -100s, and the reference: each sequence's real tokens and
    which of them are trained."""
    pa = pytest.importorskip("pyarrow")
    from packlib.formats.arrow import pack_table

    rng = np.random.default_rng(seed)
    cols = {k: [] for k in ("input_ids", "labels", "completion_mask", "assistant_masks", "attention_mask")}
    for n_real in rng.integers(2, 30, n):
        pad = int(rng.integers(0, 4))
        ids = rng.integers(1, VOCAB, n_real + pad)
        prompt = int(rng.integers(0, n_real))
        labels = np.where(rng.random(n_real + pad) < 0.2, -100, ids)
        cols["input_ids"].append(ids.tolist())
        cols["labels"].append(labels.tolist())
        cols["completion_mask"].append([0] * prompt + [1] * (n_real + pad - prompt))
        cols["assistant_masks"].append((rng.random(n_real + pad) < 0.8).astype(int).tolist())
        cols["attention_mask"].append([1] * n_real + [0] * pad)
    return pack_table(pa.table(cols), L, position_ids=True).to_pylist()


def _reference(rows, use=("labels", "completion_mask", "assistant_masks", "attention_mask")):
    refs = []
    for r in rows:
        cuts = np.cumsum(r["seq_lengths"])[:-1]
        parts = {k: np.split(np.asarray(r[k]), cuts) for k in ("input_ids", *use)}
        for j, ids in enumerate(parts["input_ids"]):
            real = parts["attention_mask"][j] != 0 if "attention_mask" in use else np.ones(len(ids), bool)
            masks = [parts[k][j][real] for k in ("completion_mask", "assistant_masks") if k in use]
            labels = parts["labels"][j][real] if "labels" in use else None
            if real.any():
                refs.append((ids[real], ref.trained_tokens(int(real.sum()), *masks, labels=labels)))
    return refs


@pytest.mark.parametrize("split_by", ["seq_lengths", "position_ids"])
def test_the_collator_trains_only_what_every_mask_allows(split_by):
    rows = _masked_rows()
    drop = "position_ids" if split_by == "seq_lengths" else "seq_lengths"
    batch = PackedCollator()([{k: v for k, v in r.items() if k != drop} for r in rows[:3]])
    _assert_exact(batch, _reference(rows[:3]))


@pytest.mark.parametrize("only", ["labels", "completion_mask", "assistant_masks", "attention_mask"])
def test_each_mask_alone(only):
    rows = [{k: r[k] for k in ("input_ids", "seq_lengths", only)} for r in _masked_rows(seed=1)[:2]]
    _assert_exact(PackedCollator()(rows), _reference(rows, use=(only,)))


def test_rows_as_the_trainer_leaves_them_stay_apart():
    """remove_unused_columns=True keeps input_ids and position_ids: the row still splits."""
    rows = [{"input_ids": r["input_ids"], "position_ids": r["position_ids"]} for r in _masked_rows(seed=2)[:2]]
    full = _masked_rows(seed=2)[:2]
    refs = [(seq, ref.trained_tokens(len(seq))) for r in full
            for seq in np.split(np.asarray(r["input_ids"]), np.cumsum(r["seq_lengths"])[:-1])]
    _assert_exact(PackedCollator()(rows), refs)


def _raw_masked_examples(n=24, seed=5):
    """Unpacked examples with labels, completion_mask, assistant_masks and attention_mask
    zeros; each example's first token is its index + 1 (so a packed segment says its source)."""
    rng = np.random.default_rng(seed)
    cols = {k: [] for k in ("input_ids", "labels", "completion_mask", "assistant_masks", "attention_mask")}
    for i, n_real in enumerate(rng.integers(3, 30, n)):
        pad = int(rng.integers(0, 3))
        ids = np.r_[i + 1, rng.integers(1, VOCAB, n_real + pad - 1)]
        prompt = int(rng.integers(1, n_real))
        cols["input_ids"].append(ids.tolist())
        cols["labels"].append(np.where(rng.random(ids.size) < 0.15, -100, ids).tolist())
        cols["completion_mask"].append([0] * prompt + [1] * (ids.size - prompt))
        cols["assistant_masks"].append((rng.random(ids.size) < 0.85).astype(int).tolist())
        cols["attention_mask"].append([1] * n_real + [0] * pad)
    return cols


def _reference_of_row(input_ids, position_ids, cols):
    """Each segment of a packed row (split at its position_ids' restarts), computed from the
    unpacked example it came from: its real tokens and which of them every mask trains."""
    starts = np.flatnonzero(np.asarray(position_ids) == 0)
    refs = []
    for a in starts:
        i = int(input_ids[a]) - 1
        real = np.asarray(cols["attention_mask"][i]) != 0
        ids = np.asarray(cols["input_ids"][i])[real]
        refs.append((ids, ref.trained_tokens(ids.size, np.asarray(cols["completion_mask"][i])[real],
                                             np.asarray(cols["assistant_masks"][i])[real],
                                             labels=np.asarray(cols["labels"][i])[real])))
    return refs


@pytest.mark.parametrize("fold_masks", [True, False])
def test_the_trainers_defaults_keep_the_masks(tmp_path, fold_masks):
    """transformers.Trainer, every argument its default (remove_unused_columns=True drops
    completion_mask and assistant_masks): pack_dataset's folded labels still train exactly
    what the masks allow, batch for batch; without folding the prompts would be trained."""
    datasets = pytest.importorskip("datasets")
    from packlib.formats.arrow import pack_dataset

    cols = _raw_masked_examples()
    packed = pack_dataset(datasets.Dataset.from_dict(cols), 64, fold_masks=fold_masks)
    seen = set()

    def collator(examples):
        seen.update(*(e.keys() for e in examples))
        return PackedCollator()(examples)

    args = transformers.TrainingArguments(str(tmp_path), per_device_train_batch_size=1, report_to=[], use_cpu=True)
    trainer = transformers.Trainer(model=_model(), args=args, train_dataset=packed, data_collator=collator)
    batches = list(trainer.get_train_dataloader())
    assert seen == {"input_ids", "attention_mask", "position_ids", "labels"}   # the masks never arrive
    assert len(batches) == packed.num_rows
    for batch in batches:
        refs = _reference_of_row(batch["input_ids"][0].tolist(), batch["position_ids"][0].tolist(), cols)
        if fold_masks:
            _assert_exact(batch, refs)
        else:                                     # the check can fail: the prompts are trained
            assert int((batch["labels"] != -100).sum()) > sum(int(t.sum()) for _, t in refs)


@pytest.mark.parametrize("example, error, match", [
    ({"input_ids": ["a", "b"]}, TypeError, r"examples\[0\]\['input_ids'\] holds strings"),
    ({"input_ids": [1.0, 2.0]}, TypeError, r"examples\[0\]\['input_ids'\] holds floats"),
    ({"input_ids": [1, 2], "labels": [1.5, 2.0]}, TypeError, r"\['labels'\] holds floats"),
    ({"input_ids": [1, 2], "completion_mask": [0.0, 1.0]}, TypeError, r"\['completion_mask'\] holds floats"),
    ({"input_ids": [1, 2], "completion_mask": [1]}, ValueError, r"examples\[0\]\['completion_mask'\] holds 1 values for 2"),
    ({"input_ids": [1, 2], "assistant_masks": [1, 1, 1]}, ValueError, r"\['assistant_masks'\] holds 3 values"),
    ({"input_ids": [1, 2], "attention_mask": [1]}, ValueError, r"\['attention_mask'\] holds 1 values"),
    ({"input_ids": [1, 2], "attention_mask": [0, 0]}, ValueError, "every token of this micro-batch is padding"),
    ({"input_ids": [1, 2, 3], "position_ids": [0, 1]}, ValueError, r"\['position_ids'\] holds 2 values"),
    ({"input_ids": [1, 2, 3], "position_ids": [0, 2, 3]}, ValueError, "must count 0, 1, 2"),
    ({"input_ids": [1, 2, 3], "position_ids": [0, 1, 0], "seq_lengths": [1, 2]}, ValueError, "split the row differently"),
])
def test_the_collator_refuses_bad_examples(example, error, match):
    with pytest.raises(error, match=match):
        PackedCollator()([example])


def test_boolean_masks_and_tensors_are_read():
    a = PackedCollator()([{"input_ids": torch.tensor([5, 6, 7]), "completion_mask": torch.tensor([False, False, True])}])
    b = PackedCollator()([{"input_ids": [5, 6, 7], "completion_mask": [0, 0, 1]}])
    assert a["labels"].tolist() == b["labels"].tolist() == [[-100, -100, 7]]


# ------------------------------------------------------------- the Trainers' recipes
def _checked_forward(model, monkeypatch):
    """Wrap the backbone class's ``forward`` (the decoder under the LM head, whatever the
    trainer does to the head: TRL fuses it with the loss) to compare every packed row's hidden
    states with its sequences' alone; returns the tally."""
    import functools

    cls = type(model.model)
    orig, seen = cls.forward, {"rows": 0, "worst": 0.0, "keys": set()}

    @functools.wraps(orig)
    def forward(self, *args, **batch):
        out = orig(self, *args, **batch)
        ids, pos = batch["input_ids"][0], batch["position_ids"][0]
        starts = (pos == 0).nonzero().flatten().tolist() + [ids.numel()]
        with torch.no_grad():
            for a, b in zip(starts[:-1], starts[1:]):
                alone = orig(self, input_ids=ids[a:b][None], use_cache=False).last_hidden_state[0]
                seen["worst"] = max(seen["worst"], float((out.last_hidden_state[0, a:b] - alone).abs().max()))
        seen["rows"] += 1
        seen["keys"] |= set(batch)
        return out

    monkeypatch.setattr(cls, "forward", forward)
    return seen


@pytest.mark.parametrize("heading", ["`transformers.Trainer`, with its defaults", "TRL's `SFTTrainer`"])
def test_the_trainer_recipes_keep_rows_apart_and_learn(tmp_path, monkeypatch, heading):
    from tests import test_docs_blocks as docs

    if "SFT" in heading:
        try:
            import trl  # noqa: F401
        except Exception as e:  # trl is installed without its dependencies in some setups
            pytest.skip(f"trl does not import: {e}")
    (block,) = [b for b in docs.python_blocks((ROOT / "docs/training.md").read_text(), "docs/training.md")
                if b.heading == heading]
    monkeypatch.chdir(tmp_path)
    ns = {"__name__": "__main__"}
    docs.SETUPS[("docs/training.md", heading)](ns, tmp_path, None)
    seen = _checked_forward(ns["model"], monkeypatch)
    docs.run_block(block, ns)                 # asserts the loss fell
    assert seen["rows"] >= 8 and seen["worst"] <= 1e-4
    assert "position_ids" in seen["keys"]


def test_label_tokens_count_what_the_collator_trains():
    from packlib.torch import label_tokens

    rows = [dict(r, labels=np.asarray(r["labels"])) for r in _masked_rows(seed=3)]
    want = [int(sum(t.sum() for _, t in _reference([r]))) for r in rows]
    labels = [r["labels"] for r in rows]
    kept = [x.copy() for x in labels]                 # the caller's arrays are not written
    assert label_tokens(rows).tolist() == want
    got = PackedCollator()(rows)["labels"]
    assert int((got != -100).sum()) == sum(want)
    assert all((a == b).all() for a, b in zip(labels, kept))


# ------------------------------------------------------- the loop: token-weighted steps
def _loop_block(heading="The training loop"):
    text = (ROOT / "docs" / "balance.md").read_text()
    from tests.test_docs_blocks import python_blocks

    (block,) = [b.code for b in python_blocks(text, "docs/balance.md") if b.heading == heading]
    return block


class _Stop(Exception):
    pass


class _Model:
    """The model as the loop sees it, stopping (an exception) at the ``stop_at``-th forward."""

    def __init__(self, m, stop_at=None):
        self.m, self.stop_at, self.calls = m, stop_at, 0

    def __call__(self, **batch):
        self.calls += 1
        if self.calls == self.stop_at:
            raise _Stop
        return self.m(**batch)

    def __getattr__(self, name):
        return getattr(self.m, name)


def _run(block, lengths, seqs, path, *, world_size=1, stop_at=None, lr=1e-2, optimizer=torch.optim.SGD):
    m = _model()
    ns = {"lengths": lengths, "dataset": [{"input_ids": s} for s in seqs], "max_sequence_length": 96, "rank": 0,
          "world_size": world_size, "accumulation": 2, "epochs": 2, "path": str(path), "model": _Model(m, stop_at),
          "optimizer": optimizer(m.parameters(), lr=lr)}
    try:
        exec(compile(block, "docs/balance.md", "exec"), ns)
    except _Stop:
        pass
    return m, ns["sampler"]


def test_the_loops_steps_are_token_weighted(tmp_path):
    """Two epochs of the documented loop equal, step for step, SGD on each step's token-mean
    loss computed with every sequence alone."""
    lengths = np.random.default_rng(21).integers(2, 40, 20)
    seqs = _sequences(lengths, seed=21)
    trained, sampler = _run(_loop_block(), lengths, seqs, tmp_path / "c.pt")
    m, opt, steps = _model(), None, []
    opt = torch.optim.SGD(m.parameters(), lr=1e-2)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        mbs = list(sampler)
        steps += [[(seqs[i], ref.trained_tokens(len(seqs[i]))) for mb in mbs[k:k + 2] for i in mb]
                  for k in range(0, len(mbs), 2)]
    assert len(steps) >= 3
    ref.train_steps(m, opt, steps)
    for a, b in zip(trained.parameters(), m.parameters()):
        torch.testing.assert_close(a, b, atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("heading", ["The training loop", "Resuming with DataLoader workers"])
def test_the_loop_stopped_after_any_micro_batch_resumes_bitwise(tmp_path, heading):
    """The documented block (with two StatefulDataLoader workers in the second), stopped at a
    forward and run again with a fresh model and optimizer, ends with the uninterrupted run's
    parameters, bit for bit (AdamW: its state is in the checkpoint too)."""
    if heading != "The training loop":
        pytest.importorskip("torchdata", reason="the block uses torchdata's StatefulDataLoader")
    lengths = np.random.default_rng(22).integers(2, 40, 30)
    seqs = _sequences(lengths, seed=22)
    block = _loop_block(heading)
    full, _ = _run(block, lengths, seqs, tmp_path / "full.pt", optimizer=torch.optim.AdamW)
    path = tmp_path / "stopped.pt"
    _, sampler = _run(block, lengths, seqs, path, stop_at=4, optimizer=torch.optim.AdamW)  # mid-step
    assert sampler.epoch == 0 and len(sampler) > 4
    resumed, _ = _run(block, lengths, seqs, path, optimizer=torch.optim.AdamW)
    assert all(torch.equal(a, b) for a, b in zip(full.parameters(), resumed.parameters()))


# ------------------------------------------------------------------ DataLoader workers
def test_a_prefetching_dataloader_never_checkpoints_the_sampler_ahead():
    """A plain DataLoader with workers draws micro-batches ahead of the loop: the sampler's
    state_dict refuses then; without workers it is what the loop consumed, and after a resume
    len(loader) is what remains."""
    lengths = np.random.default_rng(23).integers(2, 40, 120)
    dataset = [{"input_ids": s} for s in _sequences(lengths, seed=23)]

    def sampler():
        return packlib.BalancedBatchSampler(lengths, 96, rank=0, world_size=1, micro_batches=2)

    s = sampler()
    it = iter(s.drawn_by(torch.utils.data.DataLoader(dataset, batch_sampler=s, num_workers=2,
                                                     collate_fn=PackedCollator())))
    for _ in range(4):
        next(it)
    with pytest.raises(RuntimeError, match="num_workers=2.*StatefulDataLoader"):
        s.state_dict()
    del it
    s.set_epoch(1)                                     # nothing of epoch 1 drawn yet: exact
    assert s.state_dict()["position"] == 0 and s.state_dict()["epoch"] == 1
    s = sampler()
    loader = torch.utils.data.DataLoader(dataset, batch_sampler=s, collate_fn=PackedCollator())
    it = iter(loader)
    for _ in range(4):
        next(it)
    state = s.state_dict()
    assert state["position"] == 4
    again = sampler()
    again.load_state_dict(state)
    loader = torch.utils.data.DataLoader(dataset, batch_sampler=again, collate_fn=PackedCollator())
    assert len(loader) == len(s) - 4 == sum(1 for _ in loader)


# ----------------------------------------------------------------- two real ranks, killed
def _launch(out, kill_at=None):
    """Two ranks (forked by one launcher process, which imports torch once)."""
    out.mkdir(exist_ok=True)
    extra = [] if kill_at is None else [str(kill_at)]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-m", "tests._ddp_worker", "2", str(free_port()), str(out), *extra],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finish(proc, timeout=240):
    try:
        log = proc.communicate(timeout=timeout)[0]
    finally:
        proc.kill()
    assert proc.returncode == 0, log[-4000:]


def _trained(out, rank):
    lines = (out / f"trained-{rank}.jsonl").read_text().splitlines()
    return [tuple(json.loads(x)) for x in lines]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the ranks are forked (POSIX)")
def test_the_documented_loop_killed_and_resumed_on_two_ranks(tmp_path):
    """docs/balance.md's loop on two gloo ranks under DDP; a second pair is SIGKILLed in the
    middle of a step of the first epoch and started again. Every sample of every epoch is trained
    exactly once on its rank, every row stays isolated, and both ranks end with parameters
    bitwise equal to each other and to the uninterrupted run's."""
    lengths, _ = worker.samples()
    M = worker.SETTINGS["accumulation"]
    kw = dict(micro_batches=M, cost=packlib.transformer_cost(4096), seed=0)
    per_epoch = len(packlib.BalancedBatchSampler(lengths, worker.SETTINGS["max_sequence_length"], rank=0,
                                                 world_size=2, **kw))
    kill_at = (per_epoch // (2 * M)) * M + 2          # the second micro-batch of a step in mid-epoch
    full, killed = tmp_path / "full", tmp_path / "killed"
    uninterrupted, first = _launch(full), _launch(killed, kill_at)
    deadline = time.monotonic() + 240
    while not all((killed / f"ready-{r}").exists() for r in range(2)):
        assert time.monotonic() < deadline and first.poll() is None, first.communicate()[0][-4000:]
        time.sleep(0.05)
    for r in range(2):
        while not (killed / f"ready-{r}").read_text().strip():  # created, pid not yet written
            time.sleep(0.01)
        os.kill(int((killed / f"ready-{r}").read_text()), signal.SIGKILL)
    assert "ranks exited with [-9, -9]" in first.communicate(timeout=60)[0]
    _finish(_launch(killed))                           # the same command again: it resumes
    _finish(uninterrupted)
    for r in range(2):
        sampler = packlib.BalancedBatchSampler(lengths, worker.SETTINGS["max_sequence_length"], rank=r,
                                               world_size=2, **kw)
        want = []
        for epoch in range(worker.SETTINGS["epochs"]):
            sampler.set_epoch(epoch)
            want += sorted((epoch, i) for mb in sampler for i in mb)
        assert sorted(_trained(full, r)) == want
        assert sorted(_trained(killed, r)) == want     # each exactly once: none twice, none skipped
    params = [torch.load(d / f"params-{r}.pt") for d in (full, killed) for r in range(2)]
    for other in params[1:]:
        assert all(torch.equal(params[0][k], other[k]) for k in params[0])
    seen = [json.loads((d / f"seen-{r}.json").read_text()) for d in (full, killed) for r in range(2)]
    assert max(s["worst"] for s in seen) <= 1e-4 and min(s["rows"] for s in seen) >= 4


def test_sft_trainers_max_length_cutting_packed_rows_is_refused_naming_it(tmp_path):
    """TRL's SFTTrainer cuts every row to SFTConfig's max_length (1024 by default): packed rows
    longer than that reach the collator cut, and are refused before the first step, naming
    max_length=None and the packed length; with max_length=None the same rows train."""
    try:
        import trl
    except Exception as e:  # trl is installed without its dependencies in some setups
        pytest.skip(f"trl does not import: {e}")
    from tests import test_docs_blocks as docs

    ns = {}
    docs._training_sft(ns, tmp_path, None)
    from packlib.formats.arrow import pack_dataset

    packed = pack_dataset(ns["dataset"], 128, overflow="split")
    longest = max(sum(r) for r in packed["seq_lengths"])
    assert longest > 48
    for max_length, ok in ((48, False), (None, True)):
        args = trl.SFTConfig(str(tmp_path / "out"), per_device_train_batch_size=1, max_steps=1, report_to=[],
                             bf16=False, use_cpu=True, max_length=max_length, save_strategy="no")
        trainer = trl.SFTTrainer(model=docs._tiny_model(), args=args, train_dataset=packed, processing_class=ns["tokenizer"],
                                 data_collator=PackedCollator())
        before = [p.detach().clone() for p in trainer.model.parameters()]
        if ok:
            trainer.train()
            continue
        with pytest.raises(ValueError, match=r"max_length=None \(or at least \d+, the packed length\)"):
            trainer.train()
        assert all(torch.equal(a, b) for a, b in zip(before, trainer.model.parameters()))
