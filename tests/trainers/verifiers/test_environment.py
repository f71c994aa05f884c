"""The verifiers adapter with the real verifiers package (0.4, ``verifiers.v1``): rollouts run through
verifiers' own env, agent, interception server, client and rubric (``Env.run_episode``) against a scripted
OpenAI-compatible server that writes the env's oracle (reward 1.0) or a wrong answer (0.0)."""

import asyncio
from pathlib import Path

import gymnasium as gym
import pytest
import setuptools
import verifiers.v1 as vf

from toolgym.rollout import check_prefix_property
from toolgym.rollout.keys import EpisodeKey
from toolgym.testing.openai_scripted import scripted_chat_app
from toolgym.testing.scripted import oracle_policy, oracle_script, script_texts, wrong_script
from toolgym.testing.servers import serve_in_thread
from toolgym.trainers.verifiers_adapter import (
    TASKSET_ID,
    ToolgymEnv,
    ToolgymHarness,
    ToolgymTaskset,
    load_environment,
)

ROOT = Path(__file__).resolve().parents[3]

ENV = "toolgym/Calculator-v0"


def _keys(env):
    return [EpisodeKey.from_json(task.data.key) for task in env.taskset]


def _wrong_policy(env_id, tasks, **env_kwargs):
    made = gym.make(env_id, **env_kwargs)
    scripts = {t.prompt: script_texts(made, wrong_script(env_id, t)) for t in tasks}

    def policy(request_id, turn, text):
        steps = next(s for prompt, s in scripts.items() if prompt in text)
        return steps[min(turn, len(steps) - 1)]

    return policy


def _run(env, policy):
    """Every task of ``env`` once, through verifiers' rollout machinery; the episodes and the requests."""
    app = scripted_chat_app(policy)

    async def main(url):
        ctx = vf.ModelContext(model="scripted", client=vf.EvalClientConfig(base_url=f"{url}/v1"))
        async with env.serving():
            return await asyncio.gather(*(env.run_episode(task, ctx) for task in env.taskset))

    with serve_in_thread(app) as url:
        return asyncio.run(main(url)), app.state.requests


@pytest.fixture(scope="module", params=["xml", "hermes"])
def played(request):
    env = load_environment(ENV, n=2, action_format=request.param)
    policy = oracle_policy(ENV, [k.task for k in _keys(env)], action_format=request.param)
    episodes, requests = _run(env, policy)
    return env, episodes, requests


def test_load_environment_builds_the_toolgym_taskset_env_and_harness():
    env = load_environment(ENV, n=3, split="val", max_turns=5)
    assert isinstance(env, ToolgymEnv) and isinstance(env.taskset, ToolgymTaskset)
    assert isinstance(env._harnesses["agent"], ToolgymHarness)
    keys = _keys(env)
    assert len(keys) == 3 and {k.env_kwargs["max_turns"] for k in keys} == {5}
    made = gym.make(ENV)
    assert [k.task for k in keys] == made.unwrapped.tasks.eval_tasks(3)  # the env's evaluation split
    for task, key in zip(env.taskset, keys):  # the prompt is the env's own first messages
        _, info = made.reset(seed=key.seed, options={"task": key.task})
        assert [task.data.system_prompt, task.data.prompt] == [m["content"] for m in info["messages"]]
        assert task.data.stop == made.unwrapped.parser.stop_sequences


def test_verifiers_loads_it_by_taskset_id():
    config = vf.resolve_env_config({"taskset": {"id": TASKSET_ID, "env": ENV, "n": 1}})
    env = vf.load_environment(config)
    assert isinstance(env, ToolgymEnv) and len(list(env.taskset)) == 1


def test_the_plugin_package_is_packaged():
    assert "toolgym_verifiers" in setuptools.find_packages(where=str(ROOT), include=["toolgym*"])


def test_the_oracle_reaches_reward_1_through_verifiers_rollout_and_rubric(played):
    _, episodes, _ = played
    for episode in episodes:
        assert episode.ok and not episode.errors
        (trace,) = episode.traces
        assert trace.rewards["verdict"].score == 1.0 and trace.reward == 1.0
        assert trace.metrics["passed"] == 1.0 and trace.metrics["tool_calls"] >= 1
        assert trace.info["toolgym"]["verdict"]["passed"] is True


def test_the_model_sees_the_env_prompt_and_tool_outputs(played):
    env, episodes, requests = played
    for key, episode in zip(_keys(env), episodes):
        made = gym.make(key.env_id, **key.env_kwargs)
        made.reset(seed=key.seed, options={"task": key.task})
        for text in script_texts(made, oracle_script(key.env_id, key.task)):
            *_, info = made.step(text)
        # the conversation on the trace is the toolgym env's own, message for message
        trace_messages = [
            {"role": n.message.role, "content": _text(n.message.content)} for n in episode.traces[0].nodes
        ]
        assert trace_messages == [{"role": m["role"], "content": m["content"]} for m in info["messages"]]
    assert all(r["model"] == "scripted" and r["messages"][0]["role"] == "system" for r in requests)


def test_a_wrong_answer_scores_0():
    env = load_environment(ENV, n=1)
    episodes, _ = _run(env, _wrong_policy(ENV, [k.task for k in _keys(env)]))
    (trace,) = episodes[0].traces
    assert episodes[0].ok and trace.rewards["verdict"].score == 0.0 and trace.metrics["passed"] == 0.0


def test_the_conversation_keeps_the_prefix_property_for_the_tiny_template(played, renderer):
    """Token faithfulness: verifiers carries text, so a trainer's tokens come from rendering the
    conversation; with the tiny model's template every earlier rendering is a prefix of the later one, so
    rendering the trace's conversation gives the tokens toolgym's runner would have produced."""
    _, episodes, _ = played
    for episode in episodes:
        conversation = [
            {"role": n.message.role, "content": _text(n.message.content)} for n in episode.traces[0].nodes
        ]
        assert len(conversation) >= 5
        assert check_prefix_property(renderer, conversation=conversation) == []


def _text(content):
    if isinstance(content, str):
        return content
    return "".join(getattr(part, "text", "") for part in content or [])


def test_vllm_stops_sends_the_env_stop_strings():
    env = load_environment(ENV, n=1, vllm_stops=True)
    assert env._harnesses["agent"].config.vllm_stops is True
    episodes, requests = _run(env, oracle_policy(ENV, [k.task for k in _keys(env)]))
    assert episodes[0].traces[0].reward == 1.0
    stop = gym.make(ENV).unwrapped.parser.stop_sequences
    assert all(r["stop"] == stop and r["include_stop_str_in_output"] is True for r in requests)
