"""An exact calculator tool: ``+ - * / // % **`` and parentheses over rational numbers.

Why exact: the tasks it serves have integer or rational gold answers, and a float calculator would teach the
policy to copy rounding noise. Numbers are ``fractions.Fraction``; ``1.25`` is read from its source text as
exactly 5/4 (never through a float).

Why not ``eval``: model text is hostile by default. The expression is parsed with ``ast`` and only number
literals, ``+ - * / // % **`` and unary ``+ -`` are admitted; names, calls, attributes, strings, booleans,
complex numbers, containers and everything else are refused with a short message the model can act on.

Why it cannot hang: the input length, the node count and the nesting depth are capped before evaluation;
every intermediate result is capped in digits (numerator and denominator, checked after each operation);
a power is refused *before* it is computed when its size can be shown to exceed that cap from bit lengths;
and a deadline (on the thread's CPU time) is checked between operations. With those caps every single
operation is small.

Semantics worth knowing: ``/`` is exact division (``7/2`` is 7/2); ``//`` and ``%`` follow Python on
rationals (floor division, remainder with the divisor's sign, so ``-7//2 == -4`` and ``7.5 % 2 == 1.5``);
``**`` needs a whole-number exponent (``2**-2 == 1/4``; ``2**0.5`` is refused as it is irrational);
``-2**2`` is ``-4`` as in Python. Numbers may use ``_`` between digits (``1_000``) and scientific notation
(``1e3``); thousands commas (``1,000``) are refused with a hint to drop them. ``×``, ``÷`` and ``−`` are
read as ``*``, ``/`` and ``-``, and a trailing ``=`` is ignored.

Output: integers as plain digits (``1234567``); terminating decimals with few places exactly (``1.25``);
other rationals as the exact fraction with a 10-place approximation (``7/3 ≈ 2.3333333333``).
"""

from __future__ import annotations

import ast
import math
import re
import threading
import time
from decimal import Decimal, localcontext
from fractions import Fraction

from pydantic import BaseModel, Field

from toolgym.core.types import ToolResult
from toolgym.tools.base import Tool, register_tool

ALLOWED = "numbers, parentheses and the operators + - * / // % **"


class CalculatorError(ValueError):
    """The expression cannot be evaluated; the message is written for the model to read."""


_NORMALIZE = str.maketrans({"×": "*", "÷": "/", "−": "-", "–": "-"})
# CPython 3.11's ast.parse keeps its recursion-depth bookkeeping in shared state: two threads parsing at once
# can fail a valid expression with "SystemError: AST constructor recursion depth mismatch" (seen in the
# tool server's load test). Calculator calls run in many threads, so parsing takes turns;
# an expression parses in microseconds.
_AST_PARSE_LOCK = threading.Lock()
_THOUSANDS = re.compile(r"\d,\d{3}(?!\d)")
# A number literal glued to a letter (``1if``, ``0x1f``, ``1j``, ``2pi``). Rejected before ``ast.parse``,
# which would otherwise emit a SyntaxWarning (global warnings state) or accept non-decimal literals.
# The atomic group stops the regex from backtracking into ``1e3`` and calling ``e3`` a glued name.
_GLUED = re.compile(r"(?<![\w.])(?>(?:\d[\d_]*(?:\.[\d_]*)?|\.\d[\d_]*)(?:[eE][+-]?\d[\d_]*)?)(?=[A-Za-z_])")
_DIGIT_RUN = re.compile(r"[\d_]+")
_DECIMAL = re.compile(r"(?P<int>[\d_]*)(?:\.(?P<frac>[\d_]*))?(?:[eE](?P<exp>[+-]?[\d_]+))?")

_BINARY_SYMBOLS: dict[type[ast.operator], str] = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.Pow: "**",
}
_REFUSED_OPERATORS: dict[type[ast.AST], str] = {
    ast.BitXor: "'^' is not supported: use ** for powers (2**10)",
    ast.BitAnd: "'&' is not supported",
    ast.BitOr: "'|' is not supported",
    ast.LShift: "'<<' is not supported",
    ast.RShift: "'>>' is not supported",
    ast.MatMult: "'@' is not supported",
    ast.Invert: "'~' is not supported",
    ast.Not: "'not' is not supported",
}
_REFUSED_NODES: dict[type[ast.AST], str] = {
    ast.Name: "names",
    ast.Call: "function calls",
    ast.Attribute: "attributes",
    ast.Subscript: "indexing",
    ast.Lambda: "lambdas",
    ast.NamedExpr: "assignments",
    ast.Compare: "comparisons",
    ast.BoolOp: "'and'/'or'",
    ast.IfExp: "conditional expressions",
    ast.List: "lists",
    ast.Tuple: "commas (several expressions at once)",
    ast.Set: "sets",
    ast.Dict: "dictionaries",
    ast.ListComp: "comprehensions",
    ast.SetComp: "comprehensions",
    ast.DictComp: "comprehensions",
    ast.GeneratorExp: "comprehensions",
    ast.JoinedStr: "strings",
    ast.Starred: "'*' unpacking",
    ast.Await: "await",
    ast.Yield: "yield",
    ast.YieldFrom: "yield",
    ast.Slice: "slices",
}


