"""The packing check (packlib/torch/check/): check_packing accepts models that compute a packed
row as each sequence alone and refuses, naming the model, those that leak (a running mean
over the row, state-space mixers, short convolutions, recurrences, transformers' own
refusal); the model's state is left as it was; PaddedCollator is the unpacked path; and
balance_trainer and the packed TRL trainers run the check before their first step, on every
rank alike.

Tiny random models built from configs (tests/_check_models.py). Without torch the module skips.
"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the packing check runs models: pip install torch")
transformers = pytest.importorskip("transformers", reason="the packing check builds transformers models")

import packlib  # noqa: E402
from packlib.torch import PackedCollator, PaddedCollator, balance_trainer, check_packing  # noqa: E402
from tests import _check_models as models  # noqa: E402
from tests.procs import free_port  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
LEAKING = ["LFM2", "Mamba2", "Bamba", "Jamba", "RecurrentGemma", "Granite 4 (GraniteMoeHybrid)"]


def _model(name):
    model = models.build(name)
    if model is None:
        pytest.skip(f"this transformers has no {name}")
    return model


# ------------------------------------------------------------------------ check_packing
@pytest.mark.parametrize("name", ["Llama", "Qwen3"])
def test_exact_models_are_accepted(name):
    report = check_packing(_model(name), models.examples())
    assert report.max_difference <= 1e-4 and len(report.differences) == 3
    assert report.model == type(_model(name)).__name__ and report.attn_implementation == "sdpa"
    assert report.dtype == "float32" and report.to_dict()["model"] == report.model
    assert "exact=True" in repr(report)


def test_half_precision_is_checked_within_its_rounding():
    report = check_packing(_model("Llama").to(torch.bfloat16), models.examples())
    assert report.dtype == "bfloat16" and report.tolerance[0] >= 2e-2
    with pytest.raises(ValueError, match="LlamaForCausalLM does not keep packed sequences apart.*bfloat16"):
        check_packing(models.running_mean_llama().to(torch.bfloat16), models.examples())


def test_a_running_mean_over_the_row_is_refused_naming_the_model():
    with pytest.raises(ValueError, match="LlamaForCausalLM does not keep packed sequences apart") as e:
        check_packing(models.running_mean_llama(), models.examples())
    assert "no layer known to carry state" in str(e.value) and "PaddedCollator" in str(e.value)


@pytest.mark.parametrize("name", LEAKING)
def test_layers_that_carry_state_are_refused_and_named(name):
    model = _model(name)
    cls = type(model).__name__
    with pytest.raises(ValueError, match=f"{cls} does not keep packed sequences apart") as e:
        check_packing(model, models.examples())
    assert "carry state along the row" in str(e.value) and "PaddedCollator" in str(e.value)
    report = check_packing(model, models.examples(), collator=PaddedCollator())  # the unpacked path is exact
    assert report.max_difference <= 1e-4


def test_a_forward_that_refuses_the_packed_row_is_reported_naming_the_model():
    model = models.build("Qwen3-Next")
    if model is None:
        pytest.skip("this transformers has no Qwen3-Next")
    try:
        check_packing(model, models.examples())
    except ValueError as e:
        assert str(e).startswith("Qwen3NextForCausalLM")
    else:  # flash-linear-attention installed: the boundaries reach its kernels
        pass


def test_shared_prompts_and_prefix_trees_on_a_recurrent_model_are_refused():
    pairs = [{"prompt_ids": [5, 6, 7], "chosen_ids": [8, 9], "rejected_ids": [10, 11, 12]},
             {"prompt_ids": [13, 14], "chosen_ids": [15], "rejected_ids": [16, 17]}]
    model = _model("Mamba2")
    for collator in (PackedCollator(share_prompt=True), PackedCollator(share_prefix=True, attention_mask="4d")):
        with pytest.raises(ValueError, match="Mamba2ForCausalLM has layers that carry state.*cannot fork"):
            check_packing(model, pairs, collator=collator)
    llama = _model("Llama")
    assert check_packing(llama, pairs, collator=PackedCollator(share_prompt=True)).max_difference <= 1e-4
    assert len(check_packing(llama, pairs).differences) == 4  # chosen, chosen, rejected, rejected
    trees = [{"input_ids": [5, 6, 7, 8]}, {"input_ids": [5, 6, 9]}, {"input_ids": [10, 11]}]
    assert check_packing(llama, trees, collator=PackedCollator(share_prefix=True)).max_difference <= 1e-4


def test_a_reward_models_scores_are_compared():
    config = transformers.LlamaConfig(**dict(models.CONFIGS["Llama"][1], num_labels=1, pad_token_id=0))
    model = transformers.LlamaForSequenceClassification(config)
    pairs = [{"chosen_ids": [5, 6, 7], "rejected_ids": [8, 9]}, {"chosen_ids": [10, 11], "rejected_ids": [12, 13]}]
    assert check_packing(model, pairs).max_difference <= 1e-4


def test_the_models_state_is_left_as_it_was():
    for model in (models.running_mean_llama(), _model("Llama")):
        model.train()
        model.model.layers[0].eval()
        model.lm_head.weight.requires_grad_(False)
        modes = [m.training for m in model.modules()]
        flags = [p.requires_grad for p in model.parameters()]
        state = {k: v.clone() for k, v in model.state_dict().items()}
        try:
            check_packing(model, models.examples())
        except ValueError:
            pass
        assert [m.training for m in model.modules()] == modes
        assert [p.requires_grad for p in model.parameters()] == flags
        assert all(torch.equal(v, model.state_dict()[k]) for k, v in state.items())
        assert all(p.grad is None for p in model.parameters())


def test_bad_input():
    llama = _model("Llama")
    with pytest.raises(ValueError, match="has no .config"):
        check_packing(torch.nn.Linear(2, 2), models.examples())
    with pytest.raises(TypeError, match="torch.nn.Module"):
        check_packing("llama", models.examples())

    class NoLogits(torch.nn.Module):
        config = llama.config

        def forward(self, input_ids, **kwargs):
            return {"hidden": input_ids.float()}

    with pytest.raises(ValueError, match="NoLogits's output has no logits"):
        check_packing(NoLogits(), models.examples())
    with pytest.raises(ValueError, match="non-empty list"):
        check_packing(llama, [])
    with pytest.raises(ValueError, match="collator refused"):
        check_packing(llama, [{"tokens": [1, 2]}])
    with pytest.raises(ValueError, match="train no token"):
        check_packing(llama, [{"input_ids": [1, 2], "labels": [-100, -100]}])
    with pytest.raises(TypeError, match="collator must be"):
        check_packing(llama, models.examples(), collator=lambda e: e)
    with torch.device("meta"):
        meta = transformers.LlamaForCausalLM(llama.config)
    with pytest.raises(ValueError, match="meta device"):
        check_packing(meta, models.examples())


# ------------------------------------------------------------------------ PaddedCollator
def test_padded_collator_lays_each_sequence_out_alone():
    batch = PaddedCollator(pad_token_id=3)([{"input_ids": [5, 6, 7], "labels": [-100, 6, 7]},
                                            {"input_ids": [8, 9, 10, 11], "seq_lengths": [2, 2]}])
    assert batch["input_ids"].tolist() == [[5, 6, 7], [8, 9, 3], [10, 11, 3]]
    assert batch["labels"].tolist() == [[-100, 6, 7], [-100, 9, -100], [-100, 11, -100]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0], [1, 1, 0]]
    assert batch["use_cache"] is False and "PaddedCollator(pad_token_id=3" in repr(PaddedCollator(pad_token_id=3))
    assert batch["position_ids"].tolist() == [[0, 1, 2]] * 3
    with pytest.raises(ValueError, match="preference pair"):
        PaddedCollator()([{"prompt_ids": [1], "chosen_ids": [2], "rejected_ids": [3]}])
    with pytest.raises(ValueError, match="non-empty list"):
        PaddedCollator()([])


def test_padded_collator_lays_one_sequence_out_on_writable_arrays():
    """A micro-batch of one sequence (frequent with padded=True: long sequences): no tensor over a
    read-only array (torch warns of it once per process, so in a fresh one, warnings as errors)."""
    code = "from packlib.torch import PaddedCollator; PaddedCollator()([{'input_ids': [5, 6, 7]}])"
    proc = subprocess.run([sys.executable, "-W", "error", "-c", code], cwd=ROOT, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


# ------------------------------------------------------------------------ the trainers
def test_the_trainers_check_reads_a_few_short_sequences_of_its_data():
    from types import SimpleNamespace

    from packlib.torch.check import _trainer

    llama = _model("Llama")

    def seqs(rows, collator=None):
        t = SimpleNamespace(train_dataset=rows, processing_class=None, data_collator=collator)
        return _trainer._sequences(t, llama), t

    pairs = [{"prompt_ids": [1, 2], "chosen_ids": [3, 4], "rejected_ids": [5]}]
    assert seqs(pairs)[0] == [[1, 2, 3, 4], [1, 2, 5]]
    packed_row = [{"input_ids": list(range(1, 61)), "seq_lengths": [30, 30]}]
    assert seqs(packed_row)[0] == [list(range(1, 25)), list(range(31, 55))]  # 24 tokens of each
    assert seqs([{"input_ids": [7, 8, 9]}])[0] == [[7, 8, 9], [7, 8, 9]]  # one sequence: twice
    synthetic, _ = seqs(None)
    assert len(synthetic) == 3 and all(0 <= t < models.VOCAB for s in synthetic for t in s)
    examples, collator = _trainer._layout(seqs(pairs)[1], llama, seqs(pairs)[0])
    assert isinstance(collator, PackedCollator) and examples == [{"input_ids": [1, 2, 3, 4]}, {"input_ids": [1, 2, 5]}]
    t = seqs(pairs, PackedCollator(share_prompt=True))[1]
    examples, collator = _trainer._layout(t, llama, seqs(pairs)[0])
    assert collator.share_prompt and examples[0]["completion_ids"] == [[1, 2, 3, 4], [1, 2, 5]]
    t = seqs(pairs, PaddedCollator())[1]
    assert isinstance(_trainer._layout(t, llama, seqs(pairs)[0])[1], PaddedCollator)


def _balanced(model, tmp_path, collator=None, padded=False, **kw):
    from tests import _trainer_worker as worker

    lengths, ids, labels = worker.samples()
    datasets = pytest.importorskip("datasets")
    args = worker.trainer_args(tmp_path, num_train_epochs=1)
    args.world_size  # noqa: B018  (resolves the process layout)
    sampler = packlib.BalancedBatchSampler(lengths, 64, rank=0, world_size=1, micro_batches=2, padded=padded)
    trainer = transformers.Trainer(model=model, args=args, data_collator=collator or PackedCollator(),
                                   train_dataset=datasets.Dataset.from_dict({"input_ids": ids, "labels": labels}))
    return balance_trainer(trainer, sampler, **kw)


def _params(model):
    return [p.detach().clone() for p in model.parameters()]


def test_balance_trainer_refuses_a_leaking_model_before_any_step(tmp_path):
    pytest.importorskip("accelerate")
    model = models.running_mean_llama(vocab=64)
    before = _params(model)
    trainer = _balanced(model, tmp_path)
    with pytest.raises(ValueError, match="LlamaForCausalLM does not keep packed.*before the first step"):
        trainer.train()
    assert trainer.state.global_step == 0 and all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    trainer = _balanced(models.running_mean_llama(vocab=64), tmp_path / "off", check_packing=False)
    trainer.train()  # turned off: trains
    assert trainer.state.global_step > 0


def _mamba2(seed=0):
    torch.manual_seed(seed)
    config = transformers.Mamba2Config(**dict(models.CONFIGS["Mamba2"][1], vocab_size=64))
    return transformers.Mamba2ForCausalLM(config)


def test_balance_trainer_trains_a_recurrent_model_unpacked_as_each_sequence_alone(tmp_path):
    """Mamba2, refused packed (naming the recipe), trained by balance_trainer on PaddedCollator
    rows of a padded sampler: the parameters equal SGD on each planned step's token-mean loss
    over its sequences run alone (tests/naive_training.py). A sampler planned for packing is
    warned about."""
    pytest.importorskip("accelerate")
    from tests import _trainer_worker as worker
    from tests import naive_training as ref

    with pytest.raises(ValueError, match=r"Mamba2ForCausalLM does not keep packed sequences apart.*PaddedCollator\(\) "
                                         r".*padded=True"):
        _balanced(_mamba2(), tmp_path).train()
    with pytest.warns(UserWarning, match="build the sampler with padded=True"):
        _balanced(_mamba2(), tmp_path / "unplanned", collator=PaddedCollator())
    trainer = _balanced(_mamba2(), tmp_path / "padded", collator=PaddedCollator(), padded=True)
    trainer.train()
    lengths, ids, labels = worker.samples()
    schedule = packlib.balance(lengths, 64, world_size=1, micro_batches=2, padded=True)
    assert trainer.state.global_step == schedule.num_steps
    steps = [[(ids[i], ref.trained_tokens(len(ids[i]), labels=labels[i]), labels[i]) for mb in step for i in mb]
             for step in schedule.rank(0)]
    assert max(len(mb) for step in schedule.rank(0) for mb in step) > 1, "micro-batches of several rows"
    m = _mamba2()
    ref.train_steps(m, torch.optim.SGD(m.parameters(), lr=1e-2), steps)
    worst = max(float((a - b).abs().max()) for a, b in zip(_params(trainer.model), _params(m)))
    assert worst < 2e-6
    assert max(float((a - b).abs().max()) for a, b in zip(_params(_mamba2()), _params(m))) > 1e-4  # it trained


def test_trls_sft_trainer_trains_a_recurrent_model_unpacked_as_each_sequence_alone(tmp_path):
    """The same recipe through TRL's SFTTrainer (its own loss and metrics on PaddedCollator's
    padded rows): equal to SGD on each planned step's token-mean loss over its sequences alone."""
    trl = pytest.importorskip("trl", reason="TRL's SFTTrainer")
    datasets = pytest.importorskip("datasets")
    from tests import _trainer_worker as worker
    from tests import naive_training as ref
    from tests._preference_trainers import tokenizer

    lengths, ids, labels = worker.samples()
    args = trl.SFTConfig(str(tmp_path / "sft"), per_device_train_batch_size=1, gradient_accumulation_steps=2,
                         num_train_epochs=1, max_length=None, learning_rate=1e-2, optim="sgd", lr_scheduler_type="constant",
                         max_grad_norm=0.0, report_to=[], use_cpu=True, save_strategy="no", disable_tqdm=True, bf16=False)
    trainer = trl.SFTTrainer(model=_mamba2(), args=args, processing_class=tokenizer(), data_collator=PaddedCollator(),
                             train_dataset=datasets.Dataset.from_dict({"input_ids": ids, "labels": labels}))
    sampler = packlib.BalancedBatchSampler(lengths, 64, rank=0, world_size=1, micro_batches=2, padded=True)
    balance_trainer(trainer, sampler).train()
    schedule = packlib.balance(lengths, 64, world_size=1, micro_batches=2, padded=True)
    assert trainer.state.global_step == schedule.num_steps
    steps = [[(ids[i], ref.trained_tokens(len(ids[i]), labels=labels[i]), labels[i]) for mb in step for i in mb]
             for step in schedule.rank(0)]
    m = _mamba2()
    ref.train_steps(m, torch.optim.SGD(m.parameters(), lr=1e-2), steps)
    assert max(float((a - b).abs().max()) for a, b in zip(_params(trainer.model), _params(m))) < 2e-6


