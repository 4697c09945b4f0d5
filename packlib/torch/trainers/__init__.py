"""Trainers: balanced, packed steps in ``transformers.Trainer`` and TRL's trainers
(:func:`balance_trainer`, through :class:`BalancedTrainerMixin`), and TRL's trainers on packed rows: ``PackedDPOTrainer``,
``PackedRewardTrainer``, ``PackedKTOTrainer`` and ``PackedGRPOTrainer`` (:class:`PackedGRPOMixin`)
are TRL's ``DPOTrainer``, ``RewardTrainer``, ``KTOTrainer`` and ``GRPOTrainer`` with the packed
path, built when first imported, so TRL is needed only then.

>>> from packlib.torch.trainers import balance_trainer
>>> balance_trainer.__name__
'balance_trainer'
>>> from packlib.torch.trainers import PackedGRPOTrainer      # doctest: +SKIP
>>> trainer = PackedGRPOTrainer(model=model, reward_funcs=reward, args=GRPOConfig(...), train_dataset=prompts)  # doctest: +SKIP
>>> from packlib.torch import PackedDPOTrainer        # doctest: +SKIP
>>> PackedDPOTrainer.__mro__[2].__name__              # doctest: +SKIP
'DPOTrainer'
"""
from __future__ import annotations

from ._balanced import BalancedTrainerMixin, public_class
from ._trainer import balance_trainer
from ._trl_grpo import PackedGRPOMixin, packed_grpo_trainer

__all__ = ["balance_trainer", "BalancedTrainerMixin", "PackedGRPOMixin"]
#: TRL's trainers on packed rows, built on first access (they subclass TRL's)
TRL_TRAINERS = ("PackedDPOTrainer", "PackedRewardTrainer", "PackedKTOTrainer", "PackedGRPOTrainer")


def __getattr__(name):
    if name == "PackedGRPOTrainer":
        return packed_grpo_trainer()
    if name in TRL_TRAINERS:
        from ._trl_preference import trainer_class

        return trainer_class(name)
    made = public_class(name)  # a balanced trainer class or its callback, as pickles name them
    if made is not None:
        return made
    raise AttributeError(f"module 'packlib.torch.trainers' has no attribute {name!r}")
