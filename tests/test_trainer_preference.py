"""TRL's DPOTrainer, RewardTrainer and KTOTrainer on packed rows (packlib/torch/trainers/
_trl_preference.py, _trl_rows.py): each packed trainer's parameters after a few steps equal
TRL's own padded run's, in both layouts and with the settings that reach its loss; TRL's own
trainers refuse PackedCollator's rows, and balance_trainer refuses them (and TRL's padding
collators); under balance_trainer each step's loss is the mean over its pairs (KTO: examples)
across micro-batches of different sizes and across two gloo ranks, against TRL's own loss on
its padded batches (tests/_preference_trainers.py).

Tiny random Llama models from a config. Needs torch, transformers, datasets and TRL; without
them the module skips.
"""
from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="the trainer tests run models: pip install torch")
pytest.importorskip("transformers", reason="the trainer tests build transformers models")
pytest.importorskip("datasets", reason="TRL's trainers take a datasets.Dataset")
trl = pytest.importorskip("trl", reason="these tests run TRL's trainers")

from packlib.torch import PackedCollator, balance_trainer  # noqa: E402
from packlib.torch.trainers import _trl_preference  # noqa: E402
from tests import _preference_trainers as P  # noqa: E402
from tests.procs import free_port  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKED = {"dpo": "PackedDPOTrainer", "reward": "PackedRewardTrainer", "kto": "PackedKTOTrainer"}
STEPS = dict(per_device_train_batch_size=4, max_steps=3)


def _packed(kind):
    return _trl_preference.trainer_class(PACKED[kind])


def _trained(kind, cls=None, **settings):
    """The trainer after ``train()``, and its ``evaluate()`` loss on its training rows."""
    t = P.trainer(kind, cls, **settings)
    t.train()
    t.eval_dataset = t.train_dataset
    t.eval_loss = t.evaluate()["eval_loss"]
    return t


# --------------------------------------------------------------- the trainers' own runs
@pytest.mark.parametrize("kind, settings, layouts", [
    ("dpo", {}, (False, True)),                                         # sigmoid, a reference model
    ("dpo", dict(precompute_ref_log_probs=True, loss_type=["sigmoid", "sft"], loss_weights=[1.0, 0.5]), (True,)),
    ("dpo", dict(loss_type=["sigmoid_norm"], ld_alpha=0.5, use_weighting=True), (False,)),
    ("dpo", dict(loss_type=["ipo"], beta=1.0, max_length=9), (True,)),  # TRL's truncation
    ("reward", dict(center_rewards_coefficient=0.01), (False, True)),   # with margin
    ("kto", {}, (False, True)),                                         # its KL term
    ("kto", dict(loss_type="apo_zero_unpaired", precompute_ref_log_probs=True), (True,)),
])
def test_packed_trainers_equal_trls_own_padded_run(kind, settings, layouts, tmp_path):
    """Three SGD steps (lr 0.5): the packed trainer's parameters equal TRL's own padded run's,
    packed (the packed trainer's default collator) and with the prompt laid out once; its
    logged losses and its evaluate() loss afterwards too."""
    stock = _trained(kind, output_dir=str(tmp_path), **STEPS, **settings)
    for share in layouts:
        cut = stock.args.max_length if kind != "reward" else None  # as the config cuts
        collator = {"data_collator": PackedCollator(share_prompt=True, max_length=cut)} if share else {}
        packed = _trained(kind, _packed(kind), output_dir=str(tmp_path), **STEPS, **settings, **collator)
        assert P.max_difference(stock.model, packed.model) < 2e-5
        losses = [[h["loss"] for h in t.state.log_history if "loss" in h] for t in (stock, packed)]
        assert losses[0] == pytest.approx(losses[1], abs=1e-5)
        assert packed.eval_loss == pytest.approx(stock.eval_loss, abs=1e-5)


def test_the_fused_fields_read_only_the_logits_they_need():
    """What the packed trainers hand TRL's loss: token_logps' rows, the same whether the model
    computes every position's logits or (logits_to_keep) only those that predict a completion
    token, which is fewer than the row's tokens."""
    from packlib.torch import model_inputs, token_logps
    from packlib.torch.trainers._trl_rows import fused_output

    model = P.causal_lm()
    row = PackedCollator(share_prompt=True)([{"prompt_ids": [2, 3, 4, 5, 6], "chosen_ids": [7, 8], "rejected_ids": [9]},
                                             {"prompt_ids": [2, 3], "chosen_ids": [7, 8, 9], "rejected_ids": [10, 11]}])
    shapes = []

    def run(**keep):
        out = model(**model_inputs(row), **keep)
        shapes.append(out.logits.shape[1])
        return out

    kept, full = fused_output(run, row, keep_logits=True), fused_output(run, row, keep_logits=False)
    assert shapes == [6, row["input_ids"].shape[1]]  # 8 completion tokens; a prompt's last predicts two
    logps, mask = token_logps(model(**model_inputs(row)).logits, row)
    for out in (kept, full):
        torch.testing.assert_close(out.log_probs, logps, atol=1e-6, rtol=0)
        assert torch.equal(out.label_mask, mask.bool())
    for name in ("entropy", "mean_logits", "log_sum_sq_probs", "is_top1"):
        torch.testing.assert_close(getattr(kept, name), getattr(full, name), atol=1e-6, rtol=0)


