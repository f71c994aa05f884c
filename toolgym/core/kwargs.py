"""``KEY=VALUE`` pairs from a command line into keyword arguments (values read as JSON when they parse).

Several layers take env kwargs as text (every CLI command, the server launchers, trainer configs), so the one
parser lives here, low in the stack.
"""

from __future__ import annotations

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
