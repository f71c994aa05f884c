"""Tool state at training concurrency (a verl worker runs hundreds of episodes at once): every live episode
keeps its python interpreter however the turns interleave, a surplus over an explicit cap fails as the
sandbox's error (never the model's), and that is counted in the trajectory's stats."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import gymnasium as gym
import pytest

import toolgym  # noqa: F401 - registers the envs
from toolgym.rollout.pool import EnvPool
from toolgym.sandbox import LocalSandbox, shared_sandbox
from toolgym.sandbox.shared import shared_slots
from toolgym.testing.scripted import oracle_script

ENV = "toolgym/PythonCode-v0"


def _set_then_read(envs: list[gym.Env], threads: int = 16) -> list[tuple[str, dict]]:
    """Every episode sets ``v`` in one turn, then all read it back: round-robin, as batched rollouts take
    turns (each turn of one episode comes after a turn of every other)."""
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda i: envs[i].step(f"<python>v = {i}</python>"), range(len(envs))))
        replies = pool.map(lambda env: env.step("<python>print(v)</python>"), envs)
        return [(obs, info) for obs, _, _, _, info in replies]


def test_256_interleaved_episodes_leased_from_the_pool_keep_their_state():
    """The pool's leases reserve the shared sandbox's capacity: 256 live episodes, 256 interpreters, none
    evicted for another (80 on main's fixed 64 slots: 0 of 80 kept their state)."""
    pool = EnvPool()
    envs = [pool.acquire(ENV, {"max_turns": 4}) for _ in range(256)]
    try:
        assert shared_slots().capacity >= 256
        for i, env in enumerate(envs):
            env.reset(seed=i)
        replies = _set_then_read(envs)
        kept = [i for i, (obs, _) in enumerate(replies) if f"\n{i}\n" in obs]
        assert len(kept) == 256, [obs for obs, _ in replies if "NameError" in obs][:2]
        statuses = {r.status for _, info in replies for r in info["tool_results"]}
        assert statuses == {"ok"}
        assert shared_sandbox().slots.stats["refused"] == 0
    finally:
        for env in envs:
            pool.release(env)
        pool.close()
    assert shared_slots().capacity < 256  # the leases are back: the reservation went with them


@pytest.fixture
def capped_sandbox():
    with LocalSandbox(max_sessions=2, session_wait_s=0.2) as box:
        yield box


def test_over_an_explicit_cap_the_surplus_fails_as_infra_and_is_counted(capped_sandbox):
    envs = [gym.make(ENV, sandbox=capped_sandbox, max_turns=4) for _ in range(3)]
    for i, env in enumerate(envs):
        env.reset(seed=i)
    replies = _set_then_read(envs, threads=1)  # in order: episodes 0 and 1 take the two slots
    assert [f"\n{i}\n" in obs for i, (obs, _) in enumerate(replies)] == [True, True, False]
    (surplus,) = replies[2][1]["tool_results"]
    assert surplus.status == "infra_error" and "no session slot came free" in surplus.output
    traj = envs[2].unwrapped.trajectory
    assert traj.stats()["infra_errors"] == 2.0  # both of its calls: the set and the read
    assert traj.trainable and not traj.trainable_for(exclude_infra_errors=True)
    assert traj.training_mask_for(exclude_infra_errors=True) == [0] * len(traj.response_ids)
    assert envs[0].unwrapped.trajectory.trainable_for(exclude_infra_errors=True)
    envs[0].close()  # an episode ends: its slot goes to the next call
    obs, *_, info = envs[2].step("<python>v = 2; print(v)</python>")
    assert "\n2\n" in obs and info["tool_results"][0].status == "ok"
    for env in envs[1:]:
        env.close()


def test_a_lost_state_through_the_sandbox_is_infra_not_the_models_error(capped_sandbox):
    env = gym.make(ENV, sandbox=capped_sandbox, max_turns=4)
    env.reset(seed=0)
    env.step("<python>v = 1</python>")
    capped_sandbox.restart_workers()  # the session dies with its fork server
    obs, *_, info = env.step("<python>print(v)</python>")
    (result,) = info["tool_results"]
    assert result.status == "infra_error" and "restarted" in obs and "NameError" in obs
    assert env.unwrapped.trajectory.stats()["infra_errors"] == 1.0
    env.close()


# an integration test of the pool, the sessions and the judge at scale, the same on every Python: once per CI
# (the core suites on the other Pythons run the sessions' and the judge's own tests)
@pytest.mark.main_suite_only
def test_64_interleaved_swe_episodes_keep_their_repositories_and_are_judged_on_their_own_changes():
    """SWE-v0 at training concurrency: 64 live episodes leased from the pool, each with its repository in its
    own session; every one edits the bug's file its own way (half fix it), the turns interleaved, and each
    reads back only its own edit and is judged on its own changes."""
    pool = EnvPool()
    envs = [pool.acquire("toolgym/SWE-v0", {"max_turns": 4}) for _ in range(64)]
    try:
        for env in envs:
            env.reset(seed=0)
        task = envs[0].unwrapped.task
        fix = [c for c in oracle_script("toolgym/SWE-v0", task) if not isinstance(c, str)]

        def edit(i: int):
            env = envs[i]
            if i % 2 == 0:  # the fix, then a marker
                for call in fix:
                    env.step(env.unwrapped.parser.format_call(call))
            return env.step(f"<bash>echo {i} > mine.txt</bash>")

        def check(i: int):
            return envs[i].step("<bash>cat mine.txt; ls mine*.txt | wc -l</bash>")[0]

        with ThreadPoolExecutor(16) as threads:
            list(threads.map(edit, range(64)))
            seen = list(threads.map(check, range(64)))
            judged = list(threads.map(lambda i: envs[i].step("<answer>done</answer>"), range(64)))
        assert [obs.split("\n")[1:3] for obs in seen] == [[str(i), "1"] for i in range(64)]
        rewards = [reward for _, reward, _, _, _ in judged]
        assert rewards == [1.0 if i % 2 == 0 else 0.0 for i in range(64)]
        assert all(info["verdict"].error is None for *_, info in judged)
        assert shared_sandbox().slots.stats["refused"] == 0
    finally:
        for env in envs:
            pool.release(env)
        pool.close()
