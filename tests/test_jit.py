"""The numba policy's one visible behaviour: the first compilation says so, to a person."""
import os
import subprocess
import sys
import types

from packlib import _jit

_CALL = """
import sys
sys.modules['ipykernel'] = type(sys)('ipykernel')  # as in a notebook
import numpy as np
from packlib._kernels.growable import grow1  # a small kernel: a compile of a second or so
grow1(np.zeros(2, np.int64), 5, 1)
grow1(np.zeros(2, np.float64), 5, 1)  # a second signature: compiled, not announced again
"""


def test_first_compilation_is_announced_once_in_a_notebook_and_not_when_loaded(tmp_path):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    runs = [subprocess.run([sys.executable, "-c", _CALL], env=env, capture_output=True, text=True, timeout=300)
            for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), runs[0].stderr[-2000:] + runs[1].stderr[-2000:]
    assert runs[0].stderr.count("packlib: compiling kernels") == 1, runs[0].stderr  # a cold cache compiles
    assert runs[1].stderr == ""  # the same kernels, now loaded from the cache


def _event(module):
    dispatcher = types.SimpleNamespace(py_func=types.SimpleNamespace(__module__=module))
    return types.SimpleNamespace(data={"dispatcher": dispatcher})


def test_notice_only_for_packlib_kernels_and_only_to_a_person(monkeypatch, capsys):
    monkeypatch.setattr(_jit._CompileNotice, "said", False)
    notice = _jit._CompileNotice()
    monkeypatch.setattr(_jit, "_interactive", lambda: False)
    notice.on_start(_event("packlib._kernels.greedy"))  # a test's pipe: silent
    monkeypatch.setattr(_jit, "_interactive", lambda: True)
    notice.on_start(_event("user_code"))  # the user's own numba function: not ours to announce
    assert capsys.readouterr().err == ""
    notice.on_start(_event("packlib._kernels.greedy"))
    notice.on_start(_event("packlib._kernels.nnls"))
    assert capsys.readouterr().err.count("packlib: compiling kernels") == 1


def test_a_private_kernel_refuses_python_and_is_reached_through_a_caller():
    """``_name`` kernels are compiled without a CPython entry point: a call from Python is a
    TypeError naming the kernel (never a jump into a missing entry point), and
    python_callable reaches the compiled kernel through a small kernel that calls it."""
    import numpy as np
    import pytest

    from packlib._kernels import spread

    with pytest.raises(TypeError, match=r"packlib\._kernels\.spread\._bitset_levels is called only by other kernels"):
        spread._bitset_levels(9)
    off = _jit.python_callable(spread._bitset_levels)(9)
    assert isinstance(off, np.ndarray) and off[0] == 0 and off.size >= 2
