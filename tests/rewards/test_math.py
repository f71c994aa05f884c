"""Math equivalence (math-verify in a process pool): the table of verdicts, the bounds, the failure modes."""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from toolgym.core.task import Task
from toolgym.rewards.base import safe_verify
from toolgym.rewards.math import (
    MathVerifier,
    _parse_gold,
    check_in_worker,
    gold_from_solution,
    math_answer,
    math_equal,
    math_pool,
)
from toolgym.sandbox.local import wait_until

# (gold, answer, equivalent?) -- gold first: the comparison is asymmetric, as in math-verify.
EQUIVALENCE = [
    # integers and formatting
    ("42", "42", True),
    ("42", "42.0", True),
    ("42", "042", True),
    ("42", "+42", True),
    ("42", "43", False),
    ("42", "-42", False),
    ("1234", "1,234", True),
    ("1234567", "1{,}234{,}567", True),
    ("1234", "1 234", True),
    ("-7", "−7", True),
    ("0", "-0", True),
    ("100", "1e2", True),
    ("100", "10^2", True),
    ("1024", "2^{10}", True),
    ("12345678901234567", "12345678901234568", False),
    ("5", "$5$", True),
    ("5", "\\(5\\)", True),
    ("5", "\\boxed{5}", True),
    ("5", "\\text{5}", True),
    ("5", "5.", True),
    # fractions
    ("\\frac{1}{2}", "1/2", True),
    ("\\frac{1}{2}", "0.5", True),
    ("\\frac{1}{2}", "\\dfrac{1}{2}", True),
    ("\\frac{1}{2}", "\\tfrac12", True),
    ("\\frac{1}{2}", "\\frac{2}{4}", True),
    ("\\frac{1}{2}", "2/4", True),
    ("\\frac{1}{2}", "\\frac{1}{3}", False),
    ("\\frac{3}{4}", "0.75", True),
    ("\\frac{3}{4}", "75\\%", True),
    ("-\\frac{3}{4}", "\\frac{-3}{4}", True),
    ("-\\frac{3}{4}", "-0.75", True),
    ("-\\frac{3}{4}", "0.75", False),
    ("\\frac{7}{3}", "2\\frac{1}{3}", True),
    ("\\frac{1}{3}", "0.3333", False),
    ("\\frac{1}{3}", "0.333333", True),  # math-verify rounds decimals to 6 places
    ("\\frac{22}{7}", "3.142857142857143", True),
    ("\\frac{22}{7}", "\\pi", False),
    ("\\frac{403}{616}", "403/616", True),
    # decimals
    ("0.1", "\\frac{1}{10}", True),
    ("0.1", "0.10", True),
    ("0.1", ".1", True),
    ("24224.2", "24224.20", True),
    ("24224.2", "24224", False),
    ("2.5", "5/2", True),
    ("3.14", "3.15", False),
    ("1.5", "1\\frac{1}{2}", True),
    # percents
    ("50\\%", "0.5", True),
    ("0.5", "50\\%", True),
    ("50", "50\\%", True),
    ("12.5\\%", "\\frac{1}{8}", True),
    # an integer percent equals the same integer (math-verify 0.9's rule, kept on 0.8)
    ("9", "9\\%", True),
    ("9\\%", "9", True),
    ("-9", "-9\\%", True),
    ("50", "49\\%", False),
    ("12.5", "12.5\\%", False),
    ("50", "0.5", False),
    # radicals and constants
    ("\\sqrt{2}", "2^{1/2}", True),
    ("\\frac{\\sqrt{2}}{2}", "\\frac{1}{\\sqrt{2}}", True),
    ("2\\sqrt{3}", "\\sqrt{12}", True),
    ("\\sqrt{2}", "1.41421356", True),
    ("\\sqrt{2}", "1.41", False),
    ("\\pi", "\\pi", True),
    ("2\\pi", "\\pi \\cdot 2", True),
    ("\\pi", "3.14", False),
    ("e", "\\exp(1)", True),
    ("\\sqrt{3}", "\\sqrt{2}", False),
    # expressions
    ("x^2+2x+1", "(x+1)^2", True),
    ("2x", "x \\cdot 2", True),
    ("x^2-1", "(x-1)(x+1)", True),
    ("x+1", "x+2", False),
    ("\\frac{x}{2}", "0.5x", True),
    ("a+b", "b+a", True),
    ("2^{10}", "1024", True),
    ("10!", "3628800", True),
    ("\\binom{5}{2}", "10", True),
    ("\\log_2 8", "3", True),
    # equations
    ("x=3", "3", True),
    ("3", "x=3", True),
    ("x = 3", "x=3", True),
    ("y = 2x + 1", "y = 1 + 2x", True),
    ("x=3", "4", False),
    # sets
    ("\\{2, 3\\}", "\\{3, 2\\}", True),
    ("\\{2, 3\\}", "2, 3", True),
    ("\\{2, 3\\}", "3, 2", True),
    ("\\{-34, -20\\}", "\\{-20, -34\\}", True),
    ("\\{2, 3\\}", "\\{2\\}", False),
    ("\\{2, 3\\}", "\\{2, 3, 4\\}", False),
    ("\\{2, 3\\}", "2", False),
    ("\\{2, 3\\}", "\\{2, 4\\}", False),
    ("\\{\\frac{1}{2}, 1\\}", "\\{0.5, 1\\}", True),
    ("1, 2", "1 \\text{ and } 2", True),
    ("\\emptyset", "\\{\\}", True),
    # intervals and inequalities
    ("(4, \\infty)", "(4, \\infty)", True),
    ("(4, \\infty)", "(4,\\infty)", True),
    ("(4, \\infty)", "x > 4", True),
    ("(4, \\infty)", "[4, \\infty)", False),
    ("(-\\infty, -\\frac{806}{5}]", "(-\\infty, -161.2]", True),
    ("(-\\infty, -\\frac{806}{5}]", "x \\le -\\frac{806}{5}", True),
    ("(-\\infty, 3]", "(-\\infty, 3)", False),
    ("[1, 2)", "[1, 2]", False),
    ("[1, 2]", "[1, 2]", True),
    ("(-\\infty, 3) \\cup (5, \\infty)", "(-\\infty,3)\\cup(5,\\infty)", True),
    ("(-\\infty, 3) \\cup (5, \\infty)", "(5, \\infty) \\cup (-\\infty, 3)", True),
    ("(-\\infty, 3) \\cup (5, \\infty)", "(-\\infty, 3)", False),
    ("(1, 2)", "(2, 1)", False),
    # units and text
    ("10", "10 \\text{ cm}", True),
    ("10", "10\\,\\text{cm}", True),
    ("10", "10 \\mathrm{m}", True),
    ("10", "10 cm", True),
    ("10", "\\$10", True),
    ("10", "10 \\text{ dollars}", True),
    ("90^\\circ", "90", True),
    ("90", "90^{\\circ}", True),
    ("10", "11 \\text{ cm}", False),
    # tuples, vectors, matrices
    ("(1, 2)", "(1,2)", True),
    ("\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", "\\begin{pmatrix}1\\\\2\\end{pmatrix}", True),
    ("\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", "\\begin{pmatrix}2\\\\1\\end{pmatrix}", False),
    # complex
    ("1+2i", "2i+1", True),
    ("1+2i", "1-2i", False),
    # multiple choice and words
    ("A", "A", True),
    ("A", "B", False),
    ("\\text{(A)}", "A", True),
    ("5", "I do not know.", False),
    ("5", "five", False),
    ("5", "The answer is 5", True),  # a lead-in parse_number strips (toolgym.rewards.numeric)
    ("5", "I think it is 5", False),
    ("5", "", False),
    ("5", "\\boxed{}", False),
]


