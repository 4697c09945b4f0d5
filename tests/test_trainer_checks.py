"""What balance_trainer checks and fixes before training (packlib/torch/trainers/_checks.py):
vision models in ``transformers.Trainer`` trained on the step's token mean (Qwen2-VL,
Qwen2.5-VL, Qwen3-VL, against each example run alone and each step's tokens, computed without
packlib), ``sequence_logps`` on a vision batch against each example alone, the resume defect of
Qwen2-VL / Qwen2.5-VL checkpoints detected (and the defect itself shown), and iterable datasets
and GRPO refused by balance_trainer itself.

Tiny random models built from configs (no download). Needs torch, transformers, accelerate.
"""
from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the trainer tests run models: pip install torch")
transformers = pytest.importorskip("transformers", reason="the trainer tests build transformers models")
pytest.importorskip("accelerate", reason="pip install 'packlib[torch]'")

import packlib  # noqa: E402
from packlib.torch import (PackedCollator, VisionPackedCollator, balance_trainer, sequence_logps,  # noqa: E402
                           token_logps)
from packlib.torch.trainers._checks import resume_drops_weights  # noqa: E402
from tests import _trainer_worker as worker  # noqa: E402
from tests import naive_vision as nv  # noqa: E402

M = 2


def _examples(n=12, seed=3):
    rng = np.random.default_rng(seed)
    shapes = ([(1, 4, 6)], [], [(1, 2, 2), (1, 2, 4)], [(1, 6, 4)], [], [(1, 4, 4)], [(1, 2, 2)], [])
    return [nv.example(rng, shapes[i % len(shapes)]) for i in range(n)]


def _sampler(lengths, L=40, **kw):
    return packlib.BalancedBatchSampler(lengths, L, rank=0, world_size=1, micro_batches=M,
                                        cost=packlib.transformer_cost(4096), **kw)


def _vision_trainer(tmp_path, family, exs, **kw):
    model = nv.tiny_model(family)
    args = worker.trainer_args(tmp_path, gradient_accumulation_steps=M, num_train_epochs=1, **kw)
    return transformers.Trainer(model=model, args=args, train_dataset=exs, data_collator=VisionPackedCollator(model))


def _reference(family, exs, sampler, steps):
    """SGD (lr 1e-2) on each planned step's token mean: every example alone, its summed loss
    divided by the step's trained tokens (all its micro-batches)."""
    model = nv.tiny_model(family)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    sampler.set_epoch(0)
    micro = list(sampler)
    for s in range(steps):
        chosen = [exs[i] for mb in micro[s * M:(s + 1) * M] for i in mb]
        parts = nv.alone(model, chosen)
        opt.zero_grad()
        (sum(p[1] for p in parts) / sum(p[2] for p in parts)).backward()
        opt.step()
    return model


@pytest.mark.parametrize("family", nv.FAMILIES)
def test_vision_trainer_steps_are_the_token_mean(tmp_path, family):
    """Through balance_trainer, no setting touched: the parameters after the planned steps equal
    SGD on each step's token mean; the Trainer's own setting (accepts_loss_kwargs=False on
    Qwen2.5-VL / Qwen3-VL: each micro-batch weighed equally) is off by more."""
    exs = _examples()
    lengths = np.array([e["input_ids"].shape[1] for e in exs])
    trainer = _vision_trainer(tmp_path, family, exs)
    before = trainer.model_accepts_loss_kwargs
    sampler = _sampler(lengths)
    balance_trainer(trainer, sampler)
    assert trainer.model_accepts_loss_kwargs is True
    steps = trainer.args.max_steps
    assert 2 <= steps <= 4
    trainer.train()
    want = _reference(family, exs, _sampler(lengths), steps)
    worst = max(float((a - b).abs().max()) for a, b in zip(trainer.model.state_dict().values(), want.state_dict().values()))
    assert worst < 2e-6, worst
    if before is False:  # the check can fail: the Trainer's default weighting is measurably off
        trainer = _vision_trainer(tmp_path / "plain", family, exs)
        balance_trainer(trainer, _sampler(lengths))
        trainer.model_accepts_loss_kwargs = False
        trainer.train()
        off = max(float((a - b).abs().max()) for a, b in zip(trainer.model.state_dict().values(), want.state_dict().values()))
        assert off > 1e-4, off


