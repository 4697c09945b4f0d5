"""GPU mode of bench_preference.py: the timed batches of the three layouts saved where TRL is
installed (``--save-batches``), then timed on a GPU where it is not (``--load-batches``).

Nothing on the load path imports trl: the padded baseline is the tensors TRL's own collator
built at save time. On the device, the padded batch runs through sdpa with its
``attention_mask`` (what TRL does without flash-attn); the packed rows through
``attn_implementation="flex_attention"`` with a document-causal ``BlockMask``, the
prompt-once rows with ``packlib.torch.shared_prompt_block_mask``; block masks are built
inside the timed loop, as a training step pays for them.
"""
import os
import statistics
import sys
import time

KINDS = ("padded", "packed", "shared")  # the order of bench_preference.layouts
GPU_MODEL = {"hidden": 1024, "layers": 8, "heads": 16, "kv_heads": 8, "intermediate": 2816, "vocab": 32000,
             "dtype": "bfloat16"}
CPU_MODEL = {"hidden": 64, "layers": 2, "heads": 4, "kv_heads": 2, "intermediate": None, "vocab": 1000,
             "dtype": "float32"}
FLASH_KEYS = ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k")  # read by flash-attention only


def main(args, bench):
    if args.save_batches:
        return save(args.save_batches, args, bench)
    return run(args.load_batches, args, bench)


# ---- save (where trl is installed) -------------------------------------------------------

def _smallest(t):
    """``t`` in the smallest integer dtype that holds its values (floats and empties as they are)."""
    import torch

    if t.is_floating_point() or t.numel() == 0:
        return t
    lo, hi = int(t.min()), int(t.max())
    for dt in (torch.int8, torch.int16, torch.int32):
        if torch.iinfo(dt).min <= lo and hi <= torch.iinfo(dt).max:
            return t.to(dt)
    return t


def compact(batch, memo):
    """``{"data", "dtypes"}``: the batch's tensors made small (one copy of a tensor two keys
    share), the 4-D tree mask left out (rebuilt on load where a layout needs it), and each
    tensor's dtype to restore."""
    data, dtypes = {}, {}
    for k, v in batch.items():
        if not hasattr(v, "dtype"):
            data[k] = v
        elif v.dim() != 4:
            memo.setdefault(id(v), _smallest(v))
            data[k], dtypes[k] = memo[id(v)], str(v.dtype).removeprefix("torch.")
    return {"data": data, "dtypes": dtypes}


def save(path, args, bench):
    import torch

    timed = {"pair": 256 if args.timed_pairs is None else args.timed_pairs,
             "group": 32 if args.timed_groups is None else args.timed_groups}
    per_row = {"pair": args.pairs_per_row, "group": args.groups_per_row}
    data = {"pair": bench.pairs(args.pairs, args.scale, sigma=args.sigma) if args.pairs else [],
            "group": bench.groups(args.groups, 8, args.scale) if args.groups else []}
    out = {"sizes": {"pairs": args.pairs, "groups": args.groups, "scale": args.scale, "sigma": args.sigma,
                     "timed_pairs": timed["pair"], "timed_groups": timed["group"], **{
                         f"{u}s_per_row": n for u, n in per_row.items()}}}
    for unit, items in data.items():
        if not items:
            continue
        chunks = [items[:timed[unit]][i:i + per_row[unit]] for i in range(0, min(timed[unit], len(items)),
                                                                           per_row[unit])]
        memo = {}
        out[unit] = {"title": bench.TITLES[unit], "tokens": bench.token_counts(items, unit, per_row[unit]),
                     "counted": len(items), "timed": sum(map(len, chunks)), "per_row": per_row[unit],
                     "layouts": [(label, [compact(b, memo) for b in batches])
                                 for label, batches, _ in bench.layouts(unit, chunks)]}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    torch.save(out, path)
    print(f"saved {path}: {os.path.getsize(path) / 2**20:.1f} MiB; sizes {out['sizes']}")


# ---- load and time (on the device; no trl) -----------------------------------------------

def restore(saved):
    import torch

    return {k: v.to(getattr(torch, saved["dtypes"][k])) if k in saved["dtypes"] else v
            for k, v in saved["data"].items()}


def pad_row(batch, multiple):
    """The packed row grown by ``-T % multiple`` padding tokens, flash-attention's keys dropped.
    The padding is a group of its own (a group id past the row's last, sequence id -1): no
    real token sees it; its ``completion_mask`` 0 and ``prev_index`` -1 keep it out of the
    loss and out of ``sequence_logps`` (whose sequence count, the largest sequence id + 1,
    is unchanged)."""
    import torch

    out = {k: v for k, v in batch.items() if k not in FLASH_KEYS}
    n = -out["input_ids"].shape[1] % multiple
    if n == 0:
        return out
    fill = {"input_ids": torch.zeros(n), "position_ids": torch.arange(n), "completion_mask": torch.zeros(n),
            "sequence_ids": torch.full((n,), -1), "group_ids": torch.full((n,), int(out["group_ids"].max()) + 1),
            "prev_index": torch.full((n,), -1)}
    for k, tail in fill.items():
        out[k] = torch.cat([out[k], tail.to(out[k].dtype)[None]], 1)
    if "pair_ids" in out:
        out["pair_ids"] = out["group_ids"]
    return out


