"""Do a model's packed sequences stay apart, and what does keeping them apart cost?

    python benchmarks/bench_isolation.py            # both tables (flex_attention compiles ~40 s once)
    python benchmarks/bench_isolation.py --no-flex

Table 1: the largest |logit difference| between a packed row and each of its sequences run
alone, in a tiny random LlamaForCausalLM (transformers, training mode, the model's defaults),
per attention and per way of building the batch. ~1e-7 is isolated; ~0.1-1 is contaminated.

Table 2: collating one micro-batch (chat-like lengths filling 8,192 tokens): packlib's
PackedCollator against Hugging Face's own DataCollatorWithFlattening, run in the same process,
and the memory of the batch each way (the 4-D mask is T² floats).
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import torch
import transformers

from packlib.formats.varlen import hf_flattening_batch
from packlib.torch import PackedCollator

VOCAB = 1000


def _model(attn):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048)
    return transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=attn).train()


def _docs_loop_batch(seqs):
    """The batch the training loop of docs/balance.md built before packlib.torch.PackedCollator."""
    b = hf_flattening_batch(np.concatenate(seqs), [len(s) for s in seqs], return_flash_attn_kwargs=True)
    return {k: torch.as_tensor(v) if isinstance(v, np.ndarray) else v for k, v in b.items()}


WAYS = {
    "hf_flattening_batch + flash kwargs, model(**batch) (the old docs loop)": _docs_loop_batch,
    "the same, model(**batch, use_cache=False)": lambda s: dict(_docs_loop_batch(s), use_cache=False),
    "PackedCollator(), model(**batch)": lambda s: PackedCollator()([{"input_ids": x} for x in s]),
    'PackedCollator(attention_mask="4d", use_cache=None)': lambda s: PackedCollator(
        attention_mask="4d", use_cache=None, flash_attn_kwargs=False)([{"input_ids": x} for x in s]),
}


def contamination(attn, seqs):
    model = _model(attn)
    starts = np.cumsum([0] + [len(s) for s in seqs[:-1]])
    row = {}
    with torch.no_grad():
        # a ready 4-D mask is for eager and sdpa: flex_attention reads it out of bounds (a crash)
        packed = {name: model(**build(seqs)).logits[0] for name, build in WAYS.items()
                  if not (attn == "flex_attention" and "4d" in name)}
        alone = [model(input_ids=torch.as_tensor(s)[None]).logits[0] for s in seqs]
    for name, logits in packed.items():
        row[name] = max(float((logits[a:a + len(s)] - al).abs().max()) for s, a, al in zip(seqs, starts, alone))
    return row


def table_contamination(attns, seqs):
    print(f"\nmax |logit difference|, packed row vs each sequence alone ({len(seqs)} sequences, "
          f"{sum(map(len, seqs))} tokens; tiny random Llama, train mode, transformers {transformers.__version__})\n")
    rows = {a: contamination(a, seqs) for a in attns}
    print("| batch | " + " | ".join(attns) + " |")
    print("|---|" + "---|" * len(attns))
    for name in WAYS:
        print(f"| {name} | " + " | ".join(f"{rows[a][name]:.2g}" if name in rows[a] else "n/a" for a in attns) + " |")


def _best(fn, repeat=20):
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def _nbytes(batch):
    return sum(v.element_size() * v.nelement() for v in batch.values() if torch.is_tensor(v))


def table_cost(tokens=8192):
    rng = np.random.default_rng(0)
    lens = np.clip(rng.lognormal(6.0, 0.9, 200).astype(int), 8, 2048)
    lens = lens[np.cumsum(lens) <= tokens]
    examples = [{"input_ids": rng.integers(0, VOCAB, n).tolist()} for n in lens]
    hf = transformers.DataCollatorWithFlattening(return_flash_attn_kwargs=True, return_tensors="pt")
    ways = {"HF DataCollatorWithFlattening (baseline)": hf,
            "packlib PackedCollator()": PackedCollator(),
            'packlib PackedCollator(attention_mask="4d")': PackedCollator(attention_mask="4d")}
    print(f"\ncollating one micro-batch: {len(lens)} sequences, {int(lens.sum())} tokens (best of 20)\n")
    print("| collator | time | vs baseline | batch memory |")
    print("|---|---:|---:|---:|")
    base = None
    for name, collate in ways.items():
        t, batch = _best(lambda c=collate: c(examples))
        base = base or t
        print(f"| {name} | {t * 1e3:.2f} ms | {t / base:.2f}× | {_nbytes(batch) / 2**20:.2f} MiB |")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-flex", action="store_true", help="skip flex_attention (it compiles for ~40 s on CPU)")
    args = ap.parse_args(argv)
    seqs = [np.random.default_rng(k).integers(1, VOCAB, n) for k, n in enumerate([37, 5, 120, 64, 1, 90])]
    attns = ["sdpa", "eager"] + ([] if args.no_flex else ["flex_attention"])
    table_contamination(attns, seqs)
    table_cost()
    return 0


if __name__ == "__main__":
    sys.exit(main())
