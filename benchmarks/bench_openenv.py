"""``toolgym serve openenv`` beside the env in process and beside OpenEnv's own echo env, in one run on
Calculator-v0.

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

The fair ceiling for a server on OpenEnv is OpenEnv's own echo env (a message in, the same message out),
served and called the same way: the bench writes it with ``openenv init echo_env`` (OpenEnv's template,
from the installed package: nothing of it is copied into toolgym), raises the template's
``max_concurrent_envs=1`` to 256 as its comment says to, and serves ``server.app:app`` with uvicorn in its
own process, as OpenEnv's generated env runs it (same host, log level and backlog as ``toolgym serve
openenv``). Its step latency is the same 500 steps of the same action text over one WebSocket session;
its sessions / s, the same 256 concurrent clients each sending the oracle episode's actions (the echo env
sends them back). The two servers are measured in turn, step by step and round by round (ABBA), so a busy
neighbour on a shared machine slows both alike; each server's CPU time per step and per session (from
/proc) is printed too. A third table prints toolgym's ratios to it beside the goals (a step at most 1.2x
the echo env's at p50 and p99; sessions / s at least 0.9x).

Run::

    .venv/bin/pytest benchmarks/bench_openenv.py -q -s
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
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
PAIRED_ROUNDS = 4  # rounds of 256 sessions on each server (toolgym's and the echo env's), interleaved
STEP = "<calculator>48213*1937 - 12345</calculator>"
BUCKET = 50  # turns per row of the per-turn table
RESULTS: dict[str, dict[str, float]] = {"in process": {}, "OpenEnv": {}, "echo": {}}
#: toolgym over OpenEnv against OpenEnv's echo env: (key, bound, "<=" or ">=") for toolgym / echo
GOALS = (("p50", 1.2, "<="), ("p99", 1.2, "<="), ("sessions/s", 0.9, ">="))
#: each side's step times in turn order, one 500-step episode: the per-turn table
STEP_TIMES: dict[str, list[float]] = {}
#: each server's process id, by its URL: its CPU time
SERVER_PIDS: dict[str, int] = {}


@contextlib.contextmanager
def serve(argv: list[str], what: str, cwd: str | None = None) -> Iterator[str]:
    """``argv`` (with ``--port PORT`` appended) in its own process until the ``with`` ends; yields its URL
    once ``/health`` answers."""
    import httpx

    port = free_port()
    proc = subprocess.Popen(
        [*argv, "--port", str(port)], cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"
    SERVER_PIDS[url] = proc.pid
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                httpx.get(f"{url}/health", timeout=1)
                break
            except httpx.TransportError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{what} did not start") from None
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


def serve_openenv(*options: str) -> contextlib.AbstractContextManager[str]:
    """``toolgym serve openenv --env ENV_ID`` in its own process; yields its URL."""
    argv = [sys.executable, "-m", "toolgym.cli", "serve", "openenv", "--env", ENV_ID]
    return serve([*argv, "--log-level", "warning", *options], "toolgym serve openenv")


@pytest.fixture(scope="module", autouse=True)
def report(request):
    yield
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    for line in table().splitlines():
        reporter.write_line(line)


@pytest.fixture(scope="module")
def url():
    with serve_openenv("--max-sessions", str(CONCURRENCY), "--idle-timeout", "0") as base:
        yield base


@pytest.fixture(scope="module")
def echo_url():
    """OpenEnv's echo env (``openenv init echo_env``, its template's own env) served as its generated
    ``server/app.py`` says: ``uvicorn server.app:app``, with ``max_concurrent_envs`` raised from the
    template's 1 to ``CONCURRENCY`` (no idle timeout, as ``url``'s ``--idle-timeout 0``)."""
    openenv_cli = Path(sys.executable).with_name("openenv")
    with tempfile.TemporaryDirectory(prefix="bench-openenv-echo-") as tmp:
        subprocess.run(
            [str(openenv_cli), "init", "echo_env", "--output-dir", tmp], check=True, capture_output=True
        )
        env_dir = Path(tmp, "echo_env")
        app_py = env_dir / "server" / "app.py"
        template = app_py.read_text()
        one = "max_concurrent_envs=1,"
        assert one in template, f"OpenEnv's template changed: no {one!r} in {app_py}:\n{template}"
        app_py.write_text(template.replace(one, f"max_concurrent_envs={CONCURRENCY},"))
        argv = [sys.executable, "-m", "uvicorn", "server.app:app", "--host", "127.0.0.1"]
        argv += ["--log-level", "warning", "--backlog", "4096"]  # as toolgym serve openenv runs uvicorn
        with serve(argv, "OpenEnv's echo env", cwd=str(env_dir)) as base:
            yield base


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


def test_step_latency_openenv_and_echo(benchmark, echo_url):
    """The same 500-step loop on both servers, one step of each in turn (which goes first alternates), so a
    busy neighbour slows both alike and the ratio holds; each side's server CPU per step besides."""
    samples: dict[str, list[float]] = {"OpenEnv": [], "echo": []}
    one_long_episode = ("-k", f"max_turns={STEPS + 1}", "--max-sessions", "1")  # as in process
    with (
        serve_openenv(*one_long_episode) as long_url,
        GenericEnvClient(base_url=long_url).sync() as ours,
        GenericEnvClient(base_url=echo_url).sync() as echo,
    ):
        ours.reset(seed=0)
        echo.reset(seed=0)
        sides = [("OpenEnv", ours, long_url), ("echo", echo, echo_url)]
        cpu = {side: server_cpu(base) for side, _, base in sides}

        def step():
            for side, env, _ in sides if len(samples["echo"]) % 2 else sides[::-1]:
                started = time.perf_counter()
                result = env.step({"message": STEP})
                samples[side].append(time.perf_counter() - started)
                assert result.observation["echoed_message" if side == "echo" else "turn"]

        benchmark.pedantic(step, rounds=STEPS, iterations=1)
        for side, _, base in sides:
            RESULTS[side]["cpu/step"] = (server_cpu(base) - cpu[side]) / STEPS
    for side, times in samples.items():
        _record(side, times)