def document_block_mask(batch, device, block_size=128):
    """flex_attention's document-causal ``BlockMask`` of a packed row: each token sees the
    earlier tokens of its own sequence (and the padding only itself)."""
    from torch.nn.attention.flex_attention import create_block_mask

    s = batch["sequence_ids"].reshape(1, -1).to(device)
    g = batch["group_ids"].reshape(1, -1).to(device)
    T = s.shape[1]

    def mask_mod(b, h, q, k):
        return (k <= q) & (s[b, q] == s[b, k]) & (g[b, q] == g[b, k])

    return create_block_mask(mask_mod, None, None, T, T, device=device, BLOCK_SIZE=block_size)


def model_config(args, device):
    """The model's settings: the options given, else the device's defaults."""
    base = dict(GPU_MODEL if device.type == "cuda" else CPU_MODEL)
    for k in base:
        if getattr(args, k) is not None:
            base[k] = getattr(args, k)
    base["intermediate"] = base["intermediate"] or 2 * base["hidden"]
    return base


def build_models(cfg, device, attention):
    """The sdpa model and the same weights under ``attention`` (the packed layouts' model)."""
    import torch
    import transformers

    def model(attn):  # a config of its own: from_config records attn_implementation in the config it is given
        conf = transformers.LlamaConfig(vocab_size=cfg["vocab"], hidden_size=cfg["hidden"],
                                        intermediate_size=cfg["intermediate"], num_hidden_layers=cfg["layers"],
                                        num_attention_heads=cfg["heads"], num_key_value_heads=cfg["kv_heads"],
                                        max_position_embeddings=8192)
        with torch.device(device):
            return transformers.AutoModelForCausalLM.from_config(conf, attn_implementation=attn)

    torch.manual_seed(0)
    sdpa = model("sdpa").to(getattr(torch, cfg["dtype"])).train()
    if attention == "sdpa":
        return sdpa, sdpa
    flex = model("flex_attention").to(sdpa.dtype).train()
    flex.load_state_dict(sdpa.state_dict())
    assert (sdpa.config._attn_implementation, flex.config._attn_implementation) == ("sdpa", "flex_attention")
    return sdpa, flex


def logps_fns(bench, sdpa, model, attention, device):
    """Per layout (and a broken mask, for scale): a batch on the device -> its per-sequence
    completion log-probs, differentiable; each builds its mask as a training step does."""
    import torch

    from packlib.torch import model_inputs, sequence_logps, shared_prompt_block_mask, shared_prompt_mask

    def packed(net, mask):
        def fn(b):
            inputs = model_inputs(b)
            if mask is not None:
                inputs["attention_mask"] = mask(b)
            return sequence_logps(net(**inputs).logits, b)
        return fn

    def broken(b):  # one causal sequence across the whole row: the sequences see each other
        pos = torch.arange(b["input_ids"].shape[1], device=device)[None]
        return sequence_logps(sdpa(input_ids=b["input_ids"], position_ids=pos, use_cache=False).logits, b)

    if attention == "flex":
        masks = (lambda b: document_block_mask(b, device), lambda b: shared_prompt_block_mask(b, device=device))
    else:  # sdpa: the packed row isolated by its position_ids, the tree by its 4-D mask
        masks = (None, lambda b: shared_prompt_mask(b, dtype=model.dtype))
    return {"padded": lambda b: bench.padded_logps(sdpa, b), "packed": packed(model, masks[0]),
            "shared": packed(model, masks[1]), "broken": broken}


def _to(batch, device):
    return {k: v.to(device) if hasattr(v, "to") else v for k, v in batch.items()}


def _sync(device):
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(fn, model, batches, device, repeat, warmup):
    """Warm-up seconds (an untimed pass over the first ``warmup`` batches, in which
    flex_attention compiles: for the first shape, then once more with the length dynamic),
    the median seconds of ``repeat`` timed passes of forward + backward over all batches,
    and the peak device memory of the timed passes (cuda; else None)."""
    import torch

    def one_pass(rows):
        t0 = time.perf_counter()
        for b in rows:
            model.zero_grad(set_to_none=True)
            fn(_to(b, device)).sum().backward()
        _sync(device)
        return time.perf_counter() - t0

    warm = one_pass(batches[:warmup])
    model.zero_grad(set_to_none=True)
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    seconds = statistics.median(one_pass(batches) for _ in range(repeat))
    return warm, seconds, torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None


def check(fns, batches, device):
    """The first batch's max |difference| of per-sequence log-probs, each packed layout (and
    a broken mask, for scale) against the padded sdpa reference; and the reference's largest.
    With grad on a GPU (flex_attention compiles what training then reuses); without on a CPU
    (where flex_attention has no backward)."""
    import torch

    with torch.set_grad_enabled(device.type != "cpu"):
        return _check(fns, batches, device)


