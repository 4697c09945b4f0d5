"""Balanced steps through Accelerate, ``transformers.Trainer`` and the documented loop: every
rank gets exactly its planned micro-batches, every scheduled sample is trained once per
epoch, and the parameters equal a reference computed without packlib (tests/naive_training.py:
each sequence alone, token-weighted over the step).

Tiny random Llama models built from a config. Needs torch, transformers and accelerate;
without them the module skips.
"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the trainer tests run models: pip install torch")
transformers = pytest.importorskip("transformers", reason="the trainer tests build transformers models")
accelerate_data_loader = pytest.importorskip("accelerate.data_loader", reason="pip install 'packlib[torch]'")

import packlib  # noqa: E402
from packlib.torch import PackedCollator, balance_trainer  # noqa: E402
from tests import _trainer_worker as worker  # noqa: E402
from tests.procs import free_port  # noqa: E402
from tests import naive_training as ref  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
W, M, L = 2, 2, 64


def _sampler(lengths, rank=0, world_size=W, **kw):
    return packlib.BalancedBatchSampler(lengths, L, rank=rank, world_size=world_size, micro_batches=M,
                                        cost=packlib.transformer_cost(4096), **kw)


def _planned(lengths, rank, epoch, world_size=W, **kw):
    """Rank ``rank``'s micro-batches of ``epoch``, read from packlib.balance's Schedule itself:
    pack ``(step * world_size + rank) * M + m``."""
    s = packlib.balance(lengths, L, world_size=world_size, micro_batches=M, cost=packlib.transformer_cost(4096),
                        epoch=epoch, **kw)
    o, ix = s.packs.offsets, s.packs.indices
    ks = [(step * world_size + rank) * M + m for step in range(s.num_steps) for m in range(M)]
    return [ix[o[k]:o[k + 1]].tolist() for k in ks], s


class _Opaque:
    """A batch sampler that hides what it wraps (what any per-rank batch sampler looks like to
    Accelerate): the wrong variant, which Accelerate's sharding silently thins out."""

    def __init__(self, inner):
        self.batches = list(inner)

    def __len__(self):
        return len(self.batches)

    def __iter__(self):
        return iter(self.batches)


def _prepared(batch_sampler, rank, **kw):
    """Accelerate's prepared loader, declared to the sampler (``drawn_by``) where it is one."""
    loader = torch.utils.data.DataLoader(list(range(299)), batch_sampler=batch_sampler, collate_fn=list)
    loader = accelerate_data_loader.prepare_data_loader(loader, num_processes=W, process_index=rank, **kw)
    return batch_sampler.drawn_by(loader) if isinstance(batch_sampler, packlib.BalancedBatchSampler) else loader


# ------------------------------------------------------------------------------ Accelerate
@pytest.mark.parametrize("even_batches", [True, False])
def test_accelerate_gives_each_rank_exactly_its_plan(even_batches):
    """Through prepare_data_loader on two processes: each rank's micro-batches are its plan's,
    in order, every scheduled sample once per epoch, len(loader) the rank's count,
    loader.set_epoch reaching the schedule and skip_first_batches skipping the rank's own."""
    lengths = np.random.default_rng(0).integers(2, 40, 299)
    for epoch in range(2):
        trained = []
        for rank in range(W):
            want, schedule = _planned(lengths, rank, epoch)
            loader = _prepared(_sampler(lengths, rank), rank, even_batches=even_batches)
            loader.set_epoch(epoch)
            got = list(loader)
            assert got == want and len(loader) == len(want)
            skipped = accelerate_data_loader.skip_first_batches(loader, 2 * M)
            skipped.set_epoch(epoch)
            assert list(skipped) == want[2 * M:] and len(skipped) == len(want) - 2 * M
            trained += [i for mb in got for i in mb]
        assert sorted(trained) == sorted(set(range(299)) - set(schedule.dropped.tolist()))


def test_without_the_sampler_seeing_accelerate_samples_are_lost():
    """The check above can fail: a per-rank batch sampler that Accelerate cannot see through
    keeps every other micro-batch of its plan (the behaviour before)."""
    lengths = np.random.default_rng(0).integers(2, 40, 299)
    trained = set()
    for rank in range(W):
        loader = _prepared(_Opaque(_sampler(lengths, rank)), rank)
        trained |= {i for mb in loader for i in mb}
        assert len(loader) == len(_sampler(lengths, rank)) // 2
    assert len(trained) < 299 * 0.6


