"""Live sandbox sessions at training concurrency: memory per session and interleaved steps/s.

A verl worker runs hundreds of episodes at once, each with a python interpreter whose state must live until
the episode ends (``toolgym.sandbox.capacity``). For 1, 64, 256 and 1024 live sessions on one sandbox (two
workers): the Pss of a session (what one more live episode costs in memory) and steps/s of a round in which
every session runs one call, round-robin, as batched rollouts take turns. Every step checks the state.

Side by side, the peers' stateless method at 64 episodes: a new ``python -c`` per call that replays the
episode's earlier snippets to rebuild its state (no process lives between calls, each call pays an
interpreter start and the replay).

Run::

    .venv/bin/pytest benchmarks/bench_sessions.py -q -s
"""

from __future__ import annotations

import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from toolgym.sandbox import Limits, LocalSandbox

SIZES = (1, 64, 256, 1024)
PEER_SIZE = 64
ROUNDS = 3
#: sessions -> (MiB Pss per session, steps/s)
RESULTS: dict[str, tuple[float | None, float]] = {}


def _round(sessions, step: int) -> float:
    """One interleaved call per session; returns steps/s. Each call checks its own state."""
    started = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(lambda s: s.run("v += 1; print(v)").stdout, sessions))
    elapsed = time.perf_counter() - started
    assert outs == [f"{i + step}\n" for i in range(len(sessions))], "a session lost its state"
    return len(sessions) / elapsed


@pytest.mark.parametrize("n", SIZES)
def test_live_sessions(benchmark, n):
    with LocalSandbox(limits=Limits(timeout_s=30), max_sessions=n, session_wait_s=0) as box:
        sessions = [box.session() for _ in range(n)]
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda i: sessions[i].run(f"v = {i}"), range(n)))
        live, total = box.session_memory()
        assert live == n
        steps = iter(range(1, 1000))
        rates = benchmark.pedantic(lambda: _round(sessions, next(steps)), rounds=ROUNDS, iterations=1)
        RESULTS[f"toolgym sessions x{n}"] = (total / n / 2**20, rates)
        for sess in sessions:
            sess.close()


def _peer_call(history: list[str], code: str) -> str:
    program = "\n".join([*history, code])
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=30)
    return out.stdout.splitlines()[-1] + "\n" if out.stdout else ""


def test_peer_replay(benchmark):
    histories = [[f"v = {i}"] for i in range(PEER_SIZE)]
    step = 0

    def one_round() -> float:
        nonlocal step
        step += 1
        started = time.perf_counter()
        with ThreadPoolExecutor(2) as pool:  # two workers, as the sandbox's two fork servers
            outs = list(pool.map(lambda h: _peer_call(h, "v += 1; print(v)"), histories))
        elapsed = time.perf_counter() - started
        for h in histories:
            h.append("v += 1")
        assert outs == [f"{i + step}\n" for i in range(PEER_SIZE)]
        return PEER_SIZE / elapsed

    RESULTS[f"peers: python -c + replay x{PEER_SIZE}"] = (None, benchmark.pedantic(one_round, rounds=ROUNDS))


def teardown_module(module):
    ours = RESULTS.get(f"toolgym sessions x{PEER_SIZE}")
    peer = RESULTS.get(f"peers: python -c + replay x{PEER_SIZE}")
    title = "live sessions (one sandbox, 2 workers), interleaved round-robin, state checked every step"
    lines = ["", title, ""]
    lines.append(f"{'method':<34} {'MiB Pss/session':>16} {'steps/s':>9}")
    for name, (mib, rate) in RESULTS.items():
        lines.append(f"{name:<34} {'-' if mib is None else f'{mib:.1f}':>16} {rate:>9.0f}")
    if ours and peer:
        lines.append(f"\nsteps/s at {PEER_SIZE} episodes: toolgym / peers = {ours[1] / peer[1]:.1f}x")
    print("\n".join(lines))
