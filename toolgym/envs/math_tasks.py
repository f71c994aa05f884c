"""Tasks for ``toolgym/Math-v0``: seeded procedural problems, and GSM8K/MATH-style files.

Procedural families. Each gives an exact gold answer written in LaTeX, in the form the problem asks for, so
the verifier's equivalence rules get exercised (fractions, sets, intervals, decimals, integers), and
``data["steps"]``: calculator expressions on literal numbers that compute the answer (the oracle replays
them). The numbers are large enough that a policy gains from calling a tool.

==================== ============================================ ======================
family               problem                                      answer form
==================== ============================================ ======================
``fraction_sum``     a/b + c/d - e/f in lowest terms              ``\\frac{p}{q}``
``linear_equation``  solve a x + b = c x + d                      integer or fraction
``quadratic_roots``  all real roots of a quadratic                set ``\\{r_1, r_2\\}``
``linear_inequality`` solve a x + b < c x + d                      interval
``power_mod``        remainder of a^n divided by m                integer
``arithmetic_series`` sum of the first n terms                     integer
``combinations``     committees of k from n                       integer
``compound_interest`` exact balance after n years                  decimal
==================== ============================================ ======================

Files: ``math_file_source`` reads JSONL or Parquet with GSM8K's columns (``question``/``answer``, the gold
after ``####``) or MATH's (``problem``/``solution``, the gold in the last ``\\boxed{}``; an ``answer`` column
wins when both exist), through the same ``FieldMap`` loaders as every other task file.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from fractions import Fraction
from pathlib import Path

from toolgym.core.errors import UnknownNameError
from toolgym.core.task import RowSource, Task
from toolgym.envs.task_files import FieldMap, LazyFileSource, is_verl_layout, read_task_file, verl_file_source
from toolgym.rewards.math import gold_from_solution
from toolgym.tools.calculator import format_number
from toolgym.util.jsonl import read_jsonl

Generated = tuple[str, str, list[str]]  # prompt, LaTeX answer, calculator steps


def latex_number(value: Fraction) -> str:
    """``7``, ``-\\frac{3}{4}``: how a rational gold answer is written."""
    if value.denominator == 1:
        return str(value.numerator)
    sign = "-" if value < 0 else ""
    return f"{sign}\\frac{{{abs(value.numerator)}}}{{{value.denominator}}}"


def _lit(n: int | Fraction) -> str:
    """A number as a calculator operand: negatives in parentheses so they can follow any operator."""
    text = str(n)
    return f"({text})" if n < 0 else text


def _linear(a: int, b: int) -> str:
    """``a x + b`` written the way a textbook would: ``3x - 7``, ``-x + 2``, ``5x``."""
    head = {1: "x", -1: "-x"}.get(a, f"{a}x")
    if b == 0:
        return head
    return f"{head} {'-' if b < 0 else '+'} {abs(b)}"


def _nonzero(rng: random.Random, low: int, high: int) -> int:
    return rng.choice([n for n in range(low, high + 1) if n != 0])


def fraction_sum(rng: random.Random) -> Generated:
    dens = [rng.randint(6, 72) for _ in range(3)]
    nums = [rng.randint(1, d - 1) for d in dens]
    expr = f"{nums[0]}/{dens[0]} + {nums[1]}/{dens[1]} - {nums[2]}/{dens[2]}"
    value = Fraction(nums[0], dens[0]) + Fraction(nums[1], dens[1]) - Fraction(nums[2], dens[2])
    prompt = f"Compute {expr}. Give the result as a single fraction in lowest terms."
    return prompt, latex_number(value), [expr]


def linear_equation(rng: random.Random) -> Generated:
    a, c = _nonzero(rng, -40, 40), _nonzero(rng, -40, 40)
    while a == c:
        c = _nonzero(rng, -40, 40)
    divisors = [q for q in range(1, abs(a - c) + 1) if (a - c) % q == 0]
    x = Fraction(rng.randint(-300, 300), rng.choice(divisors))
    b = rng.randint(-999, 999)
    d = int((a - c) * x + b)
    prompt = f"Solve for x: {_linear(a, b)} = {_linear(c, d)}. Give x exactly."
    return prompt, latex_number(x), [f"({d} - {_lit(b)})/({a} - {_lit(c)})"]


def quadratic_roots(rng: random.Random) -> Generated:
    k = _nonzero(rng, -9, 9)
    r1, r2 = sorted(rng.sample(range(-60, 61), 2))
    a, b, c = k, -k * (r1 + r2), k * r1 * r2
    poly = f"{_linear(a, 0).replace('x', 'x^2')}"
    if b:
        poly += f" {'-' if b < 0 else '+'} {'' if abs(b) == 1 else abs(b)}x"
    if c:
        poly += f" {'-' if c < 0 else '+'} {abs(c)}"
    root = abs(k) * (
        r2 - r1
    )  # the square root of the discriminant, which is a perfect square by construction
    steps = [
        f"{_lit(b)}**2 - 4*{_lit(a)}*{_lit(c)}",
        f"({-b} + {root})/(2*{_lit(a)})",
        f"({-b} - {root})/(2*{_lit(a)})",
    ]
    prompt = (
        f"Find all real solutions of {poly} = 0. Give them as a set, e.g. \\{{1, 2\\}}. "
        f"(The discriminant is a perfect square.)"
    )
    return prompt, f"\\{{{r1}, {r2}\\}}", steps


_RELATIONS = {"<": "<", ">": ">", "≤": "\\le", "≥": "\\ge"}
_FLIP = {"<": ">", ">": "<", "≤": "≥", "≥": "≤"}


def linear_inequality(rng: random.Random) -> Generated:
    a, c = _nonzero(rng, -30, 30), _nonzero(rng, -30, 30)
    while a == c:
        c = _nonzero(rng, -30, 30)
    b, d = rng.randint(-500, 500), rng.randint(-500, 500)
    relation = rng.choice(list(_RELATIONS))
    bound = Fraction(d - b, a - c)
    solved = relation if a - c > 0 else _FLIP[relation]  # dividing by a negative number flips the relation
    t = latex_number(bound)
    answer = {
        "<": f"(-\\infty, {t})",
        "≤": f"(-\\infty, {t}]",
        ">": f"({t}, \\infty)",
        "≥": f"[{t}, \\infty)",
    }[solved]
    prompt = (
        f"Solve the inequality {_linear(a, b)} {relation} {_linear(c, d)}. "
        "Write the solution set in interval notation."
    )
    return prompt, answer, [f"({d} - {_lit(b)})/({a} - {_lit(c)})"]


def power_mod(rng: random.Random) -> Generated:
    base, exponent, modulus = rng.randint(3, 99), rng.randint(40, 400), rng.randint(7, 997)
    prompt = f"What is the remainder when {base} raised to the power {exponent} is divided by {modulus}?"
    return prompt, str(pow(base, exponent, modulus)), [f"{base}**{exponent} % {modulus}"]


def arithmetic_series(rng: random.Random) -> Generated:
    first, step, n = rng.randint(-50, 400), _nonzero(rng, -25, 60), rng.randint(25, 400)
    terms = ", ".join(str(first + i * step) for i in range(3))
    total = n * (2 * first + (n - 1) * step) // 2
    prompt = f"An arithmetic sequence begins {terms}, ... What is the sum of its first {n} terms?"
    return prompt, str(total), [f"{n}*(2*{_lit(first)} + {n - 1}*{_lit(step)})/2"]


_GROUPS = ("club", "choir", "chess society", "rowing team", "book circle", "residents' association")


def combinations(rng: random.Random) -> Generated:
    n, k, group = rng.randint(15, 99), rng.randint(3, 8), rng.choice(_GROUPS)
    top = "*".join(str(n - i) for i in range(k))
    bottom = "*".join(str(k - i) for i in range(k))
    value = 1
    for i in range(k):
        value = value * (n - i) // (i + 1)
    prompt = (
        f"A {group} has {n} members. In how many different ways can it choose a committee of {k} members?"
    )
    return prompt, str(value), [f"{top}/({bottom})"]


def compound_interest(rng: random.Random) -> Generated:
    principal, rate, years = rng.randint(10, 500) * 100, rng.randint(1, 12), rng.randint(2, 5)
    balance = principal * (1 + Fraction(rate, 100)) ** years
    prompt = (
        f"A deposit of {principal} dollars earns {rate}% interest per year, compounded once a year. "
        f"What is the balance after {years} years, in dollars? Give the exact value, without rounding."
    )
    return prompt, format_number(balance), [f"{principal}*(1 + {rate}/100)**{years}"]


FAMILIES: dict[str, Callable[[random.Random], Generated]] = {
    f.__name__: f
    for f in (
        fraction_sum,
        linear_equation,
        quadratic_roots,
        linear_inequality,
        power_mod,
        arithmetic_series,
        combinations,
        compound_interest,
    )
}


def generate_math_task(seed: int, families: Sequence[str] | None = None) -> Task:
    """The task for ``seed`` (drawn from ``families``, default all); the same arguments give the same task."""
    names = sorted(families) if families else sorted(FAMILIES)
    unknown = [n for n in names if n not in FAMILIES]
    if unknown:
        raise ValueError(f"unknown math families {unknown}; known: {', '.join(FAMILIES)}")
    rng = random.Random(f"toolgym.math_tasks:{seed}")
    family = rng.choice(names)
    prompt, answer, steps = FAMILIES[family](rng)
    return Task(id=f"math/{seed}", prompt=prompt, answer=answer, data={"family": family, "steps": steps})


# -- files -------------------------------------------------------------------------------------------------

QUESTION_FIELDS = ("question", "problem", "prompt")
ANSWER_FIELDS = ("answer", "solution")


def math_file_source(
    path: str | Path, question_field: str | None = None, answer_field: str | None = None
) -> RowSource:
    """GSM8K/MATH-style tasks from a ``.jsonl`` or ``.parquet`` file (see the module docstring).

    The gold is reduced to the final answer (``gold_from_solution``); the original text stays in
    ``data[answer_field]``, so a solution is never lost.
    """
    path = Path(path)
    if path.suffix in (".jsonl", ".json", ".parquet") and not path.is_file():
        raise FileNotFoundError(_missing_math_file(path))
    columns = _columns(path)
    if is_verl_layout(columns) and question_field is None:  # DAPO-Math-17k, verl's gsm8k/MATH exports

        def verl_gold(task: Task) -> Task:
            gold = task.answer[0] if isinstance(task.answer, list) and task.answer else task.answer
            return task.model_copy(update={"answer": gold_from_solution(str(gold))})

        return verl_file_source(path).map(verl_gold)
    question = question_field or _pick(columns, QUESTION_FIELDS, path, "question")
    answer = answer_field or _pick(columns, ANSWER_FIELDS, path, "answer")
    fields = FieldMap(prompt=question, answer=None, id="id" if "id" in columns else None)

    def with_gold(task: Task) -> Task:
        if task.data.get(answer) is None:
            raise ValueError(f"{path}: task {task.id!r} has no {answer!r}")
        return task.model_copy(update={"answer": gold_from_solution(task.data[answer])})

    return read_task_file(path, fields).map(with_gold)


def lazy_math_file_source(path: str | Path) -> LazyFileSource:
    """``math_file_source`` read on the first draw, once per process (``shared_file_source``)."""
    path = Path(path)
    if path.suffix not in (".jsonl", ".json", ".parquet"):
        raise ValueError(f"math tasks are read from .jsonl or .parquet files, got {path.name!r}")
    return LazyFileSource(path, "math", math_file_source, missing=_missing_math_file(path))


def _missing_math_file(path: Path) -> str:
    return (
        f"no math task file at {path}: pass tasks= a .jsonl or .parquet file with question/answer "
        "columns, or leave it out for the procedural tasks"
    )


def _columns(path: Path) -> list[str]:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq  # only for Parquet files: not on every `import` of the env

        return list(pq.read_schema(path).names)
    if path.suffix not in (".jsonl", ".json"):
        raise ValueError(f"math tasks are read from .jsonl or .parquet files, got {path.name!r}")
    first = next(read_jsonl(path), None)
    if first is None:
        raise ValueError(f"{path} has no rows")
    return list(first)


def _pick(columns: Sequence[str], choices: Sequence[str], path: Path, what: str) -> str:
    for name in choices:
        if name in columns:
            return name
    raise UnknownNameError(
        f"{path.name}: no {what} column (looked for {', '.join(choices)}; columns: {sorted(columns)})"
    )


__all__ = ["FAMILIES", "generate_math_task", "latex_number", "lazy_math_file_source", "math_file_source"]
