"""Terminal-v0: bash tool calls/s and oracle episodes/s at 1 and 2 workers, beside the peers' local shell.

Ours: each call is ``bash -c`` in the episode's sandbox session (namespaces, seccomp, rlimits, an unprivileged
uid; every process of the call killed at its end), in a workspace that lives for the episode. An oracle
episode is a whole ``toolgym/Terminal-v0`` episode (level 2, every task kind): reset (a session opened from
a fresh copy of the task's files), the solution commands, the answer, and the verifier reading the final
workspace back and judging it.

The peers' method (SkyRL's and verl-tool's local shells, a ``docker run``-free stand-in for their
containers): a new ``bash -c`` subprocess per call with no isolation at all, in a per-episode directory
written to disk; for an episode, the same commands and the same Python checks over the files read back from
that directory. ``workers`` is the number of sandbox fork servers (ours) and of threads driving episodes
(both).

Run::

    .venv/bin/pytest benchmarks/bench_terminal.py -q -s
"""

from __future__ import annotations

import base64
import os
import queue
import shutil
import statistics
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import gymnasium as gym
import pytest

import toolgym
from toolgym.core.task import Task
from toolgym.envs.terminal import check_workspace
from toolgym.envs.terminal_tasks import generate_terminal_task
from toolgym.sandbox import LocalSandbox
from toolgym.sandbox.shared import TERMINAL_LINKS, TERMINAL_PRELOAD
from toolgym.tools.bash import BashTool, Workspace

WORKERS = (1, 2)
EPISODES = 8  # live episodes driven at once
CALLS = 8  # tool calls per episode in the calls/s round
ORACLE_EPISODES = 16
ROUNDS = 3
COMMAND = "grep -c ERROR app.log | tr -d '\\n'; echo \" $(wc -l < app.log)\""
FILES = {"app.log": "".join(f"{'ERROR' if i % 7 == 0 else 'INFO'} line {i}\n" for i in range(500))}
EXPECTED = "72 500"
RESULTS: dict[tuple[str, int], float] = {}


def measure(benchmark, key: tuple[str, int], one_round, *args) -> None:
    """Run ``one_round`` (which returns a rate) ROUNDS times under pytest-benchmark; keep the mean rate."""
    rates: list[float] = []
    benchmark.pedantic(lambda: rates.append(one_round(*args)), rounds=ROUNDS)
    RESULTS[key] = statistics.mean(rates)


@pytest.fixture(scope="module", params=WORKERS)
def sandbox(request):
    with LocalSandbox(workers=request.param, links=TERMINAL_LINKS, preload=TERMINAL_PRELOAD) as box:
        yield request.param, box


def _calls_round(tools: list[BashTool], pool: ThreadPoolExecutor) -> float:
    def episode(tool: BashTool) -> None:
        for _ in range(CALLS):
            out = tool.run(BashTool.Args(command=COMMAND)).output
            assert out == f"{EXPECTED}\n[exit code 0]", out

    started = time.perf_counter()
    list(pool.map(episode, tools))
    return len(tools) * CALLS / (time.perf_counter() - started)


def test_bash_calls(benchmark, sandbox):
    workers, box = sandbox
    task = Task(id="b", prompt="", data={"files": FILES})
    tools = [BashTool(sandbox=box) for _ in range(EPISODES)]
    for tool in tools:
        tool.bind_task(task)
        tool.start_episode("bench")
    with ThreadPoolExecutor(workers) as pool:
        _calls_round(tools, pool)  # sessions open outside the measured rounds: a live episode's calls
        measure(benchmark, ("toolgym bash calls/s", workers), _calls_round, tools, pool)
    for tool in tools:
        tool.close()


def _peer_call(workdir: str, command: str) -> str:
    proc = subprocess.run(
        ["bash", "-c", command], cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30
    )
    return f"{proc.stdout.decode()}[exit code {proc.returncode}]"


def _write(root: str, files: dict) -> None:
    for rel, data in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(data if isinstance(data, bytes) else data.encode())


