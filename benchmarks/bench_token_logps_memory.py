"""Peak memory of ``packlib.torch.token_logps`` against the naive full softmax.

The naive form is what a user writes from the batch's ``prev_index``: ``log_softmax`` of the
whole row's logits in float32, then each completion token's entry. Each measurement runs in a
fresh process and reports the rise of its peak resident memory (Linux's ``VmHWM``, reset
through ``/proc/self/clear_refs`` just before the call) over its resident memory then, with
the logits already allocated (both forms need the logits; the figure is what each adds to
them). CPU, float32 logits, groups of 8 completions of
512 tokens under a 64-token prompt, packed, as many groups as fill the row.

The forward at 32k tokens × 128k vocabulary runs for ``token_logps`` on a stride-0 view of one
row of logits (``expand``: the shape and the reads of a (32k, 128k) tensor without its 16 GiB);
the naive forms, and the backward (whose logits' gradient is a dense (T, vocab) tensor for both
forms), run at smaller T, and their figures at 32k follow from them (every term grows with T
times the vocabulary).

    PYTHONPATH=$PWD python3 benchmarks/bench_token_logps_memory.py
    PYTHONPATH=$PWD python3 benchmarks/bench_token_logps_memory.py --tokens 2048 4096 --vocab 32768
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys

MIB = 2**20


def _status(field: str) -> int:
    """``VmRSS`` (resident now) or ``VmHWM`` (its peak since the last reset), in bytes."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field + ":"))


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:  # Linux: "5" resets VmHWM to the resident size
        f.write("5")


def _batch(tokens: int):
    from packlib.torch import PackedCollator

    groups, total = [], 0
    while total + 8 * (64 + 512) <= tokens:
        groups.append({"prompt_ids": [1] * 64, "completion_ids": [[2] * 512] * 8})
        total += 8 * (64 + 512)
    if tokens - total >= 8 * 65:  # the rest of the row: one group of 8 shorter completions
        n = (tokens - total) // 8 - 64
        groups.append({"prompt_ids": [1] * 64, "completion_ids": [[2] * n] * 8})
    return PackedCollator()(groups)  # each sequence whole (a shared prompt's batch would carry a T² mask)


def measure(form: str, tokens: int, vocab: int, backward: bool, expand: bool) -> dict:
    """One measurement in this process: the peak rise in bytes."""
    import torch

    from packlib.torch import token_logps

    torch.manual_seed(0)
    batch = _batch(tokens)
    T = batch["input_ids"].shape[1]
    logits = torch.randn(1, 1, vocab).expand(1, T, vocab) if expand else torch.randn(1, T, vocab)
    logits.requires_grad_(backward)
    _reset_peak()
    before = _status("VmRSS")
    with torch.set_grad_enabled(backward):
        if form == "token_logps":
            logps, mask = token_logps(logits, batch)
        else:
            prev, ids = batch["prev_index"][0], batch["input_ids"][0]
            sel = batch["completion_mask"][0] == 1
            logps = torch.log_softmax(logits[0].float(), -1)[prev[sel], ids[sel]]
        if backward:
            logps.sum().backward()
    peak = _status("VmHWM")
    return {"form": form, "tokens": T, "vocab": vocab, "backward": backward, "rise": peak - before,
            "logits": T * vocab * 4}


def _run(form, tokens, vocab, backward, expand):
    cmd = [sys.executable, __file__, "--one", json.dumps([form, tokens, vocab, backward, expand])]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, nargs="+", default=[1024, 2048], help="rows measured in full")
    ap.add_argument("--vocab", type=int, default=131072)
    ap.add_argument("--long", type=int, default=32768, help="the row whose forward runs on a stride-0 view")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(measure(*json.loads(args.one))))
        return
    rows = [_run("token_logps", args.long, args.vocab, False, True)]
    for T in args.tokens:
        for backward in (False, True):
            for form in ("naive", "token_logps"):
                rows.append(_run(form, T, args.vocab, backward, False))
    print(f"vocabulary {args.vocab:,}; the peak rise of resident memory over the logits already held (MiB)\n")
    print("| form | tokens | pass | logits (float32) | peak rise | rise / logits |")
    print("|---|---:|---|---:|---:|---:|")
    for r in rows:
        print(f"| {r['form']} | {r['tokens']:,} | {'forward + backward' if r['backward'] else 'forward'} | "
              f"{r['logits'] / MIB:,.0f} | {r['rise'] / MIB:,.0f} | {r['rise'] / r['logits']:.3f} |")


if __name__ == "__main__":
    main()
