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

How one verification runs (the in-sandbox side is ``toolgym.rewards.code_harness``):

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
within that test's timeout). Arguments and results cross the process boundary as plain data, by value: a
test that passes a lambda or a custom object *built by the test* to the solution fails; objects the
solution builds (``Pair(1, 2)``) travel as handles; a solution mutating its argument is not seen by the
test (in-process harnesses let ``assert f(xs) == xs[::-1]`` be passed by emptying ``xs``).
"""

from __future__ import annotations

import ast
import asyncio
import builtins
import importlib.util
import json
import re
import secrets
import sys
import threading
import weakref
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from toolgym.core.task import Task
from toolgym.core.types import Trajectory, Verdict
from toolgym.rewards.base import Verifier
from toolgym.rewards.extract import last_answer_tag

DEFAULT_TEST_TIMEOUT = 3.0
DEFAULT_TOTAL_TIMEOUT = 60.0
BOOT_TIMEOUT = 20.0
_HARNESS_SOURCE = Path(__file__).with_name("code_harness.py").read_text(encoding="utf-8")
_SLACK = 10.0
#: names that tests use as modules under a conventional alias
MODULE_ALIASES = {"np": "numpy", "pd": "pandas", "sp": "scipy", "nx": "networkx", "plt": "matplotlib.pyplot"}
_BUILTIN_NAMES = frozenset(dir(builtins))
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


# ------------------------------------------------------------------------------------------ test plans


def _bound_names(tree: ast.AST) -> set[str]:
    """Every name ``tree`` binds anywhere (assignments, defs, imports, arguments, handlers, patterns)."""
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            bound.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler | ast.MatchAs | ast.MatchStar) and node.name:
            bound.add(node.name)
    return bound


def _is_module(name: str) -> bool:
    if name in MODULE_ALIASES or name in sys.stdlib_module_names:
        return True
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def plan_test(source: str, setup_names: set[str], entry_point: str | None = None) -> dict[str, Any]:
    """How the driver runs one test: ``proxy`` (names taken from the solution), ``modules`` (names the
    driver imports itself: used only as ``name.attr`` and importable) and ``imports`` (every module the test
    needs, imported by the driver before any solution code runs). Raises ``SyntaxError``."""
    tree = ast.parse(source)
    loaded: set[str] = set()
    called: set[str] = set()
    attr_bases: set[str] = set()
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            loaded.add(node.id)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            called.add(node.func.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            attr_bases.add(node.value.id)
        elif isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            imported.add(node.module)
    given = {"candidate", entry_point} if entry_point else set()
    free = loaded - _bound_names(tree) - setup_names - given - _BUILTIN_NAMES
    modules = sorted(n for n in free if n in attr_bases and n not in called and _is_module(n))
    bound = [[n, MODULE_ALIASES.get(n, n)] for n in modules]
    return {
        "src": source,
        "proxy": sorted(free - set(modules)),
        "modules": bound,
        "imports": sorted(imported | {module for _, module in bound}),
    }


def _setup_names(setup: str, entry_point: str | None) -> set[str]:
    try:
        names = _bound_names(ast.parse(setup))
    except SyntaxError:
        return set()
    return names - {entry_point}


# ------------------------------------------------------------------------------------------ running


@dataclass(frozen=True)
class TestOutcome:
    """One hidden test: passed, or why not (for ``Verdict.details`` and for the model's logs)."""

    __test__ = False  # not a pytest test class
    passed: bool
    reason: str = ""


@dataclass(frozen=True)
class CodeTestReport:
    """What the harness recorded. ``infra_error`` is set when the sandbox, not the solution, failed."""

    outcomes: tuple[TestOutcome, ...]
    infra_error: str | None = None
    retry: bool = False  # the session lost its state between calls: worth one more try

    @property
    def total(self) -> int:
        return len(self.outcomes)

    @property
    def passed(self) -> int:
        return sum(o.passed for o in self.outcomes)

    @property
    def fraction(self) -> float:
        return self.passed / self.total if self.total else 0.0

    @property
    def all_passed(self) -> bool:
        return bool(self.outcomes) and all(o.passed for o in self.outcomes)


class _Job:
    """One verification as its two session calls and the parser of the second call's output."""

    def __init__(
        self,
        solution: str,
        tests: Sequence[str],
        setup: str,
        entry_point: str | None,
        timeout: float,
        total_timeout: float,
    ):
        self.n = len(tests)
        self.nonce = "toolgym-" + secrets.token_hex(16)
        names = _setup_names(setup, entry_point)
        plans = []
        for src in tests:
            try:
                plans.append(plan_test(src, names, entry_point))
            except SyntaxError:
                plans.append({"src": src})  # the driver reports it as a test that does not compile
        # module names are no secret: the driver imports them at boot, before any solution code runs
        preload = sorted({m for plan in plans for m in plan.get("imports", ())})
        boot_args = f"{setup!r}, {solution!r}, {BOOT_TIMEOUT!r}, {preload!r}"
        self.boot = f"{_HARNESS_SOURCE}\n_toolgym_harness = Harness({boot_args})\n"
        self.boot_timeout = BOOT_TIMEOUT + _SLACK
        spec = {
            "nonce": self.nonce,
            "tests": plans,
            "entry_point": entry_point,
            "timeout": float(timeout),
            "total_timeout": float(total_timeout),
        }
        self.run = f"_toolgym_harness.run({spec!r})\n"
        # per test: spawn + load + calls within `timeout`, and a little for reporting
        self.run_timeout = min(total_timeout, self.n * (timeout + 0.5)) + _SLACK

    def report(self, res: Any) -> CodeTestReport:
        if res.session_reset:
            return CodeTestReport((), infra_error="the sandbox session was reset between calls", retry=True)
        found: dict[int, TestOutcome] = {}
        done = False
        prefix = self.nonce + " "
        for line in res.stdout.splitlines():
            if not line.startswith(prefix):
                continue
            try:
                record = json.loads(line[len(prefix) :])
            except ValueError:
                continue
            if not isinstance(record, dict):
                continue
            if "done" in record:
                done = True
            elif type(record.get("i")) is int and 0 <= record["i"] < self.n:
                found[record["i"]] = TestOutcome(record.get("passed") is True, str(record.get("reason", "")))
        if not done and res.status == "sandbox_error":
            return CodeTestReport((), infra_error=f"sandbox error: {res.detail}")
        missing = f"no result: the harness stopped ({res.status})"
        return CodeTestReport(tuple(found.get(i, TestOutcome(False, missing)) for i in range(self.n)))


def _session(sandbox: Any) -> Any:
    from toolgym.sandbox import shared_sandbox  # the process-wide pool (imported late: sandbox is heavy)

    sb = sandbox if sandbox is not None else shared_sandbox()
    limits = sb.limits
    limits = limits.model_copy(update={"max_output_bytes": max(limits.max_output_bytes, 1 << 20)})
    limits = limits.model_copy(update={"max_output_total_bytes": max(limits.max_output_total_bytes, 1 << 21)})
    return sb.session(limits=limits)


#: verifications in flight at once (each holds a session between its two calls; more would make sessions
#: evict each other and add nothing on a pool of a few workers)
MAX_CONCURRENT = 4
_thread_slots = threading.BoundedSemaphore(MAX_CONCURRENT)
_loop_slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
    weakref.WeakKeyDictionary()
)