def test_the_comparison_can_fail(tmp_path):
    """The check above sees a wrong loss: the packed DPO run with another beta differs."""
    stock = _trained("dpo", output_dir=str(tmp_path), **STEPS)
    packed = _trained("dpo", _packed("dpo"), output_dir=str(tmp_path), beta=0.2, **STEPS)
    assert P.max_difference(stock.model, packed.model) > 1e-3


def test_packed_trainers_are_trls_classes_and_pickle_by_name():
    import pickle

    import packlib.torch

    for kind, name in PACKED.items():
        cls = getattr(packlib.torch, name)
        assert cls is _packed(kind) and cls.__module__ == "packlib.torch"
        base = {"dpo": "DPOTrainer", "reward": "RewardTrainer", "kto": "KTOTrainer"}[kind]
        assert issubclass(cls, getattr(trl, base))
        assert pickle.loads(pickle.dumps(cls)) is cls


# ------------------------------------------------------------------------- refusals
@pytest.mark.parametrize("kind, workers", [("dpo", {}), ("reward", {}), ("kto", {}),
                                          ("dpo", dict(dataloader_num_workers=1)),
                                          ("dpo", dict(dataloader_num_workers=1, dataloader_persistent_workers=False,
                                                       dataloader_multiprocessing_context="spawn"))])
def test_trls_own_trainers_fail_on_packed_rows_before_a_step(kind, workers, tmp_path):
    """TRL's own trainers cannot read PackedCollator's one row as their padded batch: they fail
    at the first batch (in a DataLoader worker too), before any step; balance_trainer refuses
    them by name (below), and the packed trainers read the row."""
    t = P.trainer(kind, output_dir=str(tmp_path), data_collator=PackedCollator(), **STEPS, **workers)
    with pytest.raises(Exception):  # noqa: B017  (TRL's own error, whichever it is)
        t.train()
    assert t.state.global_step == 0


def test_the_refusal_leaves_a_loop_of_ones_own_alone():
    pairs = [{"prompt_ids": [2, 3], "chosen_ids": [4], "rejected_ids": [5, 6]}]
    assert PackedCollator()(pairs)["input_ids"].shape == (1, 7)


@pytest.mark.parametrize("kind", ["dpo", "reward", "kto"])
@pytest.mark.parametrize("collator", ["trl", "packed"])
def test_balance_trainer_refuses_trls_preference_trainers(kind, collator, tmp_path):
    """TRL's trainers weigh each micro-batch's mean equally: refused with any collator,
    naming the packed trainer."""
    kw = {"data_collator": PackedCollator()} if collator == "packed" else {}
    t = P.trainer(kind, output_dir=str(tmp_path), gradient_accumulation_steps=2, **P.settings_of(kind), **kw)
    with pytest.raises(ValueError, match=f"use packlib.torch.{PACKED[kind]} with data_collator="):
        balance_trainer(t, P.sampler(kind, t))


@pytest.mark.parametrize("kind, collator, config, match", [
    ("dpo", dict(max_length=12), dict(max_length=9), "max_length=12 but the trainer's DPOConfig has max_length=9"),
    ("dpo", dict(max_length=9), dict(max_length=9, truncation_mode="keep_end"),
     "truncation_mode='keep_start' but the trainer's DPOConfig has truncation_mode='keep_end'"),
    ("kto", dict(max_length=12), dict(), "max_length=12 but the trainer's KTOConfig has max_length=1024"),
])
def test_a_collator_that_cuts_otherwise_than_the_config_is_refused(kind, collator, config, match, tmp_path):
    """A PackedCollator of one's own cuts as the config says, or is refused naming both values:
    never packed rows of other tokens than TRL's batch."""
    with pytest.raises(ValueError, match=re.escape(match)):
        P.trainer(kind, _packed(kind), output_dir=str(tmp_path), **STEPS, **config,
                  data_collator=PackedCollator(share_prompt=True, **collator))


