"""The code-tests verifier: the plain-data codec, answer extraction, test plans, the harness's semantics
(timeouts, handles, expected exceptions, setup) and the ``code_tests`` scorer.

Hostile solutions are in ``tests/security/test_reward_hacks.py``; this file is about honest ones.
"""

from __future__ import annotations

import asyncio
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolgym.core.task import Task
from toolgym.rewards.code import (
    CodeTestsVerifier,
    arun_code_tests,
    code_tests_scorer,
    extract_code,
    plan_test,
    run_code_tests,
)
from toolgym.rewards.code.harness import BadReply, Unencodable, decode, encode
from toolgym.rewards.compute_score import compute_score
from toolgym.rewards.scorers import BadVerificationInfo, score
from toolgym.sandbox import ExecResult, shared_sandbox

ADD_TESTS = ["assert add(1, 2) == 3", "assert add(-1, 1) == 0", "assert add(2, 2) == 4"]


# ------------------------------------------------------------------------------------------ codec

plain = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text()
    | st.binary()
    | st.complex_numbers(allow_nan=False),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.integers() | st.text(), inner, max_size=4)
        | st.frozensets(st.integers() | st.text(), max_size=4)
    ),
    max_leaves=20,
)


@given(plain)
def test_plain_values_round_trip_exactly(value):
    back = decode(encode(value))
    assert back == value and type(back) is type(value)


def test_special_floats_huge_ints_and_sets_round_trip():
    for value in (float("inf"), -0.0, 10**5000, -(2**521), {1, 2}, (1, [2, {3: b"x"}])):
        back = decode(encode(value))
        assert back == value and type(back) is type(value)
    assert math.isnan(decode(encode(float("nan"))))
    assert str(decode(encode(-0.0))) == "-0.0"


def test_only_exact_builtin_types_are_plain_data():
    class MyInt(int):
        pass

    class MyList(list):
        pass

    for value in (MyInt(3), MyList([1]), object(), [1, object()], lambda: 1):
        with pytest.raises(Unencodable):
            encode(value)
    nested = []
    for _ in range(200):
        nested = [nested]
    with pytest.raises(Unencodable):
        encode(nested)


@pytest.mark.parametrize(
    "bad",
    [
        None,
        [],
        ["zz", 1],
        ["b", 1],
        ["i", 5],
        ["i", "f" * 70000],
        ["f", "bogus"],
        ["l", "notalist"],
        ["d", [[["l", []], ["n"]]]],  # an unhashable key
        ["S", [["l", []]]],
        ["r", 0, "T"],  # a reference without a resolver
        {"v": 1},
    ],
)
def test_malformed_values_are_rejected(bad):
    with pytest.raises(BadReply):
        decode(bad)


# ------------------------------------------------------------------------------------ answers and plans


@pytest.mark.parametrize(
    ("answer", "code"),
    [
        ("def f():\n    return 1", "def f():\n    return 1"),
        ("```python\ndef f():\n    return 1\n```", "def f():\n    return 1"),
        ("Here it is:\n```py\nx = 1\n```\nand a test:\n```python\ny = 2\n```\n", "y = 2"),
        ("```\nz = 3\n```", "z = 3"),
        ("```python\nunclosed = 1\n", "unclosed = 1"),
        ("```text\nnot code\n```\nplain = 1", "```text\nnot code\n```\nplain = 1"),
    ],
)
def test_extract_code(answer, code):
    assert extract_code(answer) == code


def test_plan_proxies_solution_names_and_imports_modules():
    plan = plan_test(
        "import random\nxs = [random.random()]\n"
        "assert math.isclose(area(2), np.pi * 4)\nassert helper(len(xs))",
        setup_names={"helper"},
    )
    assert plan["proxy"] == ["area"]
    assert plan["modules"] == [["math", "math"], ["np", "numpy"]]
    assert plan["imports"] == ["math", "numpy", "random"]
    check = plan_test("def check(candidate):\n    assert candidate(1)\ncheck(candidate)", set(), "f")
    assert check["proxy"] == [] and check["modules"] == []


