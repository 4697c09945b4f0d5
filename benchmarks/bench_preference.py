"""Preference pairs and groups of completions: padded (TRL) vs packed vs prompt shared.

Two workloads of synthetic token ids with long-tailed (lognormal) lengths:

- pairs, UltraFeedback-like: prompt ~150 tokens, chosen and rejected ~300 each, ``--pairs-per-row``
  pairs a batch. Baseline: TRL's own ``DataCollatorForPreference`` (the B ``prompt + chosen``,
  then the B ``prompt + rejected``, right-padded to the batch's longest);
- groups, long prompts: prompt ~600 tokens, 8 completions ~400 each, ``--groups-per-row`` groups a
  batch. Baseline: GRPOTrainer's layout (prompts left-padded to the longest prompt,
  completions right-padded to the longest completion, the prompt repeated for each of its
  completions), built with TRL's own ``pad``.

For each layout: tokens laid out per pair / group, and the forward + backward time per pair /
group of a tiny random transformers Llama on this machine's CPU (sdpa, float32; the loss is
the sum of the per-sequence completion log-probs, ``packlib.torch.sequence_logps`` for the
packed rows and TRL's masked ``log_softmax`` sum for the padded batch), with the peak resident
memory above the start. GPU rows are measured only where a GPU is at hand (``--device cuda``).

    PYTHONPATH=$PWD python3 benchmarks/bench_preference.py
    PYTHONPATH=$PWD python3 benchmarks/bench_preference.py --pairs 8 --groups 2 --scale 0.1 --repeat 1   # smoke

GPU mode (``benchmarks/_preference_gpu.py``), for a GPU machine without trl: save the timed
batches of the three layouts here (TRL's own collator builds the baseline; the file, about
11 MiB, also holds the token counts over all counted pairs / groups), then time them there on
a random Llama (hidden 1024, 8 layers, 16 heads, 8 kv heads, intermediate 2816, vocab 32000,
bf16): the padded batch through sdpa with its attention_mask, the packed rows through
flex_attention with a document-causal block mask, the prompt-once rows with
``shared_prompt_block_mask``. ``--gpu-attention sdpa --device cpu`` is a CPU smoke run.

    PYTHONPATH=$PWD python3 benchmarks/bench_preference.py --save-batches gpu/pref.pt   # here, with trl
    PYTHONPATH=$PWD python3 benchmarks/bench_preference.py --load-batches gpu/pref.pt --device cuda

On a CPU, sdpa has no variable-length kernel: a packed row's attention, masked, is dense in
the row's length (``T²`` scores), while the padded batch's is ``rows x longest²``; so the CPU
time favours short rows, and the tokens are the figure that carries to a GPU's varlen or
flex_attention kernels, whose cost follows the sequences.
"""
import argparse
import sys
import time

import numpy as np

from _common import PeakRss

VOCAB = 1000


def _lognormal(rng, mean, n, lo, hi, sigma=0.7):
    mu = np.log(mean) - sigma ** 2 / 2  # the distribution's mean is `mean`
    return np.clip(np.rint(rng.lognormal(mu, sigma, n)), lo, hi).astype(int)


def pairs(n, scale=1.0, seed=0, sigma=0.7):
    """``n`` UltraFeedback-like pairs of random token ids (lengths lognormal of shape ``sigma``)."""
    rng = np.random.default_rng(seed)
    p = _lognormal(rng, 150 * scale, n, 2, max(2, int(1024 * scale)), sigma)
    c, r = (_lognormal(rng, 300 * scale, n, 1, max(1, int(2048 * scale)), sigma) for _ in range(2))
    ids = lambda k: rng.integers(1, VOCAB, k).tolist()  # noqa: E731
    return [{"prompt_ids": ids(a), "chosen_ids": ids(b), "rejected_ids": ids(d)} for a, b, d in zip(p, c, r)]


