"""Gymnasium's vector envs with their defaults: ``gym.make_vec(ID, num_envs=N, vectorization_mode="async")``
works for every registered env with no extra argument (AnyText is shareable through Gymnasium's shared
memory, ``toolgym/core/spaces.py``), its observations are the ones a single env gives for the same seeds,
and they follow each step (not the first observation forever); the common wrappers work on top."""

from __future__ import annotations

import copy

import gymnasium as gym
import pytest
from gymnasium.vector import AutoresetMode
from gymnasium.wrappers import TimeLimit
from gymnasium.wrappers.vector import RecordEpisodeStatistics

import toolgym  # noqa: F401 - registers the envs
from toolgym.core.spaces import AnyText, SharedTexts

ENV_IDS = sorted(i for i in gym.registry if i.startswith("toolgym/"))
ANSWER = "<answer>42</answer>"


def _single_observations(env_id: str, seeds: list[int]) -> list[str]:
    out = []
    for seed in seeds:
        env = gym.make(env_id)
        out.append(env.reset(seed=seed)[0])
        env.close()
    return out


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_async_vector_env_with_defaults(env_id):
    envs = gym.make_vec(env_id, num_envs=2, vectorization_mode="async")
    try:
        observations, _ = envs.reset(seed=[11, 12])
        assert list(observations) == _single_observations(env_id, [11, 12])
        after, rewards, terminated, _, _ = envs.step([ANSWER, ANSWER])
        assert all(isinstance(o, str) for o in after) and len(rewards) == 2
        assert terminated.all()  # an answer ends the episode
    finally:
        envs.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_observations_follow_the_steps_and_autoreset(mode):
    envs = gym.make_vec("toolgym/Calculator-v0", num_envs=2, vectorization_mode=mode)
    try:
        envs.reset(seed=[1, 2])
        stepped, *_ = envs.step(["<calculator>2+2</calculator>", "<calculator>3*3</calculator>"])
        assert [o.strip() for o in stepped] == ["<output>\n4\n</output>", "<output>\n9\n</output>"]
        stepped, *_ = envs.step(["<calculator>5+5</calculator>", ANSWER])
        assert stepped[0].strip() == "<output>\n10\n</output>" and stepped[1] == ""
        reset, *_ = envs.step(
            ["<calculator>1+1</calculator>", "ignored: this env resets (next-step autoreset)"]
        )
        assert reset[0].strip() == "<output>\n2\n</output>" and "?" in reset[1]  # a new task's prompt
    finally:
        envs.close()


def test_same_step_autoreset_time_limit_and_episode_statistics():
    envs = gym.make_vec(
        "toolgym/Calculator-v0",
        num_envs=2,
        vectorization_mode="async",
        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
        wrappers=[lambda env: TimeLimit(env, max_episode_steps=2)],
    )
    envs = RecordEpisodeStatistics(envs)
    try:
        first, _ = envs.reset(seed=[5, 6])
        envs.step(["<calculator>1+1</calculator>"] * 2)
        observations, _, terminated, truncated, infos = envs.step(["<calculator>1+1</calculator>", ANSWER])
        assert truncated[0] and terminated[1]  # the time limit, and the answer
        # same-step autoreset: the observation is already the next episode's first
        assert all("?" in o for o in observations) and list(observations) != list(first)
        assert list(infos["episode"]["l"]) == [2, 2]
        assert "final_obs" in infos
    finally:
        envs.close()


def test_shared_texts_is_a_live_view_and_copies_to_a_tuple():
    from gymnasium.vector.utils.shared_memory import create_shared_memory, write_to_shared_memory

    space = AnyText(max_length=8)
    memory = create_shared_memory(space, n=2)
    view = gym.vector.utils.read_from_shared_memory(space, memory, n=2)
    assert isinstance(view, SharedTexts) and list(view) == ["", ""]
    write_to_shared_memory(space, 1, "héllo 中", memory)
    assert view[1] == "héllo 中" and view[-1] == "héllo 中" and view[0:2] == ("", "héllo 中")
    snapshot = copy.deepcopy(view)
    write_to_shared_memory(space, 1, "x" * 8, memory)
    assert snapshot == ("", "héllo 中") and view[1] == "x" * 8
    with pytest.raises(ValueError, match="does not fit"):
        write_to_shared_memory(space, 0, "🙂" * 9, memory)
    with pytest.raises(IndexError):
        view[2]
