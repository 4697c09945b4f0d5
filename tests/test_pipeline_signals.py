"""A stop signal at any moment of ``pack-dataset`` unwinds cleanly.

The driver is stopped at a named point (``PACKLIB_TEST_PAUSE_AT=<step>:start|end``, a hook
read only by the tests: the driver announces the point and waits there), then signalled.
Every run must end with status ``128 + signal``, one line on stderr, nothing in the output,
nothing staged beside it, no process of its session left, and no leaked-resource warning.
The runs are independent subprocesses (each in a session of its own), run a few at a time.
"""
import concurrent.futures as cf
import json
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

LINUX = sys.platform.startswith("linux")
pytestmark = pytest.mark.skipif(not LINUX, reason="reads the run's processes from /proc")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = ("lengths", "plan", "spill", "assemble", "verify")
SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP")
CONCURRENT = 4


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """Two tiny Parquet shards (input_ids and loss_mask), for both output formats."""
    d = tmp_path_factory.mktemp("in")
    rng = np.random.default_rng(1)
    for f in range(2):
        lengths = rng.integers(2, 60, 200)
        ids = [list(range(n)) for n in lengths.tolist()]
        mask = [[k >= n // 2 for k in range(n)] for n in lengths.tolist()]
        pq.write_table(pa.table({"input_ids": ids, "loss_mask": mask}), d / f"part-{f}.parquet")
    return d


def session_processes(sid: int) -> list:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat", "rb") as fh:
                    stat = fh.read()
            except OSError:
                continue
            fields = stat[stat.rindex(b")") + 2:].split()
            if int(fields[3]) == sid and fields[0] != b"Z":
                out.append(int(d))
    return out


def _wait(predicate, seconds):
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def command(inputs, parent, workers=None, megatron=False, engine=None):
    out = parent / ("out.npy" if megatron else "out")
    cmd = [sys.executable, "-m", "packlib", "pack-dataset", str(inputs / "*.parquet"), "--output", str(out),
           "--seq-length", "64", "--columns", "input_ids"]
    if megatron:
        cmd = cmd[:-2] + ["--format", "megatron-sft", "--method", "bfd", "--metadata-output", str(parent / "meta.json")]
    if workers is not None:
        cmd += ["--workers", str(workers)]
    if engine is not None:
        cmd += ["--engine", engine]
    return cmd


def run_stopped(cmd, parent, points, signames, seconds=180.0):
    """Start ``cmd`` in ``parent`` (a fresh directory), send ``signames[k]`` when it announces
    ``points[k]``; returns ``(status, stderr lines without the hook's, processes left)``."""
    parent.mkdir()
    marker = parent / "at"
    env = dict(os.environ, PYTHONPATH=ROOT, PACKLIB_TEST_PAUSE_AT=",".join(points), PACKLIB_TEST_PAUSE_FILE=str(marker),
               PACKLIB_TEST_PAUSE_SECONDS=str(seconds), RAY_memory_monitor_refresh_ms="0")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=parent,
                            start_new_session=True)
    try:
        for k, (point, signame) in enumerate(zip(points, signames)):
            def there(k=k):
                return proc.poll() is not None or (marker.exists() and len(marker.read_text().splitlines()) > k)
            assert _wait(there, seconds) and proc.poll() is None, f"never reached {point}: {proc.communicate()}"
            os.kill(proc.pid, getattr(signal, signame))
        _, err = proc.communicate(timeout=seconds)
    finally:
        if proc.poll() is None:
            for p in session_processes(proc.pid):
                os.kill(p, signal.SIGKILL)
            proc.communicate()
    _wait(lambda: not session_processes(proc.pid), 10)
    lines = [line for line in err.splitlines() if not line.startswith("packlib-test: ")]
    return proc.returncode, lines, session_processes(proc.pid)


def check_stopped(case, parent, status, lines, left, signame):
    signum = getattr(signal, signame)
    problems = []
    if status != 128 + signum:
        problems.append(f"exit status {status}, not {128 + signum}")
    if lines != [f"interrupted ({signame}); nothing was written"]:
        problems.append(f"stderr {lines}")
    if left:
        problems.append(f"processes left {left}")
    beside = sorted(n for n in os.listdir(parent) if n != "at")
    if beside:
        problems.append(f"left in the output's directory: {beside}")
    return [f"{case}: {p}" for p in problems]


def run_cases(cases):
    """Run ``(name, fn)`` cases a few at a time; every failure is reported together."""
    with cf.ThreadPoolExecutor(CONCURRENT) as ex:
        found = [p for ps in ex.map(lambda c: c[1](), cases) for p in ps]
    assert not found, "\n".join(found)


def test_every_boundary_of_every_step(inputs, tmp_path):
    """Each step's start and end, each stop signal, one worker (in the driver) and two."""
    cases = []
    for workers in (1, 2):
        for i, step in enumerate(STEPS):
            for end in ("start", "end"):
                for signame in SIGNALS:
                    name = f"{step}:{end}-{signame}-w{workers}"
                    parent = tmp_path / name.replace(":", "-")

                    def case(name=name, parent=parent, point=f"{step}:{end}", signame=signame, workers=workers):
                        status, lines, left = run_stopped(command(inputs, parent, workers), parent, [point], [signame])
                        return check_stopped(name, parent, status, lines, left, signame)
                    cases.append((name, case))
    run_cases(cases)


def test_every_boundary_of_the_megatron_sft_writer(inputs, tmp_path):
    meta = [{"existing": True}]
    cases = []
    for point in ("read:start", "read:end", "write:start", "write:end"):
        for signame in SIGNALS:
            name = f"megatron-{point}-{signame}"
            parent = tmp_path / name.replace(":", "-")

            def case(name=name, parent=parent, point=point, signame=signame):
                status, lines, left = run_stopped(command(inputs, parent, megatron=True), parent, [point], [signame])
                problems = check_stopped(name, parent, status, lines, left, signame)
                return problems
            cases.append((name, case))
    run_cases(cases)
    # an existing metadata list is left as it was by a stopped run
    parent = tmp_path / "with-meta"
    parent.mkdir()
    (parent / "meta.json").write_text(json.dumps(meta))
    sub = parent / "run"
    cmd = command(inputs, sub, megatron=True)
    cmd[cmd.index("--metadata-output") + 1] = str(parent / "meta.json")
    status, lines, left = run_stopped(cmd, sub, ["write:end"], ["SIGTERM"])
    assert check_stopped("megatron with metadata", sub, status, lines, left, "SIGTERM") == []
    assert json.loads((parent / "meta.json").read_text()) == meta


def test_a_second_signal_while_unwinding_changes_nothing(inputs, tmp_path):
    """The first signal is reported; later ones, during the clean-up, neither crash nor stop it."""
    cases = []
    for workers, point, signames in ((2, "spill:start", ("SIGTERM", "SIGINT", "SIGHUP")),
                                     (1, "assemble:end", ("SIGINT", "SIGTERM", "SIGTERM")),
                                     (2, "lengths:end", ("SIGHUP", "SIGHUP", "SIGINT"))):
        name = f"second-{point}-w{workers}"
        parent = tmp_path / name.replace(":", "-")

        def case(name=name, parent=parent, point=point, signames=signames, workers=workers):
            points = [point, "cleanup", "cleanup"]
            status, lines, left = run_stopped(command(inputs, parent, workers), parent, points[:2], signames[:2])
            return check_stopped(name, parent, status, lines, left, signames[0])
        cases.append((name, case))
    run_cases(cases)


def test_stress_signals_at_random_moments(inputs, tmp_path):
    """Fifty runs signalled at a random moment after the run starts: each one is stopped
    cleanly, or (signalled too late) finished with its whole output, never anything else."""
    rng = random.Random(0)
    (tmp_path / "probe").mkdir()
    t0 = time.monotonic()
    done = subprocess.run(command(inputs, tmp_path / "probe", 2), capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=ROOT))
    assert done.returncode == 0, done.stderr
    span = time.monotonic() - t0
    cases, stopped = [], []
    for k in range(50):
        signame, workers, delay = rng.choice(SIGNALS), rng.choice((1, 2)), rng.uniform(0, span)
        name = f"random-{k}-{signame}-w{workers}-{delay:.3f}s"
        parent = tmp_path / f"r{k}"

        def case(name=name, parent=parent, signame=signame, workers=workers, delay=delay):
            parent.mkdir()
            marker = parent.with_name(parent.name + "-at")
            env = dict(os.environ, PYTHONPATH=ROOT, PACKLIB_TEST_PAUSE_AT="armed", PACKLIB_TEST_PAUSE_SECONDS="0",
                       PACKLIB_TEST_PAUSE_FILE=str(marker))
            proc = subprocess.Popen(command(inputs, parent, workers), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True, env=env, cwd=parent, start_new_session=True)
            _wait(lambda: marker.exists() or proc.poll() is not None, 60)
            time.sleep(delay)
            if proc.poll() is None:
                os.kill(proc.pid, getattr(signal, signame))
            _, err = proc.communicate(timeout=60)
            _wait(lambda: not session_processes(proc.pid), 10)
            left = session_processes(proc.pid)
            lines = [line for line in err.splitlines() if not line.startswith("packlib-test: ")]
            if proc.returncode in (0, -getattr(signal, signame)) and (parent / "out").exists():
                # finished before the signal, or signalled after publishing (at exit: the default action)
                problems = [] if (parent / "out" / "_packing_metadata.json").exists() else ["no complete output"]
                problems += [f"processes left {left}"] if left else []
                problems += [f"stderr {lines}"] if lines else []
                return [f"{name}: {p}" for p in problems]
            stopped.append(name)
            return check_stopped(name, parent, proc.returncode, lines, left, signame)
        cases.append((name, case))
    run_cases(cases)
    assert len(stopped) >= 10, f"only {len(stopped)} of the 50 runs were signalled before they finished"


def _ray_processes() -> list:
    found = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/cmdline", "rb") as fh:
                    cmd = fh.read()
                with open(f"/proc/{d}/stat", "rb") as fh:
                    stat = fh.read()
            except OSError:
                continue
            if stat[stat.rindex(b")") + 2:].split()[0] != b"Z" and (b"ray::" in cmd or b"raylet" in cmd or b"gcs_server" in cmd):
                found.append(int(d))
    return found


def test_the_ray_engine_at_a_few_boundaries(inputs, tmp_path):
    pytest.importorskip("ray")
    if _ray_processes():
        pytest.skip("a Ray instance already runs on this machine")
    problems = []
    for point, signame in (("lengths:end", "SIGINT"), ("assemble:start", "SIGTERM")):
        parent = tmp_path / point.replace(":", "-")
        status, lines, left = run_stopped(command(inputs, parent, 2, engine="ray"), parent, [point], [signame])
        problems += check_stopped(f"ray {point} {signame}", parent, status, lines, left, signame)
        if not _wait(lambda: not _ray_processes(), 30):
            problems.append(f"ray {point} {signame}: Ray processes left {_ray_processes()}")
    assert not problems, "\n".join(problems)
