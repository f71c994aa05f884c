"""TRL's rollout function with ``agent=``: a user's agent program (the example ``openai``-SDK tool loop, or a
hand-written one) plays each prompt's task against a gateway in front of the trainer's engine, and TRL gets
the tokens the gateway recorded. Here the engine is a scripted policy writing hermes tool calls (the tiny
model's random text calls no tool), recorded call by call, so every sampled token can be checked; the last
test trains on it."""

from __future__ import annotations

import json

import pytest
import torch
from openai import AsyncOpenAI

from toolgym.testing.scripted import ScriptedClient
from toolgym.trainers.trl_adapter import env_reward, make_rollout_func, prompt_dataset
from toolgym.trainers.trl_adapter.data import key_of_prompt

from .test_rollout import fake_trainer

ENV = "toolgym/Calculator-v0"


class Engine(ScriptedClient):
    """A scripted engine that also keeps the sampling settings of every call."""

    def __init__(self, renderer, policy):
        super().__init__(renderer, policy)
        self.samplings = []

    async def generate(self, prompt_ids, sampling, request_id):
        self.samplings.append(sampling)
        return await super().generate(prompt_ids, sampling, request_id)


def _sessions(engine):
    """session id -> (its calls' prompts, its calls' sampled ids), in call order."""
    out: dict[str, tuple[list, list]] = {}
    for session, prompt, ids in zip(engine.request_ids, engine.prompts, engine.generated, strict=True):
        prompts, generated = out.setdefault(session, ([], []))
        prompts.append(prompt)
        generated.append(ids)
    return out


def _tasks(dataset):
    return [key_of_prompt(p).task for p in dataset["prompt"]]


def test_an_openai_agents_episodes_are_what_the_engine_sampled_with_the_verifiers_rewards(
    renderer, recorded_agent, hermes_policy, env_verdict
):
    dataset = prompt_dataset(ENV, 2, seed=0)
    tasks = {t.id: t for t in _tasks(dataset)}
    engine = Engine(renderer, hermes_policy(ENV, list(tasks.values())))
    rollout = make_rollout_func(ENV, client=engine, agent=recorded_agent.spec, max_tokens_per_turn=96)
    prompts = [p for p in dataset["prompt"] for _ in range(2)]  # GRPO groups of two
    out = rollout(prompts, fake_trainer(renderer.tokenizer, temperature=0.7))

    answers, sessions = recorded_agent.answers(), _sessions(engine)
    assert len(answers) == len(sessions) == 4
    by_tokens = {tuple(t for ids in generated for t in ids): s for s, (_, generated) in sessions.items()}
    for i, traj in enumerate(rollout.last_trajectories):
        completion, mask = out["completion_ids"][i], out["env_mask"][i]
        session = by_tokens[tuple(t for t, m in zip(completion, mask, strict=True) if m)]
        seen, _ = sessions[session]
        assert out["prompt_ids"][i] == seen[0] and traj.task_id == answers[session]["task_id"]
        for prompt in seen[1:]:  # every call saw the record so far: the sampled ids, never re-tokenized
            assert prompt == out["prompt_ids"][i] + completion[: len(prompt) - len(out["prompt_ids"][i])]
        assert [lp for lp, m in zip(out["logprobs"][i], mask, strict=True) if m] == [-0.5] * sum(mask)
        assert mask[-1] == 1 and "<tool_response>" in renderer.decode(completion)
        verdict = env_verdict(ENV, tasks[traj.task_id], answers[session]["answer"])
        assert out["env_reward"][i] == verdict.reward and out["env_passed"][i] == verdict.passed
    rewards = out["env_reward"]
    assert sorted(rewards[:2]) == sorted(rewards[2:]) == [0.0, 1.0]  # each group: one solved, one not
    assert out["env_segments"] == [1] * 4
    # the trainer's sampling settings, not the agent's defaults; each turn within the per-turn cap
    assert {s.temperature for s in engine.samplings} == {0.7}
    assert all(s.max_tokens <= 96 for s in engine.samplings)


async def rewriting_agent(task, base_url, api_key):
    """Calls a tool, then starts over with a summary in place of the history: a second segment."""
    async with AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client:
        first = await client.chat.completions.create(model="m", messages=task.messages, tools=task.tools)
        call = first.choices[0].message.tool_calls[0]
        output = await task.call_tool(call.function.name, json.loads(call.function.arguments))
        summary = {"role": "user", "content": f"The calculator says {output}. What is the answer?"}
        last = await client.chat.completions.create(model="m", messages=[*task.messages, summary])
        return last.choices[0].message.content


