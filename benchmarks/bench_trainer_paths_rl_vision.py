"""GRPO and vision-language models in the Trainer: each path a user tries first, exact or refused?

    PYTHONPATH=$PWD python benchmarks/bench_trainer_paths_rl_vision.py

Tiny random models built from configs on CPU (a Llama for GRPO; Qwen2-VL, Qwen2.5-VL, Qwen3-VL
from tests/naive_vision.py), every figure against a reference computed without packlib:

- ``balance_trainer(GRPOTrainer(...), sampler)``: refused, or what it trains;
- ``PackedGRPOTrainer`` against ``GRPOTrainer``'s own run: two optimizer steps, sampling
  included (``num_iterations=2``), parameters after them; tokens laid out, packed vs padded;
- ``Trainer`` + ``VisionPackedCollator`` + ``balance_trainer``: parameters after the planned
  steps against SGD on each step's token mean (each example alone); beside it the Trainer's
  own weighting (``model_accepts_loss_kwargs=False``, the behaviour before);
- ``sequence_logps`` on a vision row against each example alone;
- an iterable dataset given to ``balance_trainer``;
- resuming Qwen2-VL / Qwen2.5-VL through the Trainer: parameters of a run stopped at step 2 and
  resumed against the uninterrupted run, as transformers resumes and through ``from_pretrained``.

Prints a markdown table, one line per path: "exact" with the figure against its reference, or
"refused" with the message.
"""
from __future__ import annotations

import contextlib
import io
import logging
import pathlib
import sys
import tempfile
import warnings

import numpy as np
import torch
import transformers

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import packlib  # noqa: E402
from packlib.torch import PackedCollator, VisionPackedCollator, balance_trainer, sequence_logps  # noqa: E402
from tests import naive_vision as nv  # noqa: E402
from tests import test_trainer_checks as checks  # noqa: E402
from tests import test_trainer_grpo as grpo  # noqa: E402