def groups(n, k=8, scale=1.0, seed=1):
    """``n`` groups of a long prompt and ``k`` completions."""
    rng = np.random.default_rng(seed)
    p = _lognormal(rng, 600 * scale, n, 2, max(2, int(2048 * scale)))
    ids = lambda m: rng.integers(1, VOCAB, m).tolist()  # noqa: E731
    return [{"prompt_ids": ids(a), "completion_ids": [ids(m) for m in _lognormal(rng, 400 * scale, k, 1,
                                                                                  max(1, int(2048 * scale)))]}
            for a in p]


def trl_pairs_batch(batch):
    from trl.trainer.dpo_trainer import DataCollatorForPreference

    return DataCollatorForPreference(pad_token_id=0)(batch)


def trl_groups_batch(batch):
    """GRPOTrainer's layout: prompts left-padded, completions right-padded, one row per completion."""
    import torch
    from trl.trainer.utils import pad

    prompts = [torch.tensor(g["prompt_ids"]) for g in batch for _ in g["completion_ids"]]
    comps = [torch.tensor(c) for g in batch for c in g["completion_ids"]]
    p = pad(prompts, padding_value=0, padding_side="left")
    pm = pad([torch.ones_like(x) for x in prompts], padding_value=0, padding_side="left")
    c = pad(comps, padding_value=0, padding_side="right")
    cm = pad([torch.ones_like(x) for x in comps], padding_value=0, padding_side="right")
    return {"input_ids": torch.cat([p, c], 1), "attention_mask": torch.cat([pm, cm], 1),
            "completion_mask": torch.cat([torch.zeros_like(pm), cm], 1)}


def padded_logps(model, batch):
    """Each padded row's summed completion log-probs (TRL's masked ``log_softmax`` sum)."""
    import torch

    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False)
    logp = torch.log_softmax(out.logits[:, :-1].float(), -1).gather(2, batch["input_ids"][:, 1:, None]).squeeze(2)
    return (logp * batch["completion_mask"][:, 1:]).sum(1)


def _padded_loss(model, batch):
    return padded_logps(model, batch).sum()


def _packed_loss(model, batch):
    from packlib.torch import model_inputs, sequence_logps

    return sequence_logps(model(**model_inputs(batch)).logits, batch).sum()


def _to(batch, device):
    return {k: v.to(device) if hasattr(v, "to") else v for k, v in batch.items()}


