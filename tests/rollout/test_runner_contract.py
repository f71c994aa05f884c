"""What the trainer adapters rely on from the episode runner: one session id per episode, failures returned
as untrainable trajectories, a prompt cap, optional logprobs, no trailing observation tokens, rendering off
the event loop, and a pool of env instances keyed by kwargs."""

import asyncio
import threading

import gymnasium as gym
import pytest

import toolgym
from toolgym.core.task import ListSource, Task
from toolgym.rollout import EnvPool, RolloutConfig, draw_task, run_episode
from toolgym.rollout.chat import ChatRenderer
from toolgym.rollout.clients.base import Generation, Sampling
from toolgym.rollout.clients.errors import ClientError
from toolgym.rollout.clients.openai_http import completion_request
from toolgym.rollout.clients.vllm_inproc import vllm_sampling_kwargs
from toolgym.testing.scripted import ScriptedClient, oracle_policy, oracle_script, script_texts


def _calculator(**kwargs):
    env = gym.make("toolgym/Calculator-v0", **kwargs)
    env.reset(seed=5)
    return env, env.unwrapped.task


def test_every_turn_of_an_episode_is_sent_with_the_same_session_id(renderer):
    env, task = _calculator()
    client = ScriptedClient(renderer, script_texts(env, oracle_script(env.spec.id, task)))
    traj = asyncio.run(run_episode(env, client, renderer, options={"task": task}, request_id="ep-7"))
    assert traj.reward == 1.0 and traj.num_turns >= 2
    assert client.request_ids == ["ep-7"] * traj.num_turns


class FailingClient(ScriptedClient):
    """Answers ``ok_turns`` turns from the script, then fails like an unreachable server."""

    def __init__(self, renderer, texts, ok_turns):
        super().__init__(renderer, texts)
        self.ok_turns = ok_turns

    async def generate(self, prompt_ids, sampling, request_id):
        if len(self.generated) >= self.ok_turns:
            raise ClientError("server unreachable", retryable=True)
        return await super().generate(prompt_ids, sampling, request_id)


def test_a_failed_episode_comes_back_untrainable_with_its_prompt_and_tokens(renderer):
    env, task = _calculator()
    client = FailingClient(renderer, script_texts(env, oracle_script(env.spec.id, task)), ok_turns=1)
    traj = asyncio.run(run_episode(env, client, renderer, options={"task": task}))
    assert traj.stop_reason == "error" and "server unreachable" in traj.error and not traj.trainable
    assert traj.task_id == task.id and traj.prompt_ids
    assert traj.response_ids == client.generated[0]  # what was generated is kept; the observation is not
    assert traj.response_mask == [0] * len(traj.response_ids)
    assert traj.reward == 0.0 and traj.num_turns == 1


def test_a_failing_reset_is_an_error_trajectory_not_an_exception(renderer):
    class BrokenSource(ListSource):
        def get(self, task_id):
            raise RuntimeError("task store offline")

    env = toolgym.make_env(
        BrokenSource([Task(id="t", prompt="q", answer="1")]), ["calculator"], lambda t, a: 1
    )
    client = ScriptedClient(renderer, ["<answer>1</answer>"])
    traj = asyncio.run(run_episode(env, client, renderer, options={"task_id": "t"}))
    assert traj.error == "RuntimeError: task store offline" and traj.task_id == "?"
    assert traj.prompt_ids == [] and traj.response_ids == [] and client.generated == []


def test_a_prompt_over_its_cap_fails_before_any_generation(renderer):
    env, task = _calculator()
    client = ScriptedClient(renderer, ["<answer>1</answer>"])
    config = RolloutConfig(max_prompt_tokens=20)
    traj = asyncio.run(run_episode(env, client, renderer, config, options={"task": task}))
    assert "max_prompt_tokens=20" in traj.error and "PromptTooLong" in traj.error
    assert len(traj.prompt_ids) > 20 and traj.response_ids == [] and client.generated == []
    fits = RolloutConfig(max_prompt_tokens=len(traj.prompt_ids))
    env.reset(seed=5)
    client = ScriptedClient(renderer, script_texts(env, oracle_script(env.spec.id, task)))
    assert asyncio.run(run_episode(env, client, renderer, fits, options={"task": task})).reward == 1.0


def test_an_aborted_turn_fails_the_episode(renderer):
    class Aborting(ScriptedClient):
        async def generate(self, prompt_ids, sampling, request_id):
            return Generation(token_ids=[], logprobs=[], finish_reason="abort")

    env, task = _calculator()
    traj = asyncio.run(run_episode(env, Aborting(renderer, []), renderer, options={"task": task}))
    assert "abort" in traj.error and traj.num_turns == 0 and not traj.trainable


def test_without_logprobs_the_trajectory_has_none_and_the_same_tokens(renderer):
    env, task = _calculator()
    texts = script_texts(env, oracle_script(env.spec.id, task))
    with_lp = asyncio.run(run_episode(env, ScriptedClient(renderer, texts), renderer, options={"task": task}))
    without = asyncio.run(
        run_episode(env, ScriptedClient(renderer, texts, logprobs=False), renderer, options={"task": task})
    )
    assert without.logprobs is None and len(with_lp.logprobs) == len(with_lp.response_ids)
    assert without.response_ids == with_lp.response_ids and without.response_mask == with_lp.response_mask


def test_a_verifier_failure_makes_the_episode_untrainable(renderer):
    def broken(task, answer):
        raise RuntimeError("judge crashed")

    env = toolgym.make_env([{"id": "t", "prompt": "Say 1.", "answer": "1"}], ["calculator"], broken)
    traj = asyncio.run(run_episode(env, ScriptedClient(renderer, ["<answer>1</answer>"]), renderer))
    assert traj.error is None and traj.verdict.error and not traj.trainable


