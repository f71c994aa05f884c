"""Finding the final answer in a whole model response: the last ``\\boxed{…}`` or ``<answer>…</answer>``.

Plain single-turn training (verl's ``compute_score``, the reward server) hands a verifier the entire response,
reasoning included, so the answer has to be found in it. The rules, in order:

1. If the response has an ``<answer>…</answer>`` block, the last complete one is the scope; otherwise the
   whole response is.
2. In that scope, the content of the last ``\\boxed{…}`` (or ``\\fbox{…}``) is the answer. Braces are matched,
   and LaTeX's escaped braces ``\\{ \\}`` (set notation) are not counted. ``\\boxed 5`` (no braces) is read
   too, up to the next space or ``$``.
3. Otherwise the ``<answer>`` content is the answer; with neither, there is none (``None``).

We never fall back to "the last number in the text": it rewards a response that lists candidates, and a
policy learns to hedge. A last ``\\boxed{`` that is never closed (a generation cut off by the length limit)
means no answer, rather than an earlier, intermediate box. Everything is ``str.rfind`` and one forward scan,
so hostile responses cost linear time.
"""

from __future__ import annotations

ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
_BOX_COMMANDS = ("\\boxed", "\\fbox")
_INLINE_END = " \t\n$"


def last_answer_tag(text: str) -> str | None:
    """The content of the last complete ``<answer>…</answer>`` block, stripped; ``None`` if there is none."""
    close = text.rfind(ANSWER_CLOSE)
    if close == -1:
        return None
    open_ = text.rfind(ANSWER_OPEN, 0, close)
    if open_ == -1:
        return None
    return text[open_ + len(ANSWER_OPEN) : close].strip()


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{…}``/``\\fbox{…}`` in ``text``, stripped; ``None`` if there is
    none or the last one is never closed."""
    start, command = max((text.rfind(c), c) for c in _BOX_COMMANDS)
    if start == -1:
        return None
    i = start + len(command)
    if text.startswith("{", i):
        return _braced(text, i)
    if text.startswith(" ", i):  # \boxed 5
        rest = text[i:].lstrip(" ")
        end = next((k for k, ch in enumerate(rest) if ch in _INLINE_END), len(rest))
        return rest[:end] or None
    return None


def _braced(text: str, open_at: int) -> str | None:
    """The text inside the brace group opening at ``open_at``; escaped braces do not count."""
    depth = 0
    i = open_at
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[open_at + 1 : i].strip()
        i += 1
    return None


def extract_final_answer(response: str) -> str | None:
    """The final answer in a whole response (see the module docstring for the rules), or ``None``."""
    if not isinstance(response, str):
        return None
    tagged = last_answer_tag(response)
    boxed = last_boxed(response if tagged is None else tagged)
    return boxed if boxed is not None else tagged


__all__ = ["extract_final_answer", "last_answer_tag", "last_boxed"]