def _check(fns, batches, device):
    ref = fns["padded"](_to(batches["padded"], device)).detach()
    diff = {k: float((fns[k](_to(batches[k if k != "broken" else "packed"], device)).detach() - ref).abs().max())
            for k in ("packed", "shared", "broken")}
    return diff, float(ref.abs().max())


def prepared(entry, multiple):
    """The saved layouts' batches, restored; the packed ones padded to ``multiple``."""
    out = {}
    for kind, (label, batches) in zip(KINDS, entry["layouts"]):
        rows = [restore(b) for b in batches]
        out[kind] = (label, rows if kind == "padded" else [pad_row(b, multiple) for b in rows])
    return out


def table(entry, fns, models, device, args, attention):
    unit, layouts = entry["unit"], prepared(entry, args.pad_multiple)
    diff, largest = check(fns, {k: v[1][0] for k, v in layouts.items()}, device)
    timed, nb = entry["timed"], len(layouts["padded"][1])
    if device.type == "cpu" and attention["packed"].startswith("flex"):
        print(f"\n{entry['title']}: flex_attention has no backward on a CPU, so no timing here (time the CPU with "
              "--gpu-attention sdpa)")
        return _correct(diff, largest)
    print(f"\n{entry['title']}, {entry['per_row']} a batch: tokens over {entry['counted']:,} {unit}s; forward + "
          f"backward over the first {timed} ({nb} batches), median of {args.repeat}\n")
    print(f"| layout | attention | tokens per {unit} | fewer tokens than padded | fwd+bwd per {unit} | faster than "
          "padded | faster than packed | peak memory | warm-up (compile) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    secs = {}
    for kind, count in zip(KINDS, entry["tokens"]):
        label, batches = layouts[kind]
        warm, secs[kind], peak = measure(fns[kind], models[kind], batches, device, args.repeat, args.warmup)
        vs_packed = f"{secs['packed'] / secs[kind]:.2f}x" if kind == "shared" else "—"
        mem = "—" if peak is None else f"{peak / 2**30:.2f} GiB"
        print(f"| {label} | {attention[kind]} | {count / entry['counted']:,.0f} | {entry['tokens'][0] / count:.2f}x "
              f"| {secs[kind] / timed * 1e3:.2f} ms | {secs['padded'] / secs[kind]:.2f}x | {vs_packed} | {mem} "
              f"| {warm:.1f} s |")
    _correct(diff, largest)


def _correct(diff, largest):
    print(f"\ncorrectness, first batch: max |per-sequence log-prob difference| against the padded sdpa reference "
          f"(sums up to {largest:,.0f}): packed {diff['packed']:.3g}, prompt once {diff['shared']:.3g}; for "
          f"scale, a broken mask (causal across the packed row): {diff['broken']:.3g}")


def _dynamo_settings():
    """Room for flex_attention's recompiles (a new shape, mask function or grad mode): past
    the limit torch would fall back to running flex_attention uncompiled, and time that."""
    import torch._dynamo

    name = "recompile_limit" if hasattr(torch._dynamo.config, "recompile_limit") else "cache_size_limit"
    setattr(torch._dynamo.config, name, 64)
    return (f"torch._dynamo.config.{name} = 64; automatic dynamic shapes (torch's default: a mask function "
            "compiles for its first row length, then once more with the length dynamic)")


def run(path, args, bench):
    import torch
    import transformers

    sys.stdout.reconfigure(line_buffering=True)  # each table out as it is done, even if the run is cut short
    device = torch.device(args.device)
    saved = torch.load(path, weights_only=True)
    cfg = model_config(args, device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"# bench_preference, saved batches on {name}: torch {torch.__version__}, transformers "
          f"{transformers.__version__}\n\nmodel: random Llama {cfg}; saved with {saved['sizes']}")
    packed = "flex_attention" if args.gpu_attention == "flex" else "sdpa"
    attention = {"padded": "sdpa, attention_mask",
                 "packed": f"{packed}, " + ("document-causal BlockMask" if packed != "sdpa" else "position_ids"),
                 "shared": f"{packed}, " + ("shared_prompt_block_mask" if packed != "sdpa" else "shared_prompt_mask")}
    print(f"packed rows padded to a multiple of {args.pad_multiple} tokens (a group of their own: never seen, "
          f"trained or counted); masks built inside the timed loop; warm-up: an untimed pass over the first "
          f"{args.warmup} batches of each layout")
    if args.gpu_attention == "flex":
        print(f"flex_attention: {_dynamo_settings()}")
    sdpa, model = build_models(cfg, device, args.gpu_attention)
    fns = logps_fns(bench, sdpa, model, args.gpu_attention, device)
    models = {"padded": sdpa, "packed": model, "shared": model}
    for unit in ("pair", "group"):
        if unit in saved:
            table({**saved[unit], "unit": unit}, fns, models, device, args, attention)
