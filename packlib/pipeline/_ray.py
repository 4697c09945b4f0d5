"""The ``ray`` engine: the same tasks as Ray tasks (``pip install 'packlib[ray]'``).

With no address, a local Ray runtime with ``num_cpus=workers`` is started (and stopped
at the end); with ``ray_address`` (e.g. ``"auto"`` or ``"ray://head:10001"``) the run
joins that cluster. If Ray is already initialised in this process, it is used as it is.
Every node must see the inputs and the output directory at the same paths (a shared
file system) and have packlib installed.
"""
from __future__ import annotations

import os

from .._progress import progress_bar
from . import _signals
from ._errors import PipelineError, WorkerDied

__all__ = ["RayEngine"]

_POLL_SECONDS = 0.1


def _import_ray():
    try:
        import ray
    except ImportError:
        raise PipelineError("the ray engine needs Ray: pip install 'packlib[ray]' (or ray[data])") from None
    return ray


class RayEngine:
    name = "ray"

    def __init__(self, workers: int | None, address: str | None = None):
        ray = _import_ray()
        self._ray = ray
        self._started = False
        self._reaper = None
        if not ray.is_initialized():
            before = set(_descendants(os.getpid()))  # the caller's own children are not Ray's
            if address:
                ray.init(address=address, log_to_driver=False)
            else:
                # the directory that holds the packlib package (workers import it from there)
                root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
                path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
                ray.init(num_cpus=int(workers) if workers else None, include_dashboard=False, log_to_driver=False,
                         runtime_env={"env_vars": {"PYTHONPATH": path}})
            self._started = True
            if not address:
                self._reaper = _start_reaper(before)
        self.workers = int(ray.available_resources().get("CPU", 1)) if workers is None else int(workers)
        self._remote = None

    def map(self, fn, tasks, desc: str, progress=None, unit: str = "task"):
        from ._tasks import run_in_worker

        ray = self._ray
        if self._remote is None:
            # tasks are idempotent (every file is written under a temporary name, then renamed),
            # so a task whose worker died is retried
            self._remote = ray.remote(num_cpus=1, max_retries=2)(run_in_worker)
        tasks = list(tasks)
        refs = [self._remote.options(name=fn.__name__).remote(fn, *t) for t in tasks]
        pending = list(refs)
        try:
            with progress_bar(len(refs), desc, progress, unit=unit) as bar:
                while pending:
                    # Ray's own wait records a signal without returning: a short wait, then the safe point
                    done, pending = ray.wait(pending, num_returns=1, timeout=_POLL_SECONDS)
                    _signals.check()
                    ray.get(done)  # raise the first failure at once
                    bar.update(len(done))
            return ray.get(refs)
        except ray.exceptions.RayTaskError as exc:
            _cancel(ray, pending)
            cause = getattr(exc, "cause", None)
            if isinstance(cause, BaseException):
                raise cause from None
            raise PipelineError(f"a Ray task failed during {desc}: {str(exc).splitlines()[0]}") from None
        except (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError, ray.exceptions.ObjectLostError) as exc:
            _cancel(ray, pending)
            raise WorkerDied(f"a Ray worker died during {desc} and retries ran out ({type(exc).__name__}); "
                             "nothing was written") from None
        except BaseException:  # interrupted (SIGINT, SIGTERM, SIGHUP): the run's tasks end with it
            _cancel(ray, pending)
            raise

    def close(self, abort: bool = False) -> None:
        """Stop the Ray instance this engine started (a joined cluster keeps running); a
        failed map has cancelled its own tasks already, so ``abort`` changes nothing here."""
        if self._reaper is not None:
            self._reaper.kill()  # the run ends in order: ray.shutdown() stops the local instance
            self._reaper.wait()
            self._reaper = None
        if self._started:
            self._ray.shutdown()
            self._started = False


def _cancel(ray, refs, timeout: float = 60.0) -> None:
    """Kill the tasks of ``refs`` and wait until they have ended: a cancel is only a request,
    and a task still running would write into the work directory the caller removes next
    (on a joined cluster nothing else stops it)."""
    for r in refs:
        ray.cancel(r, force=True)
    if refs:
        ray.wait(refs, num_returns=len(refs), timeout=timeout)


# A local Ray instance's own helpers (its dashboard and runtime-env agents) outlive a driver
# that was killed (SIGKILL, the OOM killer) by about a minute. This watcher, started with the
# instance, ends them within a second of the driver's death (Linux; it waits on a pidfd).
_REAPER = """
import os, select, signal, sys
driver, pids = int(sys.argv[1]), [int(p) for p in sys.argv[2:]]
select.select([os.pidfd_open(driver)], [], [])
for pid in pids:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
"""


def _descendants(root: int) -> list[int]:
    """The processes below ``root`` (from /proc; empty where there is none)."""
    parent = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for d in names:
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat", "rb") as fh:
                    stat = fh.read()
            except OSError:
                continue
            parent[int(d)] = int(stat[stat.rindex(b")") + 2:].split()[1])
    out, frontier = [], [root]
    while frontier:
        kids = [p for p, pp in parent.items() if pp in frontier]
        out += kids
        frontier = kids
    return out


def _start_reaper(before: set):
    """The watcher of the local Ray instance's processes (those started since ``before``)."""
    import subprocess
    import sys

    if not hasattr(os, "pidfd_open"):
        return None
    pids = [p for p in _descendants(os.getpid()) if p not in before]
    if not pids:
        return None
    return subprocess.Popen([sys.executable, "-c", _REAPER, str(os.getpid()), *map(str, pids)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
