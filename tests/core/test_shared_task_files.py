"""Task files at training scale: one shared, lazy copy per process. A verl worker makes an env per concurrent
episode, all with the same ``tasks=`` file; each used to read the whole file again (64 Search envs on a
200k-row file: 317 s and +17 GB)."""

from __future__ import annotations

import json
import os
import sys
import threading
import tracemalloc
from pathlib import Path

import gymnasium as gym
import pytest

import toolgym  # noqa: F401 - registers the envs
from toolgym.envs.task_files import LazyFileSource, clear_shared_file_sources, shared_file_source
from toolgym.rollout.keys import draw_task
from toolgym.rollout.pool import EnvPool

MATH = "toolgym/Math-v0"


def _math_file(path: Path, rows: int, offset: int = 0) -> Path:
    """GSM8K-shaped rows: a question and a worked solution ending in ``#### answer`` (~300 bytes a row)."""
    steps = "First add the two numbers step by step, carrying where needed, then check the sum. " * 3
    with path.open("w") as fh:
        for i in range(rows):
            n = i + offset
            row = {"id": f"q{i}", "question": f"What is {n} + 1?", "answer": f"{steps}#### {n + 1}"}
            fh.write(json.dumps(row) + "\n")
    return path


@pytest.fixture(autouse=True)
def _fresh_cache():
    clear_shared_file_sources()
    yield
    clear_shared_file_sources()


def test_envs_of_one_id_and_kwargs_share_one_source(tmp_path):
    path = _math_file(tmp_path / "math.jsonl", 50)
    pool = EnvPool()
    envs = [pool.acquire(MATH, {"tasks": str(path)}) for _ in range(32)]
    for i, env in enumerate(envs):
        env.reset(seed=i)
    holders = [env.unwrapped.tasks for env in envs]
    assert all(isinstance(h, LazyFileSource) for h in holders)
    shared = {id(h.loaded()) for h in holders}
    assert len(shared) == 1  # one source behind all 32
    for env in envs:
        pool.release(env)
    pool.close()


def test_many_threads_read_the_file_once(tmp_path):
    path = _math_file(tmp_path / "math.jsonl", 10)
    builds = []

    def build(p):
        builds.append(p)
        from toolgym.envs.math_tasks import math_file_source

        return math_file_source(p)

    barrier = threading.Barrier(16)
    got = []

    def worker():
        barrier.wait()
        got.append(shared_file_source(path, "math-test", build))

    threads = [threading.Thread(target=worker) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(builds) == 1 and len({id(s) for s in got}) == 1


def test_a_changed_file_is_read_again(tmp_path):
    path = _math_file(tmp_path / "math.jsonl", 3)
    env = gym.make(MATH, tasks=str(path))
    env.reset(seed=0)
    first = env.unwrapped.tasks.loaded()
    assert first.task_at(0).prompt == "What is 0 + 1?"
    _math_file(path, 4, offset=100)
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # a clock with coarse ticks: still newer
    env.reset(seed=0)
    second = env.unwrapped.tasks.loaded()
    assert second is not first and len(second) == 4 and second.task_at(0).prompt == "What is 100 + 1?"
    assert gym.make(MATH, tasks=str(path)).unwrapped.tasks.loaded() is second  # the old copy is gone


def test_a_pinned_episode_never_opens_the_file_and_plays_after_it_is_deleted(tmp_path):
    """verl's rows carry their task (``extra_info.task``), as ``options={"task": ...}`` and ``EpisodeKey``
    do: such an episode needs no file, so rows exported from a file still play after it is gone."""
    path = _math_file(tmp_path / "math.jsonl", 5)
    task = draw_task(gym.make(MATH, tasks=str(path)), seed=3)
    path.unlink()
    clear_shared_file_sources()
    opened = []

    def audit(event, args):
        if event == "open" and args and str(args[0]).endswith("math.jsonl"):
            opened.append(args[0])

    sys.addaudithook(audit)  # hooks cannot be removed: this one only records opens of this file
    env = gym.make(MATH, tasks=str(path))
    env.reset(options={"task": task})
    gold = task.answer
    _, reward, terminated, _, _ = env.step(f"<answer>{gold}</answer>")
    assert terminated and reward == 1.0
    assert opened == []
    with pytest.raises(FileNotFoundError, match="no math task file"):
        env.reset(seed=0)  # an unpinned draw needs the file: the error says so


def test_a_file_deleted_after_it_was_read_keeps_serving(tmp_path):
    path = _math_file(tmp_path / "math.jsonl", 5)
    env = gym.make(MATH, tasks=str(path))
    env.reset(seed=0)
    path.unlink()
    _, info = env.reset(seed=1)
    assert "What is" in info["messages"][-1]["content"]


def _envs(n: int, path: Path) -> list:
    clear_shared_file_sources()
    envs = [gym.make(MATH, tasks=str(path)) for _ in range(n)]
    for i, env in enumerate(envs):
        env.reset(seed=i)
    return envs


def _peak_bytes(n: int, path: Path) -> int:
    tracemalloc.start()
    try:
        _envs(n, path)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_32_envs_read_the_file_once_and_cost_at_most_one_and_a_half_envs_of_memory(tmp_path, monkeypatch):
    """32 envs on a 200k-row file against one, counted rather than timed (a CPU-time ratio of two short runs
    failed CI on another interpreter): the file's bytes are read once, and the peak memory of 32 envs is
    within 1.5x of one env's (see benchmarks/bench_task_files.py for the time, at 256 envs)."""
    path = _math_file(tmp_path / "math.jsonl", 200_000)
    reads = []
    real_read_bytes = Path.read_bytes

    def counting_read_bytes(self):
        if self.resolve() == path.resolve():
            reads.append(self)
        return real_read_bytes(self)

    monkeypatch.setattr(Path, "read_bytes", counting_read_bytes)
    envs = _envs(32, path)
    assert len(envs) == 32 and len(reads) == 1
    one_bytes, many_bytes = _peak_bytes(1, path), _peak_bytes(32, path)
    assert many_bytes <= 1.5 * one_bytes, (many_bytes, one_bytes)
