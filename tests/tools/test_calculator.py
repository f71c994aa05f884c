"""The calculator: exact against Fraction arithmetic, bounded on hostile input, and a well-behaved Tool."""

from __future__ import annotations

import asyncio
import random
from decimal import Decimal
from fractions import Fraction

import gymnasium as gym
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import toolgym  # noqa: F401 - registers the envs
from toolgym.core.types import ToolCall
from toolgym.parsers import PARSERS
from toolgym.testing.complexity import cost_ratio
from toolgym.tools.base import TOOLS, make_tool
from toolgym.tools.calculator import Calculator, CalculatorError, format_number

CALC = Calculator()


# -- a reference: random expression trees, rendered as text and evaluated directly on Fractions ------------

_PREC = {"+": 1, "-": 1, "*": 2, "/": 2, "//": 2, "%": 2, "neg": 3, "pos": 3, "**": 4, "num": 5}


def _literal(rng: random.Random) -> tuple:
    kind = rng.random()
    if kind < 0.5:
        text = str(rng.randint(0, 10 ** rng.randint(1, 6)))
    elif kind < 0.8:
        text = f"{rng.randint(0, 9999)}.{rng.randint(0, 999):0{rng.randint(3, 4)}d}"
    elif kind < 0.9:
        text = f"{rng.randint(1, 99)}.{rng.randint(0, 9)}e{rng.randint(-3, 3)}"
    else:
        text = f"{rng.randint(1, 999)}_{rng.randint(0, 999):03d}"
    return ("num", text)


def _tree(rng: random.Random, depth: int) -> tuple:
    if depth == 0 or rng.random() < 0.25:
        return _literal(rng)
    roll = rng.random()
    if roll < 0.15:
        return (rng.choice(["neg", "pos"]), _tree(rng, depth - 1))
    if roll < 0.27:
        # Powers: a shallow base and a small exponent (sometimes fractional, which must be refused).
        exponent = ("num", str(rng.randint(0, 3)))
        if rng.random() < 0.3:
            exponent = ("neg", exponent)
        elif rng.random() < 0.1:
            exponent = ("/", ("num", "1"), ("num", "2"))
        return ("**", _tree(rng, min(depth - 1, 1)), exponent)
    op = rng.choice(["+", "-", "*", "/", "//", "%"])
    return (op, _tree(rng, depth - 1), _tree(rng, depth - 1))


def _render(node: tuple, rng: random.Random) -> str:
    kind = node[0]
    if kind == "num":
        text = node[1]
    elif kind in ("neg", "pos"):
        operand = node[1]
        inner = _render(operand, rng)
        if _PREC[operand[0]] < 3:
            inner = f"({inner})"
        text = ("-" if kind == "neg" else "+") + inner
    else:
        left, right = node[1], node[2]
        p = _PREC[kind]
        lt, rt = _render(left, rng), _render(right, rng)
        if _PREC[left[0]] < p or (_PREC[left[0]] == p and kind == "**"):
            lt = f"({lt})"
        if _PREC[right[0]] < p or (_PREC[right[0]] == p and kind != "**"):
            rt = f"({rt})"
        space = " " if rng.random() < 0.3 else ""
        text = f"{lt}{space}{kind}{space}{rt}"
    if rng.random() < 0.1:  # redundant parentheses are harmless
        text = f"({text})"
    return text


class _Refused(Exception):
    pass


