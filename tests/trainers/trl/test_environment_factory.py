"""TRL's ``environment_factory`` path: a toolgym env as the class GRPOTrainer drives with its own tool-call
loop. The tool methods render to the tools' own schemas through transformers (what TRL reads), calls run the
env's real tools, ``reset`` pins the row's task, and the reward is the env's verifier (``None`` when the
verifier fails); a real GRPOTrainer on the tiny model trains through it with the verifier's rewards."""

from __future__ import annotations

import gymnasium as gym
import pytest
from transformers.utils import get_json_schema

import toolgym
from toolgym.core.task import ProceduralSource, Task
from toolgym.parsers.base import ERROR_MARKER
from toolgym.rewards.base import FunctionVerifier
from toolgym.tools.calculator import Calculator
from toolgym.trainers.trl_adapter import (
    environment_dataset,
    environment_factory,
    environment_reward,
)
from toolgym.trainers.trl_adapter.environment import EPISODE_FIELD, ToolgymEnvironment

ENV_IDS = ["toolgym/Calculator-v0", "toolgym/PythonCode-v0", "toolgym/Search-v0", "toolgym/SQL-v0"]


def _tool_schema(tool):
    """What transformers can express of a tool's schema: names, types, descriptions, required (it has no
    keywords for ``examples`` or ``maxLength``; toolgym still validates them on every call)."""
    function = tool.schema()["function"]
    properties = {
        name: {"type": prop["type"], "description": prop["description"]}
        for name, prop in function["parameters"]["properties"].items()
    }
    return (
        function["name"],
        " ".join(function["description"].split()),
        properties,
        function["parameters"]["required"],
    )


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_the_tool_methods_render_as_the_envs_tool_schemas(env_id):
    cls = environment_factory(env_id)
    env = gym.make(env_id)
    try:
        for tool in env.unwrapped.tools.values():
            rendered = get_json_schema(getattr(cls, tool.name))["function"]
            params = rendered["parameters"]
            assert (rendered["name"], rendered["description"], params["properties"], params["required"]) == (
                _tool_schema(tool)
            )
    finally:
        env.close()
    public = {name for name in vars(cls) if callable(vars(cls)[name]) and not name.startswith("_")}
    assert public == set(env.unwrapped.tools)  # TRL takes every public method for a tool


def test_calls_run_the_envs_tools_with_its_validation_marker_and_budget():
    cls = environment_factory("toolgym/Calculator-v0", max_turns=3)
    environment = cls()
    row = environment_dataset(cls, 1)[0]
    prompt = environment.reset(**row)
    env = gym.make("toolgym/Calculator-v0")
    expected_prompt, _ = env.reset(seed=0, options={"task": environment.task})
    assert prompt == expected_prompt and environment.task.id in row[EPISODE_FIELD]

    assert environment.calculator(expression="99*603") == "59697"
    bad = environment.calculator(expression="2+")
    assert bad.startswith(f"{ERROR_MARKER} invalid expression") and bad.count(ERROR_MARKER) == 1
    over = environment.calculator(expression="1+1")  # max_turns=3: two calls, then answer
    assert over.startswith(ERROR_MARKER) and "final answer" in over
    assert environment.trajectory.tool_calls == 3 and environment.trajectory.tool_errors == 2
    unknown = environment.calculator(expr="1")
    assert unknown.startswith(ERROR_MARKER)