def test_table_is_large():
    assert len(EQUIVALENCE) >= 100
    assert len({(g, a) for g, a, _ in EQUIVALENCE}) == len(EQUIVALENCE)


@pytest.mark.parametrize(("gold", "answer", "expected"), EQUIVALENCE)
def test_equivalence_table(gold, answer, expected):
    verdict = math_equal(gold, answer)
    assert verdict.error is None, verdict
    assert verdict.passed is expected, verdict
    assert verdict.reward == (1.0 if expected else 0.0)


def test_verdicts_are_deterministic_across_threads_and_repeats():
    """Many threads share the pool; every call gives the sequential answer, and the details repeat exactly."""
    sample = EQUIVALENCE[::3]
    first = [math_equal(g, a).model_dump() for g, a, _ in sample]
    with ThreadPoolExecutor(8) as threads:
        again = list(threads.map(lambda c: math_equal(c[0], c[1]).model_dump(), sample * 2))
    assert again == first * 2


PATHOLOGICAL = [
    "10^{10^{10}}",
    "9^{9^{9}}",
    "2^{2^{2^{2^{100}}}}",
    "(10^{10})!",
    "(" * 400 + "1" + ")" * 400,
    "\\frac{" * 60 + "1" + "}{2}" * 60,
    "\\sqrt{" * 120 + "2" + "}" * 120,
]


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.parametrize("answer", PATHOLOGICAL)
def test_pathological_answers_return_within_the_bound(answer):
    pool = math_pool()
    assert pool.wait_ready(60)
    workers, killed, retired = [w.proc.pid for w in pool._idle], pool.stats["killed"], pool.stats["retired"]
    verdict = math_equal("1", answer, timeout=1.0)
    assert not verdict.passed and verdict.reward == 0.0
    if verdict.error is None:  # finished in time: an ordinary (wrong) judgement
        assert verdict.details["method"] == "math-verify"
    elif (
        "killed" in verdict.error
    ):  # stuck in C past the 1 s of CPU passed down: that worker was killed, is gone
        assert verdict.error == "math-verify: timed out after 1s of CPU time (the worker was killed)"
        assert pool.stats["killed"] == killed + 1 and sum(map(_gone, workers)) == 1
    else:  # the soft alarm at 0.8 x the 1 s passed down stopped it; that worker is retired, not reused
        assert verdict.error == "math-verify: timed out after 0.8s of CPU time"
        assert pool.stats["killed"] == killed and pool.stats["retired"] == retired + 1
        assert wait_until(lambda: sum(map(_gone, workers)) == 1)


