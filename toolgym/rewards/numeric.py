"""Exact numeric answers: a conservative number parser and the ``numeric`` verifier.

The rule is deliberately strict: the *whole* answer, once light decoration is removed, must be one number.
We never pick "the last number in the text" of an answer: for exact verification that would reward an answer
such as "either 41 or 42", and it teaches a policy to hedge. (A whole response that marks no answer at all
is another matter, for the scorers: ``toolgym.rewards.extract``.) Decoration that is removed:

- surrounding whitespace, one trailing period, a lead-in ``Answer:`` / ``The final answer is``;
- wrappers around the whole answer: ``\\boxed{…}``, ``\\fbox{…}``, ``\\text{…}``, ``$…$``, ``$$…$$``,
  ``\\(…\\)``, ``\\[…\\]``, ``**…**`` and backticks (nested ones too);
- a currency sign: ``$1,234``, ``-$5``, ``\\$5``.

Numbers accepted: ``42``, ``-5``, ``+5`` (also with the Unicode minus), ``1234.0``, ``.5``, thousands
groups of exactly three digits separated by commas, spaces or underscores (``1,234,567``; ``1 234``; LaTeX
``1{,}234`` and ``1\\,234``), scientific notation (``1.5e3``, ``1.5 \\times 10^{3}``, exponents up to
1000 in size), and fractions ``3/4`` and ``\\frac{3}{4}`` (also ``\\dfrac``/``\\tfrac``).

Rejected (``None``): no number, several numbers (``42 or 43``, ``1, 2``), malformed groups (``1,23``,
European ``1.234,5``), units or words (``42 apples``, ``5 million``: a trailing word can change the value),
percentages (``50%``: 50 or 0.5?), mixed numbers (``1 1/2``), and anything longer than 200 characters
(the parser is regex-based and must stay fast on hostile text).
"""

from __future__ import annotations

import math
import numbers
import re
from decimal import Decimal
from fractions import Fraction
from typing import Any

from toolgym.core.task import Task
from toolgym.core.types import Trajectory, Verdict
from toolgym.rewards.base import Verifier

MAX_ANSWER_CHARS = 200
MAX_EXPONENT = 1_000

_NORMALIZE = str.maketrans({"\u2212": "-", "\u2013": "-", "\u00a0": " ", "\u2009": " ", "\u202f": " "})
_LEAD_IN = re.compile(r"(?:the\s+)?(?:final\s+)?answer\s*(?:is\s*:?|:|=)\s*", re.IGNORECASE)
_WRAPPERS = [
    re.compile(r"\\(?:boxed|fbox|text|mathrm|mathbf)\s*\{(.*)\}", re.DOTALL),
    re.compile(r"\$\$(.*)\$\$", re.DOTALL),
    re.compile(r"\$([^$]*)\$"),
    re.compile(r"\\\((.*)\\\)", re.DOTALL),
    re.compile(r"\\\[(.*)\\\]", re.DOTALL),
    re.compile(r"\*\*(.*)\*\*", re.DOTALL),
    re.compile(r"`+([^`]*)`+"),
]
_CURRENCY = re.compile(r"(?P<s1>[+-]?)\s*\\?\$\s*(?P<s2>[+-]?)(?P<rest>.*)", re.DOTALL)
_INT = r"\d{1,3}(?:,\d{3})+|\d{1,3}(?: \d{3})+|\d{1,3}(?:_\d{3})+|\d+"
_NUMBER = re.compile(
    rf"(?P<sign>[+-]?)\s*(?P<int>{_INT})?(?:\.(?P<frac>\d+))?"
    r"(?:\s*(?:[eE](?P<e1>[+-]?\d+)|(?:\\times|\\cdot|×|\*|x)\s*10\s*\^\s*(?:\{(?P<e2>[+-]?\d+)\}|(?P<e3>[+-]?\d+))))?"
)
_LATEX_FRACTION = re.compile(r"(?P<sign>[+-]?)\s*\\[dt]?frac\s*\{(?P<a>[^{}]+)\}\s*\{(?P<b>[^{}]+)\}")
_SLASH_FRACTION = re.compile(r"(?P<a>[^/]+)/(?P<b>[^/]+)")


def parse_number(text: str) -> Fraction | None:
    """The exact value of an answer that is one number with light decoration, else ``None``.

    See the module docstring for what counts as decoration and which formats are accepted.
    """
    return _parse(text, MAX_ANSWER_CHARS)


