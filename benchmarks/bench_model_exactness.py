"""Which models pack exactly: each architecture's packed row against its sequences alone, and
what packlib's check says of it.

    python benchmarks/bench_model_exactness.py            # the table of docs/training.md
    python benchmarks/bench_model_exactness.py --padding  # and what unpacked rows cost
    python benchmarks/bench_model_exactness.py --padding-only  # that alone

Tiny random models built from configs (tests/_check_models.py: 2 layers, hidden 32, float32,
CPU), three sequences of 11, 7 and 13 random tokens. Columns:

- ``packed vs alone``: the largest |difference| of a trained token's log-probability between
  ``PackedCollator()``'s row and each sequence run alone (``refused`` where the model's own
  forward raises on the packed row);
- ``check_packing``: ``exact`` when :func:`packlib.torch.check_packing` accepts the model,
  else ``refused``; a small difference is still refused when it is large against the
  log-probabilities' spread (a freshly initialised model's leak is small);
- ``unpacked``: the same difference with ``PaddedCollator()`` (one right-padded row per
  sequence), the path for the models refused;
- ``check``: the check's wall time, and the time of one training step of the same model on
  a micro-batch of 4 × 128 tokens (forward, backward, SGD), for scale.

``--padding``: the tokens balanced micro-batches of unpacked rows compute (sequences ×
longest) per token they hold, on lognormal lengths (packed rows: 1.00), and the ranks' busy
fraction on that padded work (their padded tokens over ``world_size ×`` the slowest rank's,
summed over steps) and the largest micro-batch's padded tokens over ``max_sequence_length`` (its
memory), for the micro-batches packlib plans for packing (with and without a depth
limit) and for unpacked rows (``padded=True``, with the default window of 16 steps and with 64),
on 1 rank × 1 micro-batch, 8 ranks × 1 and 8 ranks × 2 (cost: tokens, the planner's default); the
planning time and peak memory (tracemalloc) against the plan for packing, in the same process.
"""
from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numpy as np
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from packlib.torch import PackedCollator, PaddedCollator, check_packing  # noqa: E402
from packlib.torch.collate import model_inputs  # noqa: E402
from tests import _check_models as models  # noqa: E402

ROWS = list(models.CONFIGS) + ["running mean"]


def difference(model, examples, collator) -> str:
    """The largest |Δ log-probability| of a trained token, ``collator``'s batch vs alone."""
    batch = collator(examples)
    try:
        with torch.no_grad():
            logits = model(**model_inputs(batch)).logits.float()
    except Exception as e:  # noqa: BLE001  (the model's own refusal, shown in the table)
        return f"refused ({type(e).__name__})"
    flat = torch.log_softmax(logits.reshape(-1, logits.shape[-1]), -1)
    ids, labels = batch["input_ids"].reshape(-1), batch["labels"].reshape(-1)
    width = batch["input_ids"].shape[-1]
    worst = 0.0
    rows = [e["input_ids"] for e in examples]
    starts = np.cumsum([0] + [len(r) for r in rows])
    for k, seq in enumerate(rows):
        with torch.no_grad():
            own = torch.log_softmax(model(input_ids=torch.tensor([seq]), use_cache=False).logits[0].float(), -1)
        base = k * width if isinstance(collator, PaddedCollator) else int(starts[k])
        for j in range(1, len(seq)):
            if int(labels[base + j]) != -100:
                worst = max(worst, abs(float(flat[base + j - 1, ids[base + j]] - own[j - 1, seq[j]])))
    return f"{worst:.2g}"


def step_time(model) -> float:
    """One SGD step on a micro-batch of 4 sequences of 128 tokens (unpacked rows: every model
    takes them)."""
    rng = np.random.default_rng(1)
    batch = PaddedCollator()([{"input_ids": rng.integers(1, models.VOCAB, n).tolist()} for n in [128] * 4])
    copy = type(model)(model.config).train()
    opt = torch.optim.SGD(copy.parameters(), lr=1e-3)
    t = time.perf_counter()
    copy(**batch).loss.backward()
    opt.step()
    return time.perf_counter() - t