def test_rendering_and_tokenizing_run_off_the_event_loop(renderer):
    seen = []

    class ThreadRecordingRenderer(ChatRenderer):
        def prompt_ids(self, *args, **kwargs):
            seen.append(("prompt", threading.current_thread().name))
            return super().prompt_ids(*args, **kwargs)

        def observation_ids(self, *args, **kwargs):
            seen.append(("observation", threading.current_thread().name))
            return super().observation_ids(*args, **kwargs)

    recording = ThreadRecordingRenderer(renderer.tokenizer)
    env, task = _calculator()
    client = ScriptedClient(recording, script_texts(env, oracle_script(env.spec.id, task)))
    traj = asyncio.run(run_episode(env, client, recording, options={"task": task}))
    assert traj.reward == 1.0
    assert {kind for kind, _ in seen} == {"prompt", "observation"}
    assert all(name != threading.main_thread().name for _, name in seen)


def test_oracle_policy_serves_concurrent_episodes_of_different_tasks(renderer):
    tasks = [draw_task(gym.make("toolgym/Calculator-v0"), seed) for seed in range(3)]
    client = ScriptedClient(renderer, oracle_policy("toolgym/Calculator-v0", tasks), delay=0.01)

    async def main():
        envs = [gym.make("toolgym/Calculator-v0") for _ in tasks]
        return await asyncio.gather(
            *(
                run_episode(env, client, renderer, options={"task": t}, request_id=f"e{i}")
                for i, (env, t) in enumerate(zip(envs, tasks, strict=True))
            )
        )

    trajs = asyncio.run(main())
    assert [t.reward for t in trajs] == [1.0, 1.0, 1.0]
    assert [t.task_id for t in trajs] == [t.id for t in tasks]


def test_env_pool_reuses_instances_per_id_and_kwargs():
    pool = EnvPool()
    with pool.lease("toolgym/Calculator-v0", {"max_turns": 3}) as a:
        assert a.unwrapped.max_turns == 3
        with pool.lease("toolgym/Calculator-v0", {"max_turns": 3}) as b:
            assert b is not a  # leased: never handed out twice at once
    with pool.lease("toolgym/Calculator-v0", {"max_turns": 3}) as again:
        assert again in (a, b)
    with pool.lease("toolgym/Calculator-v0", {"max_turns": 5}) as other:
        assert other.unwrapped.max_turns == 5 and other not in (a, b)
    assert len(pool) == 3
    with pytest.raises(ValueError, match="not made by this pool"):
        pool.release(gym.make("toolgym/Calculator-v0"))
    pool.close()
    assert len(pool) == 0
    with pytest.raises(RuntimeError, match="closed"):
        pool.acquire("toolgym/Calculator-v0")


def test_env_pool_max_idle_closes_extra_instances():
    pool = EnvPool(max_idle=1)
    a, b = pool.acquire("toolgym/Calculator-v0"), pool.acquire("toolgym/Calculator-v0")
    pool.release(a)
    pool.release(b)
    assert len(pool) == 1


def test_draw_task_is_the_seeded_reset_task():
    env = gym.make("toolgym/Calculator-v0")
    assert draw_task(env, 3) == draw_task(gym.make("toolgym/Calculator-v0"), 3) != draw_task(env, 4)


def test_sampling_extras_reach_the_engines_and_cannot_override_fields():
    sampling = Sampling(repetition_penalty=1.1, extra={"min_p": 0.05})
    assert vllm_sampling_kwargs(sampling)["repetition_penalty"] == 1.1
    assert vllm_sampling_kwargs(sampling)["min_p"] == 0.05
    body = completion_request([1, 2], sampling, "m")
    assert body["repetition_penalty"] == 1.1 and body["min_p"] == 0.05
    clash = Sampling(extra={"stop": ["x"]})
    with pytest.raises(ClientError, match="stop"):
        vllm_sampling_kwargs(clash)
    with pytest.raises(ClientError, match="stop"):
        completion_request([1], clash, "m")


def test_generation_needs_one_logprob_per_token_when_it_has_any():
    assert Generation(token_ids=[1, 2], logprobs=None, finish_reason="stop").logprobs is None
    with pytest.raises(ValueError, match="one per token"):
        Generation(token_ids=[1, 2], logprobs=[-1.0], finish_reason="stop")


def test_episodes_over_the_sandbox_capacity_wait_for_a_slot_and_the_wait_is_counted(renderer):
    """Four concurrent PythonCode episodes on a sandbox fixed at two sessions: two wait for a slot until the
    first two end (no one's state is taken, no one fails) and their trajectories count the wait."""
    from toolgym.rollout import EnvRequest, collect
    from toolgym.sandbox import LocalSandbox

    steps = ["<python>v = 7</python>", "<python>print(v * 6)</python>", "<answer>def f(): pass</answer>"]
    client = ScriptedClient(renderer, lambda request_id, turn, prompt: steps[min(turn, 2)], delay=0.05)
    config = RolloutConfig(max_response_tokens=400, max_tokens_per_turn=64)
    with LocalSandbox(max_sessions=2, session_wait_s=120) as box:
        request = EnvRequest(id="toolgym/PythonCode-v0", kwargs={"sandbox": box, "max_turns": 4})
        trajs, _ = asyncio.run(collect([request], client, renderer, config, tasks_per_env=4, progress=False))
        assert box.slots.stats["peak"] == 2 and box.slots.stats["waits"] >= 2
    assert [t.turns[1].tool_results[0].output for t in trajs] == ["42"] * 4
    assert all(t.infra_errors == 0 and t.trainable_for(exclude_infra_errors=True) for t in trajs)
    waited = [t.stats()["wait_s"] for t in trajs]
    assert sum(w > 0 for w in waited) >= 2, waited
