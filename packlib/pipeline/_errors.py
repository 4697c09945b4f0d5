"""The pipeline's exceptions."""
from __future__ import annotations

import signal

__all__ = ["PipelineError", "InputError", "WorkerDied", "VerifyError", "Interrupted", "report_interrupt"]


class PipelineError(RuntimeError):
    """A pipeline run failed; nothing was written to the output directory."""


class InputError(ValueError):
    """Bad input: a missing column, an unreadable or truncated file, an over-long sequence.
    The message names the file and what to do."""


class WorkerDied(PipelineError):
    """A worker process died mid-run (killed, out of memory, crashed)."""


class VerifyError(PipelineError):
    """The written output does not hold every input sequence exactly once."""


class Interrupted(KeyboardInterrupt):
    """The run was stopped by a signal (SIGINT, SIGTERM, SIGHUP); nothing was written.
    ``signum`` is the signal; a command exits with status ``128 + signum``."""

    def __init__(self, signum: int):
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


def report_interrupt(exc: KeyboardInterrupt) -> int:
    """For a command: one line on stderr for a run stopped by Ctrl-C, SIGTERM or SIGHUP,
    and the exit status a shell gives that signal (``128 + signum``)."""
    import sys

    signum = int(getattr(exc, "signum", signal.SIGINT))
    print(f"interrupted ({signal.Signals(signum).name}); nothing was written", file=sys.stderr)
    return 128 + signum


for _cls in (PipelineError, InputError, WorkerDied, VerifyError, Interrupted):
    _cls.__module__ = "packlib.pipeline"  # tracebacks and pickles name the public path
