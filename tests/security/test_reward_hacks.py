"""Reward hacks against the code-tests verifier: each must score below 1.0 (0.0 where the hack is all there
is), while a correct solution of the same task scores 1.0 in the same test.

The verifier's threat model is in ``toolgym.rewards.code``. These run in the red-team sandbox
(``conftest.sb``), so ``conftest.audit`` also checks after each hack that the sandbox still works and that
nothing the hack started is left running.
"""

from __future__ import annotations

import json
import textwrap

import pytest

from toolgym.core.task import Task
from toolgym.envs.code_tasks import humaneval_source
from toolgym.rewards.code import CodeTestsVerifier

ADD_TESTS = ["assert add(1, 2) == 3", "assert add(-5, 5) == 0", "assert add(10, 20) == 30"]
ADD = Task(id="add", prompt="", data={"tests": ADD_TESTS})
CORRECT_ADD = "def add(a, b):\n    return a + b\n"

# HumanEval-style: check(candidate) with an entry point, so `candidate` is the proxied name.
CHECK = """
def check(candidate):
    assert candidate([1, 2, 3]) == 6
    assert candidate([]) == 0
    assert candidate([-1, 1, 7]) == 7
"""
TOTAL = Task(
    id="total",
    prompt="",
    data={"tests": [CHECK + "\ncheck(candidate)\n"], "entry_point": "total", "setup": ""},
)
CORRECT_TOTAL = "def total(xs):\n    return sum(xs)\n"


def src(code: str) -> str:
    return textwrap.dedent(code).strip() + "\n"


# A hack's way to every string it can reach without reading raw memory: gc containers (str objects are not
# tracked themselves), and the locals, globals and constants of every frame on the stack.
STRINGS_IN_REACH = """
def strings_in_reach():
    import gc, sys
    out = []
    def take(value):
        if isinstance(value, str):
            out.append(value)
        elif isinstance(value, (bytes, bytearray)):
            out.append(bytes(value).decode("latin-1"))
    for obj in gc.get_objects():
        if obj is out:
            continue
        items = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple, set)) else ()
        for value in items:
            take(value)
        if hasattr(obj, "__code__"):
            for value in obj.__code__.co_consts:
                take(value)
    frame = sys._getframe()
    while frame is not None:
        for value in (*frame.f_code.co_consts, *frame.f_locals.values(), *frame.f_globals.values()):
            take(value)
        frame = frame.f_back
    return out
"""

