"""``toolgym train``: verl GRPO/PPO (``--trainer verl``, the default) or TRL GRPO (``--trainer trl``) from one
YAML. The command line is here; each trainer's launcher (``trainers/<trainer>_adapter/launch.py``) plans and
runs the job."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    train = sub.add_parser("train", help="train with verl (GRPO/PPO) or TRL (--trainer trl) from one YAML")
    add_train_arguments(train)
    train.set_defaults(func=cmd_train)


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True, help="toolgym train YAML (see examples/verl/, examples/trl/)")
    p.add_argument(
        "--trainer",
        choices=["verl", "trl"],
        default="verl",
        help="verl: GRPO/PPO with verl (default); trl: GRPO with TRL in this process (examples/trl/)",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="print the trainer's settings and check them, writing nothing"
    )
    p.add_argument(
        "--out", default=None, help="run dir for data, agent-loop YAML, checkpoints (runs/<experiment>)"
    )
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="-- OVERRIDE",
        help="after --: extra verl overrides (key=value), or TRL config settings (name=value)",
    )


def cmd_train(args: argparse.Namespace) -> int:
    if args.trainer == "trl":
        from toolgym.trainers.trl_adapter.launch import train
    else:
        from toolgym.trainers.verl_adapter.launch import train
    return train(args.config, out=args.out, overrides=args.overrides, dry_run=args.dry_run)
