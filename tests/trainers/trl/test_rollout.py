"""The rollout function without a trainer run: the prompt dataset and its episode keys, TRL's keys from
trajectories (failures included), and the errors that name their fix."""

from types import SimpleNamespace

import gymnasium as gym
import pytest

from toolgym.envs.compose import make_env
from toolgym.rollout import EnvRequest
from toolgym.rollout.clients.errors import ClientError
from toolgym.testing.scripted import ScriptedClient, oracle_policy
from toolgym.trainers.trl_adapter import env_reward, make_rollout_func, prompt_dataset
from toolgym.trainers.trl_adapter.data import KEY_FIELD, key_of_prompt
from toolgym.trainers.trl_adapter.rollout import trl_outputs


def fake_trainer(tokenizer, **over):
    """The attributes of ``GRPOTrainer`` the rollout function reads (a scripted client needs no model)."""
    settings = dict(
        processing_class=tokenizer,
        model=SimpleNamespace(generation_config=SimpleNamespace(eos_token_id=None)),
        args=SimpleNamespace(seed=0, generation_kwargs=None),
        state=SimpleNamespace(global_step=0),
        max_completion_length=512,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        min_p=None,
        repetition_penalty=1.0,
        use_vllm=False,
        chat_template_kwargs={},
    )
    settings.update(over)
    return SimpleNamespace(**settings)


def test_the_dataset_carries_each_rows_episode_in_its_prompt():
    dataset = prompt_dataset(
        [
            EnvRequest(id="toolgym/Calculator-v0", weight=3),
            EnvRequest(id="toolgym/Math-v0", kwargs={"max_turns": 2}),
        ],
        8,
        seed=4,
    )
    assert dataset.column_names == ["prompt", "env_id", "task_id"] and len(dataset) == 8
    assert sorted(dataset["env_id"]).count("toolgym/Calculator-v0") == 6
    for row in dataset:
        *head, _ = row["prompt"]
        assert [m["role"] for m in row["prompt"]] == ["system", "user"] and all(
            m[KEY_FIELD] is None for m in head
        )
        key = key_of_prompt(row["prompt"])
        assert key.env_id == row["env_id"] and key.task.id == row["task_id"]
        # the prompt is the env's real first prompt for that task and seed
        env = gym.make(key.env_id, **key.env_kwargs)
        _, info = env.reset(seed=key.seed, options={"task": key.task})
        assert [m["content"] for m in info["messages"]] == [m["content"] for m in row["prompt"]]
    assert key_of_prompt(dataset[0]["prompt"]) != key_of_prompt(dataset[1]["prompt"])


def test_an_unregistered_env_from_a_factory_trains_too(renderer):
    def factory():
        return make_env(
            tasks=[{"id": "t1", "prompt": "What is 6 * 7?", "answer": 42}],
            tools=["calculator"],
            verifier=lambda t, a: a == "42",
        )

    dataset = prompt_dataset(factory, 2)
    assert key_of_prompt(dataset[0]["prompt"]).task.id == "t1"
    client = ScriptedClient(renderer, ["<calculator>6*7</calculator>", "<answer>42</answer>"] * 2)
    rollout = make_rollout_func(factory, client=client, max_concurrent_episodes=1)
    out = rollout(dataset["prompt"], fake_trainer(renderer.tokenizer))
    assert out["env_reward"] == [1.0, 1.0] and out["env_tool_calls"] == [1, 1]


def test_prompts_without_a_key_or_from_other_envs_are_refused_with_the_fix(renderer):
    rollout = make_rollout_func("toolgym/Calculator-v0", client=ScriptedClient(renderer, []))
    with pytest.raises(ValueError, match="prompt_dataset"):
        rollout([[{"role": "user", "content": "2+2?"}]], fake_trainer(renderer.tokenizer))
    math_rows = prompt_dataset("toolgym/Math-v0", 1)["prompt"]
    with pytest.raises(ValueError, match="same envs"):
        rollout(math_rows, fake_trainer(renderer.tokenizer))
    with pytest.raises(ValueError, match="unknown env"):
        make_rollout_func("toolgym/Calculatr-v0")


class FlakyClient(ScriptedClient):
    """Fails every episode with an odd index, like a server going away."""

    async def generate(self, prompt_ids, sampling, request_id):
        if int(request_id.rsplit("-", 1)[1]) % 2:
            raise ClientError("server went away")
        return await super().generate(prompt_ids, sampling, request_id)


