"""Packaging: one version, the wheel's contents, the extras, the scipy floor (the fast HiGHS
path is taken), and warmup() compiling every kernel family."""
import importlib
import importlib.metadata as metadata
import os
import pathlib
import shutil
import subprocess
import sys
import zipfile

import numpy as np
import pytest
from packaging.requirements import Requirement

import packlib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _requirements(extra=None):
    """The installed distribution's requirements, for the extra ``extra`` (None: the base)."""
    reqs = [Requirement(line) for line in metadata.requires("packlib") or []]
    if extra is None:
        return [r for r in reqs if r.marker is None]
    return [r for r in reqs if r.marker is not None and r.marker.evaluate({"extra": extra})
            and not r.marker.evaluate({"extra": ""})]


# --------------------------------------------------------------------------- version


def test_version_is_the_installed_distributions():
    assert packlib.__version__ == metadata.version("packlib")


def test_version_is_written_once():
    from packlib import _version

    assert packlib.__version__ == _version.__version__
    init = (ROOT / "packlib" / "__init__.py").read_text()
    assert _version.__version__ not in init, "packlib/__init__.py repeats the version"
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject
    assert f'"{_version.__version__}"' not in pyproject, "pyproject.toml repeats the version"


def test_import_and_version_do_not_import_numba():
    code = "import sys, packlib; packlib.__version__; assert 'numba' not in sys.modules, 'numba imported'"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


# ----------------------------------------------------------------------------- wheel


@pytest.mark.packaging
def test_wheel_holds_py_typed_license_and_data(tmp_path):
    """Builds the wheel offline (no build isolation: setuptools >= 77 comes with the test
    extra) from a copy of the sources, so the work tree gets no build/ or egg-info."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "packlib", src / "packlib",
                    ignore=shutil.ignore_patterns("__pycache__", "*.nbi", "*.nbc", "*.pyc"))
    out = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation", "--no-index",
         "--disable-pip-version-check", "-q", "-w", str(tmp_path / "dist")],
        capture_output=True, text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    (wheel,) = (tmp_path / "dist").glob("packlib-*.whl")
    assert wheel.name.startswith(f"packlib-{packlib.__version__}-")
    names = zipfile.ZipFile(wheel).namelist()
    assert "packlib/py.typed" in names
    assert "packlib/_version.py" in names
    assert "packlib/datasets/wikipedia_512_hist.txt" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), names
    assert not any(n.startswith(("tests/", "conftest")) for n in names)
    meta = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: MIT" in meta
    assert "License-File: LICENSE" in meta


def test_license_file_is_mit():
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License") and "Copyright (c) 2026 the packlib authors" in text


# ---------------------------------------------------------------------------- extras


def test_all_extra_holds_every_extra():
    extras = set(metadata.metadata("packlib").get_all("Provides-Extra") or [])
    assert {"hdf5", "tfrecord", "progress", "plot", "pandas", "torch", "arrow", "hf", "ray"} <= extras
    (req,) = [r for r in _requirements("all") if r.name == "packlib"]
    assert req.extras == extras - {"all", "test"}


def _declared_extras():
    """``pyproject.toml``'s extras as written (the installed metadata may be another checkout's)."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {k: [Requirement(r) for r in v] for k, v in project["optional-dependencies"].items()}


def test_the_trainer_extras_install_the_supported_range():
    """packlib[torch] brings transformers and accelerate, packlib[trl] TRL too (what the README's
    trainer blocks import), each over the range packlib's trainers check at run time; all
    names every extra but test."""
    from packlib._compat import SUPPORTED

    extras = _declared_extras()
    torch_, trl_ = ({r.name: r for r in extras[k]} for k in ("torch", "trl"))
    assert {"torch", "transformers", "accelerate"} <= set(torch_) and {"packlib", "trl"} <= set(trl_)
    assert trl_["packlib"].extras == {"torch"}
    for name, req in (("transformers", torch_["transformers"]), ("accelerate", torch_["accelerate"]),
                      ("trl", trl_["trl"])):
        (low, high, _) = SUPPORTED[name]
        assert req.specifier.contains(f"{low[0]}.{low[1]}.0"), req
        assert not req.specifier.contains(f"{low[0]}.{low[1] - 1}.9") if low[1] else True, req
        assert not req.specifier.contains(f"{high[0]}.{high[1]}.0"), req
    (everything,) = extras["all"]
    assert everything.extras == set(extras) - {"all", "test"}


