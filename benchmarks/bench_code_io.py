"""stdin/stdout tests per second: toolgym's sandboxed runner against the peers' method, on the same tests.

The peers (LiveCodeBench, DeepCoder, NeMo-Gym's ``code_gen``) run each test as a new ``python`` subprocess
with ``input=`` and a timeout, without isolation. toolgym runs each test as a fresh child of a warm fork
server with every isolation layer on, and compares outputs outside it (``toolgym.rewards.code.io_tests``).
Both judge the same 200 tests (a program that is right on most inputs and wrong on some), two at a time (the
sandbox's 2 workers; a thread pool of 2 for the peers), in one run; the verdicts must agree test by test.

Run::

    .venv/bin/pytest benchmarks/bench_code_io.py -q -s
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from toolgym.rewards.code.io_tests import outputs_match, run_io_tests
from toolgym.sandbox import Limits, LocalSandbox

N = int(os.environ.get("TOOLGYM_BENCH_TESTS", "200"))
# right unless the first number is a multiple of 7 (then off by one): some tests pass, some fail
PROGRAM = "a, b = map(int, input().split())\nprint(a + b + (1 if a % 7 == 0 else 0))\n"
RESULTS: dict[str, float] = {}


def make_tests(n: int) -> list[dict[str, str]]:
    rng = random.Random(0)
    tests = []
    for _ in range(n):
        a, b = rng.randrange(1000), rng.randrange(1000)
        tests.append({"input": f"{a} {b}\n", "output": f"{a + b}\n"})
    return tests


def peer_verdicts(tests: list[dict[str, str]], timeout: float = 3.0) -> list[bool]:
    """What the peers do per test: a new interpreter, the input on stdin, compare what it printed."""

    def one(test: dict[str, str]) -> bool:
        try:
            proc = subprocess.run(
                [sys.executable, "-c", PROGRAM],
                input=test["input"],
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            return False
        return proc.returncode == 0 and outputs_match(proc.stdout, test["output"])

    with ThreadPoolExecutor(2) as pool:
        return list(pool.map(one, tests))


@pytest.fixture(scope="module")
def sandbox():
    with LocalSandbox(workers=2, limits=Limits(timeout_s=3)) as box:
        yield box


def test_toolgym_and_the_peers_agree_and_compare(benchmark, sandbox):
    tests = make_tests(N)
    run_io_tests(PROGRAM, tests[:10], sandbox=sandbox)  # warm
    started = time.perf_counter()
    peers = peer_verdicts(tests)
    peer_s = time.perf_counter() - started

    def ours():
        return run_io_tests(PROGRAM, tests, sandbox=sandbox, total_timeout=600)

    started = time.perf_counter()
    report = benchmark.pedantic(ours, rounds=1, iterations=1)
    our_s = time.perf_counter() - started
    mine = [o.passed for o in report.outcomes]
    agree = sum(a == b for a, b in zip(mine, peers, strict=True))
    RESULTS.update(ours=N / our_s, peers=N / peer_s, agree=agree, passed=sum(mine))
    assert agree == N, "the two runners judged some test differently"


def teardown_module() -> None:
    if not RESULTS:
        return
    print(f"\n\nstdin/stdout tests/s on {N} tests (2 at a time; {RESULTS['passed']} pass)")
    print(f"{'runner':44} {'tests/s':>8}")
    print(f"{'toolgym (sandboxed, every layer)':44} {RESULTS['ours']:8.1f}")
    print(f"{'peers: new python subprocess per test':44} {RESULTS['peers']:8.1f}")
    print(f"ratio: {RESULTS['ours'] / RESULTS['peers']:.1f}x; verdicts agree on {RESULTS['agree']}/{N}")