# ------------------------------------------------------------------------------------------ running tests


@pytest.fixture(scope="module")
def sb():
    return shared_sandbox()


def test_fraction_and_reasons(sb):
    report = run_code_tests("def add(a, b):\n    return a + b if a > 0 else 99\n", ADD_TESTS, sandbox=sb)
    assert [o.passed for o in report.outcomes] == [True, False, True]
    assert report.outcomes[1].reason == "assertion failed"
    assert report.fraction == pytest.approx(2 / 3) and not report.all_passed and report.infra_error is None


def test_a_solution_that_does_not_compile_or_load_fails_every_test_with_the_reason(sb):
    syntax = run_code_tests("def add(a, b) return a", ADD_TESTS, sandbox=sb)
    assert syntax.passed == 0 and "does not compile: SyntaxError" in syntax.outcomes[0].reason
    boom = run_code_tests("raise RuntimeError('at import')\n", ADD_TESTS, sandbox=sb)
    assert boom.passed == 0 and boom.outcomes[2].reason.endswith("RuntimeError: at import")


def test_each_test_gets_a_fresh_solution_process(sb):
    code = "calls = []\ndef add(a, b):\n    calls.append(1)\n    return len(calls)\n"
    report = run_code_tests(code, ["assert add(0, 0) == 1"] * 3, sandbox=sb)
    assert report.all_passed


def test_expected_exceptions_objects_and_numpy_results(sb):
    solution = """
import numpy as np
class Pair:
    def __init__(self, a, b):
        self.a, self.b = a, b
    def total(self):
        return self.a + self.b
def longest(pairs):
    return max(p.b - p.a for p in pairs)
def evens(n):
    return (i for i in range(n) if i % 2 == 0)
def parse(s):
    if not s.isdigit():
        raise ValueError(s)
    return np.int64(int(s))
"""
    tests = [
        "assert longest([Pair(1, 5), Pair(2, 3)]) == 4",  # objects the solution builds travel as handles
        "assert Pair(2, 3).total() == 5",
        "assert parse('12') == 12 and type(parse('7')) is int",  # numpy scalars arrive as plain values
        "try:\n    parse('x')\n    raise AssertionError('no error')\nexcept ValueError:\n    pass",
        "assert Pair(1, 2) != Pair(1, 2)",  # handles equal only themselves
        "assert list(evens(5)) == [0, 2, 4] and evens(5) != [0, 2, 4]",  # iterable, but not a list
    ]
    report = run_code_tests(solution, tests, sandbox=sb)
    assert report.all_passed, report


def test_check_candidate_with_setup_and_entry_point(sb):
    setup = "def helper(x):\n    return 2 * x\n\ndef double_all(xs):\n    '''stub'''\n"
    tests = [
        "def check(candidate):\n    assert candidate([1, 2]) == [helper(1), helper(2)]\ncheck(candidate)"
    ]
    good = "def double_all(xs):\n    return [helper(x) for x in xs]\n"  # uses the setup's helper
    assert run_code_tests(good, tests, setup=setup, entry_point="double_all", sandbox=sb).all_passed
    stub = run_code_tests("", tests, setup=setup, entry_point="double_all", sandbox=sb)
    assert stub.passed == 0


def test_timeouts_are_per_test(sb):
    code = "def add(a, b):\n    while a < 0:\n        pass\n    return a + b\n"
    report = run_code_tests(code, ADD_TESTS, sandbox=sb, timeout=0.5)
    assert [o.passed for o in report.outcomes] == [True, False, True]
    assert report.outcomes[1].reason == "timed out after 0.5 s"


