"""The pipeline survives preemption (issue 21): SIGTERM / SIGHUP are handled like Ctrl-C,
no worker outlives the driver however it dies, staging of dead runs is cleaned up, a full
disk fails cleanly, and the output reads as one dataset.

The signal tests start ``python -m packlib pack-dataset`` in a session of its own, wait
until a task of the pass under test is running (a test-only pause hook in the tasks:
``PACKLIB_TEST_PAUSE``), send the signal to the driver and then look at every process of
that session (Linux: /proc).
"""
import errno
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from packlib.pipeline import InputError, pack_files  # noqa: E402
from .procs import ray_processes, ray_to_itself, session_processes  # noqa: E402

LINUX = sys.platform.startswith("linux")
linux_only = pytest.mark.skipif(not LINUX, reason="reads the session's processes from /proc")


@pytest.fixture
def shards(tmp_path):
    """Three Parquet shards of 4,000 rows (lengths 1..199) in tmp_path/in."""
    d = tmp_path / "in"
    d.mkdir()
    rng = np.random.default_rng(0)
    for f in range(3):
        lengths = rng.integers(1, 200, 4000)
        offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int32)
        ids = pa.ListArray.from_arrays(pa.array(offsets), pa.array(np.arange(offsets[-1], dtype=np.int32) + f * 10**6))
        pq.write_table(pa.table({"input_ids": ids, "source": [f"s{f}"] * 4000}), d / f"part-{f}.parquet")
    return d