def _parse(text: str, max_chars: int) -> Fraction | None:
    if not isinstance(text, str) or len(text) > max_chars:
        return None
    core = _strip_decoration(text.translate(_NORMALIZE))
    core = core.replace("{,}", ",").replace("\\,", " ").replace("\\ ", " ").strip()
    currency = _CURRENCY.fullmatch(core)
    if currency:
        if currency["s1"] and currency["s2"]:
            return None
        core = (currency["s1"] or currency["s2"]) + currency["rest"].strip()
    for pattern in (_LATEX_FRACTION, _SLASH_FRACTION):
        match = pattern.fullmatch(core)
        if match:
            a, b = _decimal(match["a"].strip()), _decimal(match["b"].strip(), signed=False)
            if a is None or b is None or b == 0:
                return None
            value = a / b
            return -value if match.groupdict().get("sign") == "-" else value
    return _decimal(core)


def _strip_decoration(text: str) -> str:
    """Peel wrappers, lead-ins and a trailing period until nothing changes (bounded: text is short)."""
    for _ in range(20):
        before = text
        text = text.strip()
        if text.endswith(".") and not text.endswith(".."):
            text = text[:-1].rstrip()
        lead = _LEAD_IN.match(text)
        if lead:
            text = text[lead.end() :]
        for wrapper in _WRAPPERS:
            match = wrapper.fullmatch(text)
            if match:
                text = match[1]
                break
        if text == before:
            break
    return text


def _decimal(text: str, signed: bool = True) -> Fraction | None:
    """One plain number (no fraction bar) as an exact Fraction, or None."""
    match = _NUMBER.fullmatch(text)
    if match is None or (match["int"] is None and match["frac"] is None):
        return None
    if match["sign"] and not signed:
        return None
    digits = re.sub(r"[ ,_]", "", match["int"] or "0")
    frac = match["frac"] or ""
    exp_text = match["e1"] or match["e2"] or match["e3"] or "0"
    if len(exp_text.lstrip("+-")) > 5 or abs(int(exp_text)) > MAX_EXPONENT:
        return None
    scale = int(exp_text) - len(frac)
    mantissa = int(digits + frac)
    value = Fraction(mantissa * 10**scale) if scale >= 0 else Fraction(mantissa, 10**-scale)
    return -value if match["sign"] == "-" else value


def as_fraction(value: Any) -> Fraction | None:
    """A gold answer (int, Fraction, Decimal, finite float, numeric string) as an exact Fraction, else None.

    Floats are read through their shortest repr, so a gold of ``0.1`` means 1/10, not the binary double.
    """
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, numbers.Rational):
        return Fraction(int(value.numerator), int(value.denominator))
    if isinstance(value, Decimal):
        return Fraction(value) if value.is_finite() else None
    if isinstance(value, numbers.Real):
        return Fraction(repr(float(value))) if math.isfinite(value) else None
    if isinstance(value, str):
        return _parse(value, 10_000)
    return None


class NumericVerifier(Verifier):
    """Reward 1.0 when the answer parses (``parse_number``) to the task's gold, else 0.0.

    Exact by default. ``rel_tol`` (or ``task.data["rel_tol"]``, which wins) accepts ``|x - gold| <= rel_tol *
    |gold|``; a gold of 0 then still needs an exact 0. The comparison is on Fractions, so no float rounding.
    A task whose gold is not a number is a broken task, not a wrong answer: the Verdict then has ``error``.
    """

    name = "numeric"

    def __init__(self, rel_tol: float = 0.0):
        if not (isinstance(rel_tol, int | float) and math.isfinite(rel_tol) and rel_tol >= 0):
            raise ValueError(f"rel_tol must be a finite number >= 0, got {rel_tol!r}")
        self.rel_tol = rel_tol

    def verify(self, task: Task, answer: str, trajectory: Trajectory | None = None) -> Verdict:
        gold = as_fraction(task.answer)
        if gold is None:
            return Verdict(
                reward=0.0, passed=False, error=f"numeric: task gold {task.answer!r:.80} is not a number"
            )
        reason = _unparseable_reason(answer)
        parsed = parse_number(answer) if reason is None else None
        if parsed is None:
            reason = reason or f"the answer is not a single number: {answer.strip()[:60]!r}"
            return Verdict(reward=0.0, passed=False, details={"reason": reason, "gold": str(gold)})
        rel_tol = task.data.get("rel_tol", self.rel_tol)
        # rel_tol == 0 is plain equality; otherwise compare exactly on Fractions (no float rounding).
        passed = abs(parsed - gold) <= Fraction(rel_tol) * abs(gold) if rel_tol else parsed == gold
        details: dict[str, Any] = {"parsed": str(parsed), "gold": str(gold)}
        if rel_tol:
            details["rel_tol"] = rel_tol
        return Verdict(reward=1.0 if passed else 0.0, passed=passed, details=details)


def _unparseable_reason(answer: Any) -> str | None:
    if not isinstance(answer, str):
        return f"the answer is not text ({type(answer).__name__})"
    if not answer.strip():
        return "the answer is empty"
    if len(answer) > MAX_ANSWER_CHARS:
        return f"the answer is too long to be a number ({len(answer):,} characters; limit {MAX_ANSWER_CHARS})"
    return None