def test_the_reward_is_the_verifiers_verdict_on_the_final_answer():
    cls = environment_factory("toolgym/Calculator-v0")
    rows = environment_dataset(cls, 3)
    envs = [cls() for _ in rows]
    for environment, row in zip(envs, rows, strict=True):
        environment.reset(**row)
    gold = str(envs[0].task.answer)
    completions = [
        [{"role": "assistant", "content": f"<think>maybe 7</think><answer>{gold}</answer>"}],
        [{"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {}}]}],
        [{"role": "assistant", "content": "12"}],
    ]
    assert environment_reward(completions, envs) == [1.0, 0.0, 0.0]
    assert envs[0].verdict.passed and envs[0].verdict.details["parsed"] == gold
    assert envs[1].verdict.details["reason"].startswith("no final answer")
    assert envs[2].trajectory.verdict is envs[2].verdict

    def broken(task, answer):
        raise RuntimeError("judge down")

    failing = environment_factory(
        lambda: toolgym.make_env(_tasks(), [Calculator()], FunctionVerifier(broken))
    )
    environment = failing()
    environment.reset(task_id="letters/7")
    assert environment_reward([[{"role": "assistant", "content": "t"}]], [environment]) == [None]
    assert "judge down" in environment.verdict.error


def test_a_dict_of_envs_gives_named_classes_and_rows_that_name_them():
    factories = environment_factory({"calc": "toolgym/Calculator-v0", "sql": "toolgym/SQL-v0"})
    assert {name: cls.env_id for name, cls in factories.items()} == {
        "calc": "toolgym/Calculator-v0",
        "sql": "toolgym/SQL-v0",
    }
    rows = environment_dataset(factories, 5)
    assert [r["environment"] for r in rows] == ["calc", "sql", "calc", "sql", "calc"]
    environment = factories["sql"]()
    with pytest.raises(ValueError, match="plays toolgym/SQL-v0"):
        environment.reset(**rows[0])
    assert environment.reset(**rows[1])


# -- a real GRPOTrainer run ------------------------------------------------------------------------------


def _even_length_wins(task, answer):
    """Half of the tiny model's random answers have an even length: rewards of both kinds in every run."""
    return len(answer.strip()) % 2 == 0


def _tasks():
    return ProceduralSource("letters", lambda seed: Task(id=str(seed), prompt="Say a word.", answer="s or t"))


def _letter_env():
    return toolgym.make_env(_tasks(), [Calculator()], FunctionVerifier(_even_length_wins), max_turns=3)


def test_grpo_trains_through_environment_factory_with_the_verifiers_rewards(tmp_path, tiny_path):
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import qwen3_template

    factory = environment_factory(_letter_env)
    seen = []

    def reward(completions, environments, **kwargs):
        rewards = environment_reward(completions, environments, **kwargs)
        # what each instance holds now (TRL reuses the instances for the next batch)
        played = [(e.task.id, e.verdict.reward, isinstance(e, ToolgymEnvironment)) for e in environments]
        seen.append((completions, played, kwargs[EPISODE_FIELD], rewards))
        return rewards

    tokenizer = AutoTokenizer.from_pretrained(tiny_path)
    tokenizer.response_template = qwen3_template  # the tiny template lays tool calls out as Qwen's does
    config = GRPOConfig(
        output_dir=str(tmp_path / "grpo"),
        use_cpu=True,
        bf16=False,
        per_device_train_batch_size=8,
        num_generations=4,
        max_steps=2,
        max_completion_length=24,
        max_tool_calling_iterations=2,
        learning_rate=1e-3,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        disable_tqdm=True,
        seed=0,
    )
    trainer = GRPOTrainer(
        model=tiny_path,
        reward_funcs=reward,
        args=config,
        train_dataset=environment_dataset(factory, 16),
        processing_class=tokenizer,
        environment_factory=factory,
    )
    assert [t.__name__ for t in trainer._env_tools[None]] == ["calculator"]
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()

    assert len(seen) == 2
    for completions, played, keys, rewards in seen:
        assert all(ours for *_, ours in played)
        # each instance played the task its row pinned, and the reward is the verifier's rule on the answer
        assert [task_id in key for (task_id, *_), key in zip(played, keys, strict=True)] == [True] * len(keys)
        for completion, (_, verdict_reward, _), r in zip(completions, played, rewards, strict=True):
            final = completion[-1]
            answered = final["role"] == "assistant" and not final.get("tool_calls")
            expected = float(answered and _even_length_wins(None, final["content"] or ""))
            assert r == expected == verdict_reward
    logged = [h["rewards/reward/mean"] for h in trainer.state.log_history if "rewards/reward/mean" in h]
    assert logged == pytest.approx([sum(r) / len(r) for *_, r in seen])
    assert {r for *_, rewards in seen for r in rewards} == {0.0, 1.0}  # the run saw both rewards
    moved = any(not p.detach().equal(before[n]) for n, p in trainer.model.named_parameters())
    assert moved
