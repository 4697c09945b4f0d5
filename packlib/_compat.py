"""The one place where packlib reads what transformers, TRL, Accelerate and torch do not
document as public: their private attributes, their private methods that packlib's trainers
override or call, and their internal modules. Nothing here imports a host library at import
time (each is imported, or looked up in ``sys.modules``, when a function runs), so every floor
may use it. ``tests/test_lint.py`` keeps these names out of every other module; a new
transformers or TRL that renames one breaks here, and the version check of
:mod:`packlib.torch.trainers` names the versions this table was written for.

>>> sorted(HOST_METHODS)
['kl_logps', 'num_items_in_batch', 'per_token_logps']
>>> accelerate_processes() is None or len(accelerate_processes()) == 2
True
"""
from __future__ import annotations

import sys
from importlib import metadata

#: packlib's name -> the private method of the host trainer that packlib's trainers override
#: (transformers' ``Trainer``, TRL's ``KTOTrainer`` and ``GRPOTrainer``)
HOST_METHODS = {
    "num_items_in_batch": "_get_num_items_in_batch",      # transformers.Trainer: a step's loss denominator
    "kl_logps": "_compute_kl_logps",                      # trl.KTOTrainer: the KL term's log-probs
    "per_token_logps": "_get_per_token_logps_and_entropies",  # trl.GRPOTrainer: every log-prob it computes
}


def with_host_methods(cls):
    """Class decorator: each ``_packlib_<name>`` method of ``cls`` (``name`` in
    :data:`HOST_METHODS`) also under the host's private name, which the host calls."""
    for name, host in HOST_METHODS.items():
        fn = cls.__dict__.get(f"_packlib_{name}")
        if fn is not None:
            setattr(cls, host, fn)
    return cls


def host_method(obj, cls, name: str):
    """The host's own ``name`` method (:data:`HOST_METHODS`) after ``cls`` in ``obj``'s MRO:
    ``super(cls, obj).<private name>``."""
    return getattr(super(cls, obj), HOST_METHODS[name])


def tp_size(trainer) -> int:
    """TRL's tensor-parallel degree of ``trainer`` (its ``_tp_size``), 1 without."""
    return getattr(trainer, "_tp_size", 1) or 1


def entropy_bonus(trainer) -> bool:
    """Whether TRL's ``GRPOTrainer`` trains on the entropies (its ``_entropy_bonus_enabled``)."""
    return bool(getattr(trainer, "_entropy_bonus_enabled", 0))


def attn_implementation(model) -> str:
    """The attention a transformers model runs (``config._attn_implementation``), or ``""``."""
    return str(getattr(getattr(model, "config", None), "_attn_implementation", "") or "")


def remove_unused_columns(trainer, dataset):
    """transformers' ``Trainer._remove_unused_columns``: the columns its model's forward reads."""
    return trainer._remove_unused_columns(dataset, description="Training")


def collator_with_removed_columns(trainer, collator):
    """transformers' ``Trainer._get_collator_with_removed_columns``."""
    return trainer._get_collator_with_removed_columns(collator, description="Training")


def accelerate_processes():
    """``(num_processes, process_index)`` of Accelerate's ``PartialState`` when one was made
    in this process (an ``Accelerator``, ``TrainingArguments``), else ``None``; Accelerate is
    not imported here."""
    state = sys.modules.get("accelerate.state")
    partial = getattr(state, "PartialState", None)
    if partial is None or not getattr(partial, "_shared_state", None):
        return None
    s = partial()
    return s.num_processes, s.process_index


def revert_weight_conversion():
    """transformers' internal ``core_model_loading.revert_weight_conversion`` (the key names
    ``save_pretrained`` writes), or ``None`` where this transformers has none."""
    try:
        from transformers.core_model_loading import revert_weight_conversion as revert
    except ImportError:
        return None
    return revert


def reference_adapter(trainer):
    """The context in which TRL's trainers run a PEFT model as its own reference (no
    ``ref_model``): the adapter disabled, or the adapter named ``"ref"`` where there is one
    (``trl.trainer.utils.use_adapter``, as TRL's ``compute_ref_log_probs`` does); a null context
    otherwise."""
    import contextlib

    from accelerate.utils import is_peft_model

    if getattr(trainer, "ref_model", None) is not None or not is_peft_model(trainer.model):
        return contextlib.nullcontext()
    from trl.trainer.utils import use_adapter

    unwrapped = trainer.accelerator.unwrap_model(trainer.model)
    return use_adapter(unwrapped, adapter_name="ref" if "ref" in unwrapped.peft_config else None)


def fused_output_class():
    """TRL's ``FusedCausalLMOutput`` (``trl.trainer.utils``), what its fused LM head returns."""
    from trl.trainer.utils import FusedCausalLMOutput

    return FusedCausalLMOutput


# ------------------------------------------------------------------------ supported versions
#: the versions of the host libraries packlib's trainers are tested on and exact with:
#: ``(lowest, first excluded above, why the ones below are excluded)`` (docs/training.md)
SUPPORTED = {
    "transformers": ((5, 19), (6, 0), "before 5.19 the Trainer has no loss_is_scaled_for_ga, and a balanced step's "
                                      "loss is divided by the accumulation steps twice (silently wrong parameters)"),
    "accelerate": ((1, 14), (2, 0), "before 1.14 a prepared BalancedBatchSampler loader on two or more processes "
                                    "fails on even_batches"),
    "trl": ((1, 16), (1, 17), "TRL 1.15's DPO, KTO, SFT and GRPO trainers compute their log-probs with a Triton "
                              "kernel that needs a GPU (its own trainers fail on a CPU, so the packed ones cannot be "
                              "checked against them), TRL 1.14 fails inside its own loss on packed rows, 0.29 never "
                              "hands the model the packed row (silently wrong), and the packed trainers override TRL "
                              "1.16's internals, which a later TRL may change"),
}


def _release(version: str) -> tuple:
    """``(major, minor)`` of a version string (``"5.19rc1"`` is ``(5, 19)``)."""
    out = []
    for part in version.split(".")[:2]:
        digits = ""
        for c in part:
            if not c.isdigit():
                break
            digits += c
        out.append(int(digits or 0))
    return tuple(out + [0] * (2 - len(out)))


def installed_version(name: str):
    """The installed version of distribution ``name`` (not imported), or ``None``."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def check_versions(names, what: str) -> None:
    """Refuse (``RuntimeError``) an installed host library outside :data:`SUPPORTED`, naming
    the installed and the supported versions and why; one not installed is the caller's
    ``ImportError`` to raise."""
    for name in names:
        have = installed_version(name)
        if have is None:
            continue
        low, high, why = SUPPORTED[name]
        if not low <= _release(have) < high:
            span = f">={low[0]}.{low[1]},<{high[0]}.{high[1]}"
            raise RuntimeError(f"{what} supports {name} {span}, but {name} {have} is installed: {why}. Install a "
                               f"supported version (pip install '{name}{span}'; pip install 'packlib[trl]' brings the "
                               "supported set), see docs/training.md, \"Supported versions\"")
