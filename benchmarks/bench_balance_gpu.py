"""Benchmark: compute balance in measured time, on a Llama-shaped decoder, packlib against the peers.

    python benchmarks/bench_balance_gpu.py                  # on a CUDA GPU: the issue's setting
    python benchmarks/bench_balance_gpu.py --toy            # a toy size (the default without CUDA)
    python benchmarks/bench_balance_gpu.py --hidden 1024 --layers 4 --max-sequence-length 8192

Every plan's rows are run through one model, one row at a time, and each row's forward and
backward is timed (CUDA events on a GPU; ``perf_counter`` on the CPU), ``--repeats`` times
(the best counts, and the first alone is reported too); a rank's step time is the sum of its
``--micro-batches`` rows' times, a step's time its slowest rank's. On one device the ranks
run one after another: what a rank would wait is computed from the times, not measured.

- the model: a Llama-shaped decoder written here in plain torch (token embedding, ``--layers``
  blocks of RMSNorm, attention with rotary positions that restart at every sequence,
  RMSNorm, SwiGLU MLP; a final RMSNorm and an untied output layer; the token-weighted
  next-token loss of the row's sequences). Attention keeps every sequence to itself: on CUDA
  with PyTorch's ``torch.nn.attention.varlen.varlen_attn`` (flash-attention varlen, causal,
  per-sequence ``cu_seqlens``), else flash-attn's ``flash_attn_varlen_func``, else
  ``scaled_dot_product_attention`` over each sequence's slice (also the CPU path);
- the workload: a long-document epoch (85 % of the documents lognormal around ``L / 13``
  tokens, 15 % uniform in ``L / 4 .. 1.8 L``, cut to ``L``: tests/balance_workloads.py's
  long documents scaled to ``L``);
- the plans: ``packlib.balance`` with ``transformer_cost(hidden)``, with the cost
  ``packlib.torch.calibrate_cost`` measures on this model, and with the token cost
  ``(1, 0)``; TRL's ``pack_dataset(strategy="bfd")`` with its rows shuffled and dealt
  round-robin (``DistributedSampler``); axolotl's multipack (``pack_parallel`` on each rank's
  shard), each peer when installed (``benchmarks/bench_balance.py`` runs the peers' code);
- the figures: balance (ranks meet once a step: DDP with accumulation) and per micro-batch
  (ranks meet at every micro-batch: FSDP / ZeRO-3), from the first timing and from the best
  of ``--repeats``; the mean step time and the tokens per second at that step time; peak
  device memory (CUDA) or the process's peak resident memory (CPU); the calibrated
  coefficients and how well they, and the FLOP cost (scaled to the times), predict every
  timed row.

``--steps`` steps of each plan, spread evenly over its epoch, are timed. On a CPU the figures
are a toy model's on a CPU, not GPU figures: they show the benchmark runs end to end.
"""
from __future__ import annotations

import argparse
import pathlib
import resource
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from tests import balance_workloads  # noqa: E402

GPU = dict(hidden=2048, layers=8, heads=16, ffn=5632, vocab=32000, max_sequence_length=16384, documents=8000,
           ranks=8, micro_batches=2, steps=10, repeats=2)
TOY = dict(hidden=64, layers=2, heads=4, ffn=172, vocab=512, max_sequence_length=512, documents=200,
           ranks=4, micro_batches=2, steps=2, repeats=2)


# ------------------------------------------------------------------------------ the model


