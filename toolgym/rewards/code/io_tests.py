"""stdin/stdout tests: run a program once per test with the input on stdin, and judge what it printed.

This is how contest data (APPS, TACO, CodeContests, LiveCodeBench, DeepCoder, PrimeIntellect) is judged.
Each test runs the submission as a fresh program in its own sandbox child (every isolation layer, a
per-test time, CPU and memory limit). Its clock starts when the program starts, after the child's setup,
and counts the program's own time, not what a busy machine kept it waiting for a CPU (``clock="program"``
of ``toolgym.sandbox.limits.Limits``), so ``timeout`` means the same on a slow or loaded runner. Its
output is compared here, in the verifier's process: the expected output never enters the sandbox, so
printing it requires computing it, and nothing the program does (exiting early, printing a verdict,
reading files) can change how it is judged.

The checker is the usual contest checker (LiveCodeBench's, DeepCoder's): outputs are compared line by line,
trailing whitespace of each line and trailing blank lines ignored; within a line, tokens (split on
whitespace) must be equal, or both parse as numbers and agree within ``float_tolerance`` (absolute or
relative, default ``1e-6``; ``None`` for an exact comparison).

The peers run each test as a new ``python`` subprocess with no isolation (NeMo-Gym's ``code_gen`` says "no
sandbox"); ``benchmarks/bench_code_io.py`` measures both side by side.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from toolgym.rewards.code.runner import CodeTestReport, TestOutcome
from toolgym.util.program_clock import STARVED_FACTOR

DEFAULT_FLOAT_TOLERANCE = 1e-6
_MEMORY_BYTES = 1024**3
_OUTPUT_FLOOR = 1 << 16


# ------------------------------------------------------------------------------------------ the checker


def _number(token: str) -> float | None:
    try:
        value = float(token)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _lines(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def outputs_match(got: str, expected: str, float_tolerance: float | None = DEFAULT_FLOAT_TOLERANCE) -> bool:
    """The contest checker (see the module docstring)."""
    got_lines, want_lines = _lines(got), _lines(expected)
    if len(got_lines) != len(want_lines):
        return False
    for have, want in zip(got_lines, want_lines, strict=True):
        if have == want:
            continue
        have_tokens, want_tokens = have.split(), want.split()
        if len(have_tokens) != len(want_tokens):
            return False
        for a, b in zip(have_tokens, want_tokens, strict=True):
            if a == b:
                continue
            if float_tolerance is None:
                return False
            x, y = _number(a), _number(b)
            if (
                x is None
                or y is None
                or not math.isclose(x, y, rel_tol=float_tolerance, abs_tol=float_tolerance)
            ):
                return False
    return True


# ------------------------------------------------------------------------------------------ running


def io_tests_of(data: Mapping[str, Any]) -> list[dict[str, str]]:
    """``Task.data["io_tests"]`` checked: a non-empty list of ``{"input": str, "output": str}``."""
    tests = data.get("io_tests")
    if not isinstance(tests, list | tuple) or not tests:
        raise ValueError("no io_tests (a list of {input, output})")
    out = []
    for i, test in enumerate(tests):
        if not isinstance(test, Mapping) or not isinstance(test.get("input"), str):
            raise ValueError(f"io_tests[{i}] is not {{input: str, output: str}}: {test!r:.100}")
        if not isinstance(test.get("output"), str):
            raise ValueError(f"io_tests[{i}] has no output string: {test!r:.100}")
        out.append({"input": test["input"], "output": test["output"]})
    return out


def _limits(sandbox: Any, tests: Sequence[Mapping[str, str]], timeout: float, memory_bytes: int) -> Any:
    longest = max(len(t["output"]) for t in tests)
    cap = max(_OUTPUT_FLOOR, 2 * longest + 1024)
    return sandbox.limits.model_copy(
        update={
            "timeout_s": timeout,
            "clock": "program",  # the program's own time: a busy machine does not time out a fast program
            "cpu_s": timeout,
            "memory_bytes": max(memory_bytes, 64 * 1024**2),
            "max_output_bytes": max(sandbox.limits.max_output_bytes, cap),
            "max_output_total_bytes": max(sandbox.limits.max_output_total_bytes, 2 * cap),
        }
    )


def _outcome(res: Any, expected: str, float_tolerance: float | None) -> TestOutcome:
    if res.status == "ok":
        if outputs_match(res.stdout, expected, float_tolerance):
            return TestOutcome(True)
        return TestOutcome(False, "wrong answer")
    if res.status == "error":
        last = (res.stderr.strip().splitlines() or [f"exit code {res.exit_code}"])[-1]
        return TestOutcome(False, f"runtime error: {last[:200]}")
    return TestOutcome(False, f"{res.status}: {res.detail[:200]}" if res.detail else res.status)


class _Budget:
    """``total_timeout`` as the tests' own times summed (``ExecResult.program_s``, the wall time where a
    sandbox has no such clock), checked when a test would start. Past ``STARVED_FACTOR`` times it on the wall
    clock no test starts, and the tests not run make the report the sandbox's error, not fails."""

    def __init__(self, total: float):
        self.total, self.spent, self.starved = total, 0.0, False
        self.cap = time.monotonic() + total * STARVED_FACTOR
        self._lock = threading.Lock()

    def may_start(self) -> bool:
        with self._lock:
            if self.spent >= self.total:
                return False
            if time.monotonic() >= self.cap:
                self.starved = True
                return False
            return True

    def add(self, res: Any) -> None:
        with self._lock:
            self.spent += res.program_s if getattr(res, "program_s", None) is not None else res.wall_s