def test_an_undeclared_sampler_under_several_accelerate_processes_is_refused(monkeypatch):
    """Undeclared, the sampler cannot tell whether accelerator.prepare deals its micro-batches:
    under an Accelerate state of two processes its iteration is refused, naming drawn_by and
    balance_trainer, rather than losing half its samples; declared, it yields what is dealt."""
    from packlib.balancing import _drawn

    monkeypatch.setattr(_drawn, "accelerate_processes", lambda: (W, 0))
    lengths = np.random.default_rng(0).integers(2, 40, 299)
    loader = torch.utils.data.DataLoader(list(range(299)), batch_sampler=_sampler(lengths, 0), collate_fn=list)
    loader = accelerate_data_loader.prepare_data_loader(loader, num_processes=W, process_index=0)
    with pytest.raises(ValueError, match=r"sampler.drawn_by\(accelerator.prepare\(loader\)\).*balance_trainer"):
        next(iter(loader))
    assert list(_prepared(_sampler(lengths, 0), 0)) == _planned(lengths, 0, 0)[0]


@pytest.mark.parametrize("world_size, rank", [(4, 1), (2, 0)])
def test_a_sampler_for_another_process_is_refused_by_name(world_size, rank):
    lengths = np.random.default_rng(1).integers(2, 40, 60)
    loader = torch.utils.data.DataLoader(list(range(60)), batch_sampler=_sampler(lengths, rank=1), collate_fn=list)
    loader = accelerate_data_loader.prepare_data_loader(loader, num_processes=world_size, process_index=rank)
    match = f"rank 1 of world_size 2, but .* as process {rank} of {world_size}"
    with pytest.raises(ValueError, match=match):
        loader.batch_sampler.batch_sampler.drawn_by(loader)


def test_dispatched_batches_are_refused():
    """dispatch_batches=True would split each packed row between the processes."""
    lengths = np.random.default_rng(1).integers(2, 40, 60)
    sampler = _sampler(lengths, world_size=1)
    loader = torch.utils.data.DataLoader(list(range(60)), batch_sampler=sampler, collate_fn=lambda b: torch.zeros(1, 3))
    loader = accelerate_data_loader.prepare_data_loader(loader, num_processes=1, process_index=0, put_on_device=True,
                                                        dispatch_batches=True, device=torch.device("cpu"))
    with pytest.raises(ValueError, match="dispatch_batches=True"):
        sampler.drawn_by(loader)


def test_the_sampler_state_under_accelerate_is_refused():
    """Accelerate's prepared loader draws one micro-batch ahead: the sampler's position is not
    what the loop consumed, so its state_dict refuses (naming skip_first_batches)."""
    lengths = np.random.default_rng(2).integers(2, 40, 60)
    s = _sampler(lengths, rank=0, world_size=1)
    loader = accelerate_data_loader.prepare_data_loader(
        torch.utils.data.DataLoader(list(range(60)), batch_sampler=s, collate_fn=list), num_processes=1,
        process_index=0)
    it = iter(s.drawn_by(loader))
    next(it)
    with pytest.raises(RuntimeError, match="Accelerate.*skip_first_batches"):
        s.state_dict()