def test_packed_dpo_trainer_refuses_a_leaking_model_before_any_step(tmp_path):
    pytest.importorskip("trl")
    from tests import _preference_trainers as P
    from packlib.torch import PackedDPOTrainer
    import trl

    def build(**kw):
        model = models.running_mean_llama(vocab=P.VOCAB)
        args = trl.DPOConfig(str(tmp_path), **{**P.SETTINGS, "max_steps": 1, "per_device_train_batch_size": 2})
        return model, PackedDPOTrainer(model=model, ref_model=models.running_mean_llama(vocab=P.VOCAB), args=args,
                                       train_dataset=P.dataset("dpo", n=4),
                                       processing_class=P.tokenizer(), **kw)

    model, trainer = build()
    before = _params(model)
    with pytest.raises(ValueError, match="LlamaForCausalLM does not keep packed sequences apart"):
        trainer.train()
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    model, trainer = build(packlib_check_packing=False)
    trainer.train()
    assert trainer.state.global_step == 1


def test_packed_grpo_trainer_refuses_a_shared_prompt_on_a_recurrent_model(tmp_path):
    pytest.importorskip("trl")
    pytest.importorskip("datasets")
    from tests import test_trainer_grpo as G
    from packlib.torch import PackedGRPOTrainer
    import trl

    config = transformers.Mamba2Config(**dict(models.CONFIGS["Mamba2"][1], vocab_size=G.V, pad_token_id=0,
                                              eos_token_id=1, bos_token_id=None))
    model = transformers.Mamba2ForCausalLM(config)
    before = _params(model)
    args = trl.GRPOConfig(str(tmp_path), per_device_train_batch_size=G.K, num_generations=G.K, max_completion_length=4,
                          max_steps=1, report_to=[], use_cpu=True, save_strategy="no", disable_tqdm=True, bf16=False)
    trainer = PackedGRPOTrainer(model=model, reward_funcs=G._reward, args=args, train_dataset=G._prompts(),
                                processing_class=G._tokenizer())
    with pytest.raises(ValueError, match="Mamba2ForCausalLM has layers that carry state.*cannot fork"):
        trainer.train()
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the ranks are forked (POSIX)")
def test_two_ranks_agree_on_the_check(tmp_path):
    """Two gloo ranks (tests/_check_worker.py): both refuse the leaking model before any step,
    both train the exact one to the same parameters (no rank waits on another)."""
    pytest.importorskip("datasets")
    pytest.importorskip("accelerate")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-m", "tests._check_worker", str(free_port()), str(tmp_path)], cwd=ROOT,
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:]
    seen = [json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in range(2)]
    for s in seen:
        assert "does not keep packed sequences apart" in s["leaking"]["refused"] and not s["leaking"]["changed"]
        assert s["exact"]["steps"] > 0 and s["exact"]["changed"]
        assert s["unpacked"]["steps"] > 0 and s["unpacked"]["changed"]
    assert np.isclose(seen[0]["exact"]["params"], seen[1]["exact"]["params"], rtol=0, atol=1e-9)
    _the_unpacked_ranks_train_each_sequence_alone(tmp_path)


