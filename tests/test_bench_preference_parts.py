"""benchmarks/bench_preference_parts.py: its block-aligned layout gives the prompt-once row's
log-probs exactly (the padding is seen by nothing and counted nowhere), and the benchmark runs
at a toy size on a CPU (its figures are measured on a GPU, never asserted here)."""
import importlib
import os
import pathlib

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the benchmark runs a model: pip install torch==2.13.0")
transformers = pytest.importorskip("transformers", reason="the benchmark builds a transformers model")
pytest.importorskip("torch.nn.attention.flex_attention", reason="the benchmark times flex_attention")

from packlib.torch import PackedCollator, model_inputs, sequence_logps, shared_prompt_mask  # noqa: E402

BENCHMARKS = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def parts(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    return importlib.import_module("bench_preference_parts")


def test_the_block_aligned_row_gives_the_same_log_probs(parts):
    rng = np.random.default_rng(0)
    groups = [{"prompt_ids": rng.integers(1, 97, rng.integers(3, 40)).tolist(),
               "completion_ids": [rng.integers(1, 97, rng.integers(1, 30)).tolist() for _ in range(3)]}
              for _ in range(2)]
    shared = PackedCollator(share_prompt=True)(groups)
    aligned = parts.block_aligned(shared, 16)
    g, s = aligned["group_ids"][0], aligned["sequence_ids"][0]
    starts = torch.nonzero(torch.cat([torch.tensor([True]), (g[1:] != g[:-1]) | (s[1:] != s[:-1])])).reshape(-1)
    real = starts[g[starts] <= int(shared["group_ids"].max())]  # a prompt or a completion (not padding)
    assert real.numel() == 2 * 4 and aligned["input_ids"].shape[1] % 16 == 0 and bool((real % 16 == 0).all())
    assert int(aligned["completion_mask"].sum()) == int(shared["completion_mask"].sum())
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").eval()
    aligned["attention_mask"] = shared_prompt_mask(aligned)
    with torch.no_grad():
        want = sequence_logps(model(**model_inputs(shared)).logits, shared)
        got = sequence_logps(model(**model_inputs(aligned)).logits, aligned)
    assert float((got - want).abs().max()) < 1e-4


def test_the_parts_benchmark_runs_at_a_toy_size_on_a_cpu(parts, capsys):
    parts.main(["--device", "cpu", "--model", "tiny", "--groups", "1", "--scale", "0.05", "--repeat", "1",
                "--block", "16"])
    out = capsys.readouterr().out
    for row in ("| packed |", "| prompt once |", "| prompt once, block-aligned |"):
        assert row in out


@pytest.mark.skipif(not os.access("/proc/self/clear_refs", os.W_OK), reason="needs Linux's /proc/self/clear_refs")
def test_the_token_logps_memory_benchmark_measures_in_process(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    bench = importlib.import_module("bench_token_logps_memory")
    for form in ("naive", "token_logps"):
        row = bench.measure(form, 8 * 600, 64, True, False)
        assert row["tokens"] == 8 * 576 and row["rise"] >= 0 and row["logits"] == 8 * 576 * 64 * 4