# appended to the harness's source: every worker takes 1 s to fork (a loaded machine), twice a test's limit
SLOW_SPAWN = """
_fast_spawn = Harness._spawn
def _slow_spawn(self, *args):
    time.sleep(1.0)
    return _fast_spawn(self, *args)
Harness._spawn = _slow_spawn
"""


def test_a_tests_clock_starts_when_its_solution_process_exists(sb, monkeypatch):
    from toolgym.rewards.code import runner

    monkeypatch.setattr(runner, "_HARNESS_SOURCE", runner._HARNESS_SOURCE + SLOW_SPAWN)
    fast = run_code_tests("def add(a, b):\n    return a + b\n", ADD_TESTS[:2], sandbox=sb, timeout=0.5)
    assert fast.all_passed, fast  # the slow start is not the solution's time
    loops = "def add(a, b):\n    while a < 0:\n        pass\n    return a + b\n"
    report = run_code_tests(loops, ADD_TESTS[:2], sandbox=sb, timeout=0.5)
    assert [o.passed for o in report.outcomes] == [True, False] and report.infra_error is None
    assert report.outcomes[1].reason == "timed out after 0.5 s"  # a solution past its limit still times out
    slow_load = run_code_tests("while True:\n    pass\n", ADD_TESTS[:1], sandbox=sb, timeout=0.5)
    assert slow_load.outcomes[0].reason == "timed out after 0.5 s"  # its top-level code is on the clock


# a solution that computes for a fixed amount of CPU (~0.15 s on this machine, calibrated by the test)
BUSY_ADD = """
def add(a, b):
    n = 0
    for _ in range(ROUNDS):
        n += 1
    return a + b
"""


def test_a_busy_machine_does_not_time_out_an_honest_solution(sb):
    """The limit is the solution's time, not the machine's: beside six CPU-bound processes per core, a
    solution that needs 0.15 s of CPU takes longer than its 0.5-s limit on the wall clock, and passes (on a
    wall-clock limit all three tests timed out)."""
    import os
    import subprocess
    import sys
    import time

    calibration: dict = {}
    exec(BUSY_ADD.replace("ROUNDS", str(1 << 20)), calibration)
    start = time.process_time()
    calibration["add"](1, 2)
    rounds = int((1 << 20) * 0.15 / max(time.process_time() - start, 1e-3))
    code = BUSY_ADD.replace("ROUNDS", str(rounds))
    # each in a session of its own: the kernel shares the CPU between sessions first (autogroup), so spinners
    # in the test's session would only ever take the test's share
    spin = [sys.executable, "-c", "while True: pass"]
    spinners = [subprocess.Popen(spin, start_new_session=True) for _ in range(6 * (os.cpu_count() or 1))]
    try:
        report = run_code_tests(code, ADD_TESTS, sandbox=sb, timeout=0.5)
    finally:
        for proc in spinners:
            proc.kill()
            proc.wait()
    assert report.infra_error is None and report.all_passed, report


# appended to the harness's source: the schedstat clock claims the driver waited for a CPU all along, i.e.
# a machine so busy that the solution gets no time at all
STARVING = """
_real_run_delay = run_delay
def run_delay(path):
    return time.monotonic() if "thread-self" in path else _real_run_delay(path)
"""


def test_a_test_the_machine_starves_of_cpu_is_the_sandboxs_error_never_a_fail(sb, monkeypatch):
    from toolgym.rewards.code import harness, runner

    monkeypatch.setattr(runner, "_HARNESS_SOURCE", runner._HARNESS_SOURCE + STARVING)
    sleeps = "import time\ndef add(a, b):\n    time.sleep(60)\n"
    report = run_code_tests(sleeps, ADD_TESTS[:1], sandbox=sb, timeout=0.2)
    # not timed out at 0.2 s (it got none of its time), but cut at 10x on the wall clock: not an outcome
    assert report.infra_error is not None and report.infra_error.startswith("test 0: not timed: the machine")
    assert f"in {0.2 * harness.STARVED_FACTOR:.0f}." in report.infra_error, report
    task = Task(id="a", prompt="", data={"tests": ADD_TESTS[:1]})
    verdict = CodeTestsVerifier(sandbox=sb, timeout=0.2).verify(task, sleeps)
    assert verdict.error is not None and "the machine is too busy" in verdict.error and verdict.reward == 0.0


