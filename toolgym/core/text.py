"""Text helpers shared by the env loop and the tools (low in the stack, so both can import them)."""

from __future__ import annotations


def clip_middle(text: str, limit: int) -> str:
    """Keep the head and the tail of ``text`` within ``limit`` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    marker = f"\n... [{len(text) - limit:,} characters cut] ...\n"
    keep = max(limit - len(marker), 0)
    head = keep // 2
    return text[:head] + marker + text[len(text) - (keep - head) :]
