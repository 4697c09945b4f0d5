"""benchmarks/bench_preference.py runs at a toy size (a smoke test: its tables come out whole;
the figures themselves are measured by running it, never asserted here)."""
import importlib
import pathlib

import pytest

pytest.importorskip("torch", reason="the benchmark runs a model: pip install torch==2.13.0")
pytest.importorskip("transformers", reason="the benchmark builds a transformers model")
pytest.importorskip("trl", reason="the benchmark's baseline is TRL's DataCollatorForPreference")

BENCHMARKS = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"


def test_the_preference_benchmark_runs_at_a_toy_size(monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    bench = importlib.import_module("bench_preference")
    bench.main(["--pairs", "6", "--timed-pairs", "4", "--pairs-per-row", "2", "--groups", "3", "--timed-groups", "1",
                "--groups-per-row", "1", "--scale", "0.05",
                "--repeat", "1", "--hidden", "16", "--exact-pairs", "4", "--exact-answer", "20",
                "--balance-pairs", "3000"])
    out = capsys.readouterr().out
    assert "GPU rows were not measured here" in out
    for row in ("| TRL, padded (DataCollatorForPreference) |", "| TRL, padded (GRPOTrainer layout) |",
                "| packed, one row per batch |", "| packed, prompt laid out once |",
                "| pairs whole, (n, 2) |", "| one packed row, prompt laid out once (tree mask) |"):
        assert row in out
    assert out.count("| packed, prompt laid out once |") == 2
