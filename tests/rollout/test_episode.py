"""The episode runner and collector: token plumbing with a scripted client, then on the real vLLM engine."""

import asyncio
import os
import threading

import gymnasium as gym
import pytest

import toolgym
from toolgym.core.types import ToolResult
from toolgym.rollout import (
    ChatRenderer,
    RolloutConfig,
    TemplateError,
    check_prefix_property,
    collect,
    load_trajectories,
    run_episode,
)
from toolgym.sandbox.processes import process_table
from toolgym.testing.scripted import ScriptedClient, oracle_script, script_texts


class RecordingClient:
    def __init__(self, client):
        self.client = client
        self.generated: list[list[int]] = []
        self.logprobs: list[float] = []

    async def generate(self, prompt_ids, sampling, request_id):
        gen = await self.client.generate(prompt_ids, sampling, request_id)
        self.generated.append(gen.token_ids)
        self.logprobs += gen.logprobs
        return gen

    async def close(self):
        pass


def _oracle_texts(env):
    return script_texts(env, oracle_script(env.spec.id, env.unwrapped.task))


def _assert_token_faithful(traj, generated, renderer):
    masked = [tid for tid, m in zip(traj.response_ids, traj.response_mask, strict=True) if m == 1]
    assert masked == [tid for ids in generated for tid in ids]
    assert len(traj.logprobs) == len(traj.response_ids)
    assert all(lp == 0.0 for lp, m in zip(traj.logprobs, traj.response_mask, strict=True) if m == 0)
    decoded = renderer.decode(traj.prompt_ids + traj.response_ids)
    # the env records the observation of a final, truncated step too; no tokens follow it, so stop there
    last_assistant = max(i for i, m in enumerate(traj.messages) if m["role"] == "assistant")
    rendered = renderer.render(traj.messages[: last_assistant + 1])
    if traj.stop_reason == "length":  # the budget may cut the final observation anywhere
        rendered = renderer.render(traj.messages, generation_prompt=True)
        assert rendered.startswith(decoded)
        return
    assert rendered.startswith(decoded)
    assert renderer.turn_suffix.endswith(rendered[len(decoded) :])


@pytest.mark.parametrize("fmt", ["xml", "hermes", "react"])
def test_scripted_oracle_episode_is_token_faithful_and_scores_one(renderer, fmt):
    env = gym.make("toolgym/Calculator-v0", action_format=fmt)
    env.reset(seed=11)
    task = env.unwrapped.task
    client = ScriptedClient(renderer, _oracle_texts(env))
    traj = asyncio.run(run_episode(env, client, renderer, seed=11, options={"task": task}))
    assert traj.reward == 1.0 and traj.stop_reason == "answer" and traj.verdict.passed
    assert traj.num_turns == len(client.generated) and traj.tool_calls == len(task.data["steps"])
    _assert_token_faithful(traj, client.generated, renderer)
    # each turn's prompt is the previous prompt plus everything appended since: nothing is re-tokenized
    for before, after in zip(client.prompts, client.prompts[1:]):
        assert after[: len(before)] == before
    # the final answer ended with the end-of-turn token, so only the template's newline is left unrendered
    assert renderer.render(traj.messages) == renderer.decode(traj.prompt_ids + traj.response_ids) + "\n"


def test_env_steps_run_off_the_event_loop(renderer):
    threads = []

    class ThreadProbe(toolgym.Tool):
        name = "probe"
        description = "Records the thread it runs in."
        Args = toolgym.tools.calculator.Calculator.Args
        primary_arg = "expression"

        def run(self, args):
            threads.append(threading.current_thread().name)
            return ToolResult(name=self.name, output="ok")

    tasks = [{"id": "t", "prompt": "Say 1.", "answer": "1"}]
    env = toolgym.make_env(tasks, [ThreadProbe()], lambda t, a: a == "1")
    client = ScriptedClient(renderer, ["<probe>1</probe>", "<answer>1</answer>"])
    traj = asyncio.run(run_episode(env, client, renderer))
    assert traj.reward == 1.0
    assert threads and threading.main_thread().name not in threads


def test_observation_tokens_that_overflow_the_budget_end_the_episode(renderer):
    env = gym.make("toolgym/Calculator-v0")
    env.reset(seed=2)
    texts = _oracle_texts(env)
    client = ScriptedClient(renderer, texts)
    budget = len(renderer.encode(texts[0])) + 5
    config = RolloutConfig(max_response_tokens=budget)
    traj = asyncio.run(run_episode(env, client, renderer, config, options={"task": env.unwrapped.task}))
    assert traj.stop_reason == "length" and traj.reward == 0.0 and traj.trainable
    # the observation that did not fit is dropped: the response ends on the model's own last token
    assert traj.response_ids == client.generated[0] and traj.response_mask == [1] * len(client.generated[0])
    assert len(traj.response_ids) <= budget


def test_preflight_accepts_the_tiny_template_and_flags_think_stripping(renderer):
    assert check_prefix_property(renderer) == []
    stripping = ChatRenderer(renderer.tokenizer)
    stripping.tokenizer = _StrippingTokenizer(renderer.tokenizer)
    problems = check_prefix_property(stripping)
    assert problems and "re-rendered differently" in problems[0]
    with pytest.raises(TemplateError):
        stripping.observation_ids(
            [{"role": "user", "content": "q"}, {"role": "assistant", "content": "<think>x</think>a"}],
            [{"role": "user", "content": "next"}],
        )


