"""Text helpers shared by the env loop and the tools (low in the stack, so both can import them)."""

from __future__ import annotations

import re


def clip_middle(text: str, limit: int) -> str:
    """Keep the head and the tail of ``text`` within ``limit`` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    marker = f"\n... [{len(text) - limit:,} characters cut] ...\n"
    keep = max(limit - len(marker), 0)
    head = keep // 2
    return text[:head] + marker + text[len(text) - (keep - head) :]


#: deeper JSON is refused before decoding. CPython's decoder gives up at a depth that depends on the
#: version (3.11 and 3.12 raise RecursionError near 1,000 levels; 3.13 decodes 5,000), so the limit is ours:
#: the same text gets the same verdict on every Python. No tool's arguments come close to it.
MAX_JSON_DEPTH = 100
_JSON_STRING_OR_BRACKET = re.compile(r'"(?:[^"\\]|\\.)*"?|[\[\]{}]')


def json_too_deep(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether JSON in ``text`` nests (or opens without closing) more than ``limit`` arrays and objects.

    Brackets inside strings do not count. Linear in the text, and free for text with few brackets."""
    if text.count("{") + text.count("[") <= limit:
        return False
    depth = 0
    for match in _JSON_STRING_OR_BRACKET.finditer(text):
        token = match.group()
        if token in "{[":
            depth += 1
            if depth > limit:
                return True
        elif token in "}]":
            depth = max(depth - 1, 0)
    return False
