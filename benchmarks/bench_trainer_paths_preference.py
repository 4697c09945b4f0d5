"""TRL's DPOTrainer, RewardTrainer and KTOTrainer with packlib, every path a user would try
first, one line each: exact (the largest parameter difference against the reference, after
three SGD steps at a learning rate of 0.5) or refused before training (the message).

    PYTHONPATH=$PWD python benchmarks/bench_trainer_paths_preference.py [--kinds dpo,reward,kto]

References, computed without packlib: TRL's own padded run with the same settings (the packed
trainers without balance_trainer); SGD on TRL's own loss over each planned step's padded
micro-batches, each weighted by its pairs (examples) over the step's (with balance_trainer).
Tiny random Llama models on the CPU (tests/_preference_trainers.py).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import logging
import pathlib
import sys
import tempfile
import time
import warnings

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

NAMES = {"dpo": "DPOTrainer", "reward": "RewardTrainer", "kto": "KTOTrainer"}
STEPS = dict(per_device_train_batch_size=4, max_steps=3)


@contextlib.contextmanager
def quiet():
    """TRL's progress bars and transformers' warnings off."""
    import datasets
    import transformers

    datasets.disable_progress_bars()
    transformers.logging.set_verbosity_error()
    logging.disable(logging.WARNING)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


def refused(fn) -> str:
    try:
        fn()
    except ValueError as e:
        text = str(e)
        return f"refused: `ValueError: {text[:150]}{'…' if len(text) > 150 else ''}`"
    return "**accepted**"


def rows(kind, out):
    from packlib.torch import PackedCollator, balance_trainer
    from packlib.torch.trainers import _trl_preference
    from tests import _preference_trainers as P

    name = NAMES[kind]
    packed_cls = _trl_preference.trainer_class("Packed" + name)
    balanced = dict(gradient_accumulation_steps=2, max_steps=3, **P.settings_of(kind))

    def stock_balanced():
        t = P.trainer(kind, output_dir=out, gradient_accumulation_steps=2, **P.settings_of(kind))
        balance_trainer(t, P.sampler(kind, t))

    def stock_packed():
        P.trainer(kind, output_dir=out, data_collator=PackedCollator(), **STEPS).train()

    yield f"`balance_trainer({name}(...))`, TRL's own collator", refused(stock_balanced)
    yield f"`{name}(data_collator=PackedCollator())`", refused(stock_packed)
    reference = P.trainer(kind, output_dir=out, **STEPS)
    reference.train()
    for share in (False, True):
        layout = "prompt once" if share else "packed"
        collator = PackedCollator(share_prompt=True) if share else None  # None: the trainer's default
        kw = {"data_collator": collator} if collator is not None else {}
        t = P.trainer(kind, packed_cls, output_dir=out, **STEPS, **kw)
        t.train()
        yield (f"`Packed{name}`, {layout}",
               f"exact: {P.max_difference(t.model, reference.model):.1e} against {name}'s own padded run")
    for share in (False, True):
        layout = "prompt once" if share else "packed"
        kw = {"data_collator": PackedCollator(share_prompt=True)} if share else {}
        t = P.trainer(kind, packed_cls, output_dir=out, **balanced, **kw)
        sampler = P.sampler(kind, t)
        balance_trainer(t, sampler)
        t.train()
        steps = P.planned_steps(sampler, 3)
        sizes = sorted({len(mb) for step in steps for mb in step})
        ref = P.reference_run(P.trainer(kind, output_dir=out, **P.settings_of(kind)), steps)
        unit = "examples" if kind == "kto" else "pairs"
        yield (f"`balance_trainer(Packed{name}(...))`, {layout}",
               f"exact: {P.max_difference(t.model, ref):.1e} against the per-{unit[:-1]} step mean of {name}'s "
               f"loss (micro-batches of {sizes[0]}–{sizes[-1]} {unit})")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kinds", default="dpo,reward,kto")
    opts = parser.parse_args(argv)
    import trl

    print(f"TRL {trl.__version__}; three SGD steps, learning rate 0.5, tiny random Llama models, CPU\n")
    print("| path | result | seconds |\n|---|---|---:|")
    with tempfile.TemporaryDirectory() as out:
        for kind in opts.kinds.split(","):
            with quiet():
                it = rows(kind, out)
                while True:
                    start = time.perf_counter()
                    try:
                        path, result = next(it)
                    except StopIteration:
                        break
                    sys.__stdout__.write(f"| {path} | {result} | {time.perf_counter() - start:.1f} |\n")
                    sys.__stdout__.flush()


if __name__ == "__main__":
    main()