def _trim():
    """Hand freed heap memory back to the system (glibc), so that each layout's peak RSS is
    measured from a low start and not hidden by memory an earlier layout left mapped."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: peaks read low after a larger layout
        pass


def measure(model, batches, loss, device, repeat):
    """Tokens of the batches, and the median over ``repeat`` epochs of forward + backward of
    all batches; peak RSS above the start."""
    import torch

    tokens = sum(int(b["input_ids"].numel()) for b in batches)
    _trim()
    loss(model, _to(batches[0], device)).backward()  # warm-up, untimed
    model.zero_grad(set_to_none=True)
    _trim()
    times = []
    with PeakRss() as mem:
        for _ in range(repeat):
            t0 = time.perf_counter()
            for b in batches:
                model.zero_grad(set_to_none=True)
                loss(model, _to(b, device)).backward()
            if device != "cpu":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
    return tokens, float(np.median(times)), mem.peak


def model_for(device, hidden, attn="sdpa"):
    import torch
    import transformers

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=hidden, intermediate_size=2 * hidden,
                                   num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                   max_position_embeddings=8192)
    return transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=attn).to(device).train()


def token_counts(data, unit, per_row):
    """Tokens each layout lays out for ``data``, ``per_row`` pairs / groups a batch (no model)."""
    from packlib.torch import PackedCollator

    chunks = [data[i:i + per_row] for i in range(0, len(data), per_row)]
    baseline = trl_pairs_batch if unit == "pair" else trl_groups_batch
    return [sum(int(baseline(c)["input_ids"].numel()) for c in chunks),
            sum(int(PackedCollator()(c)["input_ids"].numel()) for c in chunks),
            sum(int(PackedCollator(share_prompt=True)(c)["input_ids"].numel()) for c in chunks)]


def layouts(unit, chunks):
    """``(label, batches, loss)`` of the three layouts of ``chunks`` (lists of pairs / groups)."""
    from packlib.torch import PackedCollator

    baseline = trl_pairs_batch if unit == "pair" else trl_groups_batch
    return [(f"TRL, padded ({'DataCollatorForPreference' if unit == 'pair' else 'GRPOTrainer layout'})",
             [baseline(c) for c in chunks], _padded_loss),
            ("packed, one row per batch", [PackedCollator()(c) for c in chunks], _packed_loss),
            ("packed, prompt laid out once", [PackedCollator(share_prompt=True)(c) for c in chunks], _packed_loss)]


def table(name, unit, counted, timed, per_row, model, device, repeat):
    """Tokens per pair / group over ``counted``; forward + backward time over ``timed``."""
    tokens = token_counts(counted, unit, per_row)
    chunks = [timed[i:i + per_row] for i in range(0, len(timed), per_row)]
    print(f"\n{name}, {per_row} a batch: tokens over {len(counted):,} {unit}s; forward + backward over the first "
          f"{len(timed)} ({len(chunks)} batches), tiny Llama (sdpa, float32) on {device}\n")
    print(f"| layout | tokens per {unit} | fewer tokens than padded | fwd+bwd per {unit} | faster than padded "
          "| peak RSS |")
    print("|---|---:|---:|---:|---:|---:|")
    base = None
    for (label, batches, loss), count in zip(layouts(unit, chunks), tokens):
        _, seconds, peak = measure(model, batches, loss, device, repeat)
        base = base or (count, seconds)
        print(f"| {label} | {count / len(counted):,.0f} | {base[0] / count:.2f}x | {seconds / len(timed) * 1e3:.1f} ms "
              f"| {base[1] / seconds:.2f}x | {peak / 2**20:,.0f} MiB |")


def exactness(n, max_answer, hidden, per_row=8, flex=False):
    """The issue's first table: ``n`` random pairs (prompts 2-100 tokens, answers 1-``max_answer``),
    ``per_row`` pairs a batch; per-sequence completion log-probs of each layout against TRL's
    padded batch of the same pairs."""
    import torch

    from packlib.torch import PackedCollator, model_inputs, sequence_logps, shared_prompt_block_mask

    rng = np.random.default_rng(7)
    data = [{"prompt_ids": rng.integers(1, VOCAB, rng.integers(2, 101)).tolist(),
             "chosen_ids": rng.integers(1, VOCAB, rng.integers(1, max_answer + 1)).tolist(),
             "rejected_ids": rng.integers(1, VOCAB, rng.integers(1, max_answer + 1)).tolist()} for _ in range(n)]
    chunks = [data[i:i + per_row] for i in range(0, n, per_row)]
    model = model_for("cpu", hidden)
    flex_model = model_for("cpu", hidden, "flex_attention") if flex else None
    tokens = {"padded": 0, False: 0, True: 0}
    worst = {False: 0.0, True: 0.0, "flex": 0.0}
    largest = 0.0
    with torch.no_grad():
        for chunk in chunks:
            padded = trl_pairs_batch(chunk)
            logits = model(input_ids=padded["input_ids"], attention_mask=padded["attention_mask"],
                           use_cache=False).logits
            per_token = torch.log_softmax(logits[:, :-1].float(), -1).gather(2, padded["input_ids"][:, 1:, None])
            ref = (per_token.squeeze(2) * padded["completion_mask"][:, 1:]).sum(1)
            tokens["padded"] += padded["input_ids"].numel()
            largest = max(largest, float(ref.abs().max()))
            for share in (False, True):
                batch = PackedCollator(share_prompt=share)(chunk)
                got = sequence_logps(model(**model_inputs(batch)).logits, batch)
                tokens[share] += batch["input_ids"].numel()
                worst[share] = max(worst[share], float((got - ref).abs().max()))
            if flex:  # the prompt once, through flex_attention's block mask (forward only on a CPU)
                batch["attention_mask"] = shared_prompt_block_mask(batch)
                got = sequence_logps(flex_model(**model_inputs(batch)).logits, batch)
                worst["flex"] = max(worst["flex"], float((got - ref).abs().max()))
    print(f"\n{n} random pairs (prompts 2-100 tokens, answers 1-{max_answer}), {per_row} a batch, tiny Llama, sdpa, "
          "float32: per-sequence summed completion log-probs against TRL's padded batch\n")
    print("| layout | tokens | max abs log-prob difference |\n|---|---:|---:|")
    print(f"| TRL DataCollatorForPreference (padded) | {tokens['padded']:,} | — |")
    for label, share in (("one packed row, position_ids restarting", False),
                         ("one packed row, prompt laid out once (tree mask)", True)):
        print(f"| {label} | {tokens[share]:,} ({tokens[share] / tokens['padded'] - 1:+.0%}) | {worst[share]:.1e} |")
    if flex:
        print(f"| the same, flex_attention with shared_prompt_block_mask | {tokens[True]:,} | {worst['flex']:.1e} |")
    ulp = float(np.spacing(np.float32(largest)))
    print(f"\n(the sums reach {largest:,.0f} in magnitude, where one float32 step is {ulp:.1e})")


def balance_table(n, L=4096, hidden=4096):
    """Balance of a plan on ``n`` UltraFeedback-like pairs: the pairs' sequences planned one by
    one (which may split a pair), pairs whole (2-D lengths), pairs whole with the prompt laid
    out once (``shared_prompt_lengths``)."""
    import packlib

    rng = np.random.default_rng(3)
    p = _lognormal(rng, 150, n, 2, 1024)
    c, r = (_lognormal(rng, 300, n, 1, 2048) for _ in range(2))
    lengths = np.stack([p + c, p + r], 1)
    keep = lengths.sum(axis=1) <= L  # a pair over the row is never split: such pairs are dropped first
    lengths, p = lengths[keep], p[keep]
    cost = packlib.transformer_cost(hidden)
    print(f"\nplans of {keep.sum():,} UltraFeedback-like pairs ({n - keep.sum()} over a row dropped), rows of {L:,} tokens, cost transformer_cost({hidden})\n")
    print("| lengths | world_size x micro_batches | steps | balance | micro-batch balance | efficiency | plan time |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for W, M in ((8, 1), (8, 4), (32, 2)):
        for label, lens, shared in (("sequences, 1-D (a pair may split)", lengths.reshape(-1), None),
                                    ("pairs whole, (n, 2)", lengths, None),
                                    ("pairs whole, prompt once (shared_prompt_lengths)", lengths, p)):
            kw = {} if shared is None else {"shared_prompt_lengths": shared}
            packlib.balance(lens[:64], L, world_size=1, drop_last=False, cost=cost, **{k: v[:64] for k, v in kw.items()})
            t0 = time.perf_counter()
            s = packlib.balance(lens, L, world_size=W, micro_batches=M, cost=cost, **kw)
            seconds = time.perf_counter() - t0
            print(f"| {label} | {W} x {M} | {s.num_steps:,} | {s.balance:.4f} | {s.micro_batch_balance:.4f} | "
                  f"{s.efficiency:.4f} | {seconds * 1e3:.0f} ms |")


TITLES = {"pair": "UltraFeedback-like pairs (prompt ~150, answers ~300)",
          "group": "long-prompt groups (prompt ~600, 8 completions ~400)"}


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=2048, help="pairs whose tokens are counted")
    ap.add_argument("--timed-pairs", type=int, help="of them, pairs timed (default 16, a CPU is slow; "
                    "256 with --save-batches)")
    ap.add_argument("--pairs-per-row", type=int, default=8)
    ap.add_argument("--groups", type=int, default=96, help="groups whose tokens are counted")
    ap.add_argument("--timed-groups", type=int, help="of them, groups timed (default 2; 32 with --save-batches)")
    ap.add_argument("--groups-per-row", type=int, default=1)
    ap.add_argument("--scale", type=float, default=1.0, help="lengths times this (a smoke run: 0.1)")
    ap.add_argument("--sigma", type=float, default=0.7, help="the pairs' lognormal shape (the tail)")
    ap.add_argument("--hidden", type=int, help="the model's hidden size (default 64; 1024 with --load-batches "
                    "on cuda, whose model options below default to a GPU-sized Llama)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--exact-pairs", type=int, default=48, help="pairs of the exactness table (0: none)")
    ap.add_argument("--exact-answer", type=int, default=400, help="longest answer of the exactness table")
    ap.add_argument("--flex", action="store_true", help="the exactness table through flex_attention too "
                    "(compiles for a minute or more on a CPU)")
    ap.add_argument("--balance-pairs", type=int, default=20_000, help="pairs of the balance table (0: none)")
    gpu = ap.add_argument_group("GPU mode (benchmarks/_preference_gpu.py)")
    gpu.add_argument("--save-batches", metavar="FILE", help="save the timed batches of the three layouts (needs "
                     "trl) and the token counts to FILE, and stop")
    gpu.add_argument("--load-batches", metavar="FILE", help="time the batches saved in FILE (no trl needed) on "
                     "--device, and stop")
    gpu.add_argument("--gpu-attention", choices=("flex", "sdpa"), default="flex", help="the packed layouts' "
                     "attention with --load-batches: flex_attention block masks, or sdpa (a CPU smoke run)")
    gpu.add_argument("--pad-multiple", type=int, default=128, help="packed rows padded to a multiple of this "
                     "(flex_attention compiles for fewer shapes; the padding is never seen, trained or counted)")
    gpu.add_argument("--warmup", type=int, default=3, help="batches of each layout run untimed first (flex_attention "
                     "compiles in them)")
    for name, kind in (("layers", int), ("heads", int), ("kv-heads", int), ("intermediate", int), ("vocab", int),
                       ("dtype", str)):
        gpu.add_argument(f"--{name}", type=kind, help="the model's (with --load-batches; defaults per device)")
    return ap.parse_args(argv)


def main(argv=None):
    args = parse(argv)
    if args.save_batches or args.load_batches:
        import _preference_gpu

        return _preference_gpu.main(args, sys.modules[__name__])
    import torch

    args.timed_pairs = 16 if args.timed_pairs is None else args.timed_pairs
    args.timed_groups = 2 if args.timed_groups is None else args.timed_groups
    torch.set_num_threads(max(1, torch.get_num_threads()))
    if args.balance_pairs:
        balance_table(args.balance_pairs)
    if args.exact_pairs:
        exactness(args.exact_pairs, args.exact_answer, args.hidden or 64, flex=args.flex)
    model = model_for(args.device, args.hidden or 64)
    if args.device == "cpu":
        print("CPU only: GPU rows were not measured here (run with --device cuda where a GPU is at hand)")
    if args.pairs:
        data = pairs(args.pairs, args.scale, sigma=args.sigma)
        table(TITLES["pair"], "pair", data, data[:args.timed_pairs], args.pairs_per_row, model, args.device,
              args.repeat)
    if args.groups:
        data = groups(args.groups, 8, args.scale)
        table(TITLES["group"], "group", data, data[:args.timed_groups], args.groups_per_row, model, args.device,
              args.repeat)


if __name__ == "__main__":
    sys.exit(main())