def test_an_agent_that_rewrites_its_history_trains_on_its_last_segment(renderer, hermes_policy):
    dataset = prompt_dataset(ENV, 1, seed=0)
    engine = Engine(renderer, hermes_policy(ENV, _tasks(dataset)))
    rollout = make_rollout_func(ENV, client=engine, agent=rewriting_agent)
    out = rollout(list(dataset["prompt"]), fake_trainer(renderer.tokenizer))

    (prompts, generated), *_ = _sessions(engine).values()
    assert out["env_segments"] == [2] and out["env_error"] == [None]
    # the second call's prompt and what it sampled; the first segment is dropped, not re-tokenized into it
    first = prompts[0] + generated[0]
    assert out["prompt_ids"][0] == prompts[1] and prompts[1][: len(first)] != first
    assert [t for t, m in zip(out["completion_ids"][0], out["env_mask"][0], strict=True) if m] == generated[1]
    assert out["completion_ids"][0] == generated[1]
    logged: dict[str, float] = {}
    env_reward(log_metric=logged.__setitem__, **out)
    assert logged["toolgym/segments"] == 2.0 and logged["toolgym/dropped_segments"] == 1.0


async def endless_agent(task, base_url, api_key):
    """Asks the model again and again, never answering."""
    async with AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client:
        messages = list(task.messages)
        while True:
            reply = await client.chat.completions.create(model="m", messages=messages, temperature=0.1)
            messages += [
                reply.choices[0].message.model_dump(exclude_none=True),
                {"role": "user", "content": "?"},
            ]


def test_an_agent_past_the_response_budget_is_refused_and_not_trained_on(renderer):
    dataset = prompt_dataset(ENV, 1, seed=0)
    engine = Engine(renderer, lambda session, turn, prompt: "Let me think about it some more.")
    rollout = make_rollout_func(ENV, client=engine, agent=endless_agent)
    out = rollout(list(dataset["prompt"]), fake_trainer(renderer.tokenizer, max_completion_length=64))
    assert "response budget is spent" in out["env_error"][0] and out["env_reward"] == [None]
    assert set(out["env_mask"][0]) == {0} and len(out["completion_ids"][0]) <= 64
    assert len(engine.generated) > 1 and sum(len(g) for g in engine.generated) <= 64
    assert {s.temperature for s in engine.samplings} == {1.0}  # the trainer's, not the agent's 0.1
    with pytest.raises(ValueError, match="cannot be used"):
        make_rollout_func(ENV, agent="examples/gateway_agent.py:no_such_function")


def _params(trainer):
    return {n: p.detach().clone() for n, p in trainer.model.named_parameters()}


@pytest.mark.slow
def test_grpo_trains_an_agent_program_on_its_recorded_tokens_and_the_verifiers_rewards(
    make_trainer, renderer, recorded_agent, hermes_policy, env_verdict
):
    """A GRPO step of TRL's trainer on the tiny model: the loss mask is 1 exactly on what the engine
    sampled for the agent, the advantages follow the verifier's rewards, and the parameters move."""
    dataset = prompt_dataset(ENV, 2, seed=0)
    tasks = {t.id: t for t in _tasks(dataset)}
    engine = Engine(renderer, hermes_policy(ENV, list(tasks.values())))
    rollout = make_rollout_func(ENV, client=engine, agent=recorded_agent.spec)
    trainer, spy = make_trainer(rollout, dataset, steps=1, group=2, batch=4)
    before = _params(trainer)
    trainer.train()

    after = _params(trainer)
    assert any(not torch.equal(before[n], after[n]) for n in before)
    assert len(spy.calls) == 1
    answers, sessions = recorded_agent.answers(), _sessions(engine)
    by_tokens = {tuple(t for ids in generated for t in ids): s for s, (_, generated) in sessions.items()}
    for call in spy.calls:
        for completion, loss_mask, advantage, traj in spy.rows(call):
            session = by_tokens[tuple(t for t, m in zip(completion, loss_mask, strict=True) if m)]
            answer = answers[session]
            verdict = env_verdict(ENV, tasks[answer["task_id"]], answer["answer"])
            assert traj.reward == verdict.reward
            assert (advantage > 0) == verdict.passed and abs(advantage) > 0.1
    logged = list(trainer._logs["rewards"]["env_reward"])[-4:]
    assert logged == [t.reward for t in spy.calls[-1]["trajectories"]] and sorted(logged) == [0, 0, 1, 1]