def test_a_collator_that_sets_no_cut_cuts_as_the_config(tmp_path):
    """A PackedCollator(share_prompt=True) of one's own without max_length cuts as the config
    says (a copy: one's own collator is left as it is), so the run equals TRL's own."""
    mine = PackedCollator(share_prompt=True)
    settings = dict(loss_type=["ipo"], beta=1.0, max_length=9)
    packed = _trained("dpo", _packed("dpo"), output_dir=str(tmp_path), **STEPS, **settings, data_collator=mine)
    assert (packed.data_collator.max_length, packed.data_collator.truncation_mode) == (9, "keep_start")
    assert mine.max_length is None
    stock = _trained("dpo", output_dir=str(tmp_path), **STEPS, **settings)
    assert P.max_difference(stock.model, packed.model) < 2e-5


def test_balance_trainer_refuses_a_packed_trainer_given_trls_collator(tmp_path):
    from trl.trainer.dpo_trainer import DataCollatorForPreference

    t = P.trainer("dpo", _packed("dpo"), output_dir=str(tmp_path), gradient_accumulation_steps=2,
                  data_collator=DataCollatorForPreference(pad_token_id=0), **P.settings_of("dpo"))
    with pytest.raises(ValueError, match="data_collator is DataCollatorForPreference"):
        balance_trainer(t, P.sampler("dpo", t))


# ------------------------------------------------------------------- balanced steps
@pytest.mark.parametrize("kind", ["dpo", "reward", "kto"])
def test_balanced_steps_weigh_every_pair_as_trls_padded_step(kind, tmp_path, monkeypatch):
    """balance_trainer's micro-batches hold 1 to 4 pairs (examples): three steps equal SGD on
    TRL's own loss, each micro-batch's weighted by its pairs over the step's. Without the
    weighting (each micro-batch's mean weighed equally, TRL's rule) they differ."""
    cls = _packed(kind)
    runs = {}
    for weigh in (True, False):
        if not weigh:
            monkeypatch.setattr(cls, "packlib_balance", lambda self: None)
        t = P.trainer(kind, cls, output_dir=str(tmp_path), gradient_accumulation_steps=2, max_steps=3,
                      **P.settings_of(kind))
        sampler = P.sampler(kind, t)
        balance_trainer(t, sampler)
        t.train()
        runs[weigh] = t.model
    steps = P.planned_steps(sampler, 3)
    assert len({len(mb) for step in steps for mb in step}) > 1          # micro-batches of different sizes
    reference = P.reference_run(P.trainer(kind, output_dir=str(tmp_path), **P.settings_of(kind)), steps)
    assert P.max_difference(runs[True], reference) < 2e-5
    assert P.max_difference(runs[False], reference) > 1e-3


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the ranks are forked (POSIX)")
@pytest.mark.parametrize("kind, flags", [("dpo", ()), ("dpo", ("skewed",)), ("reward", ("skewed",)),
                                         ("kto", ("skewed",)), ("kto", ("skewed", "kl")),
                                         ("dpo", ("skewed", "ranks=4")), ("reward", ("skewed", "ranks=4")),
                                         ("kto", ("skewed", "kl", "ranks=4"))])
def test_ranks_weigh_every_pair_of_the_step(kind, flags, tmp_path):
    """Two (``ranks=4``: four) gloo processes, a packed trainer with balance_trainer: every rank
    ends bitwise equal to the others and equal to SGD on TRL's own loss over each step's
    micro-batches of every rank, each weighted by its pairs (examples) over the step's.
    ``skewed``: the plan gives the ranks different numbers of pairs in the same micro-batch,
    which TRL's metrics, gathered one value per pair, cannot take as they are. KTO without
    ``kl`` drops its KL term; with it (its default loss, a reference model that makes the
    estimate positive, where TRL's clamp keeps it), TRL averages each micro-batch's KL estimate
    over the ranks' micro-batches, and so does the reference (each rank's own estimate
    instead ends beyond the tolerance)."""
    ranks = int(next((f.split("=")[1] for f in flags if f.startswith("ranks=")), 2))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "tests._preference_trainers", str(free_port()), str(tmp_path), kind, *flags]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:]
    params = [torch.load(tmp_path / f"params-{r}.pt") for r in range(ranks)]
    assert all(torch.equal(params[0][k], p[k]) for p in params[1:] for k in params[0])
    plans = [json.loads((tmp_path / f"steps-{r}.json").read_text()) for r in range(ranks)]
    assert all(p == plans[0] for p in plans)
    steps = plans[0]
    assert len(steps) == P.STEPS and all(len(step) == 2 * ranks for step in steps)
    assert len({len(mb) for step in steps for mb in step}) > 1
    if "skewed" in flags:  # the same micro-batch of the ranks holds different numbers of pairs
        assert any(len({len(step[r * 2 + m]) for r in range(ranks)}) > 1 for step in steps for m in range(2))
    settings = {**P.settings_of(kind), **({} if "kl" in flags else P.RANK_SETTINGS.get(kind, {}))}
    stock = P.trainer(kind, data=P.rank_data(kind, "skewed" in flags, ranks), output_dir=str(tmp_path),
                      ref_model=P.sharp_reference() if "kl" in flags else None, **settings)
    assert getattr(stock, "calculate_KL", False) == ("kl" in flags)  # KTO's KL term on where asked for
    reference = P.reference_run(stock, steps)
    for k, v in reference.state_dict().items():
        torch.testing.assert_close(params[0][k], v, atol=1e-5, rtol=0)


