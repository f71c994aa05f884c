"""The ``toolgym`` command: one module per command family in this package, each with ``register(sub)``.

``toolgym list``    every registered env (built-in and plugins) and tool
``toolgym play ID`` play an episode yourself in the terminal
``toolgym serve S`` run a service (retriever, rewards, tools, agent, openenv)
``toolgym rollout`` batched multi-turn rollouts with a model (in-process vLLM or a server), to JSONL
``toolgym eval``    pass@1 / pass@k of a model on an env's evaluation split
``toolgym export``  training data for a trainer: ``toolgym export verl`` writes Parquet verl loads as is;
                    ``toolgym export openenv`` an OpenEnv environment directory
``toolgym train``   GRPO/PPO with verl, or GRPO with TRL (``--trainer trl``), from one YAML (``--dry-run``)
``toolgym demo``    scripted episodes of every env (the verifiers' 1.0 and 0.0 paths) and tiny-model rollouts
``toolgym check``   the env check kit: is an env fit for RL training (a table per env; exit 1 on a failure)
``toolgym doctor``  what is installed and usable: vLLM, verl, Ray, sandbox isolation layers, plugins
``toolgym swe mine REPO``  SWE-v0 tasks from a local repository with a test suite (SWE-bench-schema rows)
``toolgym view F``  see episodes (rollout JSONL, eval reports, training dumps): conversation, tokens by mask
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import gymnasium as gym

from toolgym.cli import demo, doctor, envs, export, rollout, serve, swe, train, view

#: the command modules, in the order ``toolgym --help`` lists them
COMMANDS = (envs, demo, rollout, export, swe, train, serve, doctor, view)


def main(argv: Sequence[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    except (LookupError, ValueError, FileNotFoundError, gym.error.Error) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"toolgym {args.command}: error: {message}", file=sys.stderr)
        if isinstance(exc, gym.error.NameNotFound | gym.error.NamespaceNotFound):
            print("  `toolgym list` shows the registered envs", file=sys.stderr)
        return 2


def _build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="toolgym", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        command.register(sub)
    return p
