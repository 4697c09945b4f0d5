"""benchmarks/bench_balance_gpu.py runs end to end at its toy size on a CPU (a smoke test: its
figures are a toy's, and no figure is asserted beyond being one)."""
from __future__ import annotations

import importlib.util
import pathlib
import re

import numpy as np

import pytest

torch = pytest.importorskip("torch", reason="the benchmark runs a model: pip install torch==2.13.0")

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_the_gpu_benchmark_runs_its_toy_end_to_end(capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the CPU path, also on a GPU machine
    spec = importlib.util.spec_from_file_location("bench_balance_gpu", ROOT / "benchmarks" / "bench_balance_gpu.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    threads = torch.get_num_threads()
    try:
        bench.main(["--toy", "--documents", "120", "--steps", "1", "--repeats", "1", "--calibration-repeats", "1"])
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    assert "not GPU figures" in out and "attention: sdpa per sequence" in out
    assert re.search(r"calibrated on \d+ rows .* a = \S+ s/token, b = \S+ s/token², c = \S+ s/row", out)
    for plan in ("packlib.balance, transformer_cost", "packlib.balance, calibrated cost", "token cost (1, 0)",
                 "TRL pack_dataset bfd, dealt", "axolotl multipack"):
        line = next(ln for ln in out.splitlines() if plan in ln)
        assert "not installed here" in line or re.search(r"\d\.\d{3} / \d\.\d{3} +\d\.\d{3} / \d\.\d{3}", line), line
    assert "calibrated a, b, c" in out and "FLOP cost x least-squares scale" in out


def test_the_benchmark_model_keeps_each_sequence_to_itself():
    """The CPU attention path of the benchmark's decoder: a packed row's loss is the
    token-weighted loss of its sequences, each run alone (so its timings are of the right
    work)."""
    spec = importlib.util.spec_from_file_location("bench_balance_gpu", ROOT / "benchmarks" / "bench_balance_gpu.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    _, model = bench.build_model(97, 32, 2, 4, 48, torch.device("cpu"), torch.float64)
    runner = bench.Runner(model, 97, torch.device("cpu"))
    lengths = [5, 1, 9, 5, 3]
    ids, positions, targets, row = runner.row(lengths)
    with torch.no_grad():
        packed = model(ids, positions, targets, row).item() * int((targets >= 0).sum())
        alone, start = 0.0, 0
        for n in lengths:
            if n > 1:
                sl = slice(start, start + n)
                one = runner.row([n])[3]
                alone += model(ids[sl], positions[sl], torch.cat((targets[sl][:-1], targets.new_tensor([-100]))),
                               one).item() * (n - 1)
            start += n
    assert positions.tolist() == [0, 1, 2, 3, 4, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 0, 1, 2, 3, 4, 0, 1, 2]
    assert (targets == -100).sum() == len(lengths)
    assert packed == pytest.approx(alone, rel=1e-6)  # the loss is taken in float32


def test_saved_peer_plans_come_back_for_their_workload_only(tmp_path, capsys):
    """``--save-peer-plans`` here, ``--peer-plans`` on a GPU machine without the peers: the
    plans come back as saved, and a file made for other sizes is refused, never timed."""
    spec = importlib.util.spec_from_file_location("bench_balance_gpu", ROOT / "benchmarks" / "bench_balance_gpu.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    lengths = bench.documents(60, 256)
    path = tmp_path / "plans.pkl"
    bench.save_peer_plans(path, lengths, 256, 2, 2)
    plans = bench.load_peer_plans(path, lengths, 256, 2, 2)
    assert set(plans) == {"trl", "axolotl"}
    for name, plan in plans.items():
        assert bench.peer_plan(name, lengths, 256, 2, 2, plans) is plan
        if not isinstance(plan, str):  # installed here: every document at most once, rows within L
            ids = np.concatenate([r for step in plan for rank in step for r in rank])
            assert np.unique(ids).size == ids.size and all(
                lengths[r].sum() <= 256 for step in plan for rank in step for r in rank)
    with pytest.raises(SystemExit, match="another workload"):
        bench.load_peer_plans(path, lengths, 256, 4, 2)
    with pytest.raises(SystemExit, match="another workload"):
        bench.load_peer_plans(path, bench.documents(61, 256), 256, 2, 2)
