"""Optional progress bars (the ``progress`` extra installs tqdm).

A bar is shown only when asked for (``progress=True``), or with ``progress=None`` when the
work is large enough to be worth a bar and stderr is a terminal; without tqdm nothing is
shown. Kernels never report progress themselves: callers run them in chunks and update.
"""
from __future__ import annotations

import sys


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass


def progress_bar(total: int, desc: str, enabled: bool | None = None, unit: str = "it"):
    """A tqdm bar over ``total`` units, or a do-nothing stand-in with the same methods.

    ``enabled=None`` means: show it if stderr is a terminal and tqdm is installed.
    """
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled:
        return _NoBar()
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return _NoBar()
    return tqdm(total=total, desc=desc, unit=unit, unit_scale=True, leave=False)