def test_the_trainer_path_balances_its_steps_where_the_default_order_does_not():
    """benchmarks/bench_trainer_balanced.py's loaders, at a toy size: what balance_trainer's
    loader gives 4 ranks x 2 micro-batches (through Accelerate) is balanced under the cost
    a·l + b·l²; the Trainer's default (pack_dataset's rows, RandomSampler) is not, and repeats
    rows to even the ranks out."""
    import importlib.util

    from tests import balance_workloads

    spec = importlib.util.spec_from_file_location("bench_trainer_balanced",
                                                  ROOT / "benchmarks" / "bench_trainer_balanced.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    lengths, cost = balance_workloads.long_documents_at(300, 1024, 2027), packlib.transformer_cost(256)
    default = bench.modelled(bench.default_trainer_plan(lengths, 1024, 4, M), lengths, cost)
    ours = bench.modelled(bench.balanced_trainer_plan(lengths, 1024, 4, M, cost), lengths, cost)
    dropped = packlib.balance(lengths, 1024, world_size=4, micro_batches=M, cost=cost).dropped.size
    assert ours["balance"] > 0.99 and default["balance"] < 0.95
    assert ours["twice"] == 0 and ours["never"] == dropped and default["twice"] > 0


# ------------------------------------------------------------------- the documented loop
def _sft(n=40, seed=4, high=30, vocab=worker.VOCAB):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(3, high, n)
    ids = [rng.integers(1, vocab, k) for k in lengths]
    labels = [np.r_[[-100] * (len(x) // 3), x[len(x) // 3:]] for x in ids]
    return lengths, ids, labels


def _steps(sampler, ids, labels, epochs):
    """Every step of ``epochs`` planned epochs (all ranks' micro-batches): ``(tokens, trained, labels)``."""
    out = []
    for epoch in epochs:
        schedule = sampler._schedule_of(epoch)
        o, ix = schedule.packs.offsets, schedule.packs.indices
        per_step = sampler.world_size * sampler.micro_batches
        for step in range(schedule.num_steps):
            ks = range(step * per_step, (step + 1) * per_step)
            out.append([(ids[i], ref.trained_tokens(len(ids[i]), labels=labels[i]), labels[i])
                        for k in ks for i in ix[o[k]:o[k + 1]]])
    return out


def _docs_loop(lengths, ids, labels, tmp_path, epochs=2):
    from tests.test_docs_blocks import python_blocks

    text = (ROOT / "docs" / "balance.md").read_text()
    (block,) = [b.code for b in python_blocks(text, "docs/balance.md") if b.heading == "The training loop"]
    m = worker.tiny_model()
    ns = {"lengths": lengths, "dataset": [{"input_ids": x, "labels": y} for x, y in zip(ids, labels)],
          "max_sequence_length": L, "rank": 0, "world_size": 1, "accumulation": M, "epochs": epochs,
          "path": str(tmp_path / "c.pt"), "model": m, "optimizer": torch.optim.SGD(m.parameters(), lr=1e-2)}
    exec(compile(block, "docs/balance.md", "exec"), ns)
    return m, ns["sampler"]


@pytest.mark.parametrize("counted", [True, False])
def test_the_documented_loop_on_masked_prompts_is_the_step_token_mean(tmp_path, monkeypatch, counted):
    """docs/balance.md's loop as written, on data whose labels mask each prompt: two epochs
    equal SGD on each step's token-mean loss (each sequence alone). Without the count from the
    dataset (length - 1 per sample, the behaviour before) the parameters differ (one epoch
    shows it). The count is the one the loader's collator declares (``PackedCollator.label_tokens``)."""
    if not counted:
        monkeypatch.delattr(PackedCollator, "label_tokens")
    lengths, ids, labels = _sft()
    epochs = 2 if counted else 1
    trained, sampler = _docs_loop(lengths, ids, labels, tmp_path, epochs)
    m = worker.tiny_model()
    ref.train_steps(m, torch.optim.SGD(m.parameters(), lr=1e-2), _steps(sampler, ids, labels, range(epochs)))
    worst = max(float((a - b).abs().max()) for a, b in zip(trained.parameters(), m.parameters()))
    assert (worst < 2e-6) if counted else (worst > 1e-4)


def test_label_tokens_of_another_length_are_refused():
    lengths = np.random.default_rng(5).integers(2, 40, 30)
    with pytest.raises(ValueError, match="label_tokens holds 29 counts for 30 lengths"):
        _sampler(lengths, label_tokens=lengths[:-1] - 1)
    s = _sampler(lengths, world_size=1)                       # a dataset that is not the lengths'
    loader = torch.utils.data.DataLoader([{"input_ids": [1, 2], "labels": [1, 2]}] * 29, batch_sampler=s,
                                         collate_fn=PackedCollator())
    iter(s.drawn_by(loader))
    with pytest.raises(ValueError, match="29 examples for 30 lengths"):
        next(s.step_label_tokens())


# ------------------------------------------------------------------ transformers.Trainer
def _trainer(tmp_path, lengths, ids, labels, *, sampler=None, callbacks=(), **kw):
    datasets = pytest.importorskip("datasets")
    args = worker.trainer_args(tmp_path, **kw)
    data = datasets.Dataset.from_dict({"input_ids": [x.tolist() for x in ids], "labels": [y.tolist() for y in labels]})
    trainer = transformers.Trainer(model=worker.tiny_model(), args=args, train_dataset=data,
                                   data_collator=PackedCollator(), callbacks=list(callbacks))
    sampler = sampler or _sampler(lengths, world_size=1, window=2)
    return balance_trainer(trainer, sampler), sampler


class _StopAt(transformers.TrainerCallback):
    def __init__(self, step):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            control.should_save = control.should_training_stop = True


def test_the_trainer_trains_the_planned_epochs_and_resumes_exactly(tmp_path):
    """One process, gradient accumulation over the plan's micro-batches: the parameters equal
    SGD on each planned step's token-mean loss over the planned epochs end to end (their step
    counts differ here); a run stopped mid-epoch and resumed equals the uninterrupted run."""
    lengths, ids, labels = _sft(30, seed=15, high=60)
    trainer, sampler = _trainer(tmp_path / "full", lengths, ids, labels)
    assert sampler._steps_of(0) != sampler._steps_of(1)      # the stream matters here
    trainer.train()
    assert trainer.state.global_step == sampler._steps_of(0) + sampler._steps_of(1)
    m = worker.tiny_model()
    ref.train_steps(m, torch.optim.SGD(m.parameters(), lr=1e-2), _steps(sampler, ids, labels, range(2)))
    for a, b in zip(trainer.model.parameters(), m.parameters()):
        torch.testing.assert_close(a, b, atol=2e-6, rtol=1e-5)
    stop = sampler._steps_of(0) + 1
    first, _ = _trainer(tmp_path / "stopped", lengths, ids, labels, callbacks=[_StopAt(stop)], save_strategy="steps",
                        save_steps=10**6)
    first.train()
    assert first.state.global_step == stop
    again, _ = _trainer(tmp_path / "stopped", lengths, ids, labels)
    again.train(resume_from_checkpoint=True)
    assert all(torch.equal(a, b) for a, b in zip(trainer.model.parameters(), again.model.parameters()))


@pytest.mark.parametrize("setting, match", [
    (dict(per_device_train_batch_size=2), "per_device_train_batch_size=2"),
    (dict(gradient_accumulation_steps=3), "gradient_accumulation_steps=3 but the sampler plans 2"),
    (dict(world_size=2), "rank 0 of world_size 2, but this trainer runs process 0 of 1"),
    (dict(collator="padding"), "pass data_collator=packlib.torch.PackedCollator"),
    (dict(rows=39), "holds 39 rows but the sampler was built from 40 lengths"),
    (dict(truncated=True), r"row \d+ of the trainer's train_dataset holds \d+ input_ids"),
])
def test_the_trainer_refuses_settings_that_break_the_plan(tmp_path, setting, match):
    datasets = pytest.importorskip("datasets")
    lengths, ids, labels = _sft()
    kw = {k: v for k, v in setting.items() if k in ("per_device_train_batch_size", "gradient_accumulation_steps")}
    args = worker.trainer_args(tmp_path, **kw)
    n = setting.get("rows", len(ids))
    cols = {"input_ids": [x.tolist() for x in ids[:n]], "labels": [y.tolist() for y in labels[:n]]}
    if setting.get("truncated"):
        cols = {k: [v[:5] for v in vs] for k, vs in cols.items()}
    collator = transformers.DataCollatorWithPadding(_tokenizer()) if setting.get("collator") else PackedCollator()
    trainer = transformers.Trainer(model=worker.tiny_model(), args=args, train_dataset=datasets.Dataset.from_dict(cols),
                                   data_collator=collator)
    sampler = _sampler(lengths, world_size=setting.get("world_size", 1))
    with pytest.raises(ValueError, match=match):
        balance_trainer(trainer, sampler).get_train_dataloader()


def _tokenizer():
    from tokenizers import Tokenizer, models

    vocab = {f"t{i}": i for i in range(worker.VOCAB)}
    return transformers.PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="t0")),
                                                pad_token="t0")


# ----------------------------------------------------------------- two real processes
@pytest.mark.skipif(not hasattr(os, "fork"), reason="the ranks are forked (POSIX)")
def test_two_processes_train_the_plan(tmp_path):
    """Two gloo processes (tests/_trainer_worker.py). Accelerate's prepare: each rank's
    micro-batches are its plan's in epochs 0 and 1, len(loader) its count. The Trainer with
    balance_trainer: each rank packs exactly its planned micro-batches, in order, over the
    planned epochs end to end, so every sample is trained once per planned epoch; both ranks
    end with parameters equal to each other and to SGD on each step's token mean over both
    ranks' micro-batches, computed without packlib; TRL's SFTTrainer too. The plan gives the
    ranks different numbers of examples (and tokens) in the same micro-batch."""
    datasets = pytest.importorskip("datasets")  # noqa: F841  (the worker builds a datasets.Dataset)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-m", "tests._trainer_worker", str(free_port()), str(tmp_path)], cwd=ROOT,
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:]
    s = worker.SETTINGS
    lengths, ids, labels = worker.samples()
    seen = [json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in range(W)]
    per_epoch = [worker.sampler(lengths, 0)._steps_of(e) for e in range(s["epochs"])]
    for r in range(W):
        sampler = worker.sampler(lengths, r)
        plan = []
        for epoch in range(2):
            sampler.set_epoch(epoch)
            plan.append(list(sampler))
        assert seen[r]["accelerate"] == plan and seen[r]["len"] == len(plan[0])
        assert seen[r]["trainer"] == plan[0] + plan[1]
        assert seen[r]["steps"] == sum(per_epoch)
    for epoch in range(2):
        schedule = worker.sampler(lengths, 0)._schedule_of(epoch)
        trained = sorted(i for r in range(W) for mb in seen[r]["accelerate"][epoch] for i in mb)
        assert trained == sorted(set(range(worker.SAMPLES)) - set(schedule.dropped.tolist()))
    params = [torch.load(tmp_path / f"params-{r}.pt") for r in range(W)]
    assert all(torch.equal(params[0][k], params[1][k]) for k in params[0])
    m = worker.tiny_model()
    arrays = [np.asarray(x) for x in ids], [np.asarray(y) for y in labels]
    ref.train_steps(m, torch.optim.SGD(m.parameters(), lr=1e-2),
                    _steps(worker.sampler(lengths, 0), *arrays, range(s["epochs"])))
    for k, v in m.state_dict().items():
        torch.testing.assert_close(params[0][k], v, atol=1e-5, rtol=1e-4)
    assert any(len(a) != len(b) for a, b in zip(seen[0]["trainer"], seen[1]["trainer"]))  # unequal counts
    import importlib.util

    if importlib.util.find_spec("trl") is not None:  # the worker trains TRL's SFTTrainer too
        sft = [torch.load(tmp_path / f"params-sft-{r}.pt") for r in range(W)]
        assert all(torch.equal(sft[0][k], sft[1][k]) for k in sft[0])
        for k, v in m.state_dict().items():
            torch.testing.assert_close(sft[0][k], v, atol=1e-5, rtol=1e-4)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the ranks are forked (POSIX)")