def test_a_model_whose_loss_cannot_take_the_count_is_refused(tmp_path):
    class Opaque(torch.nn.Module):
        accepts_loss_kwargs = False

        def __init__(self):
            super().__init__()
            self.w = torch.nn.Linear(2, 2)

        def forward(self, input_ids=None, labels=None):
            return {"loss": self.w.weight.sum()}

    args = worker.trainer_args(tmp_path, gradient_accumulation_steps=M)
    trainer = transformers.Trainer(model=Opaque(), args=args, train_dataset=[{"input_ids": [1, 2]}] * 4,
                                   data_collator=PackedCollator())
    with pytest.raises(ValueError, match="Opaque declares accepts_loss_kwargs = False.* compute_loss_func="):
        balance_trainer(trainer, _sampler(np.full(4, 2)))


def test_the_models_known_to_take_the_count_hand_it_to_their_loss():
    """balance_trainer's table of models that declare accepts_loss_kwargs = False although their
    forward hands num_items_in_batch to its loss: each, in the installed transformers, does."""
    import inspect
    import re

    from packlib.torch.trainers._checks import LOSS_TAKES_NUM_ITEMS

    call = re.compile(r"self\.loss_function\((?:[^()]|\([^()]*\))*\*\*kwargs")
    for name in LOSS_TAKES_NUM_ITEMS:
        cls = getattr(transformers, name)
        assert cls.accepts_loss_kwargs is False
        assert call.search(inspect.getsource(cls.forward)), name


@pytest.mark.parametrize("family", nv.FAMILIES)
def test_sequence_logps_of_a_vision_row_is_each_example_alone(family):
    model = nv.tiny_model(family)
    exs = nv.examples()
    batch = VisionPackedCollator(model)(exs)
    with torch.no_grad():
        ours = sequence_logps(model(**batch).logits, batch)
        alone = torch.stack([-p[1] for p in nv.alone(model, exs)])
    assert ours.shape == (len(exs),)
    assert float((ours - alone).abs().max()) < 1e-3 * float(alone.abs().max())
    with pytest.raises(ValueError, match="token_logps needs a batch of pairs or groups from PackedCollator"):
        token_logps(torch.zeros(1, batch["input_ids"].shape[1], nv.VOCAB), batch)  # GRPO's layout only
    bad = dict(batch, position_ids=batch["position_ids"][1:])
    with pytest.raises(ValueError, match="mRoPE positions without the row of text positions"):
        sequence_logps(torch.zeros(1, batch["input_ids"].shape[1], nv.VOCAB), bad)


@pytest.mark.parametrize("family, lost", [("qwen2_vl", True), ("qwen2_5_vl", True), ("qwen3_vl", False)])
def test_the_resume_defect_is_detected_and_warned_about(tmp_path, family, lost):
    """transformers' own defect, shown without packlib: the checkpoint save_pretrained writes,
    loaded as Trainer.train(resume_from_checkpoint=...) loads it (load_state_dict, strict=False),
    restores almost nothing of Qwen2-VL / Qwen2.5-VL; from_pretrained restores everything.
    balance_trainer warns exactly then, naming the workaround."""
    import safetensors.torch

    model = nv.tiny_model(family)
    model.save_pretrained(tmp_path / "ckpt")
    fresh = nv.tiny_model(family, seed=1)
    result = fresh.load_state_dict(safetensors.torch.load_file(tmp_path / "ckpt" / "model.safetensors"), False)
    assert sorted(resume_drops_weights(model)) == sorted(result.missing_keys)
    assert bool(result.missing_keys) is lost
    reloaded = type(model).from_pretrained(tmp_path / "ckpt")
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), reloaded.state_dict().values()))
    exs = _examples(4)
    trainer = _vision_trainer(tmp_path / "run", family, exs)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        balance_trainer(trainer, _sampler(np.array([e["input_ids"].shape[1] for e in exs])))
    mine = [str(w.message) for w in seen if "legacy key names" in str(w.message)]
    assert bool(mine) is lost
    if lost:
        assert "from_pretrained" in mine[0] and f"{len(result.missing_keys)} of its" in mine[0]


