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
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from .procs import ray_processes, ray_to_itself, session_processes

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

LINUX = sys.platform.startswith("linux")
pytestmark = pytest.mark.skipif(not LINUX, reason="reads the run's processes from /proc")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = ("lengths", "plan", "spill", "assemble", "verify")
SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP")
CONCURRENT = 4
RAY_LOG = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+\s+(INFO|WARNING) ")  # Ray's own log lines


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
    # one whole run of each format first, one at a time: numba compiles the pipeline's kernels
    # into its cache here, not in several stopped runs at once (which, on a loaded machine
    # with a cold cache, can take longer than a case waits)
    for megatron in (False, True):
        warm = tmp_path_factory.mktemp("warm")
        subprocess.run(command(d, warm, workers=None if megatron else 2, megatron=megatron), check=True,
                       capture_output=True, env=dict(os.environ, PYTHONPATH=ROOT), timeout=600)
    return d




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


# Runs the command in this one process, case after case (the interpreter, its imports and
# the fork server are paid once): each case stops at its point, signalled by a thread of the
# harness; the exit status is what the command returns. Prints one JSON line per case.
_HARNESS = r"""
import contextlib, io, json, os, signal, sys, threading, time
from packlib.cli import main

def children(pid):
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = open(f"/proc/{d}/stat", "rb").read()
            except OSError:
                continue
            f = stat[stat.rindex(b")") + 2:].split()
            if f[0] != b"Z":
                kids.setdefault(int(f[1]), []).append(int(d))
    return kids.get(pid, []), kids

def ray_tasks():
    found = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                cmd = open(f"/proc/{d}/cmdline", "rb").read()
            except OSError:
                continue
            if cmd.startswith(b"ray::") and cmd.split(b"\0")[0].endswith(b"_task"):
                found.append(int(d))
    return found

ray = None
if os.environ.get("HARNESS_RAY"):  # one local Ray for every case (the engine uses it as it is)
    import ray
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.environ["PYTHONPATH"]}})
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(s, lambda *a: None)  # outside a run (a late random signal) a signal does nothing here

for name, argv, point, signame, marker, delay in json.loads(sys.argv[1]):
    os.environ.update(PACKLIB_TEST_PAUSE_AT=point, PACKLIB_TEST_PAUSE_FILE=marker,
                      PACKLIB_TEST_PAUSE_SECONDS="0" if delay is not None else "60")
    done = threading.Event()
    def fire():
        while not os.path.exists(marker) and not done.is_set():
            time.sleep(0.001)
        if signame and not done.wait(delay or 0):
            os.kill(os.getpid(), getattr(signal, signame))
    helper = threading.Thread(target=fire, daemon=True)
    helper.start()
    err = io.StringIO()
    t0 = time.monotonic()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        status = main(argv)
    elapsed = time.monotonic() - t0
    done.set()
    helper.join(5)
    if ray is not None:  # Ray's processes stay; none may still run a task of the run
        left = ray_tasks()
    else:
        mine, kids = children(os.getpid())
        # what may stay between runs: the fork server and the resource tracker, with no child of their own
        left = [p for p in mine if kids.get(p)] + [k for p in mine for k in kids.get(p, [])]
    lines = [x for x in err.getvalue().splitlines() if not x.startswith("packlib-test: ")]
    print(json.dumps([name, status, lines, left, elapsed]), flush=True)
if ray is not None:
    ray.shutdown()
"""


def test_every_boundary_of_every_step(inputs, tmp_path):
    """Each step's start and end, each stop signal, one worker (in the driver) and two."""
    batches = []
    for workers in (1, 2):
        cases = []
        for step in STEPS:
            for end in ("start", "end"):
                for signame in SIGNALS:
                    name = f"{step}:{end}-{signame}-w{workers}"
                    parent = tmp_path / name.replace(":", "-")
                    parent.mkdir()
                    cases.append([name, command(inputs, parent, workers)[3:], f"{step}:{end}", signame,
                                  str(tmp_path / f"{name}.at"), None])
        batches.append(cases)
    problems = []
    for cases, results in zip(batches, harness(batches)):
        for (name, status, lines, left, _), case in zip(results, cases):
            problems += check_stopped(name, tmp_path / name.replace(":", "-"), status, lines, left, case[3])
    assert not problems, "\n".join(problems)