def test_test_extra_holds_the_formats_dependencies():
    names = {r.name for r in _requirements("test")}
    assert {"pytest", "hypothesis", "pyarrow", "datasets", "pandas", "setuptools"} <= names


# ---------------------------------------------------------------- scipy and HiGHS path


def test_scipy_floor_has_the_highs_bindings():
    """scipy 1.15.0 is the first release with ``scipy.optimize._highspy`` (1.14.1 ships only
    the older Cython ``scipy.optimize._highs`` wrapper); a lower floor lets users silently
    get a cold linprog solve per column-generation round."""
    (scipy,) = [r for r in _requirements() if r.name == "scipy"]
    assert not scipy.specifier.contains("1.14.1") and scipy.specifier.contains("1.15.0"), scipy


def test_fast_highs_path_is_taken(monkeypatch):
    """Fails if the installed scipy makes optimal.py fall back to linprog per round."""
    from packlib.optimal import _lp, _solver, _tuning

    assert _tuning.USE_HIGHS_BINDINGS
    made = []

    class Recorded(_lp._Master):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(_solver, "_Master", Recorded)
    h = np.array([3, 5, 3, 4, 4, 0, 3, 2, 1, 2, 2, 2, 4, 4])  # the heuristics miss the bound: LP needed
    packlib.lower_bound(h, max_sequence_length=h.size, max_sequences_per_pack=3)
    assert made, "lower_bound built no master LP: this test no longer sees the LP path"
    assert all(m.highs is not None for m in made), "HiGHS bindings unavailable: the slow linprog path was taken"


# ---------------------------------------------------------------------------- warmup

# kernels that warmup() may leave uncompiled although code outside packlib/_kernels calls
# them, each with the reason
NOT_WARMED: dict[str, str] = {
    "csr.canonical_rows": "PackingPlan's canonical form takes it only for plans too large for numpy "
                          "(packlib._plan.DENSE_CANONICAL_ENTRIES); warmup's tiny plans never are",
}

# the kernels of blend(method="smooth") on two threads (packlib/blending/_smooth.py)
SMOOTH_THREADED = [f"blend_smooth.{k}" for k in ("smooth_setup", "block_deadlines", "block_jobs", "place_block", "finish")]

# kernels called from Python in a way the scan below cannot see
CALLED_BY_NAME = {
    "binpack.ffd", "binpack.bfd",  # packing._per_sequence: getattr(binpack, kernel_name)
}


def _entry_kernels() -> set[str]:
    """``"module.kernel"`` for every kernel of packlib._kernels that code outside
    packlib/_kernels names (``from ._kernels.m import k`` or ``from ._kernels import m``
    then ``m.k``). Kernels only called by other kernels are compiled into their callers
    (and, loaded from numba's cache, never compiled on their own), so they are not listed."""
    import ast

    out = set()
    for path in (ROOT / "packlib").rglob("*.py"):
        if "_kernels" in path.relative_to(ROOT / "packlib").parts:
            continue
        tree = ast.parse(path.read_text(), str(path))
        aliases = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                parts = node.module.split(".")
                if parts[-1] == "_kernels":
                    for a in node.names:
                        aliases[a.asname or a.name] = a.name
                elif len(parts) >= 2 and parts[-2] == "_kernels":
                    out.update(f"{parts[-1]}.{a.name}" for a in node.names)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
                out.add(f"{aliases[node.value.id]}.{node.attr}")
    return out | CALLED_BY_NAME


def test_no_kernel_called_from_python_is_private():
    """A kernel named ``_name`` has no CPython entry point (packlib._jit): Python code calls
    only public ones."""
    entry = _entry_kernels()
    assert len(entry) >= 20, sorted(entry)
    private = sorted(k for k in entry if k.split(".")[-1].startswith("_"))
    assert not private, f"kernels called from Python whose names say only kernels call them: {private}"