def _async_slots() -> asyncio.Semaphore:
    loop = asyncio.get_running_loop()
    sem = _loop_slots.get(loop)
    if sem is None:
        sem = _loop_slots.setdefault(loop, asyncio.Semaphore(MAX_CONCURRENT))
    return sem


def _verification(job: _Job, sandbox: Any) -> Generator[tuple[Any, str, float], Any, CodeTestReport]:
    """One verification as a generator, so the sync and async front ends share it: it yields
    ``(session, code, timeout)`` and is sent each call's ExecResult. A session evicted between its two
    calls (state lost) is retried once."""
    report = CodeTestReport((), infra_error="not run")
    for _attempt in range(2):
        sess = _session(sandbox)
        try:
            boot = yield sess, job.boot, job.boot_timeout
            if boot.status != "ok":
                detail = (boot.detail or boot.stderr)[-500:]
                return CodeTestReport((), infra_error=f"harness failed to start ({boot.status}): {detail}")
            report = job.report((yield sess, job.run, job.run_timeout))
        finally:
            sess.close()
        if not report.retry:
            return report
    return report


def run_code_tests(
    solution: str,
    tests: Sequence[str],
    *,
    setup: str = "",
    entry_point: str | None = None,
    sandbox: Any = None,
    timeout: float = DEFAULT_TEST_TIMEOUT,
    total_timeout: float = DEFAULT_TOTAL_TIMEOUT,
) -> CodeTestReport:
    """Run ``tests`` against ``solution`` in a fresh session of ``sandbox`` (the shared one by default)."""
    steps = _verification(_Job(solution, tests, setup, entry_point, timeout, total_timeout), sandbox)
    with _thread_slots:
        try:
            sess, code, wait = next(steps)
            while True:
                sess, code, wait = steps.send(sess.run(code, timeout=wait))
        except StopIteration as done:
            return done.value
        except Exception as exc:
            return CodeTestReport((), infra_error=f"{type(exc).__name__}: {exc}")


async def arun_code_tests(
    solution: str,
    tests: Sequence[str],
    *,
    setup: str = "",
    entry_point: str | None = None,
    sandbox: Any = None,
    timeout: float = DEFAULT_TEST_TIMEOUT,
    total_timeout: float = DEFAULT_TOTAL_TIMEOUT,
) -> CodeTestReport:
    """``run_code_tests`` for asyncio: waits for a free sandbox worker instead of piling up threads."""
    steps = _verification(_Job(solution, tests, setup, entry_point, timeout, total_timeout), sandbox)
    async with _async_slots():
        try:
            sess, code, wait = next(steps)
            while True:
                sess, code, wait = steps.send(await sess.arun(code, timeout=wait))
        except StopIteration as done:
            return done.value
        except Exception as exc:
            return CodeTestReport((), infra_error=f"{type(exc).__name__}: {exc}")


# ------------------------------------------------------------------------------------------ verifier


class CodeTestsVerifier(Verifier):
    """Judges code by a task's hidden tests (``Task.data``: ``tests``, ``setup``?, ``entry_point``?).

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
    ):
        if reward not in ("fraction", "all_or_nothing"):
            raise ValueError(f"reward must be 'fraction' or 'all_or_nothing', got {reward!r}")
        if timeout <= 0 or total_timeout <= 0:
            raise ValueError("timeouts must be positive")
        self.sandbox = sandbox
        self.timeout = float(timeout)
        self.total_timeout = float(total_timeout)
        self.reward = reward

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
        arguments = self._arguments(task, answer)
        return arguments if isinstance(arguments, Verdict) else self.verdict(run_code_tests(**arguments))

    async def averify(self, task: Task, answer: str) -> Verdict:
        """``verify`` for asyncio (batches of verifications share the sandbox with back-pressure)."""
        arguments = self._arguments(task, answer)
        if isinstance(arguments, Verdict):
            return arguments
        return self.verdict(await arun_code_tests(**arguments))

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
    from toolgym.rewards.registry import BadVerificationInfo  # the registry imports this module lazily

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
