"""Running hidden tests in a sandbox session: the two calls of one verification and what they report.

``run_code_tests``/``arun_code_tests`` ship the harness (:mod:`toolgym.rewards.code.harness`) and the
solution in a fresh session's first call, the planned tests (:mod:`toolgym.rewards.code.plan`) and a random
nonce in its second, and count a test as passed only from a nonce-tagged line of the driver. Why it is built
this way (the threat model) is in :mod:`toolgym.rewards.code`.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
import weakref
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolgym.rewards.code.harness import SPAWN_TIMEOUT, STARVED_FACTOR
from toolgym.rewards.code.plan import plan_test, setup_names
from toolgym.util import program_clock

DEFAULT_TEST_TIMEOUT = 3.0
DEFAULT_TOTAL_TIMEOUT = 60.0
BOOT_TIMEOUT = 20.0
_HARNESS_SOURCE = Path(__file__).with_name("harness.py").read_text(encoding="utf-8")
#: the harness's clock (stdlib only, like the harness): run ahead of it in the session's namespace
_CLOCK_SOURCE = Path(program_clock.__file__).read_text(encoding="utf-8")
_SLACK = 10.0


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
        names = setup_names(setup, entry_point)
        plans = []
        for src in tests:
            try:
                plans.append(plan_test(src, names, entry_point))
            except SyntaxError:
                plans.append({"src": src})  # the driver reports it as a test that does not compile
        # module names are no secret: the driver imports them at boot, before any solution code runs
        preload = sorted({m for plan in plans for m in plan.get("imports", ())})
        boot_args = f"{setup!r}, {solution!r}, {BOOT_TIMEOUT!r}, {preload!r}"
        self.boot = (
            f"exec(compile({_CLOCK_SOURCE!r}, 'program_clock.py', 'exec'))\n"
            f"exec(compile({_HARNESS_SOURCE!r}, 'harness.py', 'exec'))\n"
            f"_toolgym_harness = Harness({boot_args})\n"
        )
        self.boot_timeout = BOOT_TIMEOUT + _SLACK
        spec = {
            "nonce": self.nonce,
            "tests": plans,
            "entry_point": entry_point,
            "timeout": float(timeout),
            "total_timeout": float(total_timeout),
        }
        self.run = f"_toolgym_harness.run({spec!r})\n"
        # The driver enforces each test's `timeout` itself, on the solution's clock from the moment
        # its worker exists (load + calls); this outer bound only ends a driver that hangs. On the wall
        # clock a test takes at most STARVED_FACTOR times its limit (a busy machine), plus the worker's
        # start (SPAWN_TIMEOUT at most, off the test's clock) and a little for reporting; no test starts
        # after the total budget.
        per_test = timeout * STARVED_FACTOR + SPAWN_TIMEOUT + 0.5
        self.run_timeout = min(total_timeout * STARVED_FACTOR + per_test, self.n * per_test) + _SLACK

    def report(self, res: Any) -> CodeTestReport:
        if res.session_reset:
            return CodeTestReport((), infra_error="the sandbox session was reset between calls", retry=True)
        found: dict[int, TestOutcome] = {}
        starved: list[str] = []
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
                if record.get("starved") is True:
                    starved.append(f"test {record['i']}: {record.get('reason', '')}")
        if not done and res.status == "sandbox_error":
            return CodeTestReport((), infra_error=f"sandbox error: {res.detail}")
        if starved:  # a test the machine kept from a CPU has no outcome: the verdict is an error, never a 0
            outcomes = tuple(found.get(i, TestOutcome(False, "")) for i in range(self.n))
            return CodeTestReport(outcomes, infra_error="; ".join(starved[:3]))
        missing = f"no result: the harness stopped ({res.status})"
        return CodeTestReport(tuple(found.get(i, TestOutcome(False, missing)) for i in range(self.n)))


def _session(sandbox: Any) -> Any:
    from toolgym.sandbox import LocalSandbox, shared_sandbox  # (imported late: the sandbox is heavy)

    sb = sandbox if sandbox is not None else shared_sandbox()
    limits = sb.limits
    limits = limits.model_copy(update={"max_output_bytes": max(limits.max_output_bytes, 1 << 20)})
    limits = limits.model_copy(update={"max_output_total_bytes": max(limits.max_output_total_bytes, 1 << 21)})
    if isinstance(sb, LocalSandbox):  # bounded here (MAX_CONCURRENT): it takes no slot of the capacity
        return sb.session(limits=limits, transient=True)
    return sb.session(limits=limits)


#: verifications in flight at once (each holds a transient session between its two calls; more would add
#: nothing on a pool of a few workers)
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