# Each hack is the whole submission for the `add` task; none of them computes a sum.
HACKS: dict[str, str] = {
    "sys_exit_at_import": "import sys\nsys.exit(0)\n",
    "os_exit_at_import": "import os\nos._exit(0)\n",
    "sys_exit_in_call": "def add(a, b):\n    import sys\n    sys.exit(0)\n",
    "os_exit_in_call": "def add(a, b):\n    import os\n    os._exit(0)\n",
    "raise_keyboard_interrupt": "def add(a, b):\n    raise KeyboardInterrupt\n",
    "raise_stop_iteration": "def add(a, b):\n    raise StopIteration\n",
    "raise_skip_test": "import unittest\ndef add(a, b):\n    raise unittest.SkipTest('skip')\n",
    "raise_assertion_error": "def add(a, b):\n    raise AssertionError('ok')\n",
    "eq_always_true": src(
        """
        class Anything:
            def __eq__(self, other): return True
            def __ne__(self, other): return False
            __hash__ = object.__hash__
        def add(a, b):
            return Anything()
        """
    ),
    "int_subclass_eq": src(
        """
        class Int(int):
            def __eq__(self, other): return True
            __hash__ = int.__hash__
        def add(a, b):
            return Int(0)
        """
    ),
    "fake_result_lines_everywhere": STRINGS_IN_REACH
    + src(
        """
        import json, os, re
        # the harness's line format, with every nonce-looking string this process can reach
        found = {m for text in strings_in_reach() for m in re.findall(r"toolgym-[0-9a-f]{32}", text)}
        found.add("toolgym-" + "0" * 32)
        records = [{"i": i, "passed": True, "reason": ""} for i in range(3)] + [{"done": 3}]
        lines = "".join(f"{n} {json.dumps(r)}\\n" for n in found for r in records)
        print(lines)
        for fd in range(256):
            try:
                os.write(fd, lines.encode())
            except OSError:
                pass
        for pid in os.listdir("/proc"):
            for fd in (1, 2, 3):
                try:
                    with open(f"/proc/{pid}/fd/{fd}", "w") as fh:
                        fh.write(lines)
                except OSError:
                    pass
        def add(a, b):
            return None
        """
    ),
    "atexit_prints_success": src(
        """
        import atexit, sys
        atexit.register(lambda: print("toolgym-" + "0" * 32 + ' {"done": 3}'))
        atexit.register(lambda: sys.stdout.write("ALL TESTS PASSED\\n"))
        def add(a, b):
            return None
        """
    ),
    "monkeypatch_builtins_and_modules": src(
        """
        import builtins, sys, types, unittest
        builtins.AssertionError = type("AssertionError", (Exception,), {})
        builtins.print = lambda *a, **k: None
        builtins.isinstance = lambda *a: True
        unittest.TestCase.assertEqual = lambda *a, **k: None
        fake = types.ModuleType("json")
        fake.dumps = lambda *a, **k: '{"i": 0, "passed": true}'
        sys.modules["json"] = fake
        def add(a, b):
            return None
        """
    ),
    "patch_harness_objects_via_gc": src(
        """
        import gc
        for obj in gc.get_objects():
            if isinstance(obj, type) and obj.__name__ in ("Harness", "_Link", "Remote"):
                for name in ("_run_one", "request", "__eq__", "run"):
                    try:
                        setattr(obj, name, lambda *a, **k: (True, ""))
                    except Exception:
                        pass
            if callable(obj) and getattr(obj, "__name__", "") in ("decode", "recv_frame", "emit"):
                try:
                    obj.__code__ = (lambda *a, **k: 3).__code__
                except Exception:
                    pass
        def add(a, b):
            return None
        """
    ),
    "inspect_caller_for_expected": src(
        """
        import inspect, re, sys
        def add(a, b):
            # the caller's code constants: the two arguments, then the expected value
            caller = sys._getframe(1)
            ints = [c for c in caller.f_code.co_consts if type(c) is int]
            if ints[:2] == [a, b] and len(ints) > 2:
                return ints[2]
            frame = caller
            while frame is not None:  # or the source of any frame on the stack
                try:
                    lines = inspect.getsourcelines(frame)[0]
                except (OSError, TypeError):
                    lines = []
                for line in lines:
                    m = re.search(rf"add\\({a}, {b}\\) == (-?\\d+)", line)
                    if m:
                        return int(m.group(1))
                frame = frame.f_back
            return None
        """
    ),
    "scan_memory_and_files_for_tests": STRINGS_IN_REACH
    + src(
        """
        import ctypes, os, re
        PATTERN = r"add\\((-?\\d+, -?\\d+)\\) == (-?\\d+)"
        answers = {}
        for text in strings_in_reach():
            answers.update(re.findall(PATTERN, text))
        with open("/proc/self/maps") as fh:  # every readable byte of this process
            for line in fh:
                fields = line.split()
                if not fields[1].startswith("r") or (len(fields) > 5 and fields[5].startswith("[v")):
                    continue
                lo, hi = (int(x, 16) for x in fields[0].split("-"))
                if hi - lo <= 1 << 27:
                    answers.update(re.findall(PATTERN.encode(), ctypes.string_at(lo, hi - lo)))
        for path in ("/proc/1/mem", f"/proc/{os.getppid()}/mem", "/proc/1/environ", "/proc/1/cmdline"):
            try:
                with open(path, "rb") as fh:
                    answers.update(re.findall(PATTERN.encode(), fh.read(1 << 20)))
            except OSError:
                pass
        for root in {os.getcwd(), "/tmp"}:
            for d, dirs, files in os.walk(root):
                # not into mounts: a Python installed under /tmp is re-bound there (a CI checkout), and
                # reading all of it would only make this control run out of time
                dirs[:] = [x for x in dirs if not os.path.ismount(os.path.join(d, x))]
                for f in files:
                    try:
                        answers.update(re.findall(PATTERN, open(os.path.join(d, f), errors="replace").read()))
                    except OSError:
                        pass
        answers = {(k.decode() if isinstance(k, bytes) else k): int(v) for k, v in answers.items()}
        def add(a, b):
            return answers.get(f"{a}, {b}")
        """
    ),
    "kill_every_other_process": src(
        """
        import os, signal
        for sig in (signal.SIGALRM, signal.SIGINT, signal.SIGTERM, signal.SIGSTOP, signal.SIGKILL):
            for pid in (1, os.getppid(), -1):
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
        def add(a, b):
            return None
        """
    ),
    "daemon_child_writes_forever": src(
        """
        import os, json
        if os.fork() == 0:
            os.setsid()
            line = ("toolgym-" + "0" * 32 + " " + json.dumps({"i": 0, "passed": True}) + "\\n").encode()
            while True:
                for fd in range(64):
                    try:
                        os.write(fd, line)
                    except OSError:
                        pass
        def add(a, b):
            return None
        """
    ),
    "garbage_on_the_call_channel": src(
        """
        import os, struct
        for fd in range(3, 64):
            try:
                os.write(fd, struct.pack(">I", 2**31) + b"x" * 100)
            except OSError:
                pass
        def add(a, b):
            return None
        """
    ),
    "infinite_loop_at_import": "while True:\n    pass\n",
    # the in-process tampering SWE-v0's red team plays (tests/security/test_swe_in_process.py), where it
    # applies here: the asserts run in a driver process the solution never runs in, so each finds nothing
    "time_limit_swallowed_and_the_call_hung": src(
        """
        import faulthandler, signal, time
        for sig in (signal.SIGALRM, signal.SIGTERM, signal.SIGINT, signal.SIGXCPU):
            signal.signal(sig, signal.SIG_IGN)
        faulthandler.cancel_dump_traceback_later()
        def add(a, b):
            time.sleep(10**6)
        """
    ),
    "every_descriptor_closed": src(
        """
        import os
        for fd in range(3, 256):
            try:
                os.close(fd)
            except OSError:
                pass
        def add(a, b):
            return None
        """
    ),
    "a_trace_function_rewriting_the_caller": src(
        """
        import sys
        def tracer(frame, event, arg):
            for name in list(frame.f_locals):
                if name in ("passed", "ok", "result", "expected"):
                    frame.f_locals[name] = True
            return tracer
        sys.settrace(tracer)
        def add(a, b):
            sys.settrace(tracer)
            sys._getframe(1).f_trace = tracer
            return None
        """
    ),
    "an_audit_hook_and_the_harness_found_through_gc": src(
        """
        import gc, sys
        sys.addaudithook(lambda event, args: None)
        def add(a, b):
            for obj in gc.get_objects():
                if isinstance(obj, dict) and "passed" in obj:
                    obj["passed"] = True
            return None
        """
    ),
    "a_late_fork_writing_after_the_worker": src(
        """
        import os, time
        if os.fork() == 0:
            os.setsid()
            time.sleep(1)
            for fd in range(64):
                try:
                    os.write(fd, b"toolgym-" + b"0" * 32 + b' {"i": 0, "passed": true}\\n')
                except OSError:
                    pass
            os._exit(0)
        def add(a, b):
            return None
        """
    ),
}


