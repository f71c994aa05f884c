"""``toolgym train``: verl GRPO/PPO or TRL GRPO from one YAML; the launcher is the verl adapter's."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    from toolgym.trainers.verl_adapter.launch import add_train_arguments, cmd_train

    train = sub.add_parser("train", help="train with verl (GRPO/PPO) or TRL (--trainer trl) from one YAML")
    add_train_arguments(train)
    train.set_defaults(func=cmd_train)