def test_async_batch(sb):
    async def main():
        codes = ["def add(a, b):\n    return a + b\n", "def add(a, b):\n    return a - b\n"] * 6
        return await asyncio.gather(*(arun_code_tests(c, ADD_TESTS, sandbox=sb) for c in codes))

    reports = asyncio.run(main())
    assert [r.passed for r in reports] == [3, 0] * 6 and not any(r.infra_error for r in reports)


# ------------------------------------------------------------------------------------ verifier and scorer


def test_verifier_rewards_and_errors(sb):
    task = Task(id="t", prompt="", data={"tests": ADD_TESTS})
    partial = "```python\ndef add(a, b):\n    return 3\n```"
    verdict = CodeTestsVerifier(sandbox=sb).verify(task, partial)
    assert verdict.reward == pytest.approx(1 / 3) and not verdict.passed
    assert verdict.details["tests_passed"] == 1 and verdict.details["tests_total"] == 3
    assert [f["test"] for f in verdict.details["failures"]] == [1, 2]
    strict = CodeTestsVerifier(sandbox=sb, reward="all_or_nothing")
    assert strict.verify(task, partial).reward == 0.0
    assert strict.verify(task, "def add(a, b):\n    return a + b").reward == 1.0
    no_tests = CodeTestsVerifier(sandbox=sb).verify(Task(id="x", prompt=""), "pass")
    assert no_tests.error and no_tests.reward == 0.0
    with pytest.raises(ValueError):
        CodeTestsVerifier(reward="most")


def test_a_sandbox_failure_is_a_verdict_error_not_a_judgement():
    class BrokenSession:
        def run(self, code, timeout=None):
            return ExecResult(status="sandbox_error", detail="fork server died")

        def close(self):
            pass

    class BrokenSandbox:
        limits = shared_sandbox().limits

        def session(self, limits=None):
            return BrokenSession()

    task = Task(id="t", prompt="", data={"tests": ADD_TESTS})
    verdict = CodeTestsVerifier(sandbox=BrokenSandbox()).verify(task, "def add(a, b):\n    return a + b")
    assert verdict.error and "fork server died" in verdict.error and verdict.reward == 0.0


def test_code_tests_scorer_through_the_registry_and_verl(sb):
    info = {"type": "code_tests", "tests": ADD_TESTS}
    assert score("<answer>def add(a, b):\n    return a + b</answer>", info).reward == 1.0
    assert score("I cannot do this.", info).reward == 0.0
    humaneval_style = {
        "type": "code_tests",
        "tests": ["def check(candidate):\n    assert candidate(3) == 9\ncheck(candidate)"],
        "entry_point": "square",
    }
    assert code_tests_scorer("```python\ndef square(x):\n    return x * x\n```", humaneval_style).passed
    out = compute_score("toolgym/PythonCode-v0", "def add(a, b):\n    return a + b", ADD_TESTS)
    assert out == {"score": 1.0, "passed": True, "error": ""}
    as_json = compute_score("code_tests", "def add(a, b):\n    return a * b", '["assert add(2, 2) == 4"]')
    assert as_json["score"] == 1.0
    reference_as_gold = {"type": "code_tests", "ground_truth": "def add(a, b):\n    return a + b"}
    for bad in ({"type": "code_tests"}, {"type": "code_tests", "tests": [1]}, {**info, "reward": "most"}):
        with pytest.raises(BadVerificationInfo):
            score("x", bad)
    with pytest.raises(BadVerificationInfo):  # a bare string is not a test list (it may be the solution)
        score("x", reference_as_gold)
