"""``python -m packlib compile`` (packlib/_precompile.py, packlib/_jit.py): the kernels of the
first calls compiled into a copy of the package load in fresh processes with an empty numba
cache and compile nothing, give the plans a plain call gives, stay untouched by later
compiles, and are ignored where their module changed or the CPU differs."""
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from packlib import _precompile
from packlib.cli import main

ROOT = pathlib.Path(__file__).resolve().parents[1]
_N = 5_000  # lengths in the calls' inputs

# the calls a newcomer makes first; prints the packlib kernels compiled and each answer
_CALLS = """
import json, sys
from numba.core import event
compiled = []
class Seen(event.Listener):
    def on_start(self, ev):
        d = ev.data.get("dispatcher")
        if getattr(getattr(d, "py_func", None), "__module__", "").startswith("packlib."):
            compiled.append(d.py_func.__name__)
    def on_end(self, ev):
        pass
event.register("numba:compile", Seen())
import numpy as np
import packlib
assert packlib.__file__.startswith(sys.argv[1]), packlib.__file__
rng = np.random.default_rng(0)
lengths = np.clip(np.rint(rng.lognormal(np.log(512), 0.9, int(sys.argv[3]))), 1, 2048).astype(np.int64)
h = packlib.histogram(lengths, 2048)
out = {}
for what in sys.argv[2].split(","):
    if what == "nnls512":
        out[what] = packlib.nnls_pack(packlib.datasets.wikipedia_512()).num_packs
    elif what == "nnls2048":
        out[what] = packlib.nnls_pack(h, max_sequences_per_pack=None).num_packs
    elif what == "compare":
        out[what] = [row.packs for row in packlib.compare(h, progress=False, time_limit=None)]
    elif what == "bfd":
        out[what] = packlib.pack(lengths, 2048, method="bfd", max_sequences_per_pack=None).num_packs
    elif what == "spfhp":
        out[what] = packlib.spfhp_pack(h).num_packs
    elif what == "bfd2":
        out[what] = packlib.bfd_pack(lengths, 2048, 2).num_packs
    elif what == "assign":
        out[what] = int(packlib.lpfhp_pack(h).assign(lengths, seed=0).shuffled(seed=0).indices[:50].sum())
    elif what == "crc":  # a kernel the command does not compile
        from packlib.formats import tfrecord
        out[what] = int(tfrecord.crc32c(b"123456789", "numba"))
print(json.dumps({"compiled": compiled, "out": out}))
"""


def _copy_package(dest: pathlib.Path) -> pathlib.Path:
    shutil.copytree(ROOT / "packlib", dest / "packlib",
                    ignore=shutil.ignore_patterns("__pycache__", "*.nbi", "*.nbc", "*.pyc", "_built"))
    return dest


def _env(root: pathlib.Path, cache: pathlib.Path, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "PYTHONPATH", "NUMBA_CPU_NAME")}
    return dict(env, PYTHONPATH=str(root), NUMBA_CACHE_DIR=str(cache), **extra)


def _calls(root, cache, what, **extra):
    cache.mkdir(exist_ok=True)
    out = subprocess.run([sys.executable, "-c", _CALLS, str(root), what, str(_N)], env=_env(root, cache, **extra),
                         capture_output=True, text=True, timeout=600, cwd=str(cache))
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def _listing(directory: pathlib.Path):
    return sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in directory.iterdir())


_FIRST = "nnls512,nnls2048,compare,bfd,assign"


