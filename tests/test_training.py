"""What reaches the gradient is what the data says, on every documented path: the Trainer's
defaults, the collator's masks, the training loop's token-weighted steps and its resume (one
process and two real ranks killed with SIGKILL), DataLoader workers.

Every check is against a reference computed without packlib (tests/naive_training.py: each
sequence alone, token-weighted over the step). Tiny random transformers models built from a
config (no download). Needs torch and transformers; without them the module skips.
"""
from __future__ import annotations

import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the training tests run models: pip install torch==2.13.0")
transformers = pytest.importorskip("transformers", reason="the training tests build transformers models")

import packlib  # noqa: E402
from packlib.torch import PackedCollator  # noqa: E402
from tests import _ddp_worker as worker  # noqa: E402
from tests import naive_training as ref  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
VOCAB = 97


def _model(seed=0):
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    return transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").train()


def _sequences(lengths, seed=0):
    return [np.random.default_rng(seed * 1000 + i).integers(1, VOCAB, n) for i, n in enumerate(lengths)]


def _assert_exact(batch, refs, model=None):
    """The collated batch's loss and gradient equal the reference's (each sequence alone)."""
    model = model or _model()
    model.zero_grad()
    out = model(**batch)
    out.loss.backward()
    grads = [p.grad.detach().clone() for p in model.parameters()]
    loss, want = ref.loss_and_grads(model, refs)
    assert float(out.loss) == pytest.approx(loss, abs=1e-5)
    assert ref.max_relative(grads, want) < 1e-4


# ----------------------------------------------------------------- two real ranks, killed
def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(out, kill_at=None):
    """Two ranks (forked by one launcher process, which imports torch once)."""
    out.mkdir(exist_ok=True)
    extra = [] if kill_at is None else [str(kill_at)]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-m", "tests._ddp_worker", "2", str(_free_port()), str(out), *extra],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finish(proc, timeout=240):
    try:
        log = proc.communicate(timeout=timeout)[0]
    finally:
        proc.kill()
    assert proc.returncode == 0, log[-4000:]


def _trained(out, rank):
    lines = (out / f"trained-{rank}.jsonl").read_text().splitlines()
    return [tuple(json.loads(x)) for x in lines]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the ranks are forked (POSIX)")
def test_the_documented_loop_killed_and_resumed_on_two_ranks(tmp_path):
    """docs/balance.md's loop on two gloo ranks under DDP; a second pair is SIGKILLed in the
    middle of a step of the first epoch and started again. Every sample of every epoch is trained
    exactly once on its rank, every row stays isolated, and both ranks end with parameters
    bitwise equal to each other and to the uninterrupted run's."""
    lengths, _ = worker.samples()
    M = worker.SETTINGS["accumulation"]
    kw = dict(micro_batches=M, cost=packlib.transformer_cost(4096), seed=0)
    per_epoch = len(packlib.BalancedBatchSampler(lengths, worker.SETTINGS["max_sequence_length"], rank=0,
                                                 world_size=2, **kw))
    kill_at = (per_epoch // (2 * M)) * M + 2          # the second micro-batch of a step in mid-epoch
    full, killed = tmp_path / "full", tmp_path / "killed"
    uninterrupted, first = _launch(full), _launch(killed, kill_at)
    deadline = time.monotonic() + 240
    while not all((killed / f"ready-{r}").exists() for r in range(2)):
        assert time.monotonic() < deadline and first.poll() is None, first.communicate()[0][-4000:]
        time.sleep(0.05)
    for r in range(2):
        while not (killed / f"ready-{r}").read_text().strip():  # created, pid not yet written
            time.sleep(0.01)
        os.kill(int((killed / f"ready-{r}").read_text()), signal.SIGKILL)
    assert "ranks exited with [-9, -9]" in first.communicate(timeout=60)[0]
    _finish(_launch(killed))                           # the same command again: it resumes
    _finish(uninterrupted)
    for r in range(2):
        sampler = packlib.BalancedBatchSampler(lengths, worker.SETTINGS["max_sequence_length"], rank=r,
                                               world_size=2, **kw)
        want = []
        for epoch in range(worker.SETTINGS["epochs"]):
            sampler.set_epoch(epoch)
            want += sorted((epoch, i) for mb in sampler for i in mb)
        assert sorted(_trained(full, r)) == want
        assert sorted(_trained(killed, r)) == want     # each exactly once: none twice, none skipped
    params = [torch.load(d / f"params-{r}.pt") for d in (full, killed) for r in range(2)]
    for other in params[1:]:
        assert all(torch.equal(params[0][k], other[k]) for k in params[0])
    seen = [json.loads((d / f"seen-{r}.json").read_text()) for d in (full, killed) for r in range(2)]
    assert max(s["worst"] for s in seen) <= 1e-4 and min(s["rows"] for s in seen) >= 4