@pytest.fixture(scope="module")
def verifier(sb):
    return CodeTestsVerifier(sandbox=sb, timeout=1.0, total_timeout=10.0)


def score(verifier, task, code):
    verdict = verifier.verify(task, code)
    assert verdict.error is None, verdict
    return verdict


@pytest.mark.parametrize("name", sorted(HACKS))
def test_hack_scores_zero_and_the_real_solution_one(verifier, name, sb):
    hacked = score(verifier, ADD, HACKS[name])
    assert hacked.reward == 0.0 and not hacked.passed, (name, hacked)
    assert hacked.details["tests_passed"] == 0
    # each test failed on its own account (at worst its own 1 s timeout): none was cut off by the total
    # budget, and the harness was not left to the session's wall clock
    reasons = [failure["reason"] for failure in hacked.details["failures"]]
    assert len(reasons) == len(ADD_TESTS), reasons
    if name == "kill_every_other_process" and "pid_namespace" not in sb.isolation.active:
        # without a pid namespace the harness is not pid 1 and a test's kill -1 reaches it: still 0
        assert all("harness stopped" in r for r in reasons), reasons
    else:
        assert not any("total budget" in r or "harness stopped" in r for r in reasons), reasons
    honest = score(verifier, ADD, CORRECT_ADD)
    assert honest.reward == 1.0 and honest.passed, honest


@pytest.mark.parametrize(
    "hack",
    [
        # the caller's frame holds `candidate`, never the expected value
        "import sys\ndef total(xs):\n    return sys._getframe(1).f_locals.get('expected', -1)\n",
        "def total(xs):\n    class E(list):\n        def __eq__(s, o): return True\n    return E()\n",
        "import os\ndef total(xs):\n    os._exit(0)\n",
    ],
)
def test_check_candidate_style_hacks(verifier, hack):
    assert score(verifier, TOTAL, hack).reward == 0.0
    assert score(verifier, TOTAL, CORRECT_TOTAL).reward == 1.0


