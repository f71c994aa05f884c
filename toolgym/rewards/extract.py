"""Finding the final answer in a whole model response, in every format verl's recipes ask for.

Plain single-turn training (verl's ``compute_score``, the reward server) hands a verifier the entire response,
reasoning included, so the answer has to be found in it. The rules, in order; the first that applies decides:

1. ``<answer>…</answer>``: the last complete block is the answer (its last ``\\boxed{}`` if it has one).
2. ``\\boxed{…}`` / ``\\fbox{…}``: the content of the last one. Braces are matched, and LaTeX's escaped
   braces ``\\{ \\}`` (set notation) are not counted. ``\\boxed 5`` (no braces) is read too, up to the next
   space or ``$``.
3. GSM8K's ``#### 72`` (verl's gsm8k prompt: "output the final answer after ####"): what follows the last
   ``####``, to the end of its line.
4. An answer line: ``Answer: 72`` (DAPO's "the last line ... of the form Answer: $Answer"), ``**Final
   Answer:** 72`` and the Minerva / lm-eval form ``Final Answer: The final answer is $\\frac{2}{3}$. I hope
   it is correct.``: what follows the last ``answer:`` (any case), to the end of its line.
5. Only where the caller asks for it (``last_number_fallback``): the last number in the response (verl's gsm8k
   "flexible" mode), and only when the response has none of the markers above, not even a broken one.

The most delimited form wins, so a chatty tail after a ``\\boxed{}`` ("let me know if this answer: helps")
cannot replace it. Rules 3 and 4 find plain text, so their answer is cleaned the way lm-eval's Minerva
normalisation does: "I hope it is correct." and a lead-in "The final answer is" are dropped, a ``$…$``
(``\\(…\\)``) math span is taken when there is one (``$18`` alone is a price, not a span), markdown bold,
an article before a number (``an 8``) and trailing punctuation are dropped, and a number followed only by
words (``72 apples``, ``18 dollars``) is that number, unless a word changes the value or hedges
(``5 million``, ``5 or six``).

A last ``\\boxed{`` that is never closed (a generation cut off by the length limit) means no answer, rather
than an earlier, intermediate box or a later rule. Everything is ``str.rfind`` and forward scans with
bounded regular expressions, so hostile responses cost linear time.

Which scorer uses which rules (``toolgym.rewards.scorers``): ``math`` and ``numeric`` use rules 1-4, and
rule 5 when the gold is a plain number (a number from a response that never said which one is its answer
is a fair guess at a numeric gold, and meaningless against ``x^2 + 1``). The QA scorers read ``<answer>``
or the whole text (``toolgym.rewards.qa``), and ``code_tests`` the ``<answer>`` block or the whole text:
"the last number" would let any response that mentions the gold pass them.
"""

from __future__ import annotations

import re
from collections import deque

ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
GSM8K_MARKER = "####"
_BOX_COMMANDS = ("\\boxed", "\\fbox")
_INLINE_END = " \t\n$"
_ANSWER_LINE = re.compile(r"\banswer(?:\*\*|__)?[ \t]*:", re.IGNORECASE)
_HOPE = "i hope it is correct"
_ARTICLE = re.compile(r"^(?:a|an)\s+(?=[-+\\$\d])", re.IGNORECASE)  # DAPO: "Answer: an 8"
_LEAD_IN = re.compile(r"(?:the\s+)?(?:final\s+)?answer\s+is\s*:?\s*", re.IGNORECASE)
#: ``$…$`` whose closing ``$`` is not followed by a digit (``$18 and $20`` are two prices, not a span)
_DOLLAR_SPAN = re.compile(r"(?<!\\)\$\$?(?P<body>[^$]+?)(?<!\\)\$\$?(?!\d)")
_DISPLAY_SPANS = (("\\(", "\\)"), ("\\[", "\\]"))
_TRAILING = ",;:! \t"
_NUMBER_THEN_WORDS = re.compile(
    r"(?P<number>[-+\u2212]?\\?\$?\s*(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?)"
    r"\s+(?P<words>[A-Za-z][A-Za-z .'/-]*)"
)
#: words after a number that change its value or hedge: never dropped as units
_VALUE_WORDS = frozenset(
    {
        *("percent", "per", "cent", "hundred", "thousand", "million", "billion", "trillion", "dozen"),
        *("k", "m", "bn", "squared", "cubed", "half", "halves", "third", "thirds", "quarter", "quarters"),
        *("or", "and", "to", "plus", "minus", "times", "over", "divided", "point"),
    }
)
#: a number inside free text (``1,234``, ``2.5``, ``3/4``, ``\frac{3}{4}``): not the tail of a word or of
#: another number; ``-`` only as a sign
_NUMBER_IN_TEXT = re.compile(
    r"(?:(?<![\w)}\]])[-\u2212])?"
    r"(?:\\[dt]?frac\{\d+\}\{\d+\}|(?<![\d.])(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?(?:/\d+)?)"
)


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