def test_a_timeout_is_an_error_and_later_calls_are_unaffected():
    pool = math_pool()
    assert pool.wait_ready(60)
    verdict = math_equal("1", "10^{10^{10}}", timeout=0.5)
    assert verdict.error is not None and "timed out" in verdict.error and verdict.details["gold"] == "1"
    # the other workers were left alone: a later call finds one free at once, without waiting for the
    # replacement of a killed one to start
    assert pool.ready_workers >= pool.size - 1
    later = math_equal("\\{1, 2\\}", "\\{2, 1\\}")
    assert later.passed and later.error is None


@pytest.mark.parametrize(
    ("answer", "reason"),
    [("", "empty"), ("   ", "empty"), ("1" * 1001, "too long"), ("\\boxed{" + "1" * 1001 + "}", "too long")],
)
def test_empty_and_overlong_answers_are_wrong_without_parsing(answer, reason):
    verdict = math_equal("1", answer)
    assert verdict.error is None and not verdict.passed
    assert reason in verdict.details["reason"]


def test_answer_length_cap_is_configurable():
    assert not math_equal("5", "5" + " " * 20 + "+0", max_answer_chars=10).passed
    assert math_equal("5", "5" + " " * 20 + "+0", max_answer_chars=100).passed


def test_missing_or_unparseable_gold_is_a_verifier_error():
    for gold in (None, "", "\\boxed{}"):
        verdict = math_equal(gold, "5")
        assert verdict.error is not None and "no gold" in verdict.error


