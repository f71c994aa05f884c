"""SQL-v0: oracle episodes/s and verifier latency, beside the peers' method, at 1 and 2 processes.

The peers (SkyRL-gym's SQL tool and reward, verl-tool's ``skysql``, NeMo-Gym's ``bird_sql``) open the
dataset's own file with a plain ``sqlite3.connect``, run the model's query with an interrupt timer, and
compare results as ``frozenset``s, in the trainer's process: a ``DROP TABLE`` changes every later episode's
data and nothing bounds memory. toolgym runs every query in the SQL sandbox (a read-only connection in a
sandboxed session, an allowlist authorizer, limits, a deadline) and compares multisets, ordered when the
gold sorts.

Both judge the same 200 world tasks (levels 1-3), half answered with the gold query and half with a wrong one
(the gold cut to its first row), and play the same episode: one tool query (the gold), then the answer judged
against the gold. toolgym's episode goes through the gym env (reset, parsing, the observation, the verdict);
the peers' is the three queries and the comparison alone, so the ratio is the full cost of the safety and the
env against the bare queries. toolgym's gold-result cache is cleared before every verification here, so both
sides run both queries each time (in training, a GRPO group's samples share the gold's result). Each process
plays its share after warming up, in a fresh interpreter; ``2 processes`` is two such processes at once (2
cores here).

Run::

    .venv/bin/pytest benchmarks/bench_sql.py -q -s
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

N = int(os.environ.get("TOOLGYM_BENCH_SQL_TASKS", "200"))
RESULTS: dict[str, dict] = {}


def tasks_and_answers(n: int) -> list[tuple[dict, str]]:
    """(task as a dict, answer) pairs: the gold for even i, the gold cut to one row for odd i."""
    import gymnasium as gym

    import toolgym  # noqa: F401 - registers the envs

    env = gym.make("toolgym/SQL-v0")
    out = []
    for i in range(n):
        env.reset(seed=i)
        task = env.unwrapped.task
        gold = str(task.answer)
        wrong = gold if "LIMIT" in gold.upper() else f"{gold} LIMIT 1"
        out.append((task.model_dump(), gold if i % 2 == 0 else wrong))
    env.close()
    return out


# One process's share, in a fresh interpreter (``python -c``): the peers' way and ours, timed after a warm-up.
PLAY = textwrap.dedent(
    """
    import json, logging, sqlite3, sys, threading, time
    logging.disable(logging.CRITICAL)
    import gymnasium as gym
    import toolgym
    from toolgym.core.task import Task
    from toolgym.rewards import sql as sql_rewards

    kind, pairs = sys.argv[1], json.load(sys.stdin)
    env = gym.make("toolgym/SQL-v0")
    world = env.unwrapped.verifier.catalog
    episodes = [(Task.model_validate(t), answer) for t, answer in pairs]
    files = {t.data["db_id"]: str(world.path(t.data["db_id"])) for t, _ in episodes}

    def peer_query(db_file, sql, timeout=5.0):
        # SkyRL-gym's way: a plain connection on the file, an interrupt timer, every row fetched
        con = sqlite3.connect(db_file, check_same_thread=False)
        timer = threading.Timer(timeout, con.interrupt)
        timer.start()
        try:
            return con.execute(sql).fetchall()
        except sqlite3.Error:
            return None
        finally:
            timer.cancel()
            con.close()

    def peers(task, answer):
        db_file, gold = files[task.data["db_id"]], str(task.answer)
        peer_query(db_file, gold)  # the tool call
        started = time.perf_counter()
        pred, ref = peer_query(db_file, answer), peer_query(db_file, gold)
        reward = float(pred is not None and ref is not None and frozenset(pred) == frozenset(ref))
        return reward, time.perf_counter() - started

    def ours(task, answer):
        env.reset(options={"task": task})
        env.step(f"<sql>{task.answer}</sql>")
        sql_rewards._GOLD.clear()  # both sides run the gold query every time
        started = time.perf_counter()
        reward = env.step(f"<answer>{answer}</answer>")[1]
        return reward, time.perf_counter() - started

    episode = ours if kind == "toolgym" else peers
    for task, answer in episodes[:10]:  # warm: the sandbox's sessions, the OS page cache
        episode(task, answer)
    started = time.perf_counter()
    outcomes = [episode(task, answer) for task, answer in episodes]
    elapsed = time.perf_counter() - started
    env.close()
    result = {"elapsed": elapsed, "rewards": [r for r, _ in outcomes], "verify_s": [s for _, s in outcomes]}
    print("RESULT " + json.dumps(result))
    """
)


def measure(kind: str, pairs: list[tuple[dict, str]], processes: int) -> dict:
    """``processes`` fresh interpreters at once, each playing its share; throughput over the slowest."""
    shares = [pairs[i::processes] for i in range(processes)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", PLAY, kind], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        for _ in shares
    ]
    parts = []
    for proc, share in zip(procs, shares):
        out, _ = proc.communicate(json.dumps(share), timeout=900)
        line = next(x for x in out.splitlines() if x.startswith("RESULT "))
        parts.append(json.loads(line[len("RESULT ") :]))
    latencies = sorted(s for part in parts for s in part["verify_s"])
    rewards: list = [None] * len(pairs)
    for i, part in enumerate(parts):
        rewards[i::processes] = part["rewards"]
    return {
        "episodes_per_s": len(pairs) / max(p["elapsed"] for p in parts),
        "p50_ms": 1000 * latencies[len(latencies) // 2],
        "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
        "rewards": rewards,
    }


@pytest.fixture(scope="module")
def pairs():
    return tasks_and_answers(N)


@pytest.mark.parametrize("processes", [1, 2])
def test_sql_episodes_beside_the_peers(benchmark, pairs, processes):
    ours = benchmark.pedantic(measure, args=("toolgym", pairs, processes), rounds=1, iterations=1)
    peers = measure("peers", pairs, processes)
    agree = sum(a == b for a, b in zip(ours["rewards"], peers["rewards"], strict=True))
    RESULTS[f"{processes}"] = {"ours": ours, "peers": peers, "agree": agree}
    assert all(ours["rewards"][i] == 1.0 for i in range(0, len(pairs), 2)), "a gold answer did not score 1"
    assert agree >= 0.95 * len(pairs), "toolgym and the peers judged too many answers differently"


def teardown_module() -> None:
    if not RESULTS:
        return
    print(f"\n\nSQL-v0 oracle episodes ({N} world tasks; one tool query + the verified answer each)")
    print(f"{'method':42} {'procs':>5} {'episodes/s':>11} {'verify p50 ms':>14} {'verify p99 ms':>14}")
    for procs, row in RESULTS.items():
        for name, key in (("toolgym (sandboxed, read-only)", "ours"), ("peers: sqlite3.connect", "peers")):
            r = row[key]
            print(f"{name:42} {procs:>5} {r['episodes_per_s']:11.0f} {r['p50_ms']:14.2f} {r['p99_ms']:14.2f}")
        ratio = row["ours"]["episodes_per_s"] / row["peers"]["episodes_per_s"]
        print(f"{'':42} {procs:>5} toolgym / peers = {ratio:.2f}x; verdicts agree on {row['agree']}/{N}")