@pytest.mark.parametrize("workers", WORKERS)
def test_peer_bash_calls(benchmark, workers, tmp_path):
    dirs = []
    for i in range(EPISODES):
        dirs.append(str(tmp_path / f"ep{i}"))
        _write(dirs[-1], FILES)

    def one_round() -> float:
        def episode(workdir: str) -> None:
            for _ in range(CALLS):
                out = _peer_call(workdir, COMMAND)
                assert out == f"{EXPECTED}\n[exit code 0]", out

        started = time.perf_counter()
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(episode, dirs))
        return EPISODES * CALLS / (time.perf_counter() - started)

    measure(benchmark, ("peers: bash subprocess calls/s", workers), one_round)


TASKS = [generate_terminal_task(seed, level=2) for seed in range(ORACLE_EPISODES)]


def test_oracle_episodes(benchmark, sandbox):
    workers, box = sandbox
    envs = [gym.make("toolgym/Terminal-v0", level=2, tool=BashTool(sandbox=box)) for _ in range(workers)]

    idle: queue.Queue = queue.Queue()
    for env in envs:
        idle.put(env)

    def play(task: Task) -> float:
        env = idle.get()  # one env per episode in flight
        try:
            return _play(env, task)
        finally:
            idle.put(env)

    def _play(env, task: Task) -> float:
        env.reset(options={"task": task})
        parser = env.unwrapped.parser
        for command in task.data["solution"]:
            env.step(parser.format_call(toolgym.ToolCall(name="bash", arguments={"command": command})))
        return env.step(parser.format_answer(str(task.answer)))[1]

    def one_round() -> float:
        started = time.perf_counter()
        with ThreadPoolExecutor(workers) as pool:
            rewards = list(pool.map(play, TASKS))
        elapsed = time.perf_counter() - started
        assert rewards == [1.0] * ORACLE_EPISODES, rewards
        return ORACLE_EPISODES / elapsed

    measure(benchmark, ("toolgym oracle episodes/s", workers), one_round)
    for env in envs:
        env.close()


def _read_back(root: str) -> Workspace:
    entries = []
    for dirpath, dirs, files in os.walk(root):
        for name in sorted(dirs) + sorted(files):
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            mode = os.lstat(path).st_mode & 0o7777
            if name in dirs:
                entries.append([rel, "dir", mode, ""])
            else:
                with open(path, "rb") as fh:
                    entries.append([rel, "file", mode, base64.b64encode(fh.read()).decode()])
    return Workspace(entries)


@pytest.mark.parametrize("workers", WORKERS)
def test_peer_oracle_episodes(benchmark, workers):
    def play(task: Task) -> float:
        root = tempfile.mkdtemp(prefix="toolgym-bench-")
        try:
            _write(root, task.data["files"])
            for command in task.data["solution"]:
                _peer_call(root, command)
            ws = _read_back(root)
            failed = [c for c in task.data["checks"] if check_workspace(c, ws, str(task.answer))]
            return 0.0 if failed else 1.0
        finally:
            shutil.rmtree(root)

    def one_round() -> float:
        started = time.perf_counter()
        with ThreadPoolExecutor(workers) as pool:
            rewards = list(pool.map(play, TASKS))
        elapsed = time.perf_counter() - started
        assert rewards == [1.0] * ORACLE_EPISODES, rewards
        return ORACLE_EPISODES / elapsed

    measure(benchmark, ("peers: oracle episodes/s", workers), one_round)


def teardown_module(module):
    rows = [
        ("bash tool calls/s", "toolgym bash calls/s", "peers: bash subprocess calls/s"),
        ("oracle episodes/s", "toolgym oracle episodes/s", "peers: oracle episodes/s"),
    ]
    lines = [
        "",
        f"Terminal-v0 on {os.cpu_count()} cores: means of {ROUNDS} rounds ({EPISODES} episodes x {CALLS} "
        f"calls; {ORACLE_EPISODES} level-2 oracle episodes)",
        "",
        f"{'measure':<20} {'workers':>7} {'toolgym (isolated)':>19} {'peers (bash, none)':>19} {'ratio':>7}",
    ]
    for label, ours, peers in rows:
        for w in WORKERS:
            a, b = RESULTS.get((ours, w)), RESULTS.get((peers, w))
            if a is None or b is None:
                continue
            lines.append(f"{label:<20} {w:>7} {a:>19.1f} {b:>19.1f} {a / b:>6.2f}x")
    print("\n".join(lines))
