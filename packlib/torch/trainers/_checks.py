"""What :func:`balance_trainer` checks of the trainer before it changes anything: a dataset it
can index, a trainer that keeps the planned micro-batches (not one that regroups rows into
GRPO groups), a model whose loss the Trainer can weigh by the step's tokens, and the
checkpoints transformers cannot resume.

>>> from packlib.torch.trainers._checks import check_trainer
>>> check_trainer.__name__
'check_trainer'
"""
from __future__ import annotations

import warnings

from ..._compat import revert_weight_conversion as host_revert_weight_conversion
from .._lazy import require_torch

_REGROUPING = ("GRPOTrainer", "RLOOTrainer")
#: transformers' models that declare ``accepts_loss_kwargs = False`` although their ``forward``
#: hands ``num_items_in_batch`` to its loss (the families :class:`VisionPackedCollator` packs);
#: tests/test_trainer_checks.py checks each against the installed transformers
LOSS_TAKES_NUM_ITEMS = frozenset({"Qwen2_5_VLForConditionalGeneration", "Qwen3VLForConditionalGeneration"})


def check_trainer(trainer, sampler) -> None:
    """Refuse (``ValueError``) what a balanced schedule cannot train exactly, fix what it can,
    and warn of what transformers would do wrong later."""
    check_dataset(trainer.train_dataset)
    check_regrouping(trainer, sampler)
    check_loss_kwargs(trainer)
    warn_resume(trainer)


def check_dataset(dataset) -> None:
    """A balanced schedule indexes the dataset by sample id: it needs ``len()`` and indexing."""
    torch = require_torch()
    if dataset is None or isinstance(dataset, torch.utils.data.IterableDataset) \
            or not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
        kind = "none" if dataset is None else type(dataset).__name__
        raise ValueError(f"a balanced schedule needs a train_dataset with a len() and indexing (a datasets.Dataset, a "
                         f"list of examples), got {kind}: an iterable or streaming dataset cannot be drawn by sample "
                         "id; load it as a datasets.Dataset (load_dataset without streaming=True, or "
                         "Dataset.from_generator) and plan the sampler on its lengths")


def _group_width(sampler):
    groups = getattr(getattr(sampler, "_settings", None), "group_lengths", None)
    return None if groups is None else int(groups.shape[1])


def check_regrouping(trainer, sampler) -> None:
    """GRPO / RLOO draw prompts, repeat each ``num_generations`` times, generate and regroup the
    completions themselves: a balanced micro-batch would mix prompts in a group and leave
    prompts without completions. Refused, naming the path that packs their own micro-batches."""
    names = {c.__name__ for c in type(trainer).__mro__}
    k = getattr(trainer, "num_generations", None)
    if k is None and not names & set(_REGROUPING):
        return
    kind = next((n for n in _REGROUPING if n in names), type(trainer).__name__)
    width = _group_width(sampler)
    planned = "" if width is None or width == k else (
        f" (and num_generations={k} but the sampler plans groups of {width} sequences)")
    raise ValueError(f"{kind} draws prompts, repeats each num_generations={k} times and groups the completions it "
                     f"generates itself; balance_trainer's micro-batches would mix the prompts of a group and leave "
                     f"prompts without completions{planned}. Do not call balance_trainer on it: "
                     + ("train it as it is" if "PackedGRPOMixin" in names else
                        "use packlib.torch.PackedGRPOTrainer") + ", which packs each micro-batch TRL forms (each "
                     "prompt once, its completions after it) and keeps TRL's sampling, groups and loss")


def _uses_models_loss(trainer) -> bool:
    """The trainer's loss is the model's own (``transformers.Trainer``'s ``compute_loss``,
    which ``SFTTrainer`` calls), not one a trainer computes from the logits."""
    from transformers import Trainer

    own = type(trainer).compute_loss
    if own is Trainer.compute_loss:
        return True
    return any(c.__name__ == "SFTTrainer" and c.__dict__.get("compute_loss") is own for c in type(trainer).__mro__)


def check_loss_kwargs(trainer) -> None:
    """transformers sets ``accepts_loss_kwargs = False`` on Qwen2.5-VL and Qwen3-VL (and others),
    so the Trainer does not pass ``num_items_in_batch`` and weighs each micro-batch equally
    instead of each token. For the models whose ``forward`` is known to hand the count to its
    loss (:data:`LOSS_TAKES_NUM_ITEMS`) ``trainer.model_accepts_loss_kwargs`` is set; any other
    is refused, naming what declares the weighting (``compute_loss_func=``, or
    ``trainer.model_accepts_loss_kwargs = True``)."""
    if getattr(trainer, "model_accepts_loss_kwargs", True) or getattr(trainer, "compute_loss_func", None) is not None:
        return
    if not _uses_models_loss(trainer):
        return  # a trainer that computes its own loss weighs it itself
    model = trainer.accelerator.unwrap_model(trainer.model)
    model = getattr(model, "base_model", model) if hasattr(model, "peft_config") else model
    model = getattr(model, "model", model) if hasattr(model, "peft_config") else model
    if type(model).__name__ in LOSS_TAKES_NUM_ITEMS:
        trainer.model_accepts_loss_kwargs = True
        return
    raise ValueError(f"{type(model).__name__} declares accepts_loss_kwargs = False (trainer.model_accepts_loss_kwargs "
                     "is False): its forward does not pass num_items_in_batch to its loss, so the Trainer would weigh "
                     "each micro-batch of a step equally, not each token: pass compute_loss_func= (a loss that sums "
                     "the tokens and divides by num_items_in_batch), or, if its forward does pass num_items_in_batch "
                     "to its loss, set trainer.model_accepts_loss_kwargs = True before balance_trainer")


def resume_drops_weights(model) -> list:
    """The model's parameters that ``Trainer.train(resume_from_checkpoint=...)`` would not
    load: transformers saves some models (Qwen2-VL, Qwen2.5-VL) under their legacy key names
    (``save_pretrained`` reverts its conversion mapping) and the Trainer reloads the file with
    ``load_state_dict(strict=False)`` under the current names. ``[]`` when none, or when the
    renaming cannot be read."""
    torch = require_torch()
    revert_weight_conversion = host_revert_weight_conversion()
    if revert_weight_conversion is None:
        return []
    keys = list(model.state_dict().keys())
    try:
        with torch.device("meta"):
            probe = {k: torch.empty(0) for k in keys}
        saved = set(revert_weight_conversion(model, probe))
    except Exception:  # noqa: BLE001  (a converter that needs real shapes: nothing to report)
        return []
    return [k for k in keys if k not in saved]


def warn_resume(trainer) -> None:
    model = trainer.accelerator.unwrap_model(trainer.model)
    if hasattr(model, "peft_config") or not hasattr(model, "state_dict"):
        return  # adapters are saved and loaded by PEFT, under their own names
    lost = resume_drops_weights(model)
    if lost:
        warnings.warn(f"{type(model).__name__}: transformers saves its checkpoints under legacy key names "
                      f"({lost[0]!r} is written under another name) and Trainer.train(resume_from_checkpoint=...) "
                      f"reloads them with strict=False, so {len(lost)} of its {len(model.state_dict())} tensors would "
                      "not be restored on resume. To resume, load the model with type(model).from_pretrained(checkpoint_dir), "
                      "build the trainer on it and call train(resume_from_checkpoint=checkpoint_dir) (docs/multimodal.md);"
                      " a model loaded so can ignore this warning", stacklevel=3)
