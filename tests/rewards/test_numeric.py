"""parse_number accepts one lightly decorated number and nothing else; NumericVerifier compares exactly."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolgym.core.task import Task
from toolgym.rewards.base import safe_verify
from toolgym.rewards.numeric import MAX_ANSWER_CHARS, NumericVerifier, as_fraction, parse_number

ACCEPTED = [
    ("42", 42),
    ("-5", -5),
    ("+5", 5),
    ("\u22125", -5),  # Unicode minus sign
    ("1,234", 1234),
    ("1,234,567", 1234567),
    ("1,234,567.89", Fraction(123456789, 100)),
    ("1 234", 1234),
    ("1\u202f234\u202f567", 1234567),  # narrow no-break spaces
    ("1_000", 1000),
    ("1{,}234", 1234),
    ("1\\,234", 1234),
    ("1234.0", 1234),
    ("0.25", Fraction(1, 4)),
    (".5", Fraction(1, 2)),
    ("007", 7),
    ("$1,234", 1234),
    ("-$5", -5),
    ("$-5", -5),
    ("\\$5", 5),
    ("3/4", Fraction(3, 4)),
    ("-3 / 4", Fraction(-3, 4)),
    ("\\frac{3}{4}", Fraction(3, 4)),
    ("-\\dfrac{3}{4}", Fraction(-3, 4)),
    ("1.5e3", 1500),
    ("2E-2", Fraction(1, 50)),
    ("1.5 \\times 10^{3}", 1500),
    ("1.5×10^3", 1500),
    ("\\boxed{42}", 42),
    ("\\boxed{\\frac{3}{4}}", Fraction(3, 4)),
    ("\\boxed{\\$1,234}", 1234),
    ("$42$", 42),
    ("$$-7$$", -7),
    ("\\(42\\)", 42),
    ("\\[42\\]", 42),
    ("**42**", 42),
    ("`42`", 42),
    ("42.", 42),
    ("  42  \n", 42),
    ("Answer: 42", 42),
    ("The final answer is 42.", 42),
    ("answer = 93388581", 93388581),
    ("$\\boxed{1,234}$.", 1234),
]

REJECTED = [
    "",
    "   ",
    "abc",
    "forty-two",
    "42 or 43",
    "41, 42",
    "1, 2",
    "1,23",
    "1,2345",
    "12 34",
    "1.234,5",
    "42 apples",
    "5 million",
    "50%",
    "1 1/2",
    "3/0",
    "1/2/3",
    "4-2",
    "--5",
    "-$-5",
    "(42)",
    "x=5",
    "1e",
    "1e2000",
    "$",
    "-",
    ".",
    "\\boxed{3} \\boxed{4}",
    "$5$5",
    "The answer is 42 because 6*7=42",
    "4" * (MAX_ANSWER_CHARS + 1),
]


@pytest.mark.parametrize(("text", "expected"), ACCEPTED)
def test_accepts_one_decorated_number(text, expected):
    assert parse_number(text) == expected


@pytest.mark.parametrize("text", REJECTED)
def test_rejects_no_number_or_competing_numbers(text):
    assert parse_number(text) is None


def test_table_is_large():
    assert len(ACCEPTED) + len(REJECTED) >= 30


@given(st.integers(-(10**40), 10**40))
@settings(max_examples=300, deadline=None)
def test_integers_round_trip_plain_and_grouped(n: int):
    assert parse_number(str(n)) == n
    assert parse_number(f"{n:,}") == n
    assert parse_number(f"{n:_}") == n
    assert parse_number(f"{n}.0") == n


@given(st.fractions(max_denominator=10**6))
@settings(max_examples=300, deadline=None)
def test_fractions_round_trip(value: Fraction):
    assert parse_number(str(value)) == value


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1 " * 100, None),
        ("1," * 100, None),
        ("1 111" + " 111" * 48 + "x", None),
        ("$" * 200, None),
        ("{" * 200, None),
        ("\\boxed{" * 28, None),
        ("9" * 200, 10**200 - 1),
        ("1e" + "9" * 198, None),  # refused from its digits: 10 ** (10 ** 198 - 1) is never built
        ("/" * 200, None),
        ("**" * 100, None),
    ],
)
def test_hostile_answers_at_the_length_limit_are_refused(text, expected):
    """At most MAX_ANSWER_CHARS of text, so every pattern's work is bounded; what each one gives is pinned
    (a value computed from a hostile exponent would never return)."""
    assert len(text) <= MAX_ANSWER_CHARS
    assert parse_number(text) == expected


@pytest.mark.parametrize(
    ("gold", "expected"),
    [
        (42, Fraction(42)),
        ("1,234", Fraction(1234)),
        ("3/4", Fraction(3, 4)),
        (Fraction(7, 3), Fraction(7, 3)),
        (Decimal("1.25"), Fraction(5, 4)),
        (0.1, Fraction(1, 10)),
        (True, None),
        (None, None),
        (float("nan"), None),
        ("not a number", None),
    ],
)
def test_gold_conversion(gold, expected):
    assert as_fraction(gold) == expected


def _task(answer, **data) -> Task:
    return Task(id="t", prompt="?", answer=answer, data=data)


def test_verifier_rewards_exact_match():
    verifier = NumericVerifier()
    assert verifier.name == "numeric"
    verdict = verifier.verify(_task(93388581), "93,388,581")
    assert verdict.reward == 1.0 and verdict.passed
    assert verdict.details == {"parsed": "93388581", "gold": "93388581"}
    wrong = verifier.verify(_task(93388581), "93388580")
    assert wrong.reward == 0.0 and not wrong.passed and wrong.error is None
    assert wrong.details["parsed"] == "93388580"
    assert verifier.verify(_task("3/4"), "0.75").passed
    assert verifier.verify(_task(Fraction(1, 3)), "0.3333333333").passed is False  # exact by default


def test_verifier_explains_unparseable_answers():
    verifier = NumericVerifier()
    for answer, fragment in [
        ("42 or 43", "not a single number"),
        ("", "empty"),
        ("1" * 500, "too long"),
        (None, "not text"),
    ]:
        verdict = verifier.verify(_task(42), answer)
        assert verdict.reward == 0.0 and not verdict.passed and verdict.error is None
        assert fragment in verdict.details["reason"]
        assert verdict.details["gold"] == "42"


def test_verifier_tolerance():
    loose = NumericVerifier(rel_tol=1e-3)
    assert loose.verify(_task(1000), "1000.9").passed
    assert not loose.verify(_task(1000), "1001.1").passed
    assert loose.verify(_task(-1000), "-999.1").passed
    assert not loose.verify(_task(0), "0.0001").passed  # relative to 0 means exact
    assert loose.verify(_task(1000), "1000.9").details["rel_tol"] == 1e-3
    # a task can carry its own tolerance, which wins over the verifier's
    assert NumericVerifier().verify(_task(100, rel_tol=0.05), "104").passed
    assert not loose.verify(_task(100, rel_tol=0), "100.01").passed
    for bad in (-0.1, float("inf"), float("nan")):
        with pytest.raises(ValueError):
            NumericVerifier(rel_tol=bad)


def test_broken_gold_is_a_verifier_error_not_a_wrong_answer():
    verdict = safe_verify(NumericVerifier(), _task(None), "42")
    assert verdict.reward == 0.0 and not verdict.passed
    assert verdict.error is not None and "not a number" in verdict.error
