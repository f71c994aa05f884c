"""``toolgym serve openenv`` beside the env in process, measured in one run on Calculator-v0.

- step latency: one client, one tool-call step after another (p50 and p99), over OpenEnv's WebSocket session
  against ``env.step`` in process;
- sessions / s at concurrency 256: 256 GenericEnvClients at once, each connecting, resetting, playing the
  oracle's episode (tool calls, then the answer) and closing, against the same 256 episodes in process
  (one thread, envs reused from an EnvPool as the server does).

The server runs in this process (uvicorn in a thread, loopback), so both sides share the same cores.

Run::

    .venv/bin/pytest benchmarks/bench_openenv.py -q -s
"""

from __future__ import annotations

import asyncio
import os
import time

import gymnasium as gym
import numpy as np
import pytest
from openenv.core.generic_client import GenericEnvClient

import toolgym  # noqa: F401  (registers the envs)
from toolgym.rollout.pool import EnvPool
from toolgym.server.openenv import create_app
from toolgym.testing.scripted import oracle_script, script_texts
from toolgym.testing.servers import serve_in_thread
from toolgym.util.table import format_table

ENV_ID = "toolgym/Calculator-v0"
CONCURRENCY, ROUNDS, STEPS = 256, 3, 500
STEP = "<calculator>48213*1937 - 12345</calculator>"
RESULTS: dict[str, dict[str, float]] = {"in process": {}, "OpenEnv": {}}


@pytest.fixture(scope="module")
def url(request):
    with serve_in_thread(create_app(ENV_ID, max_sessions=CONCURRENCY, idle_timeout=None)) as base:
        yield base
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    for line in table().splitlines():
        reporter.write_line(line)


@pytest.fixture(scope="module")
def episodes():
    env = gym.make(ENV_ID, max_turns=STEPS + 1)
    scripts = {}
    for seed in range(CONCURRENCY):
        env.reset(seed=seed)
        scripts[seed] = script_texts(env, oracle_script(ENV_ID, env.unwrapped.task))
    return scripts


def _record(side: str, samples: list[float]) -> None:
    RESULTS[side]["p50"] = float(np.percentile(samples, 50))
    RESULTS[side]["p99"] = float(np.percentile(samples, 99))


def test_step_latency_in_process(benchmark):
    env = gym.make(ENV_ID, max_turns=STEPS + 1)
    env.reset(seed=0)
    samples = []

    def step():
        started = time.perf_counter()
        env.step(STEP)
        samples.append(time.perf_counter() - started)

    benchmark.pedantic(step, rounds=STEPS, iterations=1)
    _record("in process", samples)


def test_step_latency_openenv(benchmark, url):
    samples = []
    app = create_app(ENV_ID, {"max_turns": STEPS + 1}, max_sessions=1)  # one long episode, as in process
    with serve_in_thread(app) as long_url, GenericEnvClient(base_url=long_url).sync() as env:
        env.reset(seed=0)

        def step():
            started = time.perf_counter()
            env.step({"message": STEP})
            samples.append(time.perf_counter() - started)

        benchmark.pedantic(step, rounds=STEPS, iterations=1)
    _record("OpenEnv", samples)


def test_sessions_per_second_in_process(benchmark, episodes):
    pool = EnvPool()

    def round_():
        for seed, actions in episodes.items():
            with pool.lease(ENV_ID) as env:
                env.reset(seed=seed)
                for action in actions:
                    *_, info = env.step(action)
                assert info["verdict"].reward == 1.0

    started = time.perf_counter()
    benchmark.pedantic(round_, rounds=ROUNDS, iterations=1)
    RESULTS["in process"]["sessions/s"] = ROUNDS * CONCURRENCY / (time.perf_counter() - started)
    pool.close()


def test_sessions_per_second_openenv(benchmark, url, episodes):
    async def play(seed: int, actions: list[str]) -> float:
        async with GenericEnvClient(base_url=url, message_timeout_s=300) as env:
            await env.reset(seed=seed)
            for action in actions:
                result = await env.step({"message": action})
            return result.reward

    async def all_at_once() -> list[float]:
        return await asyncio.gather(*(play(seed, actions) for seed, actions in episodes.items()))

    def round_():
        assert asyncio.run(all_at_once()) == [1.0] * CONCURRENCY

    started = time.perf_counter()
    benchmark.pedantic(round_, rounds=ROUNDS, iterations=1)
    RESULTS["OpenEnv"]["sessions/s"] = ROUNDS * CONCURRENCY / (time.perf_counter() - started)


def table() -> str:
    local, remote = RESULTS["in process"], RESULTS["OpenEnv"]
    nan = float("nan")
    rows = []
    for key, label in (("p50", "step p50 (ms)"), ("p99", "step p99 (ms)")):
        a, b = local.get(key, nan) * 1e3, remote.get(key, nan) * 1e3
        rows.append((label, f"{a:.3f}", f"{b:.3f}", f"{b / a:.1f}x slower"))
    a, b = local.get("sessions/s", nan), remote.get("sessions/s", nan)
    rows.append((f"sessions/s at {CONCURRENCY}", f"{a:.0f}", f"{b:.0f}", f"{a / b:.1f}x fewer"))
    header = (
        f"{ENV_ID} over OpenEnv (WebSocket sessions, loopback) vs in process, {os.cpu_count()} CPU(s); "
        f"{STEPS} steps, {ROUNDS} rounds of {CONCURRENCY} concurrent oracle episodes"
    )
    return header + "\n" + format_table(("", "in process", "OpenEnv", "OpenEnv vs in process"), rows)
