"""``balance_trainer`` through a documented override point (packlib/torch/trainers/_balanced.py):
the trainer's class becomes ``(BalancedTrainerMixin, its class)``, whose ``get_train_dataloader``
draws the balanced steps; nothing is set on the instance's methods, the user's
``TrainingArguments`` and model are left as they were, a second trainer built from the same
arguments is a plain one, and a balanced trainer pickles (into a fresh process too) where
the plain one does. Importing ``packlib.torch`` changes nothing in the core.

Tiny random Llama models built from a config. Needs torch, transformers and datasets.
"""
from __future__ import annotations

import copy
import os
import pathlib
import pickle
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the trainer tests run models: pip install torch")
transformers = pytest.importorskip("transformers", reason="the trainer tests build transformers models")
datasets = pytest.importorskip("datasets", reason="the trainer's dataset is a datasets.Dataset")

import packlib  # noqa: E402
from packlib.torch import BalancedTrainerMixin, PackedCollator, balance_trainer  # noqa: E402
from tests import _trainer_worker as worker  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _data():
    lengths, ids, labels = worker.samples()
    return lengths, datasets.Dataset.from_dict({"input_ids": ids, "labels": labels})


def _sampler(lengths):
    s = worker.SETTINGS
    return packlib.BalancedBatchSampler(lengths, s["max_sequence_length"], rank=0, world_size=1,
                                        micro_batches=s["micro_batches"], seed=s["seed"])


def _plain(args, data, cls=None):
    cls = cls or transformers.Trainer
    return cls(model=worker.tiny_model(), args=args, train_dataset=data, data_collator=PackedCollator())


