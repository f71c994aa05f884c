"""The LLM-judge verifier's own cost: judged answers per second against the scripted judge, with cache misses
(every answer new: render, limits, HTTP, parse) and cache hits (the same request again), beside raw httpx
calls that post the same judge request to the same server in the same run (the HTTP floor).

The scripted judge (``toolgym.testing.judge_server``) answers in well under a millisecond of its own work,
so the ratios are the verifier's overhead over a bare request, not a model's latency: a real judge takes
seconds per call, which is why the cache and the concurrency limits matter more than this overhead.

Measured sequentially (one caller) and with 16 threads (the env calls verifiers from many threads), each
the median of its rounds. The server runs in this process (a uvicorn thread), so with 16 threads client and
server share the GIL: the numbers are a floor for both.

Run (under a minute on 2 cores)::

    .venv/bin/pytest benchmarks/bench_judge.py -q -s
"""

from __future__ import annotations

import itertools
import statistics
import threading
import time
from collections.abc import Callable

import httpx
import pytest

from toolgym.core.task import Task
from toolgym.rewards.judge import JudgeVerifier, clear_memory_cache, reset_endpoints
from toolgym.rewards.judge.prompt import as_criteria, reference_text, render_messages
from toolgym.testing.judge_server import scripted_judge

CRITERIA = [
    {"name": "correct", "description": "The answer names the right city.", "weight": 3},
    {"name": "clear", "description": "The answer is one clear sentence."},
]
TASK = Task(id="capital", prompt="What is the capital of France?", answer="Paris")
SEQUENTIAL = 400  # calls per round, one caller
THREADS, PER_THREAD = 16, 50  # calls per round with threads
ROUNDS = 3
RESULTS: dict[str, float] = {}  # name -> answers per second
_fresh = itertools.count()


@pytest.fixture(scope="module")
def judge(request):
    with scripted_judge("fixed") as running:
        yield running
    clear_memory_cache()
    reset_endpoints()
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    for line in table().splitlines():
        reporter.write_line(line)


def _body(answer: str) -> dict:
    messages = render_messages(TASK.prompt, reference_text(TASK.answer), as_criteria(CRITERIA), answer)
    return {"model": "scripted", "messages": messages, "temperature": 0.0, "max_tokens": 1024, "seed": 0}


def _rate(benchmark, name: str, calls: int, threads: int, one: Callable[[], object]) -> None:
    """Run ``calls`` calls of ``one`` (split over ``threads``) per round; keep the median calls/s."""
    rates: list[float] = []

    def round_() -> None:
        def work(n: int) -> None:
            for _ in range(n):
                one()

        started = time.perf_counter()
        if threads == 1:
            work(calls)
        else:
            workers = [threading.Thread(target=work, args=(calls // threads,)) for _ in range(threads)]
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join()
        rates.append(calls / (time.perf_counter() - started))

    benchmark.pedantic(round_, rounds=ROUNDS, iterations=1)
    RESULTS[name] = statistics.median(rates)


def _raw(judge) -> Callable[[], object]:
    client = httpx.Client(base_url=judge.url, limits=httpx.Limits(max_connections=THREADS))
    body = _body("It is Paris.")

    def one() -> object:
        reply = client.post("/chat/completions", json=body)
        assert reply.status_code == 200
        return reply.json()["choices"][0]["message"]["content"]

    return one


def _miss(judge) -> Callable[[], object]:
    verifier = JudgeVerifier(CRITERIA, judge.url, "scripted", max_concurrency=THREADS)

    def one() -> object:
        verdict = verifier.verify(TASK, f"It is Paris ({next(_fresh)}).")
        assert verdict.error is None and not verdict.details["cached"]
        return verdict

    return one


def _hit(judge) -> Callable[[], object]:
    verifier = JudgeVerifier(CRITERIA, judge.url, "scripted", max_concurrency=THREADS)
    verifier.verify(TASK, "It is Paris.")

    def one() -> object:
        verdict = verifier.verify(TASK, "It is Paris.")
        assert verdict.details["cached"]
        return verdict

    return one


@pytest.mark.parametrize("threads", [1, THREADS], ids=["sequential", f"{THREADS}-threads"])
@pytest.mark.parametrize("kind", ["raw httpx", "judge, cache miss", "judge, cache hit"])
def test_judged_answers_per_second(benchmark, judge, kind, threads):
    one = {"raw httpx": _raw, "judge, cache miss": _miss, "judge, cache hit": _hit}[kind](judge)
    calls = SEQUENTIAL if threads == 1 else THREADS * PER_THREAD
    _rate(benchmark, f"{kind} / {threads}", calls, threads, one)


def table() -> str:
    lines = ["", "judged answers/s against the scripted judge (median of rounds; ratio to raw httpx):"]
    lines.append(f"  {'':22} {'sequential':>22} {f'{THREADS} threads':>22}")
    for kind in ("raw httpx", "judge, cache miss", "judge, cache hit"):
        cells = []
        for threads in (1, THREADS):
            rate, raw = RESULTS.get(f"{kind} / {threads}"), RESULTS.get(f"raw httpx / {threads}")
            if rate is None or raw is None:
                cells.append(f"{'-':>22}")
            else:
                cells.append(f"{rate:>10,.0f}/s {rate / raw:>8.2f}x")
        lines.append(f"  {kind:22} {cells[0]:>22} {cells[1]:>22}")
    return "\n".join(lines)
