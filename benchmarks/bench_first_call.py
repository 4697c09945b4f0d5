"""Benchmark: a newcomer's first calls, each in a fresh interpreter, beside a baseline checkout.

    python benchmarks/bench_first_call.py                       # this checkout, median of 3
    python benchmarks/bench_first_call.py --against ../old      # and another checkout, interleaved
    python benchmarks/bench_first_call.py --rows nnls512 compare2048 --repeat 5
    python benchmarks/bench_first_call.py --demo                # + `python -m packlib demo`, cold

Each run is a new process; "cold" is an empty ``NUMBA_CACHE_DIR`` (a new machine, a fresh
container, a CI job), "warm" the cache the cold run just wrote, "read-only" a copy of the
package that cannot be written (numba's user-wide cache, in a fresh ``HOME``, as on a cluster
node whose site-packages is read-only; run as an unprivileged user where ``setpriv`` exists,
since root writes anywhere). Every row's time runs from before ``import packlib`` to the
call's return; its peak resident memory beside it (the largest process: the caller or its
compile helper). Rows:

- ``nnls512``: ``packlib.nnls_pack(h)``, the bundled Wikipedia histogram (16.3 M sequences);
- ``nnls2048``: ``nnls_pack`` on 200,000 lognormal lengths (median 512, sigma 0.9), L = 2048;
- ``compare2048``: ``packlib.compare(h)`` on the same histogram, its defaults;
- ``warm2048``: ``nnls2048`` again in a new process, the cache warm;
- ``readonly2048``: ``nnls2048`` in a second process of a read-only install;
- ``compile``: ``python -m packlib compile`` on a copy of the package (once per install);
- ``compiled512``, ``compiled2048``, ``compiledcompare``: ``nnls512``, ``nnls2048`` and
  ``compare2048`` on that copy, each in a fresh process with an empty ``NUMBA_CACHE_DIR`` and
  a fresh ``HOME`` (a container started from an image whose build step ran the command, a
  node of a shared install). A checkout without the command shows none of these.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]

_CALL = """
import json, resource, sys, time
t0 = time.perf_counter()
import numpy as np
import packlib
assert packlib.__file__.startswith(sys.argv[2]), (packlib.__file__, sys.argv[2])
if sys.argv[1] == "nnls512":
    h = packlib.datasets.wikipedia_512()
    result = packlib.nnls_pack(h).num_packs
else:
    rng = np.random.default_rng(0)
    lengths = np.clip(np.rint(rng.lognormal(np.log(512), 0.9, 200_000)), 1, 2048).astype(np.int64)
    h = packlib.histogram(lengths, 2048)
    result = len(packlib.compare(h)) if sys.argv[1] == "compare2048" else packlib.nnls_pack(h).num_packs
seconds = time.perf_counter() - t0
peak = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
print(json.dumps([seconds, peak / 1024, result]))
"""

ROWS = {
    "nnls512": "cold `import packlib; packlib.nnls_pack(h)`, Wikipedia L = 512",
    "nnls2048": "cold `nnls_pack`, 200,000 lognormal lengths, L = 2048",
    "compare2048": "cold `packlib.compare(h)`, the same, L = 2048",
    "warm2048": "warm `nnls_pack` with the import, L = 2048 (second process)",
    "readonly2048": "read-only install, second process, L = 2048",
    "compile": "`python -m packlib compile` (once, where the package is installed)",
    "compiled512": "after it: cold `nnls_pack`, Wikipedia L = 512 (empty cache, fresh HOME)",
    "compiled2048": "after it: cold `nnls_pack`, L = 2048",
    "compiledcompare": "after it: cold `compare(h)`, L = 2048",
}
_COMPILED = {"compiled512": "nnls512", "compiled2048": "nnls2048", "compiledcompare": "compare2048"}
_compiled_copies: dict = {}  # root -> a copy of its package with the kernels compiled into it


def _env(root: pathlib.Path, cache: str | None, home: str | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "PYTHONPATH")}
    env["PYTHONPATH"] = str(root)
    if cache:
        env["NUMBA_CACHE_DIR"] = cache
    if home:
        env["HOME"] = home
    return env


def _run(row: str, root: pathlib.Path, env: dict, user: list[str] | None = None) -> tuple[float, float]:
    call = "compare2048" if row == "compare2048" else ("nnls512" if row == "nnls512" else "nnls2048")
    cmd = (user or []) + [sys.executable, "-c", _CALL, call, str(root)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True, cwd=tempfile.gettempdir())
    seconds, peak_mib, _ = json.loads(out.stdout.strip().splitlines()[-1])
    return seconds, peak_mib


def _unprivileged() -> list[str] | None:
    """A prefix that runs a command as nobody (root writes read-only files), or None."""
    if os.geteuid() != 0:
        return []
    return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if shutil.which("setpriv") else None


def _compile_copy(root: pathlib.Path) -> tuple[float, float]:
    """A fresh copy of ``root``'s package with ``python -m packlib compile`` run on it (kept
    for the compiled rows); the command's seconds and peak memory (its compile processes)."""
    import time

    copy = pathlib.Path(tempfile.mkdtemp(prefix="packlib-compiled-"))
    shutil.copytree(root / "packlib", copy / "packlib", ignore=shutil.ignore_patterns("__pycache__", "_built"))
    # the command's own peak: its largest process (it, or a helper it compiled with)
    wrapper = ("import resource, subprocess, sys; subprocess.run([sys.executable, '-m', 'packlib', 'compile'], "
               "check=True, capture_output=True); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    with tempfile.TemporaryDirectory() as cache:
        t0 = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", wrapper], env=_env(copy, cache), check=True, capture_output=True,
                             text=True, cwd=tempfile.gettempdir())
        seconds = time.perf_counter() - t0
    old = _compiled_copies.pop(root, None)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    _compiled_copies[root] = copy
    return seconds, int(out.stdout.split()[-1]) / 1024


