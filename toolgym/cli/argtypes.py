"""argparse value types shared by the commands: a bad count fails at parse time, before an engine starts."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """An int >= 1 (counts: episodes, samples, tasks, tokens, concurrency)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value
