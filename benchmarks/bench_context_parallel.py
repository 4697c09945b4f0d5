"""Benchmark: DP×CP steps, packlib's planner against Megatron-LM's own schedulers.

    git -C <Megatron-LM clone> archive dev megatron | tar -x -C /tmp/megatron-dev
    python benchmarks/bench_context_parallel.py --megatron-src /tmp/megatron-dev             # the table
    python benchmarks/bench_context_parallel.py --megatron-src /tmp/megatron-dev --simulate  # G = 256..1,024
    python benchmarks/bench_context_parallel.py --fewest       # packlib, and packlib held to the fewest micro-batches
    python benchmarks/bench_context_parallel.py --quick                                      # packlib only, tiny
    python benchmarks/bench_context_parallel.py --megatron-src /tmp/megatron-dev --configs 3x2 6x2 3x8 12x4 \
        --exchange 0.25           # G = 6, 12, 24, 48 (not powers of two), under a 5x larger exchange term

Schedulers, each run from its own code as it is:

- ``packlib``: :class:`packlib.formats.megatron_cp.DynamicCPScheduler` (``plan_cp_step``);
- ``megatron dynamic CP``: ``DefaultDynamicCPScheduler`` and ``dp_balanced`` (``DpBalancedScheduler``,
  static CP) from Megatron-LM's dev-branch source, ``megatron/core/datasets/data_schedule.py``
  and ``data_schedule_utils.py`` loaded from ``--megatron-src`` (they import a few names
  that are not in the installed megatron-core 0.16.1 wheel and play no part in scheduling:
  those are set to ``None`` on the wheel's modules first);
- ``megatron hybrid CP``: ``BalancedCPScheduler`` of the installed megatron-core wheel.

Steps: seeded long-tail and SFT-mix steps of ``tests/naive_cp.py`` (documents 1k..128k,
capped at ``G · cap``, about ``4 · G · cap`` tokens a step), at dp × cp = 8×2, 16×4 and 8×8
and caps of 8k and 16k tokens per GPU. Every layout is read back by
``tests/naive_cp.evaluate`` (a sample's CP size is the number of GPUs listing it; GPUs
sharing a sample start its micro-batch together). Figures, means over steps (min):

- ``balance n²/cp``: ``Σ l² / G`` over the critical path under Megatron's own cost, ``l²/c`` per GPU;
- ``path / bound``: the tight lower bound over the critical path under ``(a·l + b·l²)/c + e·l·(c − 1)/c``,
  ``(a, b, e) = (1, 1/(12·4096), 0.05)`` (``transformer_cost(4096)`` and ring exchange);
- ``memory``: most tokens on a GPU in a micro-batch over the cap (1.00 or less: respected);
- ``misaligned``: samples not on an aligned block of a size Megatron builds groups for
  (``tests/naive_cp.megatron_group_sizes``, its rule replayed: at ``G = 12``, 1, 2, 4 and 12);
- ``micro-batches`` (and the most allowed, ``⌈Σ l / (G · cap)⌉ + 1``), ``plan``: planning time.

With ``--exchange e`` the figures are under ``(a, b, e)`` instead (a held-out cost: packlib
plans with its default unless told), and packlib runs twice: with its default cost, and
with that cost passed in (``cost=``).

The machine is shared and loaded: times are indicative.
"""
from __future__ import annotations

import argparse
import importlib.util
import math
import pathlib
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from packlib.context_parallel import allowed_sizes, lower_bounds, plan_cp_step  # noqa: E402
from packlib.formats.megatron_cp import DynamicCPScheduler  # noqa: E402
from tests import naive_cp  # noqa: E402

COST = (1.0, 1.0 / (12 * 4096), 0.05)
#: The cost the figures are computed under (``--exchange`` changes its exchange term).
EVAL_COST = COST
CONFIGS = [(8, 2), (16, 4), (8, 8)]
CAPS = [8192, 16384]
WORKLOADS = {"long-tail": naive_cp.long_tail_step, "SFT mix": naive_cp.sft_mix_step}