def _the_unpacked_ranks_train_each_sequence_alone(tmp_path):
    """The leaking model trained unpacked on two ranks (PaddedCollator, padded=True): both ranks'
    parameters equal SGD on each planned step's token-mean loss over both ranks' sequences, each
    run alone (tests/naive_training.py)."""
    from tests import _check_worker as worker
    from tests import _trainer_worker as base
    from tests import naive_training as ref

    lengths, ids, labels = base.samples()
    schedule = packlib.BalancedBatchSampler(lengths, **worker.unpacked_settings(0)).schedule
    per_step = schedule.world_size * schedule.micro_batches
    o, ix = schedule.packs.offsets, schedule.packs.indices
    steps = [[(ids[i], ref.trained_tokens(len(ids[i]), labels=labels[i]), labels[i])
              for k in range(st * per_step, (st + 1) * per_step) for i in ix[o[k]:o[k + 1]]]
             for st in range(schedule.num_steps)]
    model = models.running_mean_llama(vocab=base.VOCAB)
    ref.train_steps(model, torch.optim.SGD(model.parameters(), lr=1e-2), steps)
    for rank in range(2):
        trained = torch.load(tmp_path / f"params-unpacked-{rank}.pt")
        assert max(float((a - b).abs().max()) for a, b in zip(trained, _params(model))) < 2e-6


def test_the_benchmark_s_padding_figures_are_the_schedule_s():
    """benchmarks/bench_model_exactness.py --padding-only: its tokens computed per token trained and
    busy fraction are the padded schedule's own (cost: tokens), and larger for a plan for packing."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_model_exactness", ROOT / "benchmarks" / "bench_model_exactness.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    lengths = np.random.default_rng(2).integers(1, 300, 2000)
    s = packlib.balance(lengths, 512, world_size=4, micro_batches=2, padded=True)
    ratio, busy, largest = bench.padded_figures(s, lengths)
    assert ratio == pytest.approx(s.computed_tokens / s.packs.num_tokens) and busy == pytest.approx(s.balance)
    assert largest <= 1
    packed = bench.padded_figures(packlib.balance(lengths, 512, world_size=4, micro_batches=2), lengths)
    assert packed[0] > ratio and packed[2] > 1
