"""Math answers judged by equivalence with ``math-verify``: ``1/2`` = ``\\frac{1}{2}`` = ``0.5``, ``{3, 2}`` =
``\\{2, 3\\}``, ``(4, \\infty)`` = ``x > 4``, ``10 \\text{ cm}`` = ``10``.

What is compared: the gold is ``task.answer`` (a MATH-style solution is reduced to its last ``\\boxed{}``);
the answer is the content of its last ``\\boxed{}`` if it has one, else the whole answer text. A whole model
response (plain single-turn training) first goes through ``toolgym.rewards.extract``. Both sides are parsed
as the content of one ``\\boxed{}``, so the answer must be the math itself: ``I think it is 5`` is not ``5``.
The comparison is asymmetric, gold first, as math-verify requires.

Where it runs: in a small shared pool of worker processes (``toolgym.rewards.worker_pool``), one comparison
per call, with math-verify's own ``signal.alarm`` timeouts off: theirs turn a timeout into a silent ``False``,
have whole-second granularity, and only work on a main thread. The pool's deadline turns a timeout into a
``Verdict`` with ``error`` set instead. A pathological answer (``9^{9^{9}}``, ``(10^{10})!``) is stopped at
the deadline — by the worker's own alarm while sympy runs Python code, by killing and replacing the worker
when it is stuck in C — and costs that one call its ``timeout``, nothing more. Answers longer than
``max_answer_chars`` are refused before any parsing (reward 0: a wrong answer, not a verifier failure).

Two plain numbers are compared in-process without the pool (``toolgym.rewards.numeric.parse_number``, exact
Fractions): equal numbers pass, two integers that differ fail. Everything else, including non-integers that
differ (math-verify rounds floats to 6 places: ``0.333333`` = ``1/3``), goes to math-verify. The shortcut
only departs from math-verify where it is more exact: integers beyond float precision, and ``1e3`` (which
math-verify reads as ``e·3``).

One rule of math-verify 0.9 is kept here on the 0.8 we pin (0.9 needs a latex2sympy2_extended whose antlr
4.9.3 parser crashes on percents, and verl's hydra needs antlr 4.9): an integer percent equals the same
integer, ``9\\%`` = ``9`` either way round (GSM8K-style golds are bare numbers; models write the percent
sign). It only adds passes, and only when both whole answers are integers or integer percents:
``12.5\\%`` is still ``0.125``, never ``12.5`` (and ``50\\%`` still equals ``0.5``); inside a set or a
tuple, 0.8's rules hold.

Results are deterministic: the same gold and answer give the same verdict, or an ``error`` verdict when the
deadline passed (which depends on the machine, and is therefore never reported as a judgement).
"""

from __future__ import annotations

import logging
import os
import threading
from functools import lru_cache
from typing import Any

from toolgym.core.task import Task
from toolgym.core.types import Trajectory, Verdict
from toolgym.rewards.base import Verifier
from toolgym.rewards.extract import last_boxed
from toolgym.rewards.numeric import parse_number
from toolgym.rewards.worker_pool import PoolError, WorkerPool

MAX_ANSWER_CHARS = 1_000
DEFAULT_TIMEOUT = 5.0
_WORKER_TARGET = "toolgym.rewards.math:check_in_worker"

_pool: WorkerPool | None = None
_pool_lock = threading.Lock()


def math_pool() -> WorkerPool:
    """The process-wide math-verify pool, created (not yet started) on first use, and anew in a forked child.

    Its size is ``$TOOLGYM_MATH_WORKERS`` or ``min(4, cpu_count)``.
    """
    global _pool
    with _pool_lock:
        if _pool is None or _pool.owner_pid != os.getpid():
            size = int(os.environ.get("TOOLGYM_MATH_WORKERS") or min(4, os.cpu_count() or 1))
            # each worker parses some LaTeX while it starts: the first parse builds ANTLR's DFA (hundreds of
            # ms), which would otherwise count against the first call's deadline
            # clock="cpu": the bound counts sympy's work, not the time a loaded machine keeps it waiting
            _pool = WorkerPool(
                _WORKER_TARGET,
                size=size,
                warmup={"gold": "\\frac{1}{2}", "answer": "\\{0.5\\}"},
                clock="cpu",
            )
        return _pool


def math_answer(text: str) -> str:
    """What is compared: the last ``\\boxed{}`` content if there is one, else the stripped text."""
    boxed = last_boxed(text)
    return (boxed if boxed is not None else text).strip()


def gold_from_solution(solution: Any) -> str:
    """A gold answer from a dataset's answer field: GSM8K's ``… #### 1,234`` → ``1234``, MATH's solution →
    its last ``\\boxed{}``, anything else → its text."""
    text = str(solution).strip()
    if "####" in text:
        return text.rpartition("####")[2].strip().replace(",", "")
    return math_answer(text)


