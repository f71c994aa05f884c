"""Hidden-test verification of Python code, with a verdict the code under test cannot forge.

``CodeTestsVerifier`` runs a task's hidden tests (assert statements, or HumanEval's ``check(candidate)``
split into its asserts) against a submitted solution in the sandbox; the reward is the fraction of tests
passed (or all-or-nothing). ``code_tests_scorer`` is the same judgement for the scorer table (verl's
``compute_score``, the reward server): ``{"type": "code_tests", "tests": [...], "entry_point"?, "setup"?}``.

Threat model
------------
The solution is adversarial: an RL policy is optimised to make the reward 1.0 by any means, and a harness
that shares a process with the solution can always be talked into reporting success. So the solution never
shares a process with the tests or with the channel the verdict travels on.

How one verification runs (``toolgym.rewards.code.runner``; the in-sandbox side is
``toolgym.rewards.code.harness``, the per-test plan ``toolgym.rewards.code.plan``):

1. A fresh sandbox *session* starts. Its first call ships the harness and the solution, not the tests. The
   harness (the *driver*) makes itself non-dumpable and forks a *zygote*, which compiles the solution and
   waits. No test, expected value or nonce exists in any process at this point, so nothing the zygote or
   its children inherit, not even freed memory, holds one.
2. The second call ships the tests and a random nonce to the driver alone. For each test the zygote forks
   a fresh *worker* that runs the task's setup and the solution. The driver executes the test itself; every
   name the test takes from the solution (``candidate``, the function under test) is a proxy, and a call
   through it is a message to the worker. The worker's reply is decoded by the driver into a plain value
   of exact builtin types (``int``, ``str``, ``list``, ...; anything else becomes an opaque handle that
   equals only itself and has no truth value). The assert is evaluated by the driver on that value.
3. The driver writes ``<nonce> {"i": k, "passed": ...}`` to its stdout after each test; the verifier counts
   a test as passed only from such a line. Workers have no descriptor of the driver's stdout (their
   stdio is ``/dev/null``, every other descriptor is closed) and cannot open one through ``/proc`` (the
   driver and zygote are non-dumpable; ptrace is refused by seccomp), and they never see the nonce.

What that defeats, each asserted in ``tests/security/test_reward_hacks.py``: ``sys.exit(0)``/``os._exit(0)``
(the worker's exit is a failed call); printing fake results or the nonce format (a worker's output goes
nowhere); ``atexit`` handlers; monkeypatching ``builtins``, ``print``, ``sys.modules``, ``unittest`` or
``assert`` helpers (they live in the worker, the asserts run in the driver); objects whose ``__eq__`` is
always true (not plain data: a handle that equals only itself); reading expected values from the test
source, ``inspect``/``sys._getframe`` of the caller, ``gc.get_objects()`` or the process memory (the tests
were never in the worker's process or its ancestors' memory at fork time); raising inside tests (a raised
exception fails the test unless the test itself expects it); an infinite loop or a hang in one test (each
test has its own timeout and a fresh worker, so it does not zero the others; a total budget bounds the run);
killing the zygote (the remaining tests fail: fail-closed).

The wall is the sandbox: the design assumes what ``LocalSandbox`` provides with its layers in place (an
unprivileged uid, a read-only view of the interpreter's files, seccomp). On a machine where the sandbox
reports layers in ``isolation.missing``, a verdict is only as trustworthy as what is left. (As defence in
depth the driver makes every import it needs before any solution code runs.)

What it does not defeat: a solution that computes the right answers, however it does it (hard-coding the
examples shown in the prompt included). Tests that trust a helper the *solution* defines (rather than the
task's ``setup``) give that helper's verdict; a test's setup code is trusted and runs in both the driver
and each worker. Names a test uses only as ``name.attr`` that are importable modules (``math``, ``np``) are
imported by the driver, never taken from the solution.

Semantics and limits: each test runs on a fresh import of the solution (top-level code runs once per test,
within that test's timeout). A test's timeout is the solution's time: the driver starts its clock once the
test's worker exists (the fork is setup, bounded on its own by ``harness.SPAWN_TIMEOUT``), and a
stdin/stdout test's clock starts when its program starts (``toolgym.rewards.code.io_tests``); a solution
past its limit fails as timed out. Arguments and results cross the process boundary as plain data, by value: a
test that passes a lambda or a custom object *built by the test* to the solution fails; objects the
solution builds (``Pair(1, 2)``) travel as handles; a solution mutating its argument is not seen by the
test (in-process harnesses let ``assert f(xs) == xs[::-1]`` be passed by emptying ``xs``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Literal

from toolgym.core.task import Task
from toolgym.core.types import Trajectory, Verdict
from toolgym.rewards.base import BadVerificationInfo, Verifier
from toolgym.rewards.code.io_tests import DEFAULT_FLOAT_TOLERANCE, arun_io_tests, io_tests_of, run_io_tests
from toolgym.rewards.code.layouts import ground_truth_tests
from toolgym.rewards.code.runner import (
    DEFAULT_TEST_TIMEOUT,
    DEFAULT_TOTAL_TIMEOUT,
    CodeTestReport,
    arun_code_tests,
    run_code_tests,
)
from toolgym.rewards.extract import last_answer_tag

_FENCE = re.compile(
    r"^[ \t]*```[ \t]*([\w+-]*)[^\n]*\n(.*?)(?:^[ \t]*```[ \t]*$|\Z)", re.MULTILINE | re.DOTALL
)
_CODE_LANGUAGES = frozenset({"", "python", "py", "python3"})

Reward = Literal["fraction", "all_or_nothing"]


# ------------------------------------------------------------------------------------------ answers


def extract_code(answer: str) -> str:
    """The code in a final answer: the last ```python (or bare ```) block if there is one, else the text."""
    blocks = [body for lang, body in _FENCE.findall(answer) if lang.lower() in _CODE_LANGUAGES]
    return (blocks[-1] if blocks else answer).strip("\n")


# ------------------------------------------------------------------------------------------ verifier


class CodeTestsVerifier(Verifier):
    """Judges code by a task's hidden tests (``Task.data``: ``tests``, ``setup``?, ``entry_point``?), or by
    stdin/stdout tests (``Task.data["io_tests"]``: ``[{"input", "output"}]``, see
    ``toolgym.rewards.code.io_tests``; with ``reward="all_or_nothing"`` the tests after the first failure are
    not run).

    ``reward="fraction"`` gives the fraction of tests passed; ``"all_or_nothing"`` 1.0 only if all pass.
    ``Verdict.passed`` is "all tests passed" either way. A sandbox failure is a Verdict with ``error``.
    """

    name = "code_tests"

    def __init__(
        self,
        sandbox: Any = None,
        timeout: float = DEFAULT_TEST_TIMEOUT,
        total_timeout: float = DEFAULT_TOTAL_TIMEOUT,
        reward: Reward = "fraction",
        float_tolerance: float | None = DEFAULT_FLOAT_TOLERANCE,
    ):
        """``float_tolerance``: stdin/stdout tests only, numbers in the output agree within it (absolute or
        relative); ``None`` compares exactly (``toolgym.rewards.code.io_tests``)."""
        if reward not in ("fraction", "all_or_nothing"):
            raise ValueError(f"reward must be 'fraction' or 'all_or_nothing', got {reward!r}")
        if timeout <= 0 or total_timeout <= 0:
            raise ValueError(
                f"timeout and total_timeout must be > 0 seconds, got timeout={timeout!r}, "
                f"total_timeout={total_timeout!r}"
            )
        self.sandbox = sandbox
        self.timeout = float(timeout)
        self.total_timeout = float(total_timeout)
        self.reward = reward
        self.float_tolerance = float_tolerance

    def _io_arguments(self, task: Task, answer: str) -> dict[str, Any] | Verdict:
        try:
            tests = io_tests_of(task.data)
        except ValueError as exc:
            return Verdict(reward=0.0, passed=False, error=f"task {task.id!r}: {exc}")
        tolerance = task.data.get("float_tolerance", self.float_tolerance)
        return {
            "solution": extract_code(answer),
            "tests": tests,
            "sandbox": self.sandbox,
            "timeout": float(task.data.get("timeout") or self.timeout),
            "total_timeout": self.total_timeout,
            "float_tolerance": None if tolerance is None else float(tolerance),
            "stop_at_first_failure": self.reward == "all_or_nothing",
        }

    def _arguments(self, task: Task, answer: str) -> dict[str, Any] | Verdict:
        tests = task.data.get("tests")
        if not isinstance(tests, list | tuple) or not tests or not all(isinstance(t, str) for t in tests):
            return Verdict(reward=0.0, passed=False, error=f"task {task.id!r} has no tests (data['tests'])")
        return {
            "solution": extract_code(answer),
            "tests": list(tests),
            "setup": str(task.data.get("setup") or ""),
            "entry_point": task.data.get("entry_point") or None,
            "sandbox": self.sandbox,
            "timeout": float(task.data.get("timeout") or self.timeout),
            "total_timeout": self.total_timeout,
        }

    def verify(self, task: Task, answer: str, trajectory: Trajectory | None = None) -> Verdict:
        if "io_tests" in task.data:
            arguments = self._io_arguments(task, answer)
            run: Any = run_io_tests
        else:
            arguments, run = self._arguments(task, answer), run_code_tests
        return arguments if isinstance(arguments, Verdict) else self.verdict(run(**arguments))

    async def averify(self, task: Task, answer: str) -> Verdict:
        """``verify`` for asyncio (batches of verifications share the sandbox with back-pressure)."""
        if "io_tests" in task.data:
            arguments = self._io_arguments(task, answer)
            run: Any = arun_io_tests
        else:
            arguments, run = self._arguments(task, answer), arun_code_tests
        if isinstance(arguments, Verdict):
            return arguments
        return self.verdict(await run(**arguments))

    def verdict(self, report: CodeTestReport) -> Verdict:
        if report.infra_error:
            return Verdict(reward=0.0, passed=False, error=f"code_tests: {report.infra_error}")
        failures = [{"test": i, "reason": o.reason} for i, o in enumerate(report.outcomes) if not o.passed]
        reward = report.fraction if self.reward == "fraction" else float(report.all_passed)
        details = {"tests_passed": report.passed, "tests_total": report.total, "failures": failures[:5]}
        return Verdict(reward=reward, passed=report.all_passed, details=details)


def code_tests_scorer(response: str, info: Mapping[str, Any]) -> Verdict:
    """Scorer for ``{"type": "code_tests", "tests": [...], "entry_point"?, "setup"?, "timeout"?,
    "reward"?}``: the code is the last ``<answer>`` block of the response (else the whole response), fence
    stripped. ``tests`` may also come as ``ground_truth`` (a list, or a JSON list in a string, as verl
    hands it over). A request without usable tests is ``BadVerificationInfo``, never a score."""
    tests = info.get("tests", info.get("ground_truth"))
    if isinstance(tests, str):  # a JSON list; never one bare string (it may be a reference solution)
        try:
            tests = json.loads(tests)
        except ValueError:
            tests = None
    if not isinstance(tests, list | tuple) or not tests or not all(isinstance(t, str) for t in tests):
        raise BadVerificationInfo(
            'code_tests needs "tests" (or "ground_truth"): a non-empty list of test sources, '
            f"got {tests!r:.100}"
        )
    reward = info.get("reward", "fraction")
    if reward not in ("fraction", "all_or_nothing"):
        raise BadVerificationInfo(
            f'code_tests "reward" must be "fraction" or "all_or_nothing", got {reward!r}'
        )
    data = {"tests": list(tests), "setup": info.get("setup"), "entry_point": info.get("entry_point")}
    task = Task(id=str(info.get("id", "request")), prompt="", data=data)
    verifier = CodeTestsVerifier(timeout=float(info.get("timeout", DEFAULT_TEST_TIMEOUT)), reward=reward)
    answer = last_answer_tag(response)
    return verifier.verify(task, answer if answer is not None else response)


def code_io_scorer(response: str, info: Mapping[str, Any]) -> Verdict:
    """Scorer for contest data: ``{"type": "code_io", "ground_truth": <tests in any layout of
    toolgym.rewards.code.layouts>, "fn_name"?, "starter_code"?, "max_tests"?, "timeout"?, "reward"?,
    "float_tolerance"?}`` (verl's ``apps``, ``taco``, ``codecontests``, ``livecodebench``, ``deepcoder``,
    ``primeintellect`` rows). A row exported by toolgym carries its tests in the task instead
    (``io_tests``, or assert ``tests``). Tests that do not parse are
    ``BadVerificationInfo``, never a score."""
    if info.get("io_tests") or (isinstance(info.get("tests"), list) and info.get("entry_point")):
        data = {k: info[k] for k in ("io_tests", "tests", "entry_point", "setup") if info.get(k) is not None}
    else:
        try:
            max_tests = info.get("max_tests")
            data = ground_truth_tests(
                info.get("tests", info.get("ground_truth")),
                fn_name=info.get("fn_name"),
                starter_code=str(info.get("starter_code") or ""),
                max_tests=int(max_tests) if max_tests is not None else None,
            )
        except (ValueError, TypeError, KeyError) as exc:
            raise BadVerificationInfo(
                f"code_io: the ground truth holds no tests in a known layout: {exc}"
            ) from None
    reward = info.get("reward", "fraction")
    if reward not in ("fraction", "all_or_nothing"):
        raise BadVerificationInfo(f'code_io "reward" must be "fraction" or "all_or_nothing", got {reward!r}')
    tolerance = info.get("float_tolerance", DEFAULT_FLOAT_TOLERANCE)
    verifier = CodeTestsVerifier(
        timeout=float(info.get("timeout", DEFAULT_TEST_TIMEOUT)), reward=reward, float_tolerance=tolerance
    )
    task = Task(id=str(info.get("id", "request")), prompt="", data=data)
    answer = last_answer_tag(response)
    return verifier.verify(task, answer if answer is not None else response)
