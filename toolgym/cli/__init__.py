"""The ``toolgym`` command: one module per command family in this package, each with ``register(sub)``;
``toolgym --help`` lists what they register (``DESCRIPTION`` and ``EPILOG`` frame it for a user)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import gymnasium as gym

from toolgym.cli import demo, doctor, envs, export, rollout, serve, swe, train, view

#: what ``toolgym --help`` says before the commands it lists (argparse lists the registered ones, so the list
#: cannot drift from them: tests/test_cli.py checks it)
DESCRIPTION = """\
toolgym: tool-using text environments for training LLM agents with RL, each with a verifier that turns an
episode into a reward, and adapters for verl, TRL and other trainers.

Start with `toolgym list` to see the environments, `toolgym play ID` to try one yourself, and
`toolgym demo` to watch scripted and tiny-model episodes of every environment."""
EPILOG = """\
examples:
  toolgym list                                         the environments and tools you can use
  toolgym check toolgym/Calculator-v0                  is an environment fit for RL training?
  toolgym rollout --env toolgym/Math-v0 --model tiny   episodes of a model, to JSONL
  toolgym train --config examples/verl/tiny-cpu.yaml --dry-run
  toolgym serve gateway --help                         serve a model to your own agent programs

`toolgym COMMAND --help` says what each command takes; docs: docs/quickstart.md."""

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
        prog="toolgym",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        command.register(sub)
    return p
