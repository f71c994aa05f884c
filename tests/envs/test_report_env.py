"""toolgym/Report-v0: long-form profiles of invented entities, judged by an LLM judge (a scripted one here,
``reference_overlap``: every criterion 10 when the answer has every word of the reference, else 2)."""

import gymnasium as gym
import pytest

import toolgym  # noqa: F401 - registers the envs
from toolgym.envs.report import HOW_TO_CONFIGURE
from toolgym.search.world import KnowledgeWorld
from toolgym.testing.judge_server import scripted_judge
from toolgym.testing.scripted import oracle_script, play_script, wrong_script

ENV = "toolgym/Report-v0"


@pytest.fixture()
def judge(monkeypatch):
    for name in ("TOOLGYM_JUDGE_URL", "TOOLGYM_JUDGE_MODEL", "TOOLGYM_JUDGE_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    with scripted_judge(mode="reference_overlap") as server:
        yield server


def _played(env, answer, seed=0):
    env.reset(seed=seed)
    task = env.unwrapped.task
    *calls, _ = oracle_script(ENV, task)
    return play_script(env, [*calls, answer], options={"task": task})


def test_the_task_is_one_entitys_profile_and_the_reference_its_documented_facts():
    env = gym.make(ENV, world_size=500, world_seed=3)
    prompt, _ = env.reset(seed=5)
    task = env.unwrapped.task
    world = KnowledgeWorld(500, 3)
    document = world.document(task.data["entity"])["contents"]
    assert task.data["name"] in prompt and document == f"{task.data['name']}\n{task.answer}"
    assert task.data["queries"] == [task.data["name"]]
    # the gate's facts are the entity's values the prompt does not give
    assert task.data["facts"] and all(form[0] in task.answer for form in task.data["facts"])
    assert not any(form[0].lower() in prompt.lower() for form in task.data["facts"])


def test_without_a_judge_the_env_builds_and_every_verdict_is_an_error_saying_how_to_set_one(monkeypatch):
    monkeypatch.delenv("TOOLGYM_JUDGE_URL", raising=False)
    monkeypatch.delenv("TOOLGYM_JUDGE_MODEL", raising=False)
    env = gym.make(ENV)
    env.reset(seed=0)
    task = env.unwrapped.task
    out = play_script(env, oracle_script(ENV, task), options={"task": task})
    assert out.verdict.error == HOW_TO_CONFIGURE and out.reward == 0.0 and not out.verdict.passed
    assert "TOOLGYM_JUDGE_URL" in HOW_TO_CONFIGURE and "judge=" in HOW_TO_CONFIGURE
    assert env.unwrapped.trajectory.trainable is False


def test_the_judge_kwarg_names_the_endpoint_and_the_judge_scores_the_report(judge):
    env = gym.make(ENV, judge={"base_url": judge.url, "model": "scripted", "max_concurrency": 2})
    env.reset(seed=0)
    task = env.unwrapped.task
    good = play_script(env, oracle_script(ENV, task), options={"task": task})
    assert good.reward == 1.0 and good.verdict.passed
    assert good.verdict.details["scores"] == {"accuracy": 10, "coverage": 10, "grounding": 10}
    (request,) = judge.requests
    assert request["model"] == "scripted" and task.answer in request["messages"][-1]["content"]
    # a report with one fact but not all of them: the judge's 2s, a reward of 0.2
    partial = _played(env, f"{task.data['name']} is linked to {task.data['facts'][0][0]}.")
    assert partial.reward == pytest.approx(0.2) and not partial.verdict.passed
    assert partial.verdict.error is None
    assert judge.count == 2


def test_an_answer_with_none_of_the_facts_scores_zero_without_a_judge_call(judge):
    env = gym.make(ENV, judge={"base_url": judge.url, "model": "scripted"})
    env.reset(seed=1)
    task = env.unwrapped.task
    for answer in ["I do not know.", "", task.prompt, f"{task.data['name']} is a remarkable entity."]:
        out = _played(env, answer, seed=1)
        assert out.reward == 0.0 and out.verdict.details["gate_failed"] and out.verdict.error is None
    wrong = play_script(env, wrong_script(ENV, task), options={"task": task})
    assert wrong.reward == 0.0
    assert judge.count == 0


def test_the_environment_variables_name_the_endpoint_and_api_key_env_the_key(judge, monkeypatch):
    monkeypatch.setenv("TOOLGYM_JUDGE_URL", judge.url)
    monkeypatch.setenv("TOOLGYM_JUDGE_MODEL", "from-env")
    monkeypatch.setenv("MY_JUDGE_KEY", "sk-test-123")
    env = gym.make(ENV, judge={"api_key_env": "MY_JUDGE_KEY"})
    env.reset(seed=2)
    task = env.unwrapped.task
    assert play_script(env, oracle_script(ENV, task), options={"task": task}).reward == 1.0
    assert judge.requests[-1]["model"] == "from-env"
    assert judge.headers[-1]["authorization"] == "Bearer sk-test-123"


def test_a_bad_judge_option_is_an_error_verdict_not_a_crash(judge):
    env = gym.make(ENV, judge={"base_url": judge.url, "model": "scripted", "timeout": -1})
    env.reset(seed=0)
    task = env.unwrapped.task
    out = play_script(env, oracle_script(ENV, task), options={"task": task})
    assert out.verdict.error and "timeout" in out.verdict.error and out.reward == 0.0
    assert judge.count == 0


def test_the_group_judge_setting_judges_alone_outside_a_group(judge):
    env = gym.make(ENV, judge={"base_url": judge.url, "model": "scripted", "group": True})
    assert callable(getattr(env.unwrapped.verifier, "verify_group", None))
    env.reset(seed=0)
    task = env.unwrapped.task
    out = play_script(env, oracle_script(ENV, task), options={"task": task})
    assert out.reward == 1.0 and out.verdict.details["group_size"] == 1 and judge.count == 1
