"""toolgym/ReasoningGym-v0: reasoning-gym datasets by name, scored by their own score_answer."""

from __future__ import annotations

import json
import sys

import gymnasium as gym
import pytest

from toolgym.envs.reasoning_gym import ReasoningGymVerifier, dataset_names, make_task
from toolgym.testing.scripted import oracle_script, play_script

ENV_ID = "toolgym/ReasoningGym-v0"
DATASETS = [
    "basic_arithmetic",
    "chain_sum",
    "gcd",
    "fraction_simplification",
    "simple_equations",
    "prime_factorization",
    "word_sorting",
    "spell_backward",
]


def test_many_datasets_are_available():
    names = dataset_names()
    assert len(names) > 50 and set(DATASETS) <= set(names)


@pytest.mark.parametrize("dataset", DATASETS)
def test_gold_answers_score_one_through_the_env(dataset):
    env = gym.make(ENV_ID, dataset=dataset)
    for seed in range(3):
        env.reset(seed=seed)
        task = env.unwrapped.task
        assert task.id.startswith(f"reasoning_gym/{dataset}/") and task.source == f"reasoning_gym/{dataset}"
        json.dumps(task.model_dump())  # JSON-plain: metadata is rebuilt, never stored
        summary = play_script(env, oracle_script(ENV_ID, task), options={"task": task})
        assert summary.reward == 1.0 and summary.verdict.passed and summary.tool_errors == 0, summary
        wrong = play_script(env, ["I do not know."], options={"task": task})
        assert wrong.reward < 1.0 and not wrong.verdict.passed and wrong.verdict.error is None, wrong
    env.close()


def test_numeric_golds_are_checked_with_the_calculator():
    env = gym.make(ENV_ID, dataset="basic_arithmetic")
    env.reset(seed=5)
    script = oracle_script(ENV_ID, env.unwrapped.task)
    assert script[0].name == "calculator" and script[-1] == env.unwrapped.task.answer


def test_a_malformed_answer_is_wrong_not_a_verifier_failure():
    """prime_factorization's score_answer raises on non-numbers: that is the answer's fault."""
    task = make_task("prime_factorization", 3)
    verdict = ReasoningGymVerifier().verify(task, "no idea")
    assert verdict.reward == 0.0 and verdict.error is None
    assert "score_answer raised ValueError" in verdict.details["reason"]


def test_a_task_that_cannot_be_rebuilt_is_a_verifier_error():
    task = make_task("chain_sum", 1)
    broken = task.model_copy(update={"data": {**task.data, "dataset": "no_such_dataset"}})
    verdict = ReasoningGymVerifier().verify(broken, task.answer)
    assert verdict.error is not None and "cannot rebuild" in verdict.error


def test_a_task_rebuilt_with_another_question_is_a_verifier_error():
    """ransom_note draws letters from a set, so under another PYTHONHASHSEED (another rollout worker) its seed
    gives another question: scoring against this process's gold would be a silently wrong reward."""
    task = make_task("ransom_note", 0)
    assert ReasoningGymVerifier().verify(task, task.answer).reward == 1.0
    from_another_process = task.model_copy(update={"prompt": task.prompt.replace("Ransom note:", "Note:")})
    verdict = ReasoningGymVerifier().verify(from_another_process, task.answer)
    assert verdict.reward == 0.0 and "PYTHONHASHSEED" in verdict.error


def test_config_is_passed_to_the_dataset():
    env = gym.make(ENV_ID, dataset="chain_sum", config={"min_terms": 5, "max_terms": 5})
    prompt, _ = env.reset(seed=0)
    assert env.unwrapped.task.data["config"] == {"min_terms": 5, "max_terms": 5}
    assert prompt.count("+") + prompt.count("-") >= 4
    with pytest.raises(ValueError, match="config may not set"):
        gym.make(ENV_ID, dataset="chain_sum", config={"seed": 1})


def test_unknown_dataset():
    with pytest.raises(ValueError, match="no reasoning-gym dataset named 'nope'"):
        gym.make(ENV_ID, dataset="nope")


def test_without_reasoning_gym_the_error_names_the_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "reasoning_gym", None)
    monkeypatch.setitem(sys.modules, "reasoning_gym.factory", None)
    with pytest.raises(ImportError, match="pip install reasoning-gym"):
        gym.make(ENV_ID)