def measure(row: str, root: pathlib.Path) -> tuple[float, float] | None:
    """One measurement of ``row`` for the checkout at ``root``, in fresh processes (None:
    the checkout has no ``compile`` command)."""
    if row == "compile" or row in _COMPILED:
        if not (root / "packlib" / "_precompile.py").exists():
            return None
        if row == "compile" or root not in _compiled_copies:
            result = _compile_copy(root)
            if row == "compile":
                return result
        copy = _compiled_copies[root]
        with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as home:
            return _run(_COMPILED[row], copy, _env(copy, cache, home))
    with tempfile.TemporaryDirectory() as cache:
        if row in ("nnls512", "nnls2048", "compare2048"):
            return _run(row, root, _env(root, cache))
        if row == "warm2048":
            _run("nnls2048", root, _env(root, cache))
            return _run(row, root, _env(root, cache))
        user = _unprivileged()
        if user is None:
            raise RuntimeError("read-only row: run as a user other than root, or install setpriv")
        site, home = pathlib.Path(cache) / "site", pathlib.Path(cache) / "home"
        shutil.copytree(root / "packlib", site / "packlib", ignore=shutil.ignore_patterns("__pycache__"))
        home.mkdir()
        os.chmod(cache, 0o755)
        os.chmod(home, 0o777)
        for path in [site, *site.rglob("*")]:
            os.chmod(path, 0o555 if path.is_dir() else 0o444)
        env = _env(site, None, str(home))
        _run("nnls2048", site, env, user)
        return _run(row, site, env, user)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", metavar="DIR", help="another checkout, measured interleaved (the baseline)")
    ap.add_argument("--rows", nargs="+", choices=list(ROWS), default=list(ROWS))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--demo", action="store_true", help="also `python -m packlib demo`, cold")
    args = ap.parse_args()
    roots = [ROOT] + ([pathlib.Path(args.against).resolve()] if args.against else [])
    times = {(row, r): [] for row in args.rows for r in roots}
    peaks = {(row, r): [] for row in args.rows for r in roots}
    for _ in range(args.repeat):
        for row in args.rows:
            for root in roots:
                got = measure(row, root)
                if got is not None:
                    times[row, root].append(got[0])
                    peaks[row, root].append(got[1])
    head = "| first call | this checkout (min–max) | peak |"
    head += " baseline (min–max) | peak | baseline / this |" if args.against else ""
    print(head)
    print("|---" * (head.count("|") - 1) + "|")
    for row in args.rows:
        cells = [ROWS[row]]
        for root in roots:
            t = times[row, root]
            cells += ([f"{statistics.median(t):.2f} s ({min(t):.2f}–{max(t):.2f})", f"{max(peaks[row, root]):,.0f} MiB"]
                      if t else ["–", "–"])
        if args.against and times[row, ROOT] and times[row, roots[1]]:
            cells.append(f"{statistics.median(times[row, roots[1]]) / statistics.median(times[row, ROOT]):.2f}x")
        elif args.against:
            cells.append("–")
        print("| " + " | ".join(cells) + " |")
    if args.demo:
        for root in roots:
            with tempfile.TemporaryDirectory() as cache:
                import time

                t0 = time.perf_counter()
                subprocess.run([sys.executable, "-m", "packlib", "demo"], env=_env(root, cache), check=True,
                               capture_output=True, cwd=tempfile.gettempdir())
                print(f"`python -m packlib demo`, cold cache, {root}: {time.perf_counter() - t0:.1f} s")
    for copy in _compiled_copies.values():
        shutil.rmtree(copy, ignore_errors=True)
    print(f"\n({args.repeat} runs each, interleaved; {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f} at the end)")


if __name__ == "__main__":
    main()