def _report(
    results: Sequence[Any | None],
    tests: Sequence[Mapping[str, str]],
    float_tolerance: float | None,
    why: str,
    budget: _Budget,
) -> CodeTestReport:
    broken = next((r for r in results if r is not None and r.status == "sandbox_error"), None)
    if broken is not None:
        return CodeTestReport((), infra_error=f"sandbox error: {broken.detail}")
    if budget.starved:
        cap = budget.total * STARVED_FACTOR
        why_not = f"not timed: the machine is too busy (tests not run in {cap:g} s)"
        return CodeTestReport((), infra_error=why_not)
    outcomes = tuple(
        TestOutcome(False, why) if r is None else _outcome(r, t["output"], float_tolerance)
        for r, t in zip(results, tests, strict=True)
    )
    return CodeTestReport(outcomes)


def _sandbox(sandbox: Any) -> Any:
    if sandbox is not None:
        return sandbox
    from toolgym.sandbox import shared_sandbox  # (imported late: the sandbox is heavy)

    return shared_sandbox()


def run_io_tests(
    solution: str,
    tests: Sequence[Mapping[str, str]],
    *,
    sandbox: Any = None,
    timeout: float = 3.0,
    total_timeout: float = 60.0,
    memory_bytes: int = _MEMORY_BYTES,
    float_tolerance: float | None = DEFAULT_FLOAT_TOLERANCE,
    stop_at_first_failure: bool = False,
) -> CodeTestReport:
    """Run ``solution`` once per test (stdin = the test's input) on the sandbox's workers, in test order.

    ``timeout`` (the program's own time, ``Limits(clock="program")``, and CPU) is each test's: passed down
    to the sandbox run, whose clock starts when the program starts. ``stop_at_first_failure``: the rest are
    not run once one fails (an all-or-nothing reward needs no more). Tests that would start once the tests
    run so far used ``total_timeout`` of their own time fail as "not run: total budget".
    """
    sb = _sandbox(sandbox)
    limits = _limits(sb, tests, timeout, memory_bytes)
    results: list[Any | None] = [None] * len(tests)
    budget = _Budget(total_timeout)
    failed = False

    def one(i: int) -> None:
        nonlocal failed
        if (stop_at_first_failure and failed) or not budget.may_start():
            return
        res = sb.run(solution, stdin=tests[i]["input"], timeout=timeout, limits=limits)
        results[i] = res
        budget.add(res)
        if not _outcome(res, tests[i]["output"], float_tolerance).passed:
            failed = True

    workers = max(1, min(len(tests), int(getattr(sb, "workers", 1))))
    with ThreadPoolExecutor(workers, thread_name_prefix="toolgym-io-tests") as pool:
        list(pool.map(one, range(len(tests))))
    why = "not run: an earlier test failed" if stop_at_first_failure and failed else "not run: total budget"
    return _report(results, tests, float_tolerance, why, budget)


async def arun_io_tests(
    solution: str,
    tests: Sequence[Mapping[str, str]],
    *,
    sandbox: Any = None,
    timeout: float = 3.0,
    total_timeout: float = 60.0,
    memory_bytes: int = _MEMORY_BYTES,
    float_tolerance: float | None = DEFAULT_FLOAT_TOLERANCE,
    stop_at_first_failure: bool = False,
) -> CodeTestReport:
    """``run_io_tests`` for asyncio: the tests queue on the sandbox's ``arun`` (its back-pressure)."""
    sb = _sandbox(sandbox)
    limits = _limits(sb, tests, timeout, memory_bytes)
    results: list[Any | None] = [None] * len(tests)
    budget = _Budget(total_timeout)
    failed = False

    turn = asyncio.Semaphore(max(1, int(getattr(sb, "workers", 1))))  # the budget is checked at the start

    async def one(i: int) -> None:
        nonlocal failed
        async with turn:
            if (stop_at_first_failure and failed) or not budget.may_start():
                return
            res = await sb.arun(solution, stdin=tests[i]["input"], timeout=timeout, limits=limits)
            budget.add(res)
        results[i] = res
        if not _outcome(res, tests[i]["output"], float_tolerance).passed:
            failed = True

    await asyncio.gather(*(one(i) for i in range(len(tests))))
    why = "not run: an earlier test failed" if stop_at_first_failure and failed else "not run: total budget"
    return _report(results, tests, float_tolerance, why, budget)