def test_numbers_are_settled_exactly_in_process():
    """Integers beyond float precision: math-verify would round; the in-process comparison is exact."""
    verdict = math_equal("12345678901234567", "12345678901234567.0")
    assert verdict.passed and verdict.details["method"] == "exact number"
    assert math_equal("3", "4").details["method"] == "exact number"
    assert math_equal("\\frac{1}{3}", "0.333333").details["method"] == "math-verify"


def test_verifier_reads_the_last_box_of_the_answer_and_reports_details():
    verifier = MathVerifier(timeout=2.0)
    task = Task(id="t", prompt="?", answer="\\frac{3}{4}")
    verdict = verifier.verify(task, "First \\boxed{1}, no: \\boxed{0.75}")
    assert (
        verdict.passed and verdict.details["answer"] == "0.75" and verdict.details["gold"] == "\\frac{3}{4}"
    )
    wrong = verifier.verify(task, "\\boxed{\\frac{4}{3}}")
    assert not wrong.passed and wrong.error is None and wrong.details["parsed"]
    assert json.loads(json.dumps(wrong.model_dump()))  # details are JSON-plain
    assert safe_verify(verifier, task, None).details["reason"].startswith("the answer is not text")
    with pytest.raises(ValueError):
        MathVerifier(timeout=0)


@pytest.mark.parametrize(
    ("solution", "gold"),
    [
        ("Natalia sold 48/2 = 24 clips in May.\n#### 72", "72"),
        ("so in total ... #### 1,234", "1234"),
        ("The area is $\\boxed{\\frac{\\sqrt{3}}{4}}$.", "\\frac{\\sqrt{3}}{4}"),
        ("first \\boxed{1} and finally \\boxed{2}", "2"),
        ("\\{1, 2\\}", "\\{1, 2\\}"),
        (42, "42"),
    ],
)
def test_gold_from_gsm8k_and_math_solutions(solution, gold):
    assert gold_from_solution(solution) == gold


def test_math_answer_prefers_the_last_box():
    assert math_answer("  x \\boxed{2} y ") == "2"
    assert math_answer(" 3/4 ") == "3/4"


def test_warm_calls_start_no_worker_and_parse_a_repeated_gold_once():
    """What keeps a warm pool's answers to a few milliseconds: no call starts or kills a worker, and a gold
    shared by many calls (a GRPO group's) is parsed once per worker, then cached. The latency itself is
    measured, against its target, by ``benchmarks/bench_latency.py``."""
    pool = math_pool()
    assert pool.wait_ready(60)
    started, killed, calls = pool.stats["started"], pool.stats["killed"], pool.stats["calls"]
    answers = [f"\\{{{i}, {i + 1}\\}}" for i in range(50)]
    verdicts = [math_equal("\\{1, 2\\}", answer) for answer in answers]
    assert all(v.error is None for v in verdicts) and [v.passed for v in verdicts][:3] == [False, True, False]
    assert pool.stats["calls"] == calls + 50
    assert (pool.stats["started"], pool.stats["killed"]) == (started, killed)
    # the worker's side, run here to count: one parse of the gold for many answers
    _parse_gold.cache_clear()
    for answer in answers[:5]:
        assert check_in_worker({"gold": "\\{1, 2\\}", "answer": answer})["gold_parsed"]
    assert (_parse_gold.cache_info().misses, _parse_gold.cache_info().hits) == (1, 4)


def test_a_forked_child_gets_its_own_pool_and_leaves_the_parents_alone():
    """A trainer that forks (data loaders, Ray) must not share or kill the parent's worker pipes."""
    pool = math_pool()
    assert pool.wait_ready(60)
    started = pool.stats["started"]
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        code = 2
        try:
            ok = math_equal("\\{1, 2\\}", "\\{2, 1\\}").passed and math_pool() is not pool
            pool.close()  # what the child's atexit would do with the inherited copy
            code = 0 if ok else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert pool.ready_workers == pool.size and pool.stats["started"] == started
    assert math_equal("\\{3, 4\\}", "\\{4, 3\\}").details["method"] == "math-verify"