def wait_until(predicate, seconds: float) -> float:
    """Seconds until ``predicate()`` held (``inf`` if it did not within ``seconds``)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        if predicate():
            return time.monotonic() - t0
        time.sleep(0.02)
    return float("inf")


def start_paused(shards, out, step, tmp_path, *extra):
    """Start the command, paused in a task of ``step``; returns the process."""
    marker = tmp_path / f"paused-{step}"
    env = dict(os.environ, PACKLIB_TEST_PAUSE=step, PACKLIB_TEST_PAUSE_FILE=str(marker),
               RAY_memory_monitor_refresh_ms="0")
    proc = subprocess.Popen([sys.executable, "-m", "packlib", "pack-dataset", str(shards / "*.parquet"), "--output",
                             str(out), "--seq-length", "256", "--workers", "2", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, env=env)
    if wait_until(lambda: marker.exists() or proc.poll() is not None, 120) == float("inf") or proc.poll() is not None:
        proc.kill()
        raise AssertionError(f"the run did not reach {step}: {proc.communicate()}")
    return proc


def rerun_is_exactly_once(shards, out):
    """The next run into the same output succeeds and passes the exactly-once check."""
    res = pack_files(shards / "*.parquet", 256, output=out, workers=2)
    assert res.verified and res.num_sequences == 12000
    assert pq.read_table(out).num_rows == res.num_packs


def leftovers(parent, keep=("in",)):
    return sorted(n for n in os.listdir(parent) if n not in keep and not n.startswith("paused-"))


@linux_only
@pytest.mark.parametrize("step, signame", [("lengths", "SIGTERM"), ("spill", "SIGTERM"), ("assemble", "SIGTERM"),
                                           ("spill", "SIGHUP")])
def test_stop_signal_leaves_nothing(shards, tmp_path, step, signame):
    out = tmp_path / "out"
    proc = start_paused(shards, out, step, tmp_path)
    assert len(session_processes(proc.pid)) >= 3  # the driver, its workers and helpers
    signum = getattr(signal, signame)
    os.kill(proc.pid, signum)
    exited = wait_until(lambda: proc.poll() is not None, 30)
    _, err = proc.communicate()
    assert proc.returncode == 128 + signum, err
    last = [line for line in err.splitlines() if not line.startswith("packlib-test")]
    assert last == [f"interrupted ({signame}); nothing was written"], err
    gone = wait_until(lambda: not session_processes(proc.pid), 10)
    assert gone < 10, f"processes of the run still alive: {session_processes(proc.pid)}"
    assert leftovers(tmp_path) == [], "nothing in the output, nothing staged beside it"
    print(f"\n{signame} in {step}: exit after {exited:.2f} s, last process gone after {exited + gone:.2f} s")
    rerun_is_exactly_once(shards, out)


@linux_only
@pytest.mark.parametrize("step", ["lengths", "spill", "assemble"])
def test_workers_die_with_a_killed_driver_and_the_next_run_cleans_up(shards, tmp_path, step, caplog):
    out = tmp_path / "out"
    proc = start_paused(shards, out, step, tmp_path)
    t0 = time.monotonic()
    os.kill(proc.pid, signal.SIGKILL)
    gone = wait_until(lambda: not session_processes(proc.pid), 10)
    proc.communicate()
    assert gone < 10, f"processes outlived the driver: {session_processes(proc.pid)}"
    staged = leftovers(tmp_path)
    assert len(staged) == 1 and staged[0].startswith(".out.tmp-"), staged  # the dead run's staging
    print(f"\nSIGKILL in {step}: last process gone {time.monotonic() - t0:.2f} s after the driver")
    with caplog.at_level("WARNING", logger="packlib.pipeline"):
        rerun_is_exactly_once(shards, out)
    assert leftovers(tmp_path) == ["out"]
    assert f"removed {tmp_path / staged[0]}, the staging of a run that died" in caplog.text


@linux_only
@pytest.mark.parametrize("signame", ["SIGTERM", "SIGKILL"])
def test_ray_engine_tasks_end_with_the_run(shards, tmp_path, ray_runtime_absent, signame):
    out = tmp_path / "out"
    proc = start_paused(shards, out, "spill", tmp_path, "--engine", "ray")
    t0 = time.monotonic()
    os.kill(proc.pid, getattr(signal, signame))
    wait_until(lambda: proc.poll() is not None, 60)
    _, err = proc.communicate()
    if signame == "SIGTERM":
        assert proc.returncode == 128 + signal.SIGTERM and err.strip().endswith("interrupted (SIGTERM); nothing was written")
    gone = wait_until(lambda: not session_processes(proc.pid) and not ray_processes(), 20)
    assert gone < 20, f"Ray processes of the run still alive: {ray_processes()}"
    print(f"\nRay, {signame} in spill: last process gone {time.monotonic() - t0:.2f} s after the signal")
    assert leftovers(tmp_path) == ([] if signame == "SIGTERM" else leftovers(tmp_path))




@pytest.fixture
def ray_runtime_absent():
    """The Ray tests start a local Ray of their own: skip without Ray; other tests' Ray
    instances wait their turn (a foreign one still running skips)."""
    pytest.importorskip("ray")
    with ray_to_itself():
        yield


# ------------------------------------------------------------------------------ in process


def test_the_caller_s_signal_handlers_are_restored(shards, tmp_path):
    def mine(signum, frame):
        pass

    old = signal.signal(signal.SIGTERM, mine)
    try:
        pack_files(shards / "*.parquet", 256, output=tmp_path / "a", workers=1)
        assert signal.getsignal(signal.SIGTERM) is mine
        with pytest.raises(InputError):
            pack_files(shards / "*.parquet", 100, output=tmp_path / "b", workers=1)  # rows longer than 100
        assert signal.getsignal(signal.SIGTERM) is mine
        if hasattr(signal, "SIGHUP"):
            assert signal.getsignal(signal.SIGHUP) in (signal.SIG_DFL, signal.SIG_IGN, None) or callable(signal.getsignal(signal.SIGHUP))
    finally:
        signal.signal(signal.SIGTERM, old)


def test_staging_of_live_runs_and_other_hosts_is_never_touched(shards, tmp_path):
    live = tmp_path / ".other.tmp-aaaaaaaaaaaa"
    live.mkdir()
    (live / "_owner.json").write_text(json.dumps({"pid": os.getpid(), "host": os.uname().nodename, "start": None}))
    remote = tmp_path / ".other.tmp-bbbbbbbbbbbb"
    remote.mkdir()
    (remote / "_owner.json").write_text(json.dumps({"pid": 1, "host": "another-host", "start": None}))
    unowned = tmp_path / ".third.tmp-cccccccccccc"
    unowned.mkdir()
    dead = tmp_path / ".fourth.tmp-dddddddddddd"
    dead.mkdir()
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    (dead / "_owner.json").write_text(json.dumps({"pid": child.pid, "host": os.uname().nodename, "start": "1"}))
    pack_files(shards / "*.parquet", 256, output=tmp_path / "out", workers=1)
    assert live.exists() and remote.exists() and unowned.exists()
    assert not dead.exists()


def test_two_runs_into_one_output_end_with_one_output_and_one_clean_failure(shards, tmp_path):
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "packlib", "pack-dataset", str(shards / "*.parquet"), "--output", str(out),
           "--seq-length", "256", "--workers", "1"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [(p.wait(), p.communicate()) for p in procs]
    codes = sorted(r[0] for r in results)
    assert codes == [0, 2], results
    err = next(r[1][1] for r in results if r[0] == 2)
    assert err.count("\n") == 1 and err.startswith("error: ") and str(out) in err, err
    assert leftovers(tmp_path) == ["out"]
    assert pq.read_table(out).num_rows > 0


def test_disk_full_is_one_line_and_leaves_nothing(shards, tmp_path, monkeypatch, capsys):
    from packlib.cli import main
    from packlib.pipeline import _tasks

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), self.path)

    monkeypatch.setattr(_tasks._StagedIpcFile, "write", full)
    code = main(["pack-dataset", str(shards / "*.parquet"), "--output", str(tmp_path / "out"), "--seq-length", "256",
                 "--workers", "1"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "No space left on device" in err and ".tmp-" in err, err
    assert leftovers(tmp_path) == []


def test_output_reads_as_one_dataset(shards, tmp_path):
    out = tmp_path / "out"
    res = pack_files(shards / "*.parquet", 256, output=out, workers=1, rows_per_file=500)
    assert len(res.files) > 1
    assert sorted(os.listdir(out))[0] == "_packing_metadata.json"
    assert pq.read_table(out).num_rows == res.num_packs
    import pyarrow.dataset as ds

    assert ds.dataset(out).count_rows() == res.num_packs
    datasets = pytest.importorskip("datasets")
    loaded = datasets.load_dataset(str(out), split="train")
    assert loaded.num_rows == res.num_packs and loaded.column_names == ["input_ids", "seq_lengths", "position_ids"]


def test_metadata_is_read_under_both_names(shards, tmp_path):
    from packlib.pipeline import read_metadata

    out = tmp_path / "out"
    res = pack_files(shards / "*.parquet", 256, output=out, workers=1)
    meta = read_metadata(out)
    assert meta["plan"]["packs"] == res.num_packs and meta["left_out_columns"] == ["source"]
    os.replace(out / "_packing_metadata.json", out / "packing_metadata.json")  # as packlib 0.2 wrote it
    assert read_metadata(out) == meta
    os.remove(out / "packing_metadata.json")
    with pytest.raises(InputError, match="no _packing_metadata.json"):
        read_metadata(out)


def test_null_tokens_name_file_row_and_column(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    pq.write_table(pa.table({"input_ids": pa.array([[1, 2], [3], [4, None, 6]])}), d / "a.parquet")
    with pytest.raises(InputError, match=r"a\.parquet: column 'input_ids' row 2 holds a null token"):
        pack_files(d / "a.parquet", 8, output=tmp_path / "out", workers=1)
    assert leftovers(tmp_path) == []


def test_null_rows_are_dropped_and_counted(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    pq.write_table(pa.table({"input_ids": pa.array([[1, 2], None, [], [4, 5, 6]])}), d / "a.parquet")
    res = pack_files(d / "a.parquet", 8, output=tmp_path / "out", workers=1)
    assert res.dropped_rows == 2 and res.null_rows == 1
    assert "dropped 2 empty rows (1 of them null)" in res.summary()
    assert pq.read_table(tmp_path / "out").column("input_ids").to_pylist() == [[4, 5, 6, 1, 2]]
