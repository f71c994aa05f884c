"""The speed targets the unit tests do not assert, measured here and reported against their targets.

A time limit in a unit test fails on a slower or busier machine, so the tests check what each limit stood for
(linear time measured in one run, an operation count, an outcome; see ``tests/test_no_wallclock_bounds.py``).
The absolute speed is measured here, where a miss is reported in the table, not failed:

- the math-verify pool, warm: one non-numeric comparison, the gold's parse cached (target 100 ms);
- ``gym.make("toolgym/Search-v0")`` with a cold cache, which builds the default world's BM25 index (2 s);
- each action format on its slowest megabyte adversarial input of ``tests/parsers/test_all_formats.py`` (1 s);
- ``extract_final_answer`` on its slowest hostile response of ``tests/rewards/test_extract.py`` (0.5 s);
- the calculator refusing its slowest huge expression, length limit lifted (1 s).

Each row is the worst case over its inputs of the best of ``TOOLGYM_BENCH_ROUNDS`` runs (default 3).

Run::

    .venv/bin/pytest benchmarks/bench_latency.py -q -s
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import time
from pathlib import Path
from types import ModuleType

import gymnasium as gym
import pytest

import toolgym  # noqa: F401  (registers the envs)
from toolgym.parsers import make_parser
from toolgym.rewards.extract import extract_final_answer
from toolgym.rewards.math import math_equal, math_pool
from toolgym.search import sources
from toolgym.tools.calculator import Calculator

ROUNDS = int(os.environ.get("TOOLGYM_BENCH_ROUNDS", "3"))
TESTS = Path(__file__).resolve().parents[1] / "tests"
#: name -> (target in seconds, worst measured seconds, what was worst)
RESULTS: dict[str, tuple[float, float, str]] = {}


def _load(relative: str) -> ModuleType:
    """A test module, for its inputs (the benchmark measures what the tests check)."""
    spec = importlib.util.spec_from_file_location(f"_bench_{Path(relative).stem}", TESTS / relative)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _best(fn, *args) -> float:
    times = []
    for _ in range(ROUNDS):
        started = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - started)
    return min(times)


def _worst(name: str, target: float, cases: dict[str, tuple]) -> None:
    """Record the slowest of ``cases`` (label -> (fn, *args)), each the best of ROUNDS runs."""
    timed = {label: _best(*case) for label, case in cases.items()}
    label = max(timed, key=timed.__getitem__)
    RESULTS[name] = (target, timed[label], label)


def table() -> str:
    lines = ["", f"speed targets, {os.cpu_count()} CPU(s), load {os.getloadavg()[0]:.1f}", ""]
    lines.append(f"{'measurement':44} {'target':>9} {'measured':>10}  {'':6} slowest input")
    for name, (target, seconds, label) in RESULTS.items():
        verdict = "ok" if seconds <= target else "OVER"
        lines.append(f"{name:44} {target * 1e3:7.0f}ms {seconds * 1e3:8.1f}ms  {verdict:6} {label}")
    return "\n".join(lines)


@pytest.fixture(scope="module", autouse=True)
def report(request):
    yield
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    for line in table().splitlines():
        reporter.write_line(line)


def test_math_verify_warm_comparison(benchmark):
    assert math_pool().wait_ready(120)
    answers = [f"\\{{{i}, {i + 1}\\}}" for i in range(50)]
    math_equal("\\{1, 2\\}", "\\{2, 1\\}")  # the gold's parse is cached from here on
    feed = iter(answers)
    samples: list[float] = []

    def once():
        started = time.perf_counter()
        verdict = math_equal("\\{1, 2\\}", next(feed))
        samples.append(time.perf_counter() - started)
        return verdict

    benchmark.pedantic(once, rounds=len(answers), iterations=1)
    RESULTS["math-verify warm comparison (p50)"] = (0.1, statistics.median(samples), "\\{i, i+1\\}")
    RESULTS["math-verify warm comparison (max)"] = (0.1, max(samples), "\\{i, i+1\\}")


def test_default_search_world_index_build(benchmark):
    samples: list[float] = []

    def cold_make():
        sources._world_index.cache_clear()
        started = time.perf_counter()
        gym.make("toolgym/Search-v0").close()
        samples.append(time.perf_counter() - started)

    benchmark.pedantic(cold_make, rounds=ROUNDS, iterations=1)
    label = f"{sources.DEFAULT_WORLD_SIZE:,} documents"
    RESULTS["gym.make(Search-v0), cold index (best)"] = (2.0, min(samples), label)


def test_parsers_on_megabyte_adversarial_inputs(benchmark):
    formats, shapes = _load("parsers/conftest.py"), _load("parsers/test_all_formats.py").ADVERSARIAL
    tools = [formats.FakeCalculator(), formats.FakePython(), formats.FakeSearch(), formats.FakeLookup()]

    def run():
        for fmt in formats.FORMATS:
            parser = make_parser(fmt, tools, max_action_chars=2_000_000)
            cases = {shape: (parser.parse, unit * count) for shape, (unit, count) in shapes.items()}
            _worst(f"{fmt} parser, 1 MB adversarial input", 1.0, cases)

    benchmark.pedantic(run, rounds=1, iterations=1)


def test_answer_extraction_on_hostile_responses(benchmark):
    hostile = _load("rewards/test_extract.py").HOSTILE

    def extract(text):
        return extract_final_answer(text, last_number_fallback=True)

    cases = {shape: (extract, p + unit * n + s) for shape, (p, unit, n, s) in hostile.items()}
    benchmark.pedantic(_worst, args=("extract_final_answer, hostile response", 0.5, cases), rounds=1)


def test_calculator_refusing_huge_expressions(benchmark):
    calc, huge = Calculator(max_length=10**7), _load("tools/test_calculator.py").HUGE
    cases = {shape: (calc, {"expression": make(n)}) for shape, (make, n) in huge.items()}
    cases["'1+' x 500,000"] = (calc, {"expression": "1+" * 500_000 + "1"})  # the largest hostile input
    benchmark.pedantic(_worst, args=("calculator refusal, huge expression", 1.0, cases), rounds=1)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q", "-s", "-p", "no:cacheprovider"]))
