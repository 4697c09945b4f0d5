"""Collection settings for the whole repository (``python -m pytest`` collects ``tests/`` and
the doctests of ``packlib/``, see ``[tool.pytest.ini_options]`` in ``pyproject.toml``).

A newcomer's machine has only what ``pip install -e ".[test]"`` brings: no torch, no
transformers, no TRL. So:

- a module whose docstring examples need an optional package is left out of doctest
  collection when that package is missing (``OPTIONAL_MODULES`` for the package; for the
  helper modules under ``tests/``, read from their top-level imports), and the tests of such
  modules skip on their own;
- a test that skips because a package is missing says how to install it;
- with ``PACKLIB_RECORD_SKIPPED=FILE`` set, the node ids of every test skipped and every module
  left out are written to FILE, so that ``.ci/run`` can add the model stack and run exactly
  those.
"""
from __future__ import annotations

import ast
import importlib.util
import os
import pathlib
import re

import pytest

_HERE = pathlib.Path(__file__).resolve().parent

# module or package under packlib/ -> the top-level packages its examples need
OPTIONAL_MODULES = {
    "packlib/plot.py": ("matplotlib",),
    "packlib/torch": ("torch",),
    "packlib/formats/hdf5.py": ("h5py",),
    "packlib/arrow.py": ("pyarrow",),
    "packlib/formats/arrow.py": ("pyarrow",),
    "packlib/formats/megatron_sft.py": ("pyarrow",),
    "packlib/hf.py": ("datasets", "pyarrow"),
    "packlib/formats/hf.py": ("datasets", "pyarrow"),
    "packlib/ray.py": ("ray",),
}

# what to install for a package the tests may miss (the model stack is what .ci/run adds)
INSTALL = {
    "torch": "pip install torch==2.13.0 (the CPU build; an unpinned torch pulls a CUDA build)",
    "transformers": "pip install transformers==5.24.0",
    "accelerate": "pip install accelerate==1.15.0",
    "torchtune": "pip install torchtune==0.6.1 torchao==0.13.0",
    "torchao": "pip install torchao==0.13.0",
    "trl": "pip install --no-deps trl==1.16.0",
    "megatron": "pip install --no-deps megatron-bridge==0.3.1 megatron-core==0.16.1",
    "torchdata": "pip install torchdata",
    "flash_attn": "flash-attention needs a CUDA GPU",
    "ray": "pip install ray (the pipeline's Ray engine; CI's model stack has it)",
}


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None  # finds it without importing it
    except (ImportError, ValueError):
        return False


def _top_level_imports(path: pathlib.Path) -> set[str]:
    """The packages a module imports when it is imported (module-level ``import`` statements,
    not those inside functions or ``try`` blocks)."""
    names = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def _helpers_missing_a_package() -> list[str]:
    """Helper modules under ``tests/`` (not ``test_*.py``, which skip on their own) whose
    import needs a package that is not installed: their doctests cannot be collected."""
    out = []
    for path in sorted((_HERE / "tests").glob("*.py")):
        if path.name.startswith("test_") or path.name == "conftest.py":
            continue
        if any(name in INSTALL and not _installed(name) for name in _top_level_imports(path)):
            out.append(str(path.relative_to(_HERE)))
    return out


collect_ignore = [
    path
    for path, needs in OPTIONAL_MODULES.items()
    if (_HERE / path).exists() and not all(_installed(n) for n in needs)
] + _helpers_missing_a_package()


# ---------------------------------------------------------------------------------------------
# Skips say what to install; .ci/run reads which tests skipped.

_MISSING = re.compile(r"could not import '([\w.]+)'|No module named '([\w.]+)'")


def _with_install_hint(reason: str) -> str:
    found = _MISSING.search(reason)
    name = next((g for g in found.groups() if g), "") if found else ""
    hint = INSTALL.get(name.split(".")[0])
    return f"{reason} [{hint}]" if hint and hint not in reason else reason


def _add_hint(report) -> None:
    if report.skipped and isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
        path, line, reason = report.longrepr
        report.longrepr = (path, line, _with_install_hint(reason))


_skipped: list[str] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _add_hint(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    _add_hint(outcome.get_result())


def pytest_collectreport(report):
    if report.skipped:
        _skipped.append(report.nodeid)


def pytest_runtest_logreport(report):
    if report.skipped and not hasattr(report, "wasxfail"):
        _skipped.append(report.nodeid)


def pytest_sessionfinish(session):
    record = os.environ.get("PACKLIB_RECORD_SKIPPED")
    if record and not hasattr(session.config, "workerinput"):  # pytest-xdist: its controller sees every report
        ids = dict.fromkeys(collect_ignore + [n for n in _skipped if n])  # in order, once each
        pathlib.Path(record).write_text("".join(f"{n}\n" for n in ids))