def load_megatron(src):
    """Megatron's schedulers: ``{name: factory(cap, cp, dp) -> callable(pairs) -> sample_id_groups}``."""
    out = {}
    try:
        import megatron.core.pipeline_parallel.hybrid_cp_schedule as hybrid
    except ImportError:
        return out

    class _Group:  # BalancedCPScheduler only asks its group for the size
        def __init__(self, n):
            self.n = n

        def size(self):
            return self.n

    def hybrid_factory(cap, cp, dp):
        sched = hybrid.BalancedCPScheduler(cap, _Group(cp * dp))
        return lambda pairs: sched.get_groups_and_subsamples(pairs, None)[1]

    out["megatron hybrid CP (0.16 wheel)"] = hybrid_factory
    if src is None:
        return out
    import megatron.core.extensions.transformer_engine as te
    import megatron.core.packed_seq_params as psp

    for mod, names in ((te, ["get_thd_partitioned_indices"]),
                       (psp, ["extend_thd_padding_before_cp_slice", "get_thd_padding_kwargs", "pad_sequence_for_thd",
                              "resolve_thd_tail_padding_policy"])):
        for name in names:
            if not hasattr(mod, name):
                setattr(mod, name, None)
    base = pathlib.Path(src) / "megatron" / "core" / "datasets"
    _load("megatron.core.datasets.data_schedule_utils", base / "data_schedule_utils.py")
    dev = _load("megatron_dev_data_schedule", base / "data_schedule.py")
    out["megatron dynamic CP (dev)"] = lambda cap, cp, dp: dev.DefaultDynamicCPScheduler(
        cap, cp, dp, None, min_cp_size=1).get_groups_and_subsamples
    out["megatron static CP (dp_balanced, dev)"] = lambda cap, cp, dp: dev.DpBalancedScheduler(
        cap, cp, dp, None).get_groups_and_subsamples
    return out


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def packlib_factory(cap, cp, dp, cost=COST):
    return DynamicCPScheduler(cap, cp, dp, None, cost=cost).get_groups_and_subsamples


def packlib_fewest_factory(cap, cp, dp):
    """packlib held to ``⌈Σ l / (G · cap)⌉`` micro-batches (``plan_cp_step(micro_batches=...)``)."""
    def plan(pairs):
        lengths = np.array([n for _, n in pairs])
        fewest = math.ceil(int(lengths.sum()) / (cp * dp * cap))
        return plan_cp_step(lengths, cap, world_size=cp * dp, cost=COST, micro_batches=fewest).sample_id_groups()
    return plan


def measure(factory, lengths, cap, cp, dp):
    """One scheduler on one step: its figures (see the module docstring), under :data:`EVAL_COST`."""
    G = cp * dp
    pairs = list(enumerate(lengths.tolist()))
    t0 = time.perf_counter()
    groups = factory(cap, cp, dp)(pairs)
    seconds = time.perf_counter() - t0
    sizes = set(naive_cp.megatron_group_sizes(G))
    ev = naive_cp.evaluate(groups, lengths, cap, EVAL_COST, sizes)
    quad = naive_cp.evaluate(groups, lengths, cap, (0.0, 1.0, 0.0))["path"]
    _, bound = lower_bounds(lengths, cap, allowed_sizes(G, 1), EVAL_COST)
    assert sorted(set(ev["ids"])) == list(range(lengths.size)), "a scheduler lost or invented a sample"
    return {"balance": float((lengths.astype(float) ** 2).sum()) / G / quad, "efficiency": bound / ev["path"],
            "memory": ev["memory"], "misaligned": ev["misaligned"], "micro_batches": ev["micro_batches"],
            "allowed": math.ceil(int(lengths.sum()) / (G * cap)) + 1, "seconds": seconds,
            "repeats": len(ev["ids"]) - len(set(ev["ids"]))}