def _attention_kernel(device):
    """``(name, attend(q, k, v, cu, max_len, starts, lengths))`` for ``q, k, v`` of shape
    ``(tokens, heads, head_dim)``: causal attention within each sequence only."""
    import torch
    import torch.nn.functional as F

    if device.type == "cuda":
        try:
            import inspect

            from torch.nn.attention.varlen import varlen_attn

            causal = ({"is_causal": True} if "is_causal" in inspect.signature(varlen_attn).parameters
                      else {"window_size": (-1, 0)})  # the argument's name changed between releases
            return "torch varlen_attn", lambda q, k, v, cu, n, starts, lens: varlen_attn(
                q, k, v.contiguous(), cu, cu, n, n, **causal)
        except ImportError:
            pass
        try:
            from flash_attn import flash_attn_varlen_func

            return "flash_attn varlen", lambda q, k, v, cu, n, starts, lens: flash_attn_varlen_func(
                q, k, v, cu, cu, n, n, causal=True)
        except ImportError:
            pass

    def per_sequence(q, k, v, cu, n, starts, lens):
        """sdpa over each sequence's slice, one call per distinct length (sequences of one
        length in one batch)."""
        out = torch.zeros_like(q)
        starts, lens = np.asarray(starts), np.asarray(lens)
        for m in np.unique(lens):
            at = (starts[lens == m][:, None] + np.arange(m)[None]).ravel()
            idx = torch.as_tensor(at, device=q.device)
            qs, ks, vs = (x.index_select(0, idx).view(-1, int(m), *x.shape[1:]).transpose(1, 2) for x in (q, k, v))
            o = F.scaled_dot_product_attention(qs, ks, vs, is_causal=True).transpose(1, 2).reshape(-1, *q.shape[1:])
            out = out.index_copy(0, idx, o)
        return out

    return "sdpa per sequence", per_sequence