@register_tool
class Calculator(Tool):
    """Exact rational arithmetic on one expression. See the module docstring for the rules and the bounds."""

    name = "calculator"
    description = (
        "Evaluate one arithmetic expression exactly. Supports + - * / // % ** and parentheses on integers "
        "and decimals (e.g. 48213*1937 - 12345, (2.5+1)/3, 2**64). No variables or functions; write numbers "
        "without thousands separators."
    )
    primary_arg = "expression"
    #: its caps keep an evaluation well under a millisecond (the deadline bounds the worst case): async
    #: callers run it inline (a tool server profile at 256 concurrent calls spent 13% of its time in the
    #: thread hop, under 1% in the calculator)
    inline = True

    class Args(BaseModel):
        expression: str = Field(description="One arithmetic expression.", examples=["48213*1937 - 12345"])

    def __init__(
        self,
        max_length: int = 1_000,
        max_nodes: int = 1_000,
        max_depth: int = 500,
        max_digits: int = 1_000,
        timeout: float = 0.5,
        decimals: int = 10,
    ):
        # str(int) refuses more than sys.get_int_max_str_digits() digits (4300 by default); staying under
        # the default keeps formatting results and parsing literals safe.
        if not 1 <= max_digits <= 4_000:
            raise ValueError("max_digits must be between 1 and 4000")
        self.max_length = max_length
        self.max_nodes = max_nodes
        self.max_depth = max_depth
        self.max_digits = max_digits
        self.timeout = timeout
        self.decimals = decimals
        self._limit = 10**max_digits
        # 2**_max_bits >= 10**max_digits: a power whose lower bound exceeds 2**_max_bits is surely too big.
        self._max_bits = math.ceil(max_digits * math.log2(10))

    def run(self, args: Calculator.Args) -> ToolResult:
        try:
            value = self.evaluate(args.expression)
        except CalculatorError as exc:
            return ToolResult(name=self.name, status="error", output=str(exc))  # the parser adds the marker
        output = format_number(value, self.decimals)
        return ToolResult(name=self.name, output=output, metadata={"value": str(value)})

    # -- parsing -------------------------------------------------------------------------------------------

    def evaluate(self, expression: str) -> Fraction:
        """The exact value of ``expression``; raises ``CalculatorError`` with a readable message."""
        if len(expression) > self.max_length:
            raise CalculatorError(
                f"expression too long ({len(expression):,} characters; the limit is {self.max_length:,})"
            )
        tree, source = self._parse(expression)
        # the calling thread's CPU time, not the wall clock: the deadline bounds the work an expression
        # costs, and on a busy machine a descheduled thread saw a one-operation product (374044108*11)
        # pass a 0.5-s wall-clock deadline
        deadline = time.thread_time() + self.timeout
        return self._evaluate(tree, source, deadline)

    def _parse(self, expression: str) -> tuple[ast.expr, str]:
        """The checked expression tree and the normalised text it was parsed from."""
        text = " ".join(expression.translate(_NORMALIZE).split())
        text = text.removesuffix("=").rstrip()
        if not text:
            raise CalculatorError(f"empty expression: write {ALLOWED}")
        if any(c in text for c in "'\"\\"):
            raise CalculatorError(f"strings are not supported: write {ALLOWED}")
        if _THOUSANDS.search(text):
            raise CalculatorError("remove the thousands separators: write 1234567, not 1,234,567")
        if max((len(run) for run in _DIGIT_RUN.findall(text)), default=0) > self.max_digits:
            # Also keeps ast.parse away from Python's 4300-digit int conversion limit.
            raise CalculatorError(f"a number has more than {self.max_digits:,} digits")
        glued = _GLUED.search(text)
        if glued:
            tail = text[glued.end() :]
            if tail[0] in "jJ":
                raise CalculatorError("complex numbers are not supported")
            word = re.match(r"\w+", tail)
            raise CalculatorError(
                f"malformed number {glued.group() + (word.group() if word else '')!r}: write plain decimal "
                "numbers, with an explicit * for multiplication"
            )
        try:
            with _AST_PARSE_LOCK:
                tree = ast.parse(text, mode="eval")
        except (SyntaxError, ValueError, MemoryError, RecursionError, Warning) as exc:
            raise CalculatorError(self._syntax_message(text, exc)) from None
        self._check_shape(tree.body)
        return tree.body, text

    @staticmethod
    def _syntax_message(text: str, exc: BaseException) -> str:
        if isinstance(exc, MemoryError | RecursionError) or "too many nested" in str(exc):
            return "expression too deeply nested"
        if "leading zeros" in str(exc):
            return "numbers cannot start with 0 (write 7, not 007)"
        detail = exc.msg if isinstance(exc, SyntaxError) else str(exc)
        hints = []
        if "%" in text:
            hints.append("% is the remainder operator; write p percent as p/100")
        if re.search(r"\d\s+\d", text) or "," in text:
            hints.append("write numbers without spaces or commas")
        hint = f" ({'; '.join(hints)})" if hints else ""
        return f"invalid expression: {detail}{hint}. Use {ALLOWED}"

    def _check_shape(self, root: ast.expr) -> None:
        """Refuse any node outside the whitelist, and trees too large or deep, before evaluating anything."""
        count = 0
        stack: list[tuple[ast.AST, int]] = [(root, 1)]
        while stack:
            node, depth = stack.pop()
            count += 1
            if count > self.max_nodes:
                raise CalculatorError(f"expression too large (more than {self.max_nodes} parts); split it up")
            if depth > self.max_depth:
                raise CalculatorError(f"expression too deeply nested (more than {self.max_depth} levels)")
            if isinstance(node, ast.BinOp):
                if type(node.op) not in _BINARY_SYMBOLS:
                    raise CalculatorError(_REFUSED_OPERATORS.get(type(node.op), "unsupported operator"))
                stack.append((node.right, depth + 1))
                stack.append((node.left, depth + 1))
            elif isinstance(node, ast.UnaryOp):
                if not isinstance(node.op, ast.UAdd | ast.USub):
                    raise CalculatorError(_REFUSED_OPERATORS.get(type(node.op), "unsupported operator"))
                stack.append((node.operand, depth + 1))
            elif isinstance(node, ast.Constant):
                _check_constant(node.value)
            else:
                what = _REFUSED_NODES.get(type(node), f"'{type(node).__name__}' expressions")
                if isinstance(node, ast.Name):
                    what = f"names (such as {node.id!r})"
                elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                    what = f"functions (such as {node.func.id}())"
                raise CalculatorError(f"{what} are not supported; only {ALLOWED}")

    # -- evaluation ----------------------------------------------------------------------------------------

    def _evaluate(self, root: ast.expr, source: str, deadline: float) -> Fraction:
        """Post-order evaluation with an explicit stack, so long chains (1+1+...+1) need no recursion."""
        values: list[Fraction] = []
        stack: list[tuple[ast.expr, bool]] = [(root, False)]
        while stack:
            node, operands_ready = stack.pop()
            if isinstance(node, ast.Constant):
                values.append(self._check(self._literal(node, source)))
                continue
            if not operands_ready:
                stack.append((node, True))
                if isinstance(node, ast.BinOp):
                    stack.append((node.right, False))
                    stack.append((node.left, False))
                else:
                    assert isinstance(node, ast.UnaryOp)
                    stack.append((node.operand, False))
                continue
            if time.thread_time() > deadline:
                raise CalculatorError(f"calculation took too long (over {self.timeout:g} s); simplify it")
            if isinstance(node, ast.UnaryOp):
                values.append(-values.pop() if isinstance(node.op, ast.USub) else values.pop())
                continue
            assert isinstance(node, ast.BinOp)
            right = values.pop()
            left = values.pop()
            values.append(self._check(self._binary(type(node.op), left, right)))
        (result,) = values
        return result

    def _binary(self, op: type[ast.operator], left: Fraction, right: Fraction) -> Fraction:
        if op is ast.Add:
            return left + right
        if op is ast.Sub:
            return left - right
        if op is ast.Mult:
            return left * right
        if op is ast.Pow:
            return self._power(left, right)
        if right == 0:
            raise CalculatorError("division by zero" if op is ast.Div else f"{_BINARY_SYMBOLS[op]} by zero")
        if op is ast.Div:
            return left / right
        if op is ast.FloorDiv:
            return Fraction(left // right)
        return left % right

    def _power(self, base: Fraction, exponent: Fraction) -> Fraction:
        if exponent.denominator != 1:
            raise CalculatorError(
                f"only whole-number exponents are supported (results must be exact); got {exponent}"
            )
        exp = exponent.numerator
        if base == 0:
            if exp < 0:
                raise CalculatorError("division by zero (0 to a negative power)")
            return Fraction(0 if exp else 1)
        if base.denominator == 1 and abs(base.numerator) == 1:
            return Fraction(base.numerator ** (exp % 2))
        # |base| (or 1/|base|) >= 2**(bits): the result has at least bits*|exp| bits in its numerator or
        # denominator. Refuse before computing when that alone exceeds the digit cap.
        bits = max(abs(base.numerator).bit_length(), base.denominator.bit_length()) - 1
        if bits * abs(exp) > self._max_bits:
            raise CalculatorError(f"result too large (more than {self.max_digits:,} digits)")
        return base**exp

    def _check(self, value: Fraction) -> Fraction:
        if abs(value.numerator) >= self._limit or value.denominator >= self._limit:
            raise CalculatorError(f"result too large (more than {self.max_digits:,} digits)")
        return value

    def _literal(self, node: ast.Constant, source: str) -> Fraction:
        if isinstance(node.value, int):
            return Fraction(node.value)
        # A float literal: read its digits from the source so 0.1 is exactly 1/10.
        text = ast.get_source_segment(source, node) or ""
        match = _DECIMAL.fullmatch(text.replace("_", "")) if text else None
        if match is None:
            raise CalculatorError(f"could not read the number {text!r}")
        int_part, frac_part = match["int"], match["frac"] or ""
        if len(int_part) + len(frac_part) > self.max_digits:
            raise CalculatorError(f"number {text[:20]}... has too many digits (limit {self.max_digits:,})")
        exp = int(match["exp"] or 0) if len(match["exp"] or "") <= 8 else 10**9
        if abs(exp) > self.max_digits + len(text):
            raise CalculatorError(f"{text!r} is too large or too small (limit {self.max_digits:,} digits)")
        mantissa = int((int_part or "0") + frac_part)
        scale = exp - len(frac_part)
        return Fraction(mantissa * 10**scale) if scale >= 0 else Fraction(mantissa, 10**-scale)


def _check_constant(value: object) -> None:
    if isinstance(value, bool):
        raise CalculatorError(f"booleans are not numbers here; only {ALLOWED}")
    if isinstance(value, complex):
        raise CalculatorError("complex numbers are not supported")
    if isinstance(value, str | bytes):
        raise CalculatorError(f"strings are not supported; only {ALLOWED}")
    if not isinstance(value, int | float):
        raise CalculatorError(f"{value!r} is not a number; only {ALLOWED}")


def format_number(value: Fraction, decimals: int = 10) -> str:
    """How a result is shown: plain digits for integers, an exact short decimal when the value has one,
    otherwise ``numerator/denominator ≈ approximation`` (fixed-point with ``decimals`` places for moderate
    magnitudes, scientific notation otherwise so tiny and huge values keep their significant digits).
    """
    num, den = value.numerator, value.denominator
    if den == 1:
        return str(num)
    places = _terminating_places(den)
    if places is not None and places <= 2 * decimals:
        digits = str(abs(num) * 10**places // den).rjust(places + 1, "0")
        return f"{'-' if num < 0 else ''}{digits[:-places]}.{digits[-places:]}"
    return f"{num}/{den} ≈ {_approximate(value, decimals)}"


def _terminating_places(den: int) -> int | None:
    """Decimal places of p/den when it terminates (den = 2**a * 5**b gives max(a, b)), else None."""
    twos = (den & -den).bit_length() - 1
    rest = den >> twos
    fives = 0
    while rest % 5 == 0:
        rest //= 5
        fives += 1
    return max(twos, fives) if rest == 1 else None


def _approximate(value: Fraction, decimals: int) -> str:
    with localcontext() as ctx:
        ctx.prec = decimals + 30
        approx = Decimal(value.numerator) / Decimal(value.denominator)
        if Decimal(10) ** -4 <= abs(approx) < Decimal(10) ** 15:
            return f"{approx.quantize(Decimal(10) ** -decimals):f}"
        return f"{approx:.{decimals - 1}e}"