def table(schedulers, steps, configs, caps):
    print("| dp×cp | cap | workload | scheduler | balance n²/cp | bound / path | memory | misaligned "
          "| micro-batches (allowed) | plan |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for dp, cp in configs:
        for cap in caps:
            for wname, wl in WORKLOADS.items():
                for sname, factory in schedulers.items():
                    try:
                        rows = [measure(factory, wl(dp * cp, cap, seed), cap, cp, dp) for seed in range(steps)]
                    except Exception as exc:  # a scheduler that cannot lay out the step: say so, go on
                        first = (str(exc).strip().splitlines() or [""])[0][:80]
                        print(f"| {dp}×{cp} | {cap // 1024}k | {wname} | {sname} | fails: {type(exc).__name__} "
                              f"{first} | | | | | |", flush=True)
                        continue
                    print(_row(f"{dp}×{cp}", cap, wname, sname, rows), flush=True)


def _row(config, cap, wname, sname, rows):
    def mean_min(key):
        v = np.array([r[key] for r in rows])
        return f"{v.mean():.3f} ({v.min():.3f})"

    mem = max(r["memory"] for r in rows)
    mis = sum(r["misaligned"] for r in rows)
    mbs = np.mean([r["micro_batches"] for r in rows])
    allowed = np.mean([r["allowed"] for r in rows])
    secs = np.mean([r["seconds"] for r in rows])
    return (f"| {config} | {cap // 1024}k | {wname} | {sname} | {mean_min('balance')} | {mean_min('efficiency')} "
            f"| {mem:.2f} | {mis} | {mbs:.1f} ({allowed:.1f}) | {secs * 1e3:.0f} ms |")


def simulate(schedulers, steps, sizes, cap):
    print("\nSimulation at scale (cp = 8, long-tail and SFT-mix steps, cap", cap, ")\n")
    print("| GPUs | workload | scheduler | balance n²/cp | bound / path | memory | micro-batches (allowed) | plan |")
    print("|---|---|---|---|---|---|---|---|")
    for G in sizes:
        for wname, wl in WORKLOADS.items():
            for sname, factory in schedulers.items():
                rows = [measure(factory, wl(G, cap, seed), cap, 8, G // 8) for seed in range(steps)]
                line = _row(f"{G}", cap, wname, sname, rows).split(" | ")
                print(" | ".join([line[0]] + line[2:7] + line[8:]), flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--megatron-src", help="a Megatron-LM dev-branch tree (git archive dev megatron)")
    p.add_argument("--steps", type=int, default=8, help="seeded steps per configuration (default 8)")
    p.add_argument("--simulate", action="store_true", help="also G = 256, 512, 1,024 (packlib; Megatron's "
                   "dynamic scheduler at 256 only: it takes seconds to minutes a step beyond)")
    p.add_argument("--quick", action="store_true", help="packlib only, 2 steps at dp×cp = 4×2 (a smoke test)")
    p.add_argument("--configs", nargs="*", metavar="DPxCP", help="dp×cp sizes, e.g. 3x2 6x2 (default 8x2 16x4 8x8)")
    p.add_argument("--exchange", type=float, help="evaluate under (1, 1/(12·4096), e) instead; packlib also "
                   "runs with that cost passed in")
    p.add_argument("--fewest", action="store_true", help="packlib only: its default beside it held to the fewest "
                   "micro-batches, ⌈Σ l / (G · cap)⌉")
    args = p.parse_args(argv)
    global EVAL_COST
    configs = CONFIGS if not args.configs else [tuple(int(v) for v in c.lower().split("x")) for c in args.configs]
    ours = {"packlib (DynamicCPScheduler)": packlib_factory}
    if args.exchange is not None:
        EVAL_COST = (COST[0], COST[1], args.exchange)
        ours = {"packlib, default cost": packlib_factory,
                "packlib, cost passed in": lambda cap, cp, dp: packlib_factory(cap, cp, dp, EVAL_COST)}
    if args.quick:
        table(ours, 2, [(4, 2)], [8192])
        return
    if args.fewest:
        table({**ours, "packlib, fewest micro-batches": packlib_fewest_factory}, args.steps, configs[:2], CAPS)
        return
    schedulers = {**ours, **load_megatron(args.megatron_src)}
    table(schedulers, args.steps, configs, CAPS)
    if args.simulate:
        simulate(ours, max(2, args.steps // 4), [256, 512, 1024], 16384)
        dyn = {k: v for k, v in schedulers.items() if "dynamic" in k}
        if dyn:
            simulate(dyn, 2, [256], 16384)


if __name__ == "__main__":
    main()