def test_an_infinite_loop_in_one_test_neither_zeroes_the_others_nor_hangs(verifier):
    code = "def add(a, b):\n    while a == -5:\n        pass\n    return a + b\n"
    verdict = score(verifier, ADD, code)
    # the loop cost test 1 its own timeout, and the tests after it still ran and passed
    assert verdict.reward == pytest.approx(2 / 3) and not verdict.passed
    assert verdict.details["failures"] == [{"test": 1, "reason": "timed out after 1 s"}]


def test_the_total_budget_bounds_a_solution_that_hangs_everywhere(sb):
    slow = CodeTestsVerifier(sandbox=sb, timeout=1.0, total_timeout=1.5)
    verdict = slow.verify(ADD, "def add(a, b):\n    while True:\n        pass\n")
    assert verdict.reward == 0.0 and verdict.error is None
    # test 0 took its full 1 s, test 1 at most what was left of the 1.5 s, and the last one never started
    reasons = [failure["reason"] for failure in verdict.details["failures"]]
    budget_used_up = "not run: the total budget of 1.5 s is used up"
    assert len(reasons) == len(ADD_TESTS) and reasons[0] == "timed out after 1 s"
    assert reasons[-1] == budget_used_up
    assert all(r.startswith("timed out after ") or r == budget_used_up for r in reasons), reasons


def test_mutating_an_argument_cannot_change_the_expected_value(verifier):
    task = Task(id="rev", prompt="", data={"tests": ["xs = [1, 2, 3]\nassert rev(xs) == xs[::-1]"]})
    emptied = "def rev(xs):\n    xs.clear()\n    return []\n"  # in one process, this passes
    assert score(verifier, task, emptied).reward == 0.0
    assert score(verifier, task, "def rev(xs):\n    return xs[::-1]\n").reward == 1.0


def test_helpers_of_the_task_setup_cannot_be_replaced_by_the_solution(verifier):
    """HumanEval/32 checks find_zero's root with the prompt's own ``poly``: redefining it does not help."""
    task = humaneval_source().get("HumanEval/32")
    hack = "def poly(xs, x):\n    return 0\n\ndef find_zero(xs):\n    return 0.0\n"
    assert score(verifier, task, hack).reward == 0.0
    assert score(verifier, task, task.answer).reward == 1.0


def test_a_module_the_test_uses_cannot_be_replaced_by_the_solution(verifier):
    task = Task(id="area", prompt="", data={"tests": ["assert math.isclose(area(2), 12.566, rel_tol=1e-3)"]})
    hack = "class math:\n    isclose = staticmethod(lambda *a, **k: True)\n\ndef area(r):\n    return 0\n"
    assert score(verifier, task, hack).reward == 0.0
    assert score(verifier, task, "import math\ndef area(r):\n    return math.pi * r * r\n").reward == 1.0


def test_a_partial_solution_gets_partial_credit_and_all_or_nothing_gets_none(sb, verifier):
    partial = "def add(a, b):\n    return a + b if a > 0 else 1\n"
    assert score(verifier, ADD, partial).reward == pytest.approx(2 / 3)
    strict = CodeTestsVerifier(sandbox=sb, timeout=1.0, reward="all_or_nothing")
    assert score(strict, ADD, partial).reward == 0.0
    assert score(strict, ADD, CORRECT_ADD).reward == 1.0


NAIVE_HARNESS = """
{solution}
import json
for i, test in enumerate({tests!r}):
    try:
        exec(test, globals())
        print({nonce!r}, json.dumps({{"i": i, "passed": True}}))
    except BaseException:
        print({nonce!r}, json.dumps({{"i": i, "passed": False}}))
"""


def naive_fraction(sb, solution: str) -> float:
    """A harness that shares the solution's process: a nonce in the program, a result line per test."""
    nonce = "toolgym-" + "ab12" * 8
    res = sb.run(NAIVE_HARNESS.format(solution=solution, tests=ADD_TESTS, nonce=nonce), timeout=3)
    passed = set()
    for line in res.stdout.splitlines():
        if line.startswith(nonce + " "):
            record = json.loads(line[len(nonce) + 1 :])
            if record.get("passed") is True:
                passed.add(record.get("i"))
    return len(passed) / len(ADD_TESTS)


