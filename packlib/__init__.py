"""packlib: packing algorithms for ML training data.

Histogram packing (SPFHP, LPFHP, NNLSHP and a near-optimal packer with a lower-bound
certificate), per-sequence first/best-fit decreasing, blended-dataset indices, readahead
bucketing, and adapters to the formats trainers read.

>>> import packlib
>>> plan = packlib.nnls_pack(packlib.datasets.wikipedia_512())   # doctest: +SKIP
>>> packs = plan.assign(lengths, seed=0)                          # doctest: +SKIP

``import packlib`` is cheap: the public names are loaded on first use (importing numba
is slow enough to matter to a command-line tool), and kernels compile on their first call,
then come from numba's on-disk cache. Call :func:`packlib.warmup` to pay the compile cost up front.
"""
from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

from . import _hooks
from ._version import __version__


def _lower_bound(histogram, max_sequence_length, max_sequences_per_pack):
    from .optimal import lower_bound

    return lower_bound(histogram, max_sequence_length, max_sequences_per_pack)


_hooks.lower_bound = _lower_bound  # PackingPlan.bound, for plans whose packer computed none

# public name -> module that defines it (relative to this package)
_EXPORTS = {
    "histogram": "packing",
    "spfhp_pack": "packing",
    "lpfhp_pack": "packing",
    "nnls_pack": "packing",
    "ffd_pack": "packing",
    "bfd_pack": "packing",
    "PackingPlan": "packing",
    "Packs": "packing",
    "warmup": "_warmup",
    "pack": "methods",
    "lower_bound": "optimal",
    "optimal_pack": "optimal",
    "LowerBound": "optimal",
    "Certificate": "optimal",
    "blend": "blending",
    "blend_exhaustive": "blending",
    "BlendedIndex": "blending",
    "BucketedReadaheadBatchIterator": "bucketing",
    "bucket": "bucketing",
    "pack_stream": "bucketing",
    "Batches": "bucketing",
    "PackStream": "bucketing",
    "compare": "comparison",
    "balance": "balancing",
    "Schedule": "balancing",
    "transformer_cost": "balancing",
    "fit_cost": "balancing",
    "vision_cost": "balancing",
    "round_robin": "balancing",
    "BalancedBatchSampler": "balancing",
    "ComparisonTable": "comparison",
    "plan_cp_step": "context_parallel",
    "CPStep": "context_parallel",
}
_SUBMODULES = ("datasets", "formats", "methods", "plot", "torch")

__all__ = sorted(_EXPORTS) + list(_SUBMODULES)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is not None:
        value = getattr(import_module(f".{module}", __name__), name)
    elif name in _SUBMODULES:
        value = import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module 'packlib' has no attribute {name!r}")
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # for type checkers and IDEs; never executed
    from . import datasets, formats, methods, plot  # noqa: F401
    from .methods import pack  # noqa: F401
    from ._warmup import warmup  # noqa: F401
    from .blending import BlendedIndex, blend, blend_exhaustive  # noqa: F401
    from .bucketing import Batches, BucketedReadaheadBatchIterator, PackStream, bucket, pack_stream  # noqa: F401
    from .balancing import BalancedBatchSampler, Schedule, balance, fit_cost, round_robin, transformer_cost  # noqa: F401
    from .balancing import vision_cost  # noqa: F401
    from .comparison import ComparisonTable, compare  # noqa: F401
    from .context_parallel import CPStep, plan_cp_step  # noqa: F401
    from .optimal import Certificate, LowerBound, lower_bound, optimal_pack  # noqa: F401
    from .packing import (  # noqa: F401
        PackingPlan,
        Packs,
        bfd_pack,
        ffd_pack,
        histogram,
        lpfhp_pack,
        nnls_pack,
        spfhp_pack,
    )