def _reference(node: tuple) -> Fraction:
    kind = node[0]
    if kind == "num":
        return Fraction(node[1].replace("_", ""))
    if kind == "neg":
        return -_reference(node[1])
    if kind == "pos":
        return _reference(node[1])
    a, b = _reference(node[1]), _reference(node[2])
    if kind in ("/", "//", "%") and b == 0:
        raise _Refused("division by zero")
    if kind == "**":
        if b.denominator != 1:
            raise _Refused("fractional exponent")
        if a == 0 and b < 0:
            raise _Refused("division by zero")
        return a ** int(b)
    return {
        "+": lambda: a + b,
        "-": lambda: a - b,
        "*": lambda: a * b,
        "/": lambda: a / b,
        "//": lambda: Fraction(a // b),
        "%": lambda: a % b,
    }[kind]()


def test_random_expressions_match_exact_fraction_arithmetic():
    rng = random.Random(1234)
    checked = refused = 0
    for _ in range(4000):
        tree = _tree(rng, rng.randint(1, 5))
        text = _render(tree, rng)
        try:
            expected = _reference(tree)
        except _Refused:
            expected = None
        if expected is not None and max(abs(expected.numerator), expected.denominator) >= 10**1000:
            expected = None  # over the digit cap: the calculator must refuse too
        result = CALC({"expression": text})
        if expected is None:
            assert result.status == "error", (text, result.output)
            refused += 1
        else:
            assert result.ok, (text, result.output)
            assert CALC.evaluate(text) == expected, text
            assert result.output == format_number(expected)
            assert Fraction(result.metadata["value"]) == expected
            checked += 1
    assert checked > 3000 and refused > 50  # both paths were really exercised


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("2+3*4", 14),
        ("(2+3)*4", 20),
        ("2**3**2", 512),
        ("-2**2", -4),
        ("(-2)**2", 4),
        ("2**-2", Fraction(1, 4)),
        ("-7//2", -4),
        ("-7%3", 2),
        ("7%-3", -2),
        ("7.5%2", Fraction(3, 2)),
        ("7.5//2", 3),
        ("10-4-3", 3),
        ("64/4/2", 8),
        ("--5", 5),
        ("+5", 5),
        ("0.1+0.2", Fraction(3, 10)),
        ("1.25", Fraction(5, 4)),
        ("1e3", 1000),
        ("1.5E-3", Fraction(3, 2000)),
        ("1_000_000+1", 1000001),
        (".5+5.", Fraction(11, 2)),
        ("48213*1937", 93388581),
        ("2 × 3 − 1 ÷ 2", Fraction(11, 2)),
        ("(1 +\n 2) * 3 =", 9),
        ("(-1)**(10**100+1)", -1),
        ("1**10**100", 1),
        ("0**0", 1),
        ("(1/2)**-3", 8),
        ("10**999", 10**999),
    ],
)
def test_known_values_and_python_precedence(expression, expected):
    assert CALC.evaluate(expression) == expected


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (Fraction(93388581), "93388581"),
        (Fraction(-12), "-12"),
        (Fraction(5, 4), "1.25"),
        (Fraction(-1, 8), "-0.125"),
        (Fraction(7, 3), "7/3 ≈ 2.3333333333"),
        (Fraction(-2, 3), "-2/3 ≈ -0.6666666667"),
        (Fraction(1, 7), "1/7 ≈ 0.1428571429"),
        (Fraction(1, 3**30), "1/205891132094649 ≈ 4.856935750e-15"),
        (Fraction(1, 2**40), "1/1099511627776 ≈ 9.094947018e-13"),
    ],
)
def test_output_format(value, shown):
    assert format_number(value) == shown


def test_long_integers_are_plain_digits_within_the_str_conversion_limit():
    calc = Calculator(max_digits=4000)
    result = calc("10**3999 - 1")
    assert result.ok and result.output == "9" * 3999
    with pytest.raises(ValueError):
        Calculator(max_digits=5000)  # would trip Python's 4300-digit int->str limit when formatting


@given(st.decimals(min_value=-(10**9), max_value=10**9, places=6, allow_nan=False, allow_infinity=False))
@settings(max_examples=300, deadline=None)
def test_decimal_literals_are_read_exactly(value: Decimal):
    assert CALC.evaluate(str(value)) == Fraction(value)


@given(st.integers(-(10**30), 10**30), st.integers(1, 10**30))
@settings(max_examples=300, deadline=None)
def test_division_is_exact(a: int, b: int):
    assert CALC.evaluate(f"{a}/{b}") == Fraction(a, b)
    assert CALC.evaluate(f"({a})//{b}") == a // b
    assert CALC.evaluate(f"({a})%{b}") == a % b


# -- hostile input: always an error result, always fast --------------------------------------------------

HOSTILE = [
    "9**9**9",
    "2**10**10",
    "(" * 10_000 + "1" + ")" * 10_000,
    "1" * 10**6,
    "1+" * 500_000 + "1",
    "*".join(["10**1000"] * 50),
    "*".join(["10**600"] * 3) + "/10**1200",  # the final value is small, but an intermediate is not
    "10**999*10",
    "1/3**-100000",
    "7**-100000",
    "(1/3)**100000",
    "1e999999999",
    "1.5e-999999",
    "__import__('os')",
    "__import__",
    "().__class__",
    "().__class__.__bases__[0].__subclasses__()",
    "x",
    "[1]*10**9",
    "'a'*10**9",
    "b'abc'",
    "f'{1}'",
    "True+1",
    "False",
    "None",
    "1j",
    "2+3J",
    "(x := 10)",
    "lambda: 1",
    "[i for i in range(10**9)]",
    "{1: 2}",
    "{1, 2}",
    "(1, 2)",
    "1 if 1 else 2",
    "1 < 2",
    "1 and 2",
    "~1",
    "1 << 100000",
    "2^3",
    "1 @ 2",
    "sqrt(2)",
    "abs(-1)",
    "2**0.5",
    "4**(1/2)",
    "1/0",
    "1//0",
    "1%0",
    "0**-1",
    "1,000",
    "1,000,000 * 3",
    "1 000",
    "0x1f",
    "007",
    "15% of 200",
    "",
    "   ",
    "1 +",
    "((1)",
    "1\x00",
    "...",
    "2pi",
    "import os",
    "exec('1')",
    "\\",
]