class _Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        yield {"input_ids": [1, 2, 3]}


@pytest.mark.parametrize("dataset", ["iterable", "streaming"])
def test_an_iterable_dataset_is_refused_by_balance_trainer_itself(tmp_path, dataset):
    datasets = pytest.importorskip("datasets")
    data = _Stream() if dataset == "iterable" else datasets.Dataset.from_dict(
        {"input_ids": [[1, 2, 3]] * 4}).to_iterable_dataset()
    args = worker.trainer_args(tmp_path, gradient_accumulation_steps=M, max_steps=2)
    trainer = transformers.Trainer(model=worker.tiny_model(), args=args, train_dataset=data,
                                   data_collator=PackedCollator())
    with pytest.raises(ValueError, match="needs a train_dataset with a len.. and indexing .* got "):
        balance_trainer(trainer, _sampler(np.full(4, 3)))


# ------------------------------------------------------------------------------ versions
@pytest.mark.parametrize("name, version", [("transformers", "5.18.0"), ("transformers", "4.57.1"),
                                           ("accelerate", "1.13.0"), ("trl", "1.14.0"), ("trl", "0.29.0")])
def test_versions_outside_the_supported_range_are_refused(tmp_path, monkeypatch, name, version):
    """balance_trainer and the packed trainers refuse an installed transformers, Accelerate or
    TRL outside the supported range before anything trains, naming both versions and why."""
    pytest.importorskip("trl", reason="the packed trainers subclass TRL's")
    from packlib import _compat
    from packlib.torch.trainers import _trl_grpo, _trl_preference

    real = _compat.installed_version
    monkeypatch.setattr(_compat, "installed_version", lambda n: version if n == name else real(n))
    low, high, why = _compat.SUPPORTED[name]
    match = (f"supports {name} >={low[0]}.{low[1]},<{high[0]}.{high[1]}, but {name} {version} is installed: "
             + re.escape(why[:40]))
    monkeypatch.setattr(_trl_preference, "_CLASSES", {})
    with pytest.raises(RuntimeError, match=match):
        _trl_preference.trainer_class("PackedDPOTrainer")
    monkeypatch.setattr(_trl_grpo, "_CLASS", None)
    with pytest.raises(RuntimeError, match=match):
        _trl_grpo.packed_grpo_trainer()
    import trl

    mine = type("MyGRPOTrainer", (_trl_grpo.PackedGRPOMixin, trl.GRPOTrainer), {})  # the mixin on a user's class
    with pytest.raises(RuntimeError, match=r"packlib.torch.PackedGRPOMixin \(MyGRPOTrainer\) " + match):
        mine(model="unused", reward_funcs=[])
    if name != "trl":  # transformers.Trainer: TRL is not checked
        args = worker.trainer_args(tmp_path, gradient_accumulation_steps=M)
        trainer = transformers.Trainer(model=worker.tiny_model(), args=args, train_dataset=[{"input_ids": [1, 2]}] * 4,
                                       data_collator=PackedCollator())
        with pytest.raises(RuntimeError, match=match):
            balance_trainer(trainer, _sampler(np.full(4, 2)))


def test_the_installed_versions_are_supported():
    from packlib import _compat

    for name in _compat.SUPPORTED:
        _compat.check_versions([name], "this test")