class _StrippingTokenizer:
    """A tokenizer whose template drops <think> blocks from assistant turns that are not the last message,
    as some reasoning-model templates do."""

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def apply_chat_template(self, messages, **kwargs):
        last = len(messages) - 1
        cleaned = [
            {**m, "content": m["content"].split("</think>")[-1]}
            if m["role"] == "assistant" and i < last
            else m
            for i, m in enumerate(messages)
        ]
        return self.inner.apply_chat_template(cleaned, **kwargs)


# -- on the real engine --------------------------------------------------------------------------------------


def test_real_engine_masks_cover_exactly_the_generated_tokens(engine):
    env = gym.make("toolgym/Calculator-v0", max_turns=3)
    client = RecordingClient(engine.client)
    config = RolloutConfig(max_response_tokens=600, max_tokens_per_turn=48)
    traj = engine.run(run_episode(env, client, engine.renderer, config, seed=4, sampling_seed=7))
    assert traj.num_turns == len(client.generated) >= 1
    _assert_token_faithful(traj, client.generated, engine.renderer)
    generated_logprobs = [lp for lp, m in zip(traj.logprobs, traj.response_mask, strict=True) if m]
    assert generated_logprobs == client.logprobs and all(lp <= 0.0 for lp in generated_logprobs)
    assert any(lp < 0.0 for lp in generated_logprobs)


def test_real_engine_honours_the_token_budget_and_turn_limit(engine):
    env = gym.make("toolgym/Calculator-v0", max_turns=50)
    config = RolloutConfig(max_response_tokens=60, max_tokens_per_turn=32)
    traj = engine.run(run_episode(env, engine.client, engine.renderer, config, seed=1, sampling_seed=1))
    assert len(traj.response_ids) <= 60 and traj.stop_reason in ("length", "answer")

    env = gym.make("toolgym/Calculator-v0", max_turns=2)
    config = RolloutConfig(max_response_tokens=2000, max_tokens_per_turn=16)
    traj = engine.run(run_episode(env, engine.client, engine.renderer, config, seed=1, sampling_seed=1))
    assert traj.num_turns <= 2 and traj.stop_reason in ("max_turns", "answer")


def test_real_engine_seeded_sampling_is_reproducible(engine):
    config = RolloutConfig(max_response_tokens=200, max_tokens_per_turn=32)
    runs = [
        engine.run(
            run_episode(
                gym.make("toolgym/Calculator-v0"),
                engine.client,
                engine.renderer,
                config,
                seed=3,
                sampling_seed=99,
            )
        )
        for _ in range(2)
    ]
    assert runs[0].response_ids == runs[1].response_ids


def test_collect_groups_share_the_task_and_stream_to_jsonl(engine, tmp_path):
    out = tmp_path / "rollouts.jsonl"
    config = RolloutConfig(max_response_tokens=120, max_tokens_per_turn=24)
    trajs, summary = engine.run(
        collect(
            ["toolgym/Calculator-v0"],
            engine.client,
            engine.renderer,
            config,
            tasks_per_env=2,
            group_size=3,
            concurrency=4,
            out=out,
            progress=False,
        )
    )
    assert len(trajs) == 6 and summary.episodes == 6
    stored = load_trajectories(out)
    assert sorted((t.group, t.sample) for t in stored) == sorted((t.group, t.sample) for t in trajs)
    groups = {}
    for t in stored:
        groups.setdefault(t.group, []).append(t)
    assert len(groups) == 2 and all(sorted(t.sample for t in g) == [0, 1, 2] for g in groups.values())
    for group in groups.values():
        assert len({t.task_id for t in group}) == 1
        assert len({tuple(t.prompt_ids) for t in group}) == 1
        assert len({tuple(t.response_ids) for t in group}) > 1  # different sampling seeds
    assert len({g[0].task_id for g in groups.values()}) == 2
    env_summary = summary.envs["toolgym/Calculator-v0"]
    assert env_summary.episodes == 6 and env_summary.errors == 0
    assert summary.generated_tokens == sum(sum(t.response_mask) for t in trajs) > 0
    assert 0.0 <= summary.engine_idle_fraction < 1.0


def _descendant_commands(pid: int) -> list[str]:
    """The command lines of every process below ``pid`` (from the sandbox's ``process_table``)."""
    table = process_table()
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        for child, (ppid, _, command) in table.items():
            if ppid == parent:
                found.append(command)
                todo.append(child)
    return found


def test_the_cpu_engine_runs_its_model_in_the_engine_core_process(engine):
    """One worker on a CPU: the model runs in vLLM's engine-core process (the ``uni`` executor), so an engine
    start spawns one process that imports vLLM and torch, not two; the variable that allows it is set only
    while the engine is built."""
    parallel = engine.client.engine.vllm_config.parallel_config
    assert parallel.distributed_executor_backend == "uni"
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in os.environ
    commands = _descendant_commands(os.getpid())  # vLLM names its processes with setproctitle
    assert any(command.startswith("VLLM::EngineCore") for command in commands), commands
    assert not any(command.startswith("VLLM::Worker") for command in commands), commands


def test_the_executor_is_left_to_vllm_for_several_workers_or_when_chosen():
    from toolgym.rollout.clients.vllm_inproc import VLLMConfig, _one_process_executor, _uniproc_allowed

    assert _one_process_executor(VLLMConfig(model="m")) == {"distributed_executor_backend": "uni"}
    assert _one_process_executor(VLLMConfig(model="m", tensor_parallel_size=2)) == {}
    chosen = VLLMConfig(model="m", extra={"distributed_executor_backend": "mp"})
    assert _one_process_executor(chosen) == {}
    with _uniproc_allowed({"distributed_executor_backend": "uni"}):
        assert os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in os.environ