def table() -> None:
    examples = models.examples()
    print(f"{'model':30s} {'class':30s} {'packed vs alone':>18s} {'check_packing':>14s} {'unpacked':>9s} "
          f"{'check':>8s} {'one step':>9s}")
    for name in ROWS:
        model = models.build(name)
        if model is None:
            print(f"{name:30s} (not in this transformers)")
            continue
        model.eval()
        packed = difference(model, examples, PackedCollator())
        unpacked = difference(model, examples, PaddedCollator())
        t = time.perf_counter()
        try:
            check_packing(model, examples)
            verdict = "exact"
        except ValueError:
            verdict = "refused"
        checked = time.perf_counter() - t
        label = "Llama + a running mean layer" if name == "running mean" else name
        print(f"{label:30s} {type(model).__name__:30s} {packed:>18s} {verdict:>14s} {unpacked:>9s} "
              f"{checked * 1e3:6.0f}ms {step_time(model) * 1e3:7.0f}ms")


def padded_figures(schedule, lengths) -> tuple[float, float, float]:
    """``(tokens computed / tokens trained, busy fraction, largest micro-batch)`` of ``schedule``'s
    micro-batches laid out as unpacked rows (``sequences x longest`` tokens each, the cost the
    ranks then run): the busy fraction is the ranks' padded tokens over ``world_size x`` the
    slowest rank's, summed over steps; the largest micro-batch's tokens are in units of
    ``max_sequence_length`` (its memory)."""
    o, ix = schedule.packs.offsets, schedule.packs.indices
    sizes = np.diff(o)
    full = sizes > 0
    per_pack = np.zeros(sizes.size)
    per_pack[full] = sizes[full] * np.maximum.reduceat(lengths[ix], o[:-1][full])
    per_rank = per_pack.reshape(schedule.num_steps, schedule.world_size, -1).sum(axis=2)
    busy = per_rank.sum() / (schedule.world_size * per_rank.max(axis=1).sum())
    return per_pack.sum() / lengths[ix].sum(), busy, per_pack.max() / schedule.max_sequence_length


def padding() -> None:
    import tracemalloc

    import packlib

    lengths = np.minimum(np.random.default_rng(0).lognormal(5.5, 0.9, 20_000).astype(np.int64) + 2, 2048)
    plans = [("planned for packing", None, False, 16), ("planned for packing, depth 4", 4, False, 16),
             ("padded=True", None, True, 16), ("padded=True, window=64", None, True, 64)]
    for _, depth, padded, window in plans:  # compiled before anything is timed
        packlib.balance(lengths[:2000], 2048, depth, world_size=2, window=window, padded=padded)
    print(f"\n{len(lengths):,} lognormal lengths (median {int(np.median(lengths))}, mean {lengths.mean():.0f}, "
          f"longest {lengths.max():,}); PaddedCollator rows; planning time and peak memory against the packing plan")
    print(f"{'L':>6s} {'ranks x mb':>10s} {'plan':>29s} {'micro-batches':>14s} {'computed / trained':>19s} "
          f"{'busy fraction':>14s} {'largest / L':>12s} {'plan time':>10s} {'peak memory':>12s}")
    for L in (2048, 4096, 8192):
        for W, M in ((1, 1), (8, 1), (8, 2)):
            base = None
            for label, depth, padded, window in plans:
                tracemalloc.start()
                t = time.perf_counter()
                s = packlib.balance(lengths, L, depth, world_size=W, micro_batches=M, window=window, padded=padded)
                t = time.perf_counter() - t
                peak = tracemalloc.get_traced_memory()[1]
                tracemalloc.stop()
                base = base or (t, peak)
                ratio, busy, largest = padded_figures(s, lengths)
                print(f"{L:>6,d} {f'{W} x {M}':>10s} {label:>29s} {s.packs.num_packs:>14,d} {ratio:>19.3f} "
                      f"{busy:>14.4f} {largest:>12.2f} {t / base[0]:>9.2f}x {peak / base[1]:>11.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--padding", action="store_true", help="also the cost of unpacked rows")
    parser.add_argument("--padding-only", action="store_true", help="only the cost of unpacked rows")
    args = parser.parse_args()
    torch.manual_seed(0)
    if not args.padding_only:
        print(f"transformers {__import__('transformers').__version__}, torch {torch.__version__}, float32, CPU")
        table()
    if args.padding or args.padding_only:
        padding()


if __name__ == "__main__":
    main()
