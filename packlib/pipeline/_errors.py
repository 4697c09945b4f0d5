"""The pipeline's exceptions."""
from __future__ import annotations

__all__ = ["PipelineError", "InputError", "WorkerDied", "VerifyError"]


class PipelineError(RuntimeError):
    """A pipeline run failed; nothing was written to the output directory."""


class InputError(ValueError):
    """Bad input: a missing column, an unreadable or truncated file, an over-long sequence.
    The message names the file and what to do."""


class WorkerDied(PipelineError):
    """A worker process died mid-run (killed, out of memory, crashed)."""


class VerifyError(PipelineError):
    """The written output does not hold every input sequence exactly once."""