def test_failed_episodes_come_back_untrainable_and_unscored(renderer):
    env_id = "toolgym/Calculator-v0"
    dataset = prompt_dataset(env_id, 1)
    tasks = [key_of_prompt(dataset[0]["prompt"]).task]
    client = FlakyClient(renderer, oracle_policy(env_id, tasks))
    rollout = make_rollout_func(env_id, client=client)
    out = rollout(list(dataset["prompt"]) * 4, fake_trainer(renderer.tokenizer))
    assert out["env_reward"] == [1.0, None, 1.0, None]
    assert [e is None for e in out["env_error"]] == [True, False, True, False]
    for i in (1, 3):  # TRL indexes the last completion token: a filler token, never trained on
        assert out["completion_ids"][i] and set(out["env_mask"][i]) == {0} and out["prompt_ids"][i]
        assert "server went away" in out["env_error"][i]
    for i in (0, 2):
        assert out["env_mask"][i] == rollout.last_trajectories[i].response_mask and out["env_passed"][i]
        assert len(out["logprobs"][i]) == len(out["completion_ids"][i])
    # the reward function hands TRL the env's rewards and logs what happened
    logged = {}
    rewards = env_reward(
        prompts=list(dataset["prompt"]) * 4, completions=[None] * 4, log_metric=logged.__setitem__, **out
    )
    assert (
        rewards == out["env_reward"]
        and logged["toolgym/untrainable"] == 0.5
        and logged["toolgym/passed"] == 0.5
    )
    with pytest.raises(ValueError, match="rollout_func"):
        env_reward(prompts=[], completions=[])


def test_budgets_and_sampling_come_from_the_trainer(renderer):
    env_id = "toolgym/Calculator-v0"
    dataset = prompt_dataset(env_id, 1)
    texts = ["<calculator>" + "1+" * 200 + "1</calculator>"] * 8
    client = ScriptedClient(renderer, texts)
    rollout = make_rollout_func(env_id, client=client, max_tokens_per_turn=40, max_prompt_tokens=4096)
    out = rollout(list(dataset["prompt"]) * 2, fake_trainer(renderer.tokenizer, max_completion_length=100))
    assert all(len(c) <= 100 for c in out["completion_ids"]) and set(out["env_stop_reason"]) == {"length"}
    assert all(len(g) <= 40 for g in client.generated)
    # a prompt over its cap fails its episode; TRL still gets a capped prompt
    short = make_rollout_func(env_id, client=ScriptedClient(renderer, []), max_prompt_tokens=16)
    out = short(dataset["prompt"], fake_trainer(renderer.tokenizer))
    assert "max_prompt_tokens=16" in out["env_error"][0] and len(out["prompt_ids"][0]) == 16
    # settings the HF backend cannot honour are an error, not a silent change
    with pytest.raises(ValueError, match="min_p"):
        make_rollout_func(env_id)(dataset["prompt"], fake_trainer(renderer.tokenizer, min_p=0.1))


def test_an_episode_failed_by_our_infrastructure_stays_out_of_the_loss_unless_asked():
    """``exclude_infra_errors`` (default on in ``make_rollout_func``): a tool call that failed through our
    fault (here the retriever was down) makes the episode untrainable; off, it trains with its reward."""
    from toolgym.core.types import ParsedAction, ToolCall, ToolResult, Trajectory, Turn

    down = ToolResult(name="search", status="infra_error", output="retriever unreachable")
    traj = Trajectory(
        task_id="t",
        reward=1.0,
        turns=[
            Turn(
                action="<search>x</search>",
                parsed=ParsedAction(kind="tool_calls", tool_calls=(ToolCall(name="search"),)),
                tool_results=(down,),
            )
        ],
        prompt_ids=[1, 2],
        response_ids=[3, 4],
        response_mask=[1, 1],
    )
    assert traj.trainable and traj.stats()["infra_errors"] == 1.0
    kept_out = trl_outputs([traj], filler_id=0, exclude_infra_errors=True)
    assert kept_out["env_mask"] == [[0, 0]] and kept_out["env_reward"] == [None]
    assert kept_out["env_infra_errors"] == [1]
    trained = trl_outputs([traj], filler_id=0, exclude_infra_errors=False)
    assert trained["env_mask"] == [[1, 1]] and trained["env_reward"] == [1.0]
    logged = {}
    env_reward(log_metric=logged.__setitem__, **kept_out)
    assert logged["toolgym/infra_errors"] == 1.0 and logged["toolgym/untrainable"] == 1.0