def test_the_compiled_package(tmp_path):
    """One test (one compile, on one worker): after ``python -m packlib compile`` on a copy of
    the package, the first calls compile nothing and answer as this process does; a kernel
    it did not compile goes to numba's cache, never into the package; another CPU loads
    nothing from it."""
    root = _copy_package(tmp_path / "installed")
    out = subprocess.run([sys.executable, "-m", "packlib", "compile"], capture_output=True, text=True, timeout=600,
                         env=_env(root, tmp_path / "unused-cache"), cwd=str(root))
    assert out.returncode == 0, out.stdout + out.stderr
    built = root / "packlib" / "_kernels" / "_built"
    assert "compiled the kernels of the first calls into" in out.stdout and str(built) in out.stdout

    got = _calls(root, tmp_path / "empty", _FIRST)
    assert got["compiled"] == [], got["compiled"]
    assert got["out"] == _answers()

    before = _listing(built)
    cache = tmp_path / "cache"
    first = _calls(root, cache, "crc,nnls512")
    assert first["compiled"] == ["crc32c_update"], first["compiled"]  # the CRC's kernel, not nnls'
    assert _listing(built) == before
    cached = [p.name for p in cache.rglob("*.nbi")]
    assert cached and all(name.startswith("crc32c.crc32c_update-") for name in cached), cached
    again = _calls(root, cache, "crc")
    assert again["compiled"] == [] and again["out"]["crc"] == first["out"]["crc"] == 0xE3069283

    # NUMBA_CPU_NAME stands in for another machine: the package's kernels (this CPU's) are not
    # loaded; the call compiles and answers the same
    there = _calls(root, tmp_path / "there", "spfhp", NUMBA_CPU_NAME="generic")
    assert "spfhp" in there["compiled"] and there["out"]["spfhp"] == _answers(spfhp=True)["spfhp"]


def _answers(spfhp=False):
    """What this process's packlib (its own kernels) answers to _CALLS."""
    import numpy as np

    import packlib

    lengths = np.clip(np.rint(np.random.default_rng(0).lognormal(np.log(512), 0.9, _N)), 1, 2048).astype(np.int64)
    h = packlib.histogram(lengths, 2048)
    if spfhp:
        return {"spfhp": packlib.spfhp_pack(h).num_packs}
    return {
        "nnls512": packlib.nnls_pack(packlib.datasets.wikipedia_512()).num_packs,
        "nnls2048": packlib.nnls_pack(h, max_sequences_per_pack=None).num_packs,
        "compare": [row.packs for row in packlib.compare(h, progress=False, time_limit=None)],
        "bfd": packlib.pack(lengths, 2048, method="bfd", max_sequences_per_pack=None).num_packs,
        "assign": int(packlib.lpfhp_pack(h).assign(lengths, seed=0).shuffled(seed=0).indices[:50].sum()),
    }


def test_a_changed_module_compiles_its_kernels_again(tmp_path):
    root = _copy_package(tmp_path / "installed")
    env = _env(root, tmp_path / "unused")
    code = ("import sys; from packlib._precompile import compile_into_package; "
            "compile_into_package(['kernel:greedy.spfhp'], processes=1)")
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=600, cwd=str(tmp_path))
    before = _calls(root, tmp_path / "a", "spfhp")
    assert before["compiled"] == []
    greedy = root / "packlib" / "_kernels" / "greedy.py"
    greedy.write_text(greedy.read_text() + "\n# edited after compiling\n")
    after = _calls(root, tmp_path / "b", "spfhp")
    assert "spfhp" in after["compiled"] and after["out"] == before["out"], after


def test_an_unwritable_package_is_refused_naming_what_to_do(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(OSError, match="as the user who installed packlib.*packlib.warmup"):
        _precompile._check_writable(str(blocker / "_built"))


def test_compile_checks_its_arguments(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["compile", "--processes", "0"])
    assert exc.value.code == 2
    assert "--processes: must be in [1, 256], got 0" in capsys.readouterr().err


def test_the_compile_units_are_known_units():
    from packlib import _warmup

    with pytest.raises(ValueError, match="unknown compile unit"):
        _warmup.run_unit("kernel:no.such")
    for unit in _precompile.UNITS:
        kind, _, name = unit.partition(":")
        assert kind in ("kernel", "family", "assign"), unit
    assert set(_warmup.family_units()) >= {u for u in _precompile.UNITS if u.startswith("family:")}