_COLD_KERNELS = """
import importlib, json, pkgutil, sys
from numba.core.registry import CPUDispatcher
import packlib, packlib._kernels
packlib.warmup()
cold, all_, several = [], [], {}
for info in pkgutil.iter_modules(packlib._kernels.__path__):
    mod = importlib.import_module("packlib._kernels." + info.name)
    for name, obj in vars(mod).items():
        if isinstance(obj, CPUDispatcher) and obj.py_func.__module__ == mod.__name__:
            all_.append(info.name + "." + name)
            if not obj.signatures:
                cold.append(info.name + "." + name)
            if len(obj.overloads) > 1:
                several[info.name + "." + name] = [str(sig) for sig in obj.overloads]
print(json.dumps({"cold": cold, "all": all_, "several": several}))
"""

# Kernels that warmup() compiles more than once, and why. Any other second compile is the
# unintended kind (a literal constant or a read-only array reaching a kernel), each costing a
# whole compile of the kernel and its callees on every new machine.
SEVERAL_OVERLOADS = {
    "greedy._greedy": "SPFHP and LPFHP: a literal flag folds the other's branches away",
    "greedy._chain": "a literal -1 (no parent) folds the root case",
    "greedy._new_node": "a literal -1 (no parent) folds the root case",
    "binpack._set_present": "a literal flag: set or clear, each branch-free",
    "megatron_sft._pickled_size": "int32 and int64 token ids",
    "megatron_sft.pickled_packs": "int32 and int64 token ids",
    "segment_hash._hash_one": "int32 and int64 token ids",
    "segment_hash.hash_segments": "int32 and int64 token ids",
    "segment_hash.hash_packed": "int32 and int64 token ids",
    "optimal.max_pack_value": "float values (LP duals) and integer ones",
    "formats._put_varint": "int64 and uint64 values",
    "binpack.bfd": "read-only and writable lengths",
    "binpack.decreasing_order": "read-only and writable lengths",
    "csr.csr_take": "read-only and writable CSR arrays",
    "arrow.gather_values": "read-only and writable offsets",
    "crc32c.crc32c_update": "read-only and writable buffers",
}


@pytest.fixture(scope="module")
def warmed_kernels():
    """The kernels of packlib._kernels after warmup() in a fresh interpreter (so nothing else
    has compiled anything): which are still cold, and which have several signatures."""
    import json

    out = subprocess.run([sys.executable, "-c", _COLD_KERNELS], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_warmup_compiles_each_kernel_once_but_where_listed(warmed_kernels):
    """Every signature of a kernel is a compile on each new machine: warmup() (as the library's
    calls) gives each kernel one, but for the ones listed with their reason."""
    several = warmed_kernels["several"]
    unlisted = {name: sigs for name, sigs in several.items() if name not in SEVERAL_OVERLOADS}
    assert not unlisted, ("kernels compiled more than once by warmup() (a literal argument? pass a typed "
                          f"value, e.g. np.int64(0); a read-only array?): {unlisted}")
    # (a kernel that only kernels call shows its signatures only where the cache was cold: its
    # callers load from the cache whole; so the list is checked for names, not for use)
    stale = sorted(set(SEVERAL_OVERLOADS) - set(warmed_kernels["all"]))
    assert not stale, f"SEVERAL_OVERLOADS names no kernel: {stale}"


def test_warmup_compiles_every_kernel_called_from_python(warmed_kernels):
    """After warmup() every kernel the Python code calls has at least one compiled signature."""
    result = warmed_kernels
    entry = _entry_kernels() & set(result["all"])
    assert len(entry) >= 20, sorted(entry)  # the scan still finds the kernels
    not_warmed = dict(NOT_WARMED)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if cpus < 2:
        not_warmed.update(dict.fromkeys(SMOOTH_THREADED, "blend(method='smooth') uses them on two CPUs only"))
    cold = sorted(entry & set(result["cold"]) - set(not_warmed))
    assert not cold, f"kernels called from Python that warmup() does not compile: {cold}"
    stale = sorted(set(NOT_WARMED) - entry)
    assert not stale, f"NOT_WARMED names no kernel called from Python: {stale}"