def test_the_users_arguments_and_a_second_trainer_are_untouched(tmp_path):
    """The user's TrainingArguments keep max_steps=-1 (the balanced trainer runs on its own
    copy, with the planned steps); the trainer holds no function of its own (its class has the
    mixin); a second Trainer built from the same arguments, after the first has trained, is a
    plain Trainer that draws the default loader and trains num_train_epochs of it."""
    lengths, data = _data()
    args = worker.trainer_args(tmp_path)
    trainer = balance_trainer(_plain(args, data), _sampler(lengths))
    stream = trainer.packlib_stream
    assert args.max_steps == -1 and trainer.args is not args and trainer.args.max_steps == stream.total_steps
    assert "get_train_dataloader" not in vars(trainer) and isinstance(trainer, BalancedTrainerMixin)
    assert type(trainer).__mro__[1:3] == (BalancedTrainerMixin, transformers.Trainer)
    assert type(trainer).get_train_dataloader is BalancedTrainerMixin.get_train_dataloader
    trainer.train()
    assert trainer.state.global_step == stream.total_steps and args.max_steps == -1
    second = _plain(args, data)
    assert type(second) is transformers.Trainer and second.args.max_steps == -1
    loader = second.get_train_dataloader()
    assert not isinstance(loader.batch_sampler, type(stream))
    second.train()
    per_epoch = -(-len(data) // args.gradient_accumulation_steps)  # one example per micro-batch
    assert second.state.global_step == per_epoch * args.num_train_epochs != stream.total_steps


def test_a_trainer_class_with_the_mixin_is_kept_and_refuses_without_a_sampler(tmp_path):
    """A user's own ``class MyTrainer(BalancedTrainerMixin, Trainer)`` stays its class under
    balance_trainer; without balance_trainer it refuses to draw, naming it; balanced classes
    are made once per trainer class."""
    lengths, data = _data()
    mine = type("MyTrainer", (BalancedTrainerMixin, transformers.Trainer), {})
    bare = _plain(worker.trainer_args(tmp_path / "a"), data, mine)
    with pytest.raises(RuntimeError, match=r"packlib.torch.balance_trainer\(trainer, sampler\)"):
        bare.get_train_dataloader()
    assert type(balance_trainer(bare, _sampler(lengths))) is mine
    again = balance_trainer(_plain(worker.trainer_args(tmp_path / "b"), data), _sampler(lengths))
    other = balance_trainer(_plain(worker.trainer_args(tmp_path / "c"), data), _sampler(lengths))
    assert type(again) is type(other)


def test_a_second_balance_trainer_call_starts_from_the_users_arguments(tmp_path):
    """Called again (another sampler), the steps are those of the user's num_train_epochs, not
    the max_steps the first call set on the trainer's copy, and one epoch callback remains."""
    lengths, data = _data()
    args = worker.trainer_args(tmp_path, num_train_epochs=1)
    trainer = balance_trainer(_plain(args, data), _sampler(lengths))
    first = trainer.packlib_stream.total_steps
    other = packlib.BalancedBatchSampler(lengths, 40, rank=0, world_size=1, micro_batches=2, seed=9)
    balance_trainer(trainer, other)
    assert trainer.packlib_stream.total_steps == other._steps_of(0) != first
    assert trainer.args.max_steps == other._steps_of(0) and args.max_steps == -1
    names = [type(c).__name__ for c in trainer.callback_handler.callbacks]
    assert names.count("BalancedEpochs") == 1


def test_the_model_after_a_balanced_run_copies_and_pickles_as_its_own(tmp_path):
    """After training: ``copy.deepcopy(model)`` and a pickled model are the model's class with
    nothing of packlib's on them, and compute with their own weights (a copy whose weights
    change returns other logits than the trained model)."""
    lengths, data = _data()
    trainer = balance_trainer(_plain(worker.trainer_args(tmp_path), data), _sampler(lengths))
    trainer.train()
    model = trainer.model
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    for twin in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        assert type(twin) is type(model) and "forward" not in vars(twin)
        assert not any(k.startswith("packlib") or k.startswith("_packlib") for k in vars(twin))
        with torch.no_grad():
            torch.testing.assert_close(twin(input_ids=ids).logits, model(input_ids=ids).logits, rtol=0, atol=0)
            for p in twin.parameters():
                p.add_(0.5)
            assert not torch.allclose(twin(input_ids=ids).logits, model(input_ids=ids).logits)


_PICKLE = r"""
import copy, pickle, sys, tempfile
import torch
from packlib.torch import balance_trainer
from tests.test_trainer_balanced_mixin import _data, _plain, _sampler, worker

out = sys.argv[1]
if sys.argv[2] == "dump":  # a fresh process: Accelerate's shared state as a user's script has it
    lengths, data = _data()
    pickle.dumps(_plain(worker.trainer_args(tempfile.mkdtemp()), data))  # the plain Trainer pickles here
    trainer = balance_trainer(_plain(worker.trainer_args(tempfile.mkdtemp()), data), _sampler(lengths))
    open(out + "/trainer.pkl", "wb").write(pickle.dumps(trainer))
    twin = copy.deepcopy(trainer)
    assert type(twin) is type(trainer) and twin.packlib_stream is not trainer.packlib_stream
else:  # Accelerate's shared state, which a pickled Trainer (plain or not) does not carry
    import accelerate

    accelerate.Accelerator(cpu=True)
    trainer = pickle.loads(open(out + "/trainer.pkl", "rb").read())
    assert type(trainer).__name__ == "BalancedTrainer", type(trainer)
trainer.train()
torch.save(trainer.model.state_dict(), f"{out}/params-{sys.argv[2]}.pt")
print(trainer.state.global_step)
"""


def test_a_balanced_trainer_pickles_into_a_fresh_process(tmp_path):
    """Where a plain Trainer pickles (a fresh process, before any loader is prepared), so does
    a balanced one (and deep-copies as itself): its class, the mixin's subclass of Trainer, and
    its callbacks are found again by name in another fresh process, where it trains the
    planned steps to the same parameters as the trainer that was not pickled."""
    steps = []
    for part in ("dump", "load"):
        proc = subprocess.run([sys.executable, "-c", _PICKLE, str(tmp_path), part], cwd=ROOT, text=True,
                              env=dict(os.environ, PYTHONPATH=str(ROOT)), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=300)
        assert proc.returncode == 0, proc.stdout[-3000:]
        steps.append(int(proc.stdout.strip().splitlines()[-1]))
    lengths, _ = _data()
    assert steps[0] == steps[1] == _sampler(lengths)._steps_of(0) + _sampler(lengths)._steps_of(1)
    ours, theirs = (torch.load(tmp_path / f"params-{p}.pt") for p in ("dump", "load"))
    assert all(torch.equal(theirs[k], ours[k]) for k in ours)


_CORE = r"""
import sys, types
import numpy as np
import torch
import packlib

def snapshot():
    return {name: {k: id(v) for k, v in vars(m).items() if not isinstance(v, types.ModuleType)}
            for name, m in list(sys.modules.items())
            if name.startswith("packlib") and not name.startswith("packlib.torch") and m is not None}

def counts(dataset, lengths):
    s = packlib.BalancedBatchSampler(lengths, 64, rank=0, world_size=1, micro_batches=2)
    loader = s.drawn_by(torch.utils.data.DataLoader(dataset, batch_sampler=s, collate_fn=list))
    iter(loader)
    return list(s.step_label_tokens())

rng = np.random.default_rng(0)
lengths = rng.integers(4, 30, 40)
dataset = [{"input_ids": list(range(n)), "labels": [-100] * (n // 2) + list(range(n // 2, n))} for n in lengths]
import packlib.balancing._sampler, packlib.balancing._drawn, packlib.balancing._epochs
before, first = snapshot(), counts(dataset, lengths)
import packlib.torch
after, second = snapshot(), counts(dataset, lengths)
changed = sorted(f"{m}.{k}" for m in before for k in before[m] if after.get(m, {}).get(k) != before[m][k])
assert changed == [], changed
assert first == second, (first, second)
print("unchanged")
"""


def test_importing_packlib_torch_changes_nothing_in_the_core():
    """In a fresh process: every name of every core module already imported is the same object
    after ``import packlib.torch`` (the sampler's counting rule is no global an adapter
    installs), and a sampler drawn by a loader whose collator declares no count counts
    ``length - 1`` per sample before and after."""
    proc = subprocess.run([sys.executable, "-c", _CORE], cwd=ROOT, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("unchanged"), proc.stdout[-3000:]


def test_the_collator_declares_the_count_the_sampler_reads():
    """A loader whose collator is PackedCollator: the sampler counts what it trains (the
    labels not -100); the same data through a collator that declares nothing: length - 1."""
    rng = np.random.default_rng(1)
    lengths = rng.integers(4, 30, 40)
    dataset = [{"input_ids": list(range(n)), "labels": [-100] * (n // 2) + list(range(n // 2, n))} for n in lengths]
    got = {}
    for name, collate in (("packed", PackedCollator()), ("list", list)):
        s = packlib.BalancedBatchSampler(lengths, 64, rank=0, world_size=1, micro_batches=2)
        iter(s.drawn_by(torch.utils.data.DataLoader(dataset, batch_sampler=s, collate_fn=collate)))
        got[name] = sum(list(s.step_label_tokens())[::2])
    trained = packlib.torch.label_tokens(dataset)
    s = packlib.BalancedBatchSampler(lengths, 64, rank=0, world_size=1, micro_batches=2)
    kept = np.setdiff1d(np.arange(lengths.size), s.schedule.dropped)
    assert got["packed"] == int(trained[kept].sum()) and got["list"] == int((lengths[kept] - 1).sum())