def test_sessions_per_second_openenv_and_echo(benchmark, url, echo_url, episodes):
    """``PAIRED_ROUNDS`` rounds on each server, in the order ABBA ABBA ... (a neighbour's load falls on both
    alike); each round ``CONCURRENCY`` GenericEnvClients at once, each connecting, resetting, sending its
    oracle episode's actions and closing. toolgym's sessions must end with reward 1; the echo env's must
    echo the last action. One round on each first, timed apart: the steady state is what a long run sees,
    and toolgym's first round also builds the server's 256 env instances (the echo env's are empty)."""
    servers = {
        "OpenEnv": (url, lambda action, result: result.done and result.reward == 1.0),
        "echo": (echo_url, lambda action, result: result.observation["echoed_message"] == action),
    }
    wall = dict.fromkeys(servers, 0.0)
    cpu = dict.fromkeys(servers, 0.0)
    order = [side for _ in range(PAIRED_ROUNDS // 2) for side in ("OpenEnv", "echo", "echo", "OpenEnv")]
    turns = iter(order)

    def round_():
        side = next(turns)
        base, expect = servers[side]
        cpu_before, started = server_cpu(base), time.perf_counter()
        assert asyncio.run(concurrent_sessions(base, episodes, expect)) == [True] * CONCURRENCY
        wall[side] += time.perf_counter() - started
        cpu[side] += server_cpu(base) - cpu_before

    for side, (base, expect) in servers.items():  # the cold round
        started = time.perf_counter()
        assert asyncio.run(concurrent_sessions(base, episodes, expect)) == [True] * CONCURRENCY
        RESULTS[side]["cold sessions/s"] = CONCURRENCY / (time.perf_counter() - started)
    benchmark.pedantic(round_, rounds=len(order), iterations=1)
    for side in servers:
        rounds = order.count(side)
        RESULTS[side]["sessions/s"] = rounds * CONCURRENCY / wall[side]
        RESULTS[side]["cpu/session"] = cpu[side] / (rounds * CONCURRENCY)


async def concurrent_sessions(base_url: str, episodes, expect: Callable[[str, Any], bool]) -> list[bool]:
    """``CONCURRENCY`` GenericEnvClients at once: connect, reset, step each of its episode's actions, close;
    ``expect(last action, last result)`` for each."""

    async def play(seed: int, actions: list[str]) -> bool:
        async with GenericEnvClient(base_url=base_url, message_timeout_s=300) as env:
            await env.reset(seed=seed)
            for action in actions:
                result = await env.step({"message": action})
            return expect(actions[-1], result)

    return await asyncio.gather(*(play(seed, actions) for seed, actions in episodes.items()))


def server_cpu(base_url: str) -> float:
    """CPU seconds (user + system) the server at ``base_url`` has used so far (Linux's /proc; NaN
    elsewhere): what a step or a session costs the server, which a busy neighbour inflates less than the
    wall clock."""
    try:
        with open(f"/proc/{SERVER_PIDS[base_url]}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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
        + echo_table()
        + "\n\n"
        + per_turn_table()
    )


def echo_table() -> str:
    """toolgym over OpenEnv against OpenEnv's echo env served and called the same way, beside the goals."""
    ours, echo = RESULTS["OpenEnv"], RESULTS["echo"]
    nan = float("nan")
    rows = []
    for key, bound, sense in GOALS:
        a, b = ours.get(key, nan), echo.get(key, nan)
        ratio = a / b
        met = ratio <= bound if sense == "<=" else ratio >= bound
        if key == "sessions/s":
            label, values = f"sessions/s at {CONCURRENCY}", (f"{a:.0f}", f"{b:.0f}")
        else:
            label, values = f"step {key} (ms)", (f"{a * 1e3:.3f}", f"{b * 1e3:.3f}")
        verdict = "n/a" if ratio != ratio else "met" if met else "NOT met"
        rows.append((label, *values, f"{ratio:.2f}x echo", f"{sense} {bound}x: {verdict}"))
    a, b = ours.get("cold sessions/s", nan), echo.get("cold sessions/s", nan)
    rows.append(("sessions/s, first round (cold)", f"{a:.0f}", f"{b:.0f}", f"{a / b:.2f}x echo", ""))
    for key, label in (("cpu/step", "server CPU / step (ms)"), ("cpu/session", "server CPU / session (ms)")):
        a, b = ours.get(key, nan) * 1e3, echo.get(key, nan) * 1e3
        rows.append((label, f"{a:.3f}", f"{b:.3f}", f"{a / b:.2f}x echo", ""))
    header = (
        f"{ENV_ID} over toolgym serve openenv vs OpenEnv's echo env (openenv init echo_env, uvicorn), both "
        f"in their own process, the same client, action texts and concurrency, measured in turn; "
        f"{STEPS} steps each, {PAIRED_ROUNDS} rounds of {CONCURRENCY} sessions each after a cold one"
    )
    return header + "\n" + format_table(("", "toolgym", "echo env", "toolgym / echo", "goal"), rows)


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