def build_model(vocab, hidden, layers, heads, ffn, device, dtype):
    import torch
    from torch import nn
    import torch.nn.functional as F

    head_dim = hidden // heads
    name, attend = _attention_kernel(device)

    def rotate(x, cos, sin):  # rotary embedding, the halves convention
        x1, x2 = x[..., : head_dim // 2], x[..., head_dim // 2:]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1, self.norm2 = nn.RMSNorm(hidden), nn.RMSNorm(hidden)
            self.qkv = nn.Linear(hidden, 3 * hidden, bias=False)
            self.out = nn.Linear(hidden, hidden, bias=False)
            self.gate_up = nn.Linear(hidden, 2 * ffn, bias=False)
            self.down = nn.Linear(ffn, hidden, bias=False)

        def forward(self, x, cos, sin, row):
            q, k, v = self.qkv(self.norm1(x)).view(x.shape[0], 3, heads, head_dim).unbind(1)
            a = attend(rotate(q, cos, sin), rotate(k, cos, sin), v, *row)
            x = x + self.out(a.reshape(x.shape[0], hidden))
            g, u = self.gate_up(self.norm2(x)).chunk(2, dim=-1)
            return x + self.down(F.silu(g) * u)

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(vocab, hidden)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.norm = nn.RMSNorm(hidden)
            self.head = nn.Linear(hidden, vocab, bias=False)
            inv = 1.0 / 10000 ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
            self.register_buffer("inv_freq", inv, persistent=False)

        def forward(self, ids, positions, targets, row):
            angles = positions[:, None].float() * self.inv_freq[None]
            cos, sin = angles.cos().to(dtype)[:, None], angles.sin().to(dtype)[:, None]
            x = self.embed(ids)
            for block in self.blocks:
                x = block(x, cos, sin, row)
            logits = self.head(self.norm(x)).float()
            return F.cross_entropy(logits, targets, ignore_index=-100, reduction="sum") / (targets >= 0).sum()

    torch.manual_seed(0)
    model = Decoder().to(device=device, dtype=dtype)
    return name, model


class Runner:
    """Builds a packed row of given sequence lengths on the device and runs the model's
    forward and backward on it."""

    def __init__(self, model, vocab, device):
        self.model, self.vocab, self.device = model, vocab, device
        self.rng = np.random.default_rng(0)

    def row(self, lengths):
        import torch

        lens = np.asarray(lengths, dtype=np.int64)
        total = int(lens.sum())
        starts = np.concatenate(([0], np.cumsum(lens)[:-1]))
        ids = self.rng.integers(1, self.vocab, total)
        positions = np.arange(total) - np.repeat(starts, lens)
        targets = np.append(ids[1:], -100)
        targets[starts[1:] - 1] = -100  # a sequence's last token predicts nothing
        dev = self.device
        cu = torch.tensor(np.append(starts, total), dtype=torch.int32, device=dev)
        return (torch.tensor(ids, device=dev), torch.tensor(positions, device=dev), torch.tensor(targets, device=dev),
                (cu, int(lens.max()), starts.tolist(), lens.tolist()))

    def step(self, lengths, inputs=None):
        ids, positions, targets, row = inputs if inputs is not None else self.row(lengths)
        self.model(ids, positions, targets, row).backward()
        self.model.zero_grad(set_to_none=True)

    def time_rows(self, rows, repeats):
        """``(repeats, len(rows))`` seconds of each row's forward and backward."""
        import torch

        cuda = self.device.type == "cuda"
        out = np.zeros((repeats, len(rows)))
        for r in range(repeats):
            for i, lengths in enumerate(rows):
                if len(lengths) == 0:  # an empty micro-batch (a last step's): nothing runs
                    continue
                inputs = self.row(lengths)
                if cuda:
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    torch.cuda.synchronize()
                    start.record()
                    self.step(lengths, inputs)
                    end.record()
                    torch.cuda.synchronize()
                    out[r, i] = start.elapsed_time(end) / 1e3
                else:
                    t0 = time.perf_counter()
                    self.step(lengths, inputs)
                    out[r, i] = time.perf_counter() - t0
        return out


# ------------------------------------------------------------------------------ plans


def documents(n, L, seed=2027):
    """The long-document epoch of tests/balance_workloads.py (L = 32k), scaled to ``L``."""
    return balance_workloads.long_documents_at(n, L, seed)


def packlib_plan(lengths, L, W, M, cost):
    import packlib

    s = packlib.balance(lengths, L, world_size=W, micro_batches=M, cost=cost)
    o, ix = s.packs.offsets, s.packs.indices
    return [[[ix[o[k]:o[k + 1]] for k in range((st * W + r) * M, (st * W + r + 1) * M)] for r in range(W)]
            for st in range(s.num_steps)]


def peer_plan(name, lengths, L, W, M, saved=None):
    """A peer's plan through benchmarks/bench_balance.py's runners, or the reason it is missing;
    from ``saved`` (``--peer-plans``) when it holds one for this workload."""
    import bench_balance

    if saved is not None:
        return saved.get(name, f"not in the saved plans ({', '.join(saved) or 'none'})")
    try:
        if name == "trl":
            from trl.data_utils import pack_dataset  # noqa: F401 - the runner packs with it
            import datasets  # noqa: F401
            return bench_balance.run_trl(lengths, L, W, M)[1]
        bench_balance._axolotl_module()
        return bench_balance.run_axolotl(lengths, L, W, M)[1]
    except ImportError as exc:
        return f"not installed here ({type(exc).__name__}: {exc})"


def _workload_key(lengths, L, W, M):
    return {"lengths": np.asarray(lengths, np.int64), "L": L, "W": W, "M": M}


def save_peer_plans(path, lengths, L, W, M):
    """Plan the workload with each peer installed here and pickle the plans with the workload."""
    import pickle

    plans = {name: peer_plan(name, lengths, L, W, M) for name in ("trl", "axolotl")}
    with open(path, "wb") as f:
        pickle.dump({"workload": _workload_key(lengths, L, W, M), "plans": plans}, f)
    for name, plan in plans.items():
        print(f"{name}: {plan if isinstance(plan, str) else f'{len(plan)} steps'}")
    print(f"saved to {path}")


def load_peer_plans(path, lengths, L, W, M):
    """The plans :func:`save_peer_plans` saved, refused unless made for this very workload."""
    import pickle

    with open(path, "rb") as f:
        saved = pickle.load(f)
    want, got = _workload_key(lengths, L, W, M), saved["workload"]
    if any(not np.array_equal(want[k], got[k]) for k in want):
        raise SystemExit(f"{path} holds plans for another workload (L {got['L']}, {got['W']} ranks x {got['M']} "
                         f"micro-batches, {got['lengths'].size} documents): save them again with the same sizes")
    return saved["plans"]


def spread_steps(plan, steps):
    """``steps`` steps of ``plan`` spread evenly over its epoch (all of them if fewer)."""
    take = np.unique(np.linspace(0, len(plan) - 1, min(steps, len(plan))).round().astype(int))
    return [plan[i] for i in take]


def figures(plan, lengths, seconds):
    """Balance per step and per micro-batch, the mean step time and the tokens per second,
    from ``seconds``: one time per row, in the plan's order (step, rank, micro-batch)."""
    S, W, M = len(plan), len(plan[0]), len(plan[0][0])
    t = np.asarray(seconds).reshape(S, W, M)
    tokens = sum(int(lengths[ids].sum()) for ranks in plan for rows in ranks for ids in rows)
    step = t.sum(axis=2).max(axis=1)
    return {"balance": t.sum() / (W * step.sum()), "micro_batch_balance": t.sum() / (W * t.max(axis=1).sum()),
            "step": step.mean(), "tokens_per_s": tokens / step.sum()}


def prediction_errors(seconds, predict):
    """Mean and largest relative error of ``predict(rows)`` against ``seconds``."""
    err = np.abs(predict / seconds - 1)
    return err.mean(), err.max()


def features(rows):
    return np.array([[float(np.sum(r)), float(np.sum(np.square(np.asarray(r, np.float64)))), 1.0] for r in rows])


# ------------------------------------------------------------------------------ main


def peak_memory(device):
    import torch

    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20, "device peak"
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "process peak RSS"


def main(argv=None):
    import torch

    import packlib
    from packlib.torch import calibrate_cost

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--toy", action="store_true", help="the toy size (the default without CUDA)")
    for key, value in GPU.items():
        ap.add_argument("--" + key.replace("_", "-"), type=int, help=f"default {value} (toy: {TOY[key]})")
    ap.add_argument("--planners", default="packlib,trl,axolotl", help="a comma-separated subset of packlib,trl,axolotl")
    ap.add_argument("--save-peer-plans", metavar="FILE", help="plan with the peers installed here, save their plans "
                    "to FILE and stop (for a GPU machine without them: then --peer-plans FILE there)")
    ap.add_argument("--peer-plans", metavar="FILE", help="the peers' plans saved by --save-peer-plans (same sizes)")
    ap.add_argument("--calibration-repeats", type=int, default=3, help="best of this many timings per calibration row")
    args = ap.parse_args(argv)
    cuda = torch.cuda.is_available()
    if not cuda:
        torch.set_num_threads(1)  # a toy's tiny kernels only wait for one another across threads
    size = TOY if args.toy or not (cuda or args.save_peer_plans) else GPU
    cfg = {k: getattr(args, k) if getattr(args, k) is not None else v for k, v in size.items()}
    L, W, M = cfg["max_sequence_length"], cfg["ranks"], cfg["micro_batches"]
    if args.save_peer_plans:
        return save_peer_plans(args.save_peer_plans, documents(cfg["documents"], L), L, W, M)
    device = torch.device("cuda" if cuda else "cpu")
    dtype = torch.bfloat16 if cuda else torch.float32
    kernel, model = build_model(cfg["vocab"], cfg["hidden"], cfg["layers"], cfg["heads"], cfg["ffn"], device, dtype)
    params = sum(p.numel() for p in model.parameters())
    where = torch.cuda.get_device_name(device) if cuda else "CPU: these figures are a toy model's on a CPU, not GPU figures"
    print(f"{where}\nmodel: {params / 1e6:.1f} M parameters, hidden {cfg['hidden']}, {cfg['layers']} layers, "
          f"{cfg['heads']} heads, SwiGLU {cfg['ffn']}, vocabulary {cfg['vocab']}, {dtype}, attention: {kernel}")
    lengths = documents(cfg["documents"], L)
    print(f"workload: {lengths.size} long documents (mean {lengths.mean():.0f}, max {lengths.max()} tokens), "
          f"L = {L}, {W} ranks x {M} micro-batches; {cfg['steps']} steps of each plan, best of {cfg['repeats']}")
    saved = load_peer_plans(args.peer_plans, lengths, L, W, M) if args.peer_plans else None
    runner = Runner(model, cfg["vocab"], device)
    flop = packlib.transformer_cost(cfg["hidden"])

    t0 = time.perf_counter()
    fit = calibrate_cost(runner.step, L, repeats=args.calibration_repeats)
    ratio = fit.b / fit.a if fit.a > 0 else float("inf")
    print(f"calibrated on {len(fit.rows)} rows in {time.perf_counter() - t0:.1f} s: a = {fit.a:.4g} s/token, "
          f"b = {fit.b:.4g} s/token², c = {fit.c:.4g} s/row; b/a = {ratio:.3g} "
          f"(FLOP model {flop[1]:.3g}: {ratio / flop[1]:.2f}x); calibration rows' error "
          f"{100 * fit.mean_error:.1f} % mean, {100 * fit.max_error:.1f} % largest")

    wanted = args.planners.split(",")
    plans = {}
    if "packlib" in wanted:
        plans["packlib.balance, transformer_cost"] = packlib_plan(lengths, L, W, M, flop)
        plans["packlib.balance, calibrated cost"] = packlib_plan(lengths, L, W, M, fit)
        plans["packlib.balance, token cost (1, 0)"] = packlib_plan(lengths, L, W, M, (1.0, 0.0))
    if "trl" in wanted:
        plans["TRL pack_dataset bfd, dealt"] = peer_plan("trl", lengths, L, W, M, saved)
    if "axolotl" in wanted:
        plans["axolotl multipack"] = peer_plan("axolotl", lengths, L, W, M, saved)

    warm = [[L], [max(1, L // 64)] * 64]
    runner.time_rows(warm, 1)
    print(f"\n{'plan':<38} {'balance one / best':>19} {'per-mb one / best':>18} {'step (best)':>12} "
          f"{'tokens/s':>10} {'memory':>10}")
    all_rows, all_seconds = [], []
    for name, plan in plans.items():
        if isinstance(plan, str):
            print(f"{name:<38} {plan}")
            continue
        plan = spread_steps(plan, cfg["steps"])
        rows = [ids for ranks in plan for rs in ranks for ids in rs]
        if cuda:
            torch.cuda.reset_peak_memory_stats(device)
        times = runner.time_rows([lengths[ids] for ids in rows], cfg["repeats"])
        mem, mem_kind = peak_memory(device)
        one, best = figures(plan, lengths, times[0]), figures(plan, lengths, times.min(axis=0))
        print(f"{name:<38} {one['balance']:>9.3f} / {best['balance']:.3f} {one['micro_batch_balance']:>8.3f} / "
              f"{best['micro_batch_balance']:.3f} {best['step']:>11.4f}s {best['tokens_per_s']:>10,.0f} "
              f"{mem:>6.0f} MiB")
        all_rows += [lengths[ids] for ids in rows if ids.size]
        all_seconds += [s for ids, s in zip(rows, times.min(axis=0)) if ids.size]
    print(f"(memory: {mem_kind})")

    secs = np.asarray(all_seconds)
    X = features(all_rows)
    flop_x = X[:, 0] * flop[0] + X[:, 1] * flop[1]
    scale = float(flop_x @ secs / (flop_x @ flop_x))  # the FLOP cost scaled to the times by least squares
    short = X[:, 0] < L / 2
    print(f"\nprediction of the {secs.size} timed rows' times (relative error, mean / largest; "
          f"{int(short.sum())} rows under L/2 apart):")
    two = packlib.fit_cost(fit.rows, fit.seconds)  # the same timings, fitted without a per-row constant
    for label, pred in (("calibrated a, b, c", X @ np.array([fit.a, fit.b, fit.c])),
                        ("calibrated a, b (constant=False)", X[:, :2] @ np.array(two)),
                        ("FLOP cost x least-squares scale", scale * flop_x)):
        m, x = prediction_errors(secs, pred)
        ms = prediction_errors(secs[short], pred[short]) if short.any() else (float("nan"),) * 2
        print(f"  {label:<34} {100 * m:5.1f} % / {100 * x:5.1f} %   rows under L/2: {100 * ms[0]:5.1f} % / "
              f"{100 * ms[1]:5.1f} %")
    if not cuda:
        print("\nCPU: a toy model on a CPU; these figures are not GPU figures.")


if __name__ == "__main__":
    main()
