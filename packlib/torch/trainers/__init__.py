"""Trainers: balanced, packed steps in ``transformers.Trainer`` and TRL's trainers
(:func:`balance_trainer`), and TRL's ``GRPOTrainer`` on packed rows, each prompt once
(``PackedGRPOTrainer``, :class:`PackedGRPOMixin`; TRL is imported on first use).

>>> from packlib.torch.trainers import balance_trainer
>>> balance_trainer.__name__
'balance_trainer'
>>> from packlib.torch.trainers import PackedGRPOTrainer      # doctest: +SKIP
>>> trainer = PackedGRPOTrainer(model=model, reward_funcs=reward, args=GRPOConfig(...), train_dataset=prompts)  # doctest: +SKIP
"""
from __future__ import annotations

from ._trainer import balance_trainer
from ._trl_grpo import PackedGRPOMixin, packed_grpo_trainer

__all__ = ["balance_trainer", "PackedGRPOMixin"]  # and PackedGRPOTrainer, built on first use (TRL)


def __getattr__(name):
    if name == "PackedGRPOTrainer":
        return packed_grpo_trainer()
    raise AttributeError(f"module 'packlib.torch.trainers' has no attribute {name!r}")