# ------------------------------------------------------------ the model left as it was
def _round(cls, model, tmp_path, **settings):
    """A DPO round on ``model`` whose reference is ``trl.create_reference_model(model)``."""
    args = trl.DPOConfig(str(tmp_path), **{**P.SETTINGS, **STEPS, **settings})
    t = cls(model=model, ref_model=trl.create_reference_model(model), args=args, train_dataset=P.dataset("dpo"),
            processing_class=P.tokenizer())
    t.train()
    return t.model


def _pickle_error(model):
    import pickle

    try:
        pickle.loads(pickle.dumps(model))
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {e}"
    return None


def test_a_trained_model_is_left_as_it_was(tmp_path):
    """After a packed DPO run the model holds what TRL's own run leaves on it and nothing of
    packlib's: a deep copy's fused head (what DPO reads) runs the copy's weights, the model
    pickles as TRL's does, and a second round whose reference is
    trl.create_reference_model(model) equals TRL's own second round."""
    import copy

    from trl.trainer.utils import add_fused_lm_head

    stock = _trained("dpo", output_dir=str(tmp_path), **STEPS)
    packed = _trained("dpo", _packed("dpo"), output_dir=str(tmp_path), **STEPS)
    assert P.max_difference(stock.model, packed.model) < 2e-5
    for module in packed.model.modules():
        assert not [k for k in vars(module) if "packlib" in k]
    assert sorted(vars(packed.model)) == sorted(vars(stock.model))
    assert _pickle_error(packed.model) == _pickle_error(stock.model)
    twin = copy.deepcopy(packed.model)
    with torch.no_grad():
        for p in twin.parameters():
            p.add_(0.05)
    fresh = P.causal_lm()
    fresh.load_state_dict(twin.state_dict())
    add_fused_lm_head(fresh)
    ids = torch.tensor([[2, 3, 4, 5, 6]])
    with torch.no_grad():
        own, copied = (m(input_ids=ids, labels=ids, fused_lm_head=True).log_probs for m in (fresh, twin))
        torch.testing.assert_close(copied, own, atol=1e-6, rtol=0)
    first = [p.detach().clone() for p in stock.model.parameters()]
    second = [_round(cls, t.model, tmp_path / name, beta=0.5)
              for name, cls, t in (("stock", trl.DPOTrainer, stock), ("packed", _packed("dpo"), packed))]
    assert P.max_difference(*second) < 1e-5
    assert max(float((p - f).abs().max()) for p, f in zip(second[0].parameters(), first)) > 1e-3  # it trains


# --------------------------------------------------------------------------- PEFT
def test_kto_peft_precomputed_reference_is_the_adapter_disabled(tmp_path, monkeypatch):
    """PackedKTOTrainer with a LoRA adapter, precompute_ref_log_probs and no ref_model: the
    reference log-probs are the base model's (the adapter disabled, as TRL's), so training and
    evaluate() afterwards equal TRL's own run."""
    peft = pytest.importorskip("peft", reason="a LoRA adapter")
    from peft.tuners.lora import torchao

    monkeypatch.setattr(torchao, "is_torchao_available", lambda: False)  # an old torchao installed beside is unused

    def run(cls):
        args = trl.KTOConfig(str(tmp_path / cls.__name__), **{**P.SETTINGS, **STEPS, "precompute_ref_log_probs": True})
        lora = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
        t = cls(model=P.causal_lm(), ref_model=None, args=args, train_dataset=P.dataset("kto"),
                eval_dataset=P.dataset("kto"), processing_class=P.tokenizer(), peft_config=lora)
        t.train()
        return t, t.evaluate()["eval_loss"]

    (stock, stock_loss), (packed, packed_loss) = run(trl.KTOTrainer), run(_packed("kto"))
    torch.testing.assert_close(packed.train_dataset["ref_logps"], stock.train_dataset["ref_logps"], atol=1e-5,
                               rtol=0)
    assert P.max_difference(stock.model, packed.model) < 2e-5
    assert packed_loss == pytest.approx(stock_loss, abs=1e-6)
