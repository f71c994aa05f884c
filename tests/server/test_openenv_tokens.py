"""Token in, token out over OpenEnv, which carries text only: a client that keeps the sampled ids and adds
each observation's tokens from the chat template (the ``messages`` every call returns) rebuilds exactly the
tokens toolgym's episode runner produces in process, and the tiny model's template has the prefix property
on the episode the server played."""

from __future__ import annotations

import asyncio

import gymnasium as gym
import pytest
from openenv.core.generic_client import GenericEnvClient

import toolgym  # noqa: F401  (registers the envs)
from toolgym.rollout import check_prefix_property, run_episode
from toolgym.server.openenv import create_app
from toolgym.testing.scripted import ScriptedClient, oracle_script, script_texts
from toolgym.testing.servers import serve_in_thread

ENV_ID = "toolgym/Calculator-v0"


@pytest.mark.parametrize("action_format", ["xml", "hermes"])  # observations as user, and as tool messages
def test_tokens_rebuilt_from_openenv_messages_equal_the_runners(renderer, action_format):
    env = gym.make(ENV_ID, action_format=action_format)
    env.reset(seed=0)
    texts = script_texts(env, oracle_script(ENV_ID, env.unwrapped.task))
    assert len(texts) > 1  # tool calls, then the answer
    scripted = ScriptedClient(renderer, list(texts))
    traj = asyncio.run(run_episode(env, scripted, renderer, seed=0))  # in process, the reference
    assert traj.reward == 1.0 and traj.error is None
    eos = scripted.eos_id

    app = create_app(ENV_ID, {"action_format": action_format}, max_sessions=2, idle_timeout=None)
    with serve_in_thread(app) as url, GenericEnvClient(base_url=url).sync() as remote:
        first = remote.reset(seed=0).observation
        chat, tools = list(first["messages"]), first["tools"]
        prompt_ids, response_ids = renderer.prompt_ids(chat, tools), []
        for text in texts:
            generated = [*renderer.encode(text), eos]  # what the engine sampled: kept, never re-tokenized
            response_ids += generated
            result = remote.step({"message": renderer.action_text(generated)})
            added = result.observation["messages"]  # the assistant's turn, then the observation
            if result.done:
                break
            response_ids += renderer.turn_close_ids(generated)
            response_ids += renderer.observation_ids([*chat, added[0]], added[1:], tools)
            chat += added
            assert action_format == "xml" or added[-1]["role"] == "tool"
            # the prefix property on this episode: the ids built turn by turn are the whole chat's prompt
            assert prompt_ids + response_ids == renderer.prompt_ids(chat, tools)

    assert result.reward == traj.reward == 1.0
    assert prompt_ids == traj.prompt_ids
    assert response_ids == traj.response_ids
    assert check_prefix_property(renderer, tools) == []
