"""Collection settings for the whole repository (``python -m pytest`` collects ``tests/`` and
the doctests of ``packlib/``, see ``[tool.pytest.ini_options]`` in ``pyproject.toml``).

A module whose docstring examples need an optional third-party package is left out of
doctest collection when that package is not installed, so the rest of the suite still runs;
the tests of such modules skip on their own in ``tests/``.
"""
from __future__ import annotations

import importlib.util
import pathlib

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


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None  # finds it without importing it
    except (ImportError, ValueError):
        return False


collect_ignore = [
    path
    for path, needs in OPTIONAL_MODULES.items()
    if (_HERE / path).exists() and not all(_installed(n) for n in needs)
]