def math_equal(
    gold: Any, answer: str, *, timeout: float = DEFAULT_TIMEOUT, max_answer_chars: int = MAX_ANSWER_CHARS
) -> Verdict:
    """Judge ``answer`` against ``gold`` (see the module docstring). Never raises for bad input."""
    gold_text = math_answer(str(gold)) if gold is not None else ""
    if not gold_text:
        return Verdict(reward=0.0, passed=False, error=f"math: the task has no gold answer ({gold!r:.80})")
    if not isinstance(answer, str):
        return _wrong(gold_text, f"the answer is not text ({type(answer).__name__})")
    answer_text = math_answer(answer)
    if not answer_text:
        return _wrong(gold_text, "the answer is empty")
    if len(answer_text) > max_answer_chars:
        return _wrong(
            gold_text, f"the answer is too long ({len(answer_text):,} characters; limit {max_answer_chars:,})"
        )
    shortcut = _compare_numbers(gold_text, answer_text)
    if shortcut is not None:
        return _judged(shortcut, gold_text, answer_text, method="exact number")
    try:
        result = math_pool().call({"gold": gold_text, "answer": answer_text}, timeout=timeout)
    except PoolError as exc:
        return Verdict(reward=0.0, passed=False, details={"gold": gold_text}, error=f"math-verify: {exc}")
    if result.get("gold_error"):
        return Verdict(
            reward=0.0, passed=False, details={"gold": gold_text}, error=f"math: {result['gold_error']}"
        )
    details = {"parsed": result["answer_parsed"], "gold_parsed": result["gold_parsed"]}
    return _judged(result["passed"], gold_text, answer_text, method="math-verify", **details)


def _compare_numbers(gold: str, answer: str) -> bool | None:
    """True/False when two plain numbers settle it exactly; None to ask math-verify."""
    g, a = parse_number(gold), parse_number(answer)
    if g is None or a is None:
        return None
    if g == a:
        return True
    if g.denominator == 1 and a.denominator == 1:
        return False
    return None


def _judged(passed: bool, gold: str, answer: str, **details: Any) -> Verdict:
    return Verdict(
        reward=1.0 if passed else 0.0,
        passed=bool(passed),
        details={"answer": answer, "gold": gold, **details},
    )


def _wrong(gold: str, reason: str) -> Verdict:
    return Verdict(reward=0.0, passed=False, details={"reason": reason, "gold": gold})


class MathVerifier(Verifier):
    """Reward 1.0 when the final answer is mathematically equivalent to ``task.answer`` (``math_equal``).

    ``timeout`` is the hard bound in seconds on one comparison; past it the Verdict has ``error`` set.
    ``warm=True`` starts the worker pool in the background now, so the first episode does not wait for it.
    """

    name = "math"

    def __init__(
        self, timeout: float = DEFAULT_TIMEOUT, max_answer_chars: int = MAX_ANSWER_CHARS, warm: bool = False
    ):
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0, got {timeout!r}")
        self.timeout = float(timeout)
        self.max_answer_chars = int(max_answer_chars)
        if warm:
            math_pool().start()

    def verify(self, task: Task, answer: str, trajectory: Trajectory | None = None) -> Verdict:
        return math_equal(task.answer, answer, timeout=self.timeout, max_answer_chars=self.max_answer_chars)


# -- the worker side: runs in a pool process, on its main thread -------------------------------------------


def check_in_worker(payload: dict[str, str]) -> dict[str, Any]:
    """Parse both sides with math-verify and compare them, gold first. Called in a
    ``toolgym.rewards.worker_pool`` worker."""
    from math_verify import verify

    gold = _parse_gold(payload["gold"])
    if not gold:
        return {"gold_error": f"math-verify cannot parse the gold {payload['gold']!r:.200}"}
    answer = _parse(payload["answer"])
    passed = bool(answer) and (
        verify(list(gold), answer, timeout_seconds=None, allow_set_relation_comp=True)
        or _same_integer_up_to_percent(gold, answer)
    )
    return {"passed": passed, "gold_parsed": _show(gold), "answer_parsed": _show(answer)}


def _same_integer_up_to_percent(gold: Any, answer: Any) -> bool:
    """math-verify 0.9's ``9% == 9`` (its ``get_pct_val``), for 0.8: some parse of each side is an integer
    or an integer percent, and the integers are equal."""
    golds = {v for v in map(_integer_or_percent, gold) if v is not None}
    return any(_integer_or_percent(a) in golds for a in answer)


def _integer_or_percent(expr: Any) -> Any:
    """``X`` for an integer ``X`` or an integer percent ``X%`` (latex2sympy reads ``X%`` as the unevaluated
    product ``X·(1/100)``, ``-X%`` as ``-1·X·(1/100)``); ``None`` for anything else."""
    from sympy import Integer, Mul, Rational, UnevaluatedExpr

    if isinstance(expr, Integer):
        return expr
    if not isinstance(expr, Mul):
        return None
    percent = (Rational(1, 100), UnevaluatedExpr(Rational(1, 100)))
    rest = [factor for factor in expr.args if factor not in percent]
    if len(rest) != len(expr.args) - 1 or not all(isinstance(factor, Integer) for factor in rest):
        return None
    return Mul(*rest)


@lru_cache(maxsize=256)
def _parse_gold(text: str) -> tuple[Any, ...]:
    """Golds repeat (a GRPO group shares one), so their parses are cached; answers are parsed every time."""
    return tuple(_parse(text))


def _parse(text: str) -> list[Any]:
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse

    config = (LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig())
    return parse("\\boxed{" + text + "}", extraction_config=config, parsing_timeout=None)


def _show(parsed: Any) -> str:
    return str(parsed[0])[:200] if parsed else ""


def _quiet_math_verify() -> None:
    """math-verify warns on every call that its own timeouts are off; ours are on."""
    for name in ("math_verify", "latex2sympy2_extended"):
        logging.getLogger(name).setLevel(logging.ERROR)


_quiet_math_verify()

__all__ = [
    "DEFAULT_TIMEOUT",
    "MAX_ANSWER_CHARS",
    "MathVerifier",
    "gold_from_solution",
    "math_answer",
    "math_equal",
    "math_pool",
]
