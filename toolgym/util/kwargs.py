"""Command-line values shared by every launcher: ``KEY=VALUE`` kwargs (read as JSON when they parse) and
counts that must be >= 1.

Several layers parse them (every CLI command, the server launchers, trainer configs), so the one
implementation lives here, low in the stack.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any


def parse_kwargs(pairs: Sequence[str]) -> dict[str, Any]:
    """``["max_turns=4", "level=2", "name=abc"]`` -> ``{"max_turns": 4, "level": 2, "name": "abc"}``.

    A value that is valid JSON is decoded (numbers, booleans, lists, objects); anything else stays a string.
    """
    kwargs: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"expected KEY=VALUE, got {pair!r} (e.g. max_turns=4 or tasks=path.jsonl)")
        try:
            kwargs[key] = json.loads(value)
        except json.JSONDecodeError:
            kwargs[key] = value
    return kwargs


def env_kwargs_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """An env's ``gym.make`` kwargs from a command's ``--env-kwarg KEY=VALUE`` (repeatable), ``--format`` and
    ``--max-turns`` options (the options win over the same keys given as kwargs)."""
    kwargs = parse_kwargs(args.env_kwarg)
    if args.action_format:
        kwargs["action_format"] = args.action_format
    if args.max_turns:
        kwargs["max_turns"] = args.max_turns
    return kwargs


def positive_int(text: str) -> int:
    """An argparse type: an int >= 1 (counts: episodes, samples, tasks, tokens, sessions, concurrency), so a
    bad count fails at parse time, before an engine or a server starts."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def positive_float(text: str) -> float:
    """An argparse type: a number > 0 (seconds: timeouts), checked at parse time like ``positive_int``."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


#: the model dtypes ``--dtype`` takes (``toolgym.rollout.models.DTYPES``); here so that ``toolgym``'s argument
#: parser, built for every command (``toolgym list`` too), imports no rollout module
MODEL_DTYPES = ("auto", "float32", "bfloat16", "float16")