def test_four_processes_train_sfts_plan(tmp_path):
    """Four gloo processes of TRL's SFTTrainer with balance_trainer, three steps: every rank
    ends bitwise equal to the others and to SGD on each step's token mean over the four ranks'
    micro-batches (computed without packlib), on a plan whose ranks hold different numbers of
    examples and tokens in the same micro-batch."""
    pytest.importorskip("trl", reason="the worker trains TRL's SFTTrainer")
    pytest.importorskip("datasets")
    ranks = 4
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-m", "tests._trainer_worker", str(free_port()), str(tmp_path),
                           f"ranks={ranks}"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:]
    params = [torch.load(tmp_path / f"params-sft-{r}.pt") for r in range(ranks)]
    assert all(torch.equal(params[0][k], p[k]) for p in params[1:] for k in params[0])
    lengths, ids, labels = worker.samples()
    sampler = worker.sampler(lengths, 0, ranks)
    arrays = [np.asarray(x) for x in ids], [np.asarray(y) for y in labels]
    steps = _steps(sampler, *arrays, range(worker.SFT_STEPS))[:worker.SFT_STEPS]
    assert len(steps) == worker.SFT_STEPS
    first = sampler._schedule_of(0).packs  # micro-batch m of each rank: (rank * M + m)-th pack of a step
    counts = [[first.offsets[r * M + m + 1] - first.offsets[r * M + m] for r in range(ranks)] for m in range(M)]
    assert any(len(set(c)) > 1 for c in counts)  # unequal counts in the same micro-batch
    m = worker.tiny_model()
    ref.train_steps(m, torch.optim.SGD(m.parameters(), lr=1e-2), steps)
    for k, v in m.state_dict().items():
        torch.testing.assert_close(params[0][k], v, atol=1e-5, rtol=0)
