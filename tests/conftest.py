import os
import pathlib
import signal

import pytest
from hypothesis import HealthCheck, settings

# Kernels compile on first use, so the first example of a property may be slow.
settings.register_profile(
    "default", deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "thorough", deadline=None, max_examples=1000, suppress_health_check=[HealthCheck.too_slow]
)
# CI: the same examples on every run (a landing must not depend on the draw); developers'
# runs keep exploring new examples, and any failure found is kept in .hypothesis/
settings.register_profile(
    "ci", deadline=None, max_examples=60, derandomize=True, database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "default"))

# Golden data lives in the repository, so every clone runs the same tests.
DATA_DIR = pathlib.Path(__file__).resolve().parent / "data"
GOLDEN_DIR = DATA_DIR / "reference-outputs"


def reference_plan_files() -> list[pathlib.Path]:
    """The reference SPFHP/LPFHP plans on the bundled Wikipedia histogram (one JSON file per
    method and depth: ``strategies``, ``repeat_counts``, ``n_packs``), sorted by name.

    Raises if there are none, so a broken checkout fails instead of parametrizing nothing.
    """
    files = sorted(GOLDEN_DIR.glob("*.json"))
    if not files:
        raise FileNotFoundError(f"no golden reference plans in {GOLDEN_DIR}")
    return files


# for ``@pytest.mark.parametrize("path", REFERENCE_OUTPUTS, ...)``
REFERENCE_OUTPUTS = reference_plan_files()


@pytest.fixture(autouse=True, scope="session")
def _stop_signals_reach_the_runs_under_test():
    """A shell that starts the tests in the background (``cmd &``) ignores SIGINT in them, and
    so in every process they start; a pipeline run keeps an ignored signal ignored (as under
    ``nohup``), so a test that stops a run with SIGINT would wait for nothing. The tests'
    processes handle SIGINT as an interactive run does; the shell's setting comes back after."""
    before = signal.getsignal(signal.SIGINT)
    if before is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    if before is signal.SIG_IGN:
        signal.signal(signal.SIGINT, before)