def after_gsm8k_marker(text: str) -> str | None:
    """What follows the last ``####`` to the end of its line, cleaned (see the module docstring); ``None``
    without a ``####``."""
    at = text.rfind(GSM8K_MARKER)
    if at == -1:
        return None
    return clean_answer_text(_rest_of_line(text, at + len(GSM8K_MARKER)))


def last_answer_line(text: str) -> str | None:
    """What follows the last ``answer:`` (``Answer:``, ``**Final Answer:**``, Minerva's ``Final Answer: The
    final answer is …. I hope it is correct.``) to the end of its line, cleaned; ``None`` without one."""
    last = _last_match(_ANSWER_LINE, text)
    return None if last is None else clean_answer_text(_rest_of_line(text, last.end()))


def _rest_of_line(text: str, start: int) -> str:
    """From ``start``, past blank space (an answer may start on the next line), to the end of that line."""
    while start < len(text) and text[start] in " \t\r\n*_":
        start += 1
    end = text.find("\n", start)
    return text[start : end if end != -1 else len(text)]


def clean_answer_text(text: str) -> str:
    """The answer in a line of plain text (rules 3 and 4 of the module docstring)."""
    hope = text.lower().find(_HOPE)
    if hope != -1:
        text = text[:hope]
    text = text.strip().strip("*_ ")
    lead = _LEAD_IN.match(text)
    if lead:
        text = text[lead.end() :]
    span = _DOLLAR_SPAN.search(text)
    text = span["body"] if span else _display_span(text)
    text = _ARTICLE.sub("", text.strip().strip("*_ ").strip()).rstrip(_TRAILING)
    if text.endswith(".") and not text.endswith(".."):
        text = text[:-1].rstrip(_TRAILING)
    unit = _NUMBER_THEN_WORDS.fullmatch(text)
    if unit and not _VALUE_WORDS.intersection(unit["words"].lower().replace("/", " ").split()):
        return unit["number"].strip()
    return text


def _display_span(text: str) -> str:
    """The body of the first ``\\(…\\)`` or ``\\[…\\]`` in ``text``, else ``text`` (``str.find``: linear)."""
    for open_, close in _DISPLAY_SPANS:
        start = text.find(open_)
        end = text.find(close, start + 2) if start != -1 else -1
        if end != -1:
            return text[start + 2 : end]
    return text


def has_answer_marker(text: str) -> bool:
    """Whether ``text`` has any of the markers of rules 1-4, even a broken one (a cut-off ``\\boxed{``)."""
    lowered = text.lower()
    return (
        any(c in text for c in _BOX_COMMANDS)
        or ANSWER_OPEN in lowered
        or GSM8K_MARKER in text
        or _ANSWER_LINE.search(text) is not None
    )


def last_number(text: str) -> str | None:
    """The last number in ``text`` (``1,234``, ``-5``, ``2.5``, ``3/4``), as written; ``None`` if there is
    none or ``text`` has an answer marker (``has_answer_marker``): a response that marked its answer is
    judged on that answer, and one whose marked answer was cut off has none."""
    if not isinstance(text, str) or has_answer_marker(text):
        return None
    last = _last_match(_NUMBER_IN_TEXT, text)
    return None if last is None else last.group(0).replace("\u2212", "-")


def _last_match(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    last = deque(pattern.finditer(text), maxlen=1)
    return last[0] if last else None


def extract_final_answer(response: str, *, last_number_fallback: bool = False) -> str | None:
    """The final answer in a whole response (the rules are in the module docstring), or ``None``.

    ``last_number_fallback`` adds rule 5: a response with no answer marker at all is judged on its last
    number. Callers turn it on only where a number is the expected answer.
    """
    if not isinstance(response, str):
        return None
    tagged = last_answer_tag(response)
    if tagged is not None:
        boxed = last_boxed(tagged)
        return boxed if boxed is not None else tagged
    if any(c in response for c in _BOX_COMMANDS):
        return last_boxed(response)  # None when the last box is cut off: no answer, no later rule
    for rule in (after_gsm8k_marker, last_answer_line):
        found = rule(response)
        if found is not None:
            return found
    return last_number(response) if last_number_fallback else None


__all__ = [
    "after_gsm8k_marker",
    "clean_answer_text",
    "extract_final_answer",
    "has_answer_marker",
    "last_answer_line",
    "last_answer_tag",
    "last_boxed",
    "last_number",
]
