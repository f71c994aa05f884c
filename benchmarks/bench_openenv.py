"""``toolgym serve openenv`` beside the env in process, measured in one run on Calculator-v0.

- step latency: one client, one tool-call step after another (p50 and p99), over OpenEnv's WebSocket session
  against ``env.step`` in process; all 500 steps are one episode, and a second table shows the step time
  against the turn number (median and mean of turns 1-50, 51-100, ..., 451-500, and last/first): a step
  that grew with the chat (``info["messages"]`` used to copy it every step) shows a ratio well above 1;
- sessions / s at concurrency 256: 256 GenericEnvClients at once, each connecting, resetting, playing the
  oracle's episode (tool calls, then the answer) and closing, against the same 256 episodes in process
  (one thread, envs reused from an EnvPool as the server does).

The server runs as users run it, ``toolgym serve openenv`` in its own process (loopback); the clients run
in this one. (With the server in a thread of the client's process, client and server took turns on one
GIL, which is not how anyone deploys it.)

Run::

    .venv/bin/pytest benchmarks/bench_openenv.py -q -s
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from openenv.core.generic_client import GenericEnvClient

import toolgym  # noqa: F401  (registers the envs)
from toolgym.rollout.pool import EnvPool
from toolgym.testing.scripted import oracle_script, script_texts
from toolgym.testing.servers import free_port
from toolgym.util.table import format_table

ENV_ID = "toolgym/Calculator-v0"
CONCURRENCY, ROUNDS, STEPS = 256, 3, 500
STEP = "<calculator>48213*1937 - 12345</calculator>"
BUCKET = 50  # turns per row of the per-turn table
RESULTS: dict[str, dict[str, float]] = {"in process": {}, "OpenEnv": {}}
#: each side's step times in turn order, one 500-step episode: the per-turn table
STEP_TIMES: dict[str, list[float]] = {}


@contextlib.contextmanager
def serve_openenv(*options: str) -> Iterator[str]:
    """``toolgym serve openenv --env ENV_ID`` in its own process; yields its URL."""
    import httpx

    port = free_port()
    argv = [sys.executable, "-m", "toolgym.cli", "serve", "openenv", "--env", ENV_ID, "--port", str(port)]
    proc = subprocess.Popen(
        [*argv, "--log-level", "warning", *options], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                httpx.get(f"{url}/health", timeout=1)
                break
            except httpx.TransportError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("toolgym serve openenv did not start") from None
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.fixture(scope="module")
def url(request):
    with serve_openenv("--max-sessions", str(CONCURRENCY), "--idle-timeout", "0") as base:
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
    STEP_TIMES[side] = list(samples)


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
    one_long_episode = ("-k", f"max_turns={STEPS + 1}", "--max-sessions", "1")  # as in process
    with serve_openenv(*one_long_episode) as long_url, GenericEnvClient(base_url=long_url).sync() as env:
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
        f"{ENV_ID} over OpenEnv (WebSocket sessions, loopback, the server in its own process) vs in "
        f"process, {os.cpu_count()} CPU(s); "
        f"{STEPS} steps, {ROUNDS} rounds of {CONCURRENCY} concurrent oracle episodes"
    )
    return (
        header
        + "\n"
        + format_table(("", "in process", "OpenEnv", "OpenEnv vs in process"), rows)
        + "\n\n"
        + per_turn_table()
    )


def per_turn_table() -> str:
    """Step time (µs) per ``BUCKET`` turns of the one long episode, each side: the median (what a step costs,
    robust to a preempted step on a busy machine) and the mean; and last over first. A flat per-step cost
    shows ~1x, one that grows with the chat (O(turns²) per episode) well above."""
    sides = [side for side in ("in process", "OpenEnv") if STEP_TIMES.get(side)]
    columns = [
        (side, stat, buckets(STEP_TIMES[side], stat)) for side in sides for stat in (np.median, np.mean)
    ]
    rows = []
    for i in range(max((len(values) for *_, values in columns), default=0)):
        label = f"turns {i * BUCKET + 1}-{(i + 1) * BUCKET}"
        rows.append((label, *(f"{v[i]:.0f}" if i < len(v) else "" for *_, v in columns)))
    rows.append(("last / first", *(f"{v[-1] / v[0]:.2f}x" for *_, v in columns)))
    headers = ("", *(f"{side} {stat.__name__}" for side, stat, _ in columns))
    header = f"step time (µs) against the turn number, one {STEPS}-step episode per side"
    return header + "\n" + format_table(headers, rows)


def buckets(samples: list[float], stat: Callable[[list[float]], Any]) -> list[float]:
    """``stat`` (median or mean) of each ``BUCKET`` consecutive samples (seconds), in µs."""
    return [float(stat(samples[i : i + BUCKET])) * 1e6 for i in range(0, len(samples), BUCKET)]