def harness(batches, **env):
    """Run each batch of cases in a harness process of its own, the batches at once; the results."""
    procs = [subprocess.Popen([sys.executable, "-c", _HARNESS, json.dumps(cases)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=ROOT, **env))
             for cases in batches]
    out = []
    for proc, cases in zip(procs, batches):
        stdout, err = proc.communicate(timeout=600)
        results = [json.loads(line) for line in stdout.splitlines()]
        assert proc.returncode == 0 and len(results) == len(cases), err
        out.append(results)
    return out


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
    """Fifty runs signalled at a random moment after the signals are armed (in two harness
    processes: one worker and two): each is stopped cleanly, or (signalled after publishing)
    finished with its whole output, never anything else."""
    rng = random.Random(0)

    def case(name, workers, signame, delay):
        parent = tmp_path / name
        parent.mkdir()
        return [name, command(inputs, parent, workers)[3:], "armed", signame, str(tmp_path / f"{name}.at"), delay]

    # a first run loads the kernels and starts the fork server; the span is the quickest of the
    # runs after it (a run slowed by the machine's other work would send many signals too late),
    # and the signals go out within its first 80 %
    probes = harness([[case(f"probe-{k}-w1", 1, None, 0.0) for k in range(4)],
                      [case(f"probe-{k}-w2", 2, None, 0.0) for k in range(4)]])
    span = {w: min(r[4] for r in probes[w - 1][1:]) for w in (1, 2)}
    batches = [[], []]
    for k in range(50):
        workers, signame = 1 + k % 2, rng.choice(SIGNALS)
        batches[workers - 1].append(case(f"random-{k}-{signame}-w{workers}", workers, signame,
                                         rng.uniform(0, 0.8 * span[workers])))
    problems, stopped = [], 0
    for cases, results in zip(batches, harness(batches)):
        for (name, status, lines, left, _), c in zip(results, cases):
            parent = tmp_path / name
            if status == 0:  # finished before the signal, or signalled while publishing
                if not (parent / "out" / "_packing_metadata.json").exists() or lines or left:
                    problems.append(f"{name}: exit 0 but output {os.listdir(parent)}, stderr {lines}, left {left}")
                continue
            stopped += 1
            problems += check_stopped(name, parent, status, lines, left, c[3])
    assert not problems, "\n".join(problems)
    # not vacuous: a good share of the runs were stopped mid-run (how many depends on how the
    # machine's other work slows each run against the probes)
    assert stopped >= 15, f"only {stopped} of the 50 runs were signalled before they finished"


def test_fresh_processes_signalled_at_random_moments(inputs, tmp_path):
    """Ten commands, each its own process, signalled at a random moment: the process itself
    exits cleanly (no crash at exit, no leaked-resource warning, no process left)."""
    rng = random.Random(1)
    cases = []
    for k in range(10):
        signame, workers, delay = rng.choice(SIGNALS), 1 + k % 2, rng.uniform(0, 1.0)
        name = f"fresh-{k}-{signame}-w{workers}-{delay:.3f}s"
        parent = tmp_path / f"r{k}"

        def one(name=name, parent=parent, signame=signame, workers=workers, delay=delay):
            parent.mkdir()
            marker = parent.with_name(parent.name + "-at")
            env = dict(os.environ, PYTHONPATH=ROOT, PACKLIB_TEST_PAUSE_AT="armed", PACKLIB_TEST_PAUSE_SECONDS="0",
                       PACKLIB_TEST_PAUSE_FILE=str(marker))
            proc = subprocess.Popen(command(inputs, parent, workers), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True, env=env, cwd=parent, start_new_session=True)
            _wait(lambda: marker.exists() or proc.poll() is not None, 120)
            time.sleep(delay)
            if proc.poll() is None:
                os.kill(proc.pid, getattr(signal, signame))
            _, err = proc.communicate(timeout=120)
            _wait(lambda: not session_processes(proc.pid), 10)
            left = session_processes(proc.pid)
            lines = [line for line in err.splitlines() if not line.startswith("packlib-test: ")]
            if proc.returncode in (0, -getattr(signal, signame)) and (parent / "out").exists():
                # finished before the signal, or signalled after publishing (at exit: the default action)
                problems = [] if (parent / "out" / "_packing_metadata.json").exists() else ["no complete output"]
                problems += [f"processes left {left}"] if left else []
                problems += [f"stderr {lines}"] if lines else []
                return [f"{name}: {p}" for p in problems]
            return check_stopped(name, parent, proc.returncode, lines, left, signame)
        cases.append((name, one))
    run_cases(cases)




def test_the_ray_engine_at_a_few_boundaries(inputs, tmp_path):
    """The Ray engine (one local Ray for the four cases), then Ray itself ends with the harness."""
    pytest.importorskip("ray")
    with ray_to_itself():
        _ray_engine_at_a_few_boundaries(inputs, tmp_path)


def _ray_engine_at_a_few_boundaries(inputs, tmp_path):
    cases = []
    for point, signame in (("lengths:end", "SIGINT"), ("spill:start", "SIGTERM"), ("assemble:end", "SIGHUP"),
                           ("verify:start", "SIGTERM")):
        name = f"ray-{point}-{signame}".replace(":", "-")
        (tmp_path / name).mkdir()
        cases.append([name, command(inputs, tmp_path / name, 2, engine="ray")[3:], point, signame,
                      str(tmp_path / f"{name}.at"), None])
    (results,) = harness([cases], HARNESS_RAY="1", RAY_memory_monitor_refresh_ms="0")
    problems = []
    for (name, status, lines, left, _), case in zip(results, cases):
        lines = [x for x in lines if not RAY_LOG.match(x)]
        problems += check_stopped(name, tmp_path / name, status, lines, left, case[3])
    if not _wait(lambda: not ray_processes(), 30):
        problems.append(f"Ray processes left {ray_processes()}")
    assert not problems, "\n".join(problems)