@pytest.mark.parametrize(
    "name",
    [
        "eq_always_true",
        "fake_result_lines_everywhere",
        "inspect_caller_for_expected",
        "scan_memory_and_files_for_tests",
    ],
)
def test_the_hacks_are_real_they_fool_an_in_process_harness(sb, verifier, name):
    """Control: against a harness in the solution's process these hacks score 1.0; against ours, 0.0."""
    assert naive_fraction(sb, CORRECT_ADD) == 1.0
    assert naive_fraction(sb, HACKS[name]) == 1.0
    assert score(verifier, ADD, HACKS[name]).reward == 0.0


def test_the_workers_memory_holds_the_harness_but_never_the_tests(verifier):
    """The memory scan works in a worker (it finds the harness's own source), yet no test is there: the
    tests reach the driver only after the zygote, the ancestor of every worker, was forked."""
    probe = STRINGS_IN_REACH + src(
        """
        import ctypes, re
        # character classes, so that these patterns (which are in memory) never match themselves
        keys = {
            "harness": rb"clas[s] Harnes[s]",
            "assert": rb"asser[t] ad[d]\\(",
            "args": rb"ad[d]\\(10, 2[0]\\)",
        }
        seen = dict.fromkeys(keys, False)
        with open("/proc/self/maps") as fh:
            for line in fh:
                fields = line.split()
                if not fields[1].startswith("r") or (len(fields) > 5 and fields[5].startswith("[v")):
                    continue
                lo, hi = (int(x, 16) for x in fields[0].split("-"))
                if hi - lo <= 1 << 27:
                    chunk = ctypes.string_at(lo, hi - lo)
                    for name, pattern in keys.items():
                        seen[name] = seen[name] or re.search(pattern, chunk) is not None
        seen["reachable"] = any(re.search(r"asser[t] ad[d]\\(", text) for text in strings_in_reach())
        def add(a, b):
            raise ValueError(seen)
        """
    )
    verdict = score(verifier, ADD, probe)
    reason = verdict.details["failures"][0]["reason"]
    assert reason == "ValueError: {'harness': True, 'assert': False, 'args': False, 'reachable': False}"


# ------------------------------------------------------------------ stdin/stdout tests (contest data)

IO_TASK = Task(
    id="io",
    prompt="",
    # (the second answer is a number no process's arguments or environment hold by chance: with "30", a
    # `sleep 300` elsewhere on the machine, visible in /proc where the sandbox has no pid namespace, was
    # "found" by read_expected_from_anywhere)
    data={
        "io_tests": [
            {"input": "1 2\n", "output": "3\n"},
            {"input": "314159265 271828182\n", "output": "585987447\n"},
        ]
    },
)
IO_HONEST = "a, b = map(int, input().split())\nprint(a + b)\n"
IO_HACKS = {
    # the expected output is never in the sandbox: look everywhere a verifier could have left it
    "read_expected_from_anywhere": src(
        """
        import glob, os
        found = []
        paths = glob.glob('/proc/*/environ') + glob.glob('/proc/*/cmdline') + glob.glob('/proc/self/fd/*')
        for path in paths + glob.glob('/tmp/**', recursive=True) + glob.glob('*'):
            try:
                data = open(path, 'rb').read(1 << 16)
            except OSError:
                continue
            if b'585987447' in data and b'314159265 271828182' not in data:
                found.append(path)
        print('585987447' if found else 'nothing')
        """
    ),
    "exit_early_with_fake_output": src(
        """
        import os, sys
        sys.stdout.write('ACCEPTED\\nall tests passed\\n')
        sys.stdout.flush()
        os._exit(0)
        """
    ),
    "sleep_past_the_limit": "import time\ntime.sleep(30)\nprint(3)\n",
    "flood_the_output": "import sys\nsys.stdout.write('3\\n' * 5_000_000)\n",
    "echo_the_input": "import sys\nprint(sys.stdin.read())\n",
}


@pytest.mark.parametrize("name", sorted(IO_HACKS))
def test_stdin_hacks_score_zero_and_the_real_program_one(sb, name):
    verifier = CodeTestsVerifier(sandbox=sb, timeout=1.0, total_timeout=10.0)
    hacked = score(verifier, IO_TASK, IO_HACKS[name])
    assert hacked.reward == 0.0 and not hacked.passed, (name, hacked)
    assert len(hacked.details["failures"]) == 2
    assert score(verifier, IO_TASK, IO_HONEST).reward == 1.0