def _diff(a, b):
    return max(float((x - y).abs().max()) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def _refused(fn):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fn()
    except ValueError as e:
        return f"refused before training: `ValueError: {str(e)[:150]}...`"
    return "accepted"


def grpo_rows(tmp):
    import trl

    def plain():
        t = grpo._trainer(trl.GRPOTrainer, tmp / "plain", per_device_train_batch_size=1, generation_batch_size=4)
        balance_trainer(t, packlib.BalancedBatchSampler(np.full(4, 5), 64, rank=0, world_size=1, micro_batches=2))

    rows = [("`balance_trainer(GRPOTrainer(...), sampler)`", _refused(plain))]
    theirs = grpo._trainer(trl.GRPOTrainer, tmp / "trl")
    theirs.train()
    from packlib.torch.trainers import PackedGRPOTrainer, _trl_grpo

    seen, original = [], _trl_grpo._groups

    def spy(input_ids, attention_mask, keep, chosen):
        examples, order = original(input_ids, attention_mask, keep, chosen)
        seen.append((int(attention_mask[list(chosen)].sum()), int(attention_mask[list(chosen)].numel()),
                     sum(len(e["prompt_ids"]) + sum(map(len, e["completion_ids"])) for e in examples)))
        return examples, order

    _trl_grpo._groups = spy
    try:
        ours = grpo._trainer(PackedGRPOTrainer, tmp / "ours")
        ours.train()
    finally:
        _trl_grpo._groups = original
    moved = _diff(theirs.model, grpo._model())
    real, padded, packed = (sum(x[i] for x in seen) for i in range(3))
    rows.append(("`PackedGRPOTrainer` vs `GRPOTrainer`'s own run, 2 steps",
                 f"exact: parameters within {_diff(ours.model, theirs.model):.1e} (the steps move them "
                 f"{moved:.1e}); tokens laid out {packed} packed vs {padded} padded ({real} real)"))
    return rows


def vision_rows(tmp):
    rows = []
    exs = checks._examples()
    lengths = np.array([e["input_ids"].shape[1] for e in exs])
    for family in nv.FAMILIES:
        got = {}
        for fixed in (True, False):
            trainer = checks._vision_trainer(tmp / f"{family}-{fixed}", family, exs)
            own = trainer.model_accepts_loss_kwargs  # what transformers sets
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                balance_trainer(trainer, checks._sampler(lengths))
            if not fixed:
                trainer.model_accepts_loss_kwargs = own
            trainer.train()
            steps = trainer.state.global_step
            got[fixed] = _diff(trainer.model, checks._reference(family, exs, checks._sampler(lengths), steps))
        rows.append((f"`Trainer` + `VisionPackedCollator` + `balance_trainer`, {family}",
                     f"exact: parameters after {steps} steps within {got[True]:.1e} of the step token mean "
                     f"(the Trainer's own weighting: {got[False]:.1e})"))
    worst = 0.0
    for family in nv.FAMILIES:
        model = nv.tiny_model(family)
        batch = VisionPackedCollator(model)(nv.examples())
        with torch.no_grad():
            ours = sequence_logps(model(**batch).logits, batch)
            alone = torch.stack([-p[1] for p in nv.alone(model, nv.examples())])
        worst = max(worst, float((ours - alone).abs().max() / alone.abs().max()))
    rows.append(("`sequence_logps` on a `VisionPackedCollator` row (3 families)",
                 f"exact: within {worst:.1e} (relative) of each example alone"))
    return rows


def iterable_row(tmp):
    from tests import _trainer_worker as worker

    def run():
        args = worker.trainer_args(tmp / "it", gradient_accumulation_steps=2, max_steps=2)
        t = transformers.Trainer(model=worker.tiny_model(), args=args, train_dataset=checks._Stream(),
                                 data_collator=PackedCollator())
        balance_trainer(t, packlib.BalancedBatchSampler(np.full(4, 3), 16, rank=0, world_size=1, micro_batches=2))

    return [("an `IterableDataset` given to `balance_trainer`", _refused(run))]


def resume_rows(tmp):
    rows = []
    exs = checks._examples()
    lengths = np.array([e["input_ids"].shape[1] for e in exs])
    for family in ("qwen2_vl", "qwen2_5_vl"):
        def run(out, model=None, **kw):
            trainer = checks._vision_trainer(out, family, exs, save_strategy="steps", save_steps=2)
            if model is not None:
                trainer = transformers.Trainer(model=model, args=trainer.args, train_dataset=exs,
                                               data_collator=VisionPackedCollator(model))
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                balance_trainer(trainer, checks._sampler(lengths))
            trainer.train(**kw)
            return trainer, any("legacy key names" in str(w.message) for w in seen)

        full, warned = run(tmp / f"{family}-full")
        ckpt = tmp / f"{family}-full" / "checkpoint-2"
        plain, _ = run(tmp / f"{family}-full", resume_from_checkpoint=str(ckpt))
        model = type(full.model).from_pretrained(ckpt)
        fixed, _ = run(tmp / f"{family}-full", model=model, resume_from_checkpoint=str(ckpt))
        rows.append((f"resume at step 2 of {full.state.global_step}, {family}",
                     f"transformers' defect: resumed through the Trainer off by {_diff(plain.model, full.model):.1e}; "
                     f"through `from_pretrained` {_diff(fixed.model, full.model):.1e}; balance_trainer warns: "
                     f"{'yes' if warned else 'no'}"))
    return rows


def main():
    transformers.logging.set_verbosity_error()
    logging.disable(logging.WARNING)
    rows = []
    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        tmp = pathlib.Path(tmp)
        for part in (grpo_rows, vision_rows, iterable_row, resume_rows):
            rows += part(tmp)
    print("| path | result |\n|---|---|")
    for path, result in rows:
        print(f"| {path} | {result} |")


if __name__ == "__main__":
    main()