@pytest.mark.parametrize("expression", HOSTILE, ids=lambda e: repr(e[:30]))
def test_hostile_input_is_refused(expression):
    """An error result, never a runaway computation: a power is refused from the sizes of its operands before
    it is computed (computing 9**9**9 would not return), and every intermediate value meets the digit cap."""
    for calc in (CALC, Calculator(max_length=10**7)):  # the second lets huge input reach the parser
        result = calc({"expression": expression})
        assert result.status == "error", result.output
        assert not result.output.startswith("Error")  # the parser adds the marker, once
        assert "Traceback" not in result.output and len(result.output) < 300


#: huge input that gets past the length limit: (make the text of size n, n at full size)
HUGE = {
    "nested parentheses": (lambda n: "(" * n + "1" + ")" * n, 100_000),
    "one long number": (lambda n: "1" * n, 1_000_000),
    "a long sum": (lambda n: "1+" * n + "1", 100_000),
}


@pytest.mark.parametrize("shape", sorted(HUGE))
def test_huge_input_is_refused_in_linear_time(shape):
    """Ten times the input costs at most ~20x the time (measured in this run, so a slow machine slows both),
    on the same refusal."""
    calc = Calculator(max_length=10**7)
    make, n = HUGE[shape]
    small, big = make(n // 10), make(n)
    refusal = calc({"expression": big})
    assert refusal.status == "error" and calc({"expression": small}).output == refusal.output
    ratio = cost_ratio(lambda text: calc({"expression": text}), small, big)
    assert ratio <= 20, f"10x the input cost {ratio:.0f}x the time on {shape!r}"


@pytest.mark.parametrize(
    ("expression", "hint"),
    [
        ("1,000", "thousands separators"),
        ("2^3", "use ** for powers"),
        ("2**0.5", "whole-number exponents"),
        ("1/0", "division by zero"),
        ("True+1", "booleans"),
        ("1j", "complex"),
        ("sqrt(2)", "functions (such as sqrt())"),
        ("x+1", "names (such as 'x')"),
        ("9**9**9", "too large"),
        ("1" * 2000, "too long"),
        ("15% of 200", "p/100"),
        ("007", "cannot start with 0"),
        ("(1, 2)", "commas"),
    ],
)
def test_error_messages_say_what_to_do(expression, hint):
    result = CALC(expression)
    assert result.status == "error" and hint in result.output


def test_bounds_are_configurable():
    assert Calculator(max_nodes=5)("1+1+1+1").status == "error"
    assert Calculator(max_nodes=7)("1+1+1+1").ok
    assert "nested" in Calculator(max_depth=3)("((1+2)*3)-4").output
    assert Calculator(max_length=5)("1+2+3").ok
    assert "too long" in Calculator(max_length=4)("1+2+3").output
    assert "too large" in Calculator(max_digits=10)("10**10").output
    assert Calculator(max_digits=10)("9999999998+1").ok
    assert "too large" in Calculator(max_digits=10)("9999999999+1").output
    assert "too long" in Calculator(timeout=-1.0)("1+1").output  # the deadline is checked between operations
    with pytest.raises(CalculatorError, match="too large"):
        Calculator(max_digits=10).evaluate("99999*99999*99999")


def test_long_flat_sums_need_no_recursion():
    assert CALC.evaluate("+".join(["1"] * 499)) == 499


# -- the Tool protocol -----------------------------------------------------------------------------------


def test_registered_and_described():
    assert TOOLS["calculator"] is Calculator
    tool = make_tool("calculator")
    assert isinstance(tool, Calculator) and tool.primary_arg == "expression"
    params = tool.parameters
    assert params["required"] == ["expression"] and params["properties"]["expression"]["type"] == "string"
    assert tool.schema()["function"]["name"] == "calculator"


def test_call_forms():
    assert CALC({"expression": "6*7"}).output == "42"
    assert CALC("6*7").output == "42"  # a raw text body fills the primary argument
    assert CALC('{"expression": "6*7"}').output == "42"  # a JSON body
    result = CALC(ToolCall(name="calculator", arguments={"expression": "6*7"}, id="c1"))
    assert result.output == "42" and result.call_id == "c1" and result.name == "calculator"
    assert asyncio.run(CALC.acall({"expression": "6*7"})).output == "42"


@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [
        ({}, "expression: Field required"),
        ({"expr": "1+1"}, "expression: Field required"),
        ({"expression": 5}, "valid string"),
        ({"expression": None}, "valid string"),
        ({"expression": ["1+1"]}, "valid string"),
        (None, "must be a JSON object"),
        (42, "must be a JSON object"),
    ],
)
def test_bad_arguments_become_error_results(arguments, fragment):
    result = CALC(arguments)
    assert result.status == "error" and fragment in result.output


@pytest.mark.parametrize("fmt", sorted(PARSERS))
def test_a_failing_calculation_reads_error_once_in_every_format(fmt):
    env = gym.make("toolgym/Calculator-v0", action_format=fmt)
    env.reset(seed=0)
    parser = env.unwrapped.parser
    for expression in ("2**100000", "1/0", ""):
        obs = env.step(parser.format_call(ToolCall(name="calculator", arguments={"expression": expression})))[
            0
        ]
        assert obs.count("Error:") == 1, obs
