"""The ToolEnv turn loop, on a small custom env built with make_env (tools and verifier defined here)."""

import gc
import json
import math
import pickle
import random
import statistics
import time

import numpy as np
import pytest
from gymnasium.error import ResetNeeded
from pydantic import BaseModel

import toolgym
from toolgym.core.types import ToolResult, Verdict
from toolgym.testing.complexity import cost_ratio
from toolgym.tools.base import Tool

TASKS = [
    {"id": "up", "prompt": "Shout 'hello'.", "answer": "HELLO"},
    {"id": "up2", "prompt": "Shout 'bye'.", "answer": "BYE"},
    {"id": "up3", "prompt": "Shout 'ok'.", "answer": "OK"},
]


class ShoutArgs(BaseModel):
    text: str


class Shout(Tool):
    name = "shout"
    description = "Upper-cases text."
    Args = ShoutArgs
    primary_arg = "text"

    def __init__(self):
        self.events: list[str] = []

    def run(self, args):
        if args.text == "boom":
            raise RuntimeError("backend down")
        return ToolResult(name=self.name, output=args.text.upper())

    def start_episode(self, episode_id):
        self.events.append("start")

    def end_episode(self, episode_id):
        self.events.append("end")

    def close(self):
        self.events.append("close")


def exact(task, answer):
    return answer.strip() == task.answer


def make(**kwargs):
    tool = Shout()
    env = toolgym.make_env(TASKS, [tool], exact, **kwargs)
    return env, tool


def test_reset_gives_prompt_and_contract_info():
    env, _ = make()
    obs, info = env.reset(seed=0, options={"task_id": "up"})
    assert obs == "Shout 'hello'."
    assert info["task_id"] == "up" and info["turn"] == 0
    assert [m["role"] for m in info["messages"]] == ["system", "user"]
    assert "<shout>" in info["messages"][0]["content"]  # the format instructions are in the system prompt
    assert info["tools"][0]["function"]["name"] == "shout"
    assert info["tools"][0]["function"]["parameters"]["required"] == ["text"]


def test_tool_call_then_answer():
    env, _ = make()
    env.reset(options={"task_id": "up"})
    obs, reward, terminated, truncated, info = env.step("Let me shout. <shout>hello</shout>")
    assert "HELLO" in obs
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert info["action"].kind == "tool_calls"
    assert info["tool_results"][0].output == "HELLO" and info["tool_results"][0].ok
    assert info["turn"] == 1 and info["verdict"] is None  # the same keys at every step
    assert [m["role"] for m in info["messages"]] == ["system", "user", "assistant", "user"]

    obs, reward, terminated, truncated, info = env.step("<answer>HELLO</answer>")
    assert (obs, reward, terminated, truncated) == ("", 1.0, True, False)
    assert info["verdict"] == Verdict(reward=1.0, passed=True)
    assert env.unwrapped.trajectory.stop_reason == "answer"


def test_wrong_answer_scores_zero():
    env, _ = make()
    env.reset(options={"task_id": "up"})
    _, reward, terminated, _, info = env.step("<answer>hello</answer>")
    assert reward == 0.0 and terminated and not info["verdict"].passed


def test_max_turns_truncates_with_a_verdict():
    env, _ = make(max_turns=2)
    env.reset(options={"task_id": "up"})
    assert env.step("<shout>a</shout>")[3] is False
    _, reward, terminated, truncated, info = env.step("<shout>b</shout>")
    assert (reward, terminated, truncated) == (0.0, False, True)
    assert "within 2 turns" in info["verdict"].details["reason"]
    with pytest.raises(ResetNeeded):
        env.step("<answer>HELLO</answer>")


@pytest.mark.parametrize(
    ("action", "hint"),
    [
        (None, "decode generated token ids"),
        (b"<answer>HELLO</answer>", "action.decode('utf-8')"),
        (["x"], ""),
    ],
)
def test_a_non_string_action_is_a_type_error_naming_the_env_and_what_step_takes(action, hint):
    env = toolgym.make_env(TASKS, [Shout()], exact)
    env.reset(options={"task_id": "up"})
    with pytest.raises(
        TypeError, match=r"ToolEnv: step\(\) takes one action, the model's turn as text \(a str\)"
    ) as e:
        env.step(action)
    assert f"got {type(action).__name__}" in str(e.value) and hint in str(e.value)
    assert env.step("<answer>HELLO</answer>")[1] == 1.0  # the episode goes on; no turn was spent


def test_a_registered_env_names_its_id_in_the_type_error():
    import gymnasium as gym

    with pytest.raises(TypeError, match=r"^toolgym/Calculator-v0: step\(\) takes"):
        env = gym.make("toolgym/Calculator-v0")
        env.reset(seed=0)
        env.step(None)


def test_step_before_reset_is_an_error():
    env, _ = make()
    with pytest.raises(ResetNeeded):
        env.step("<answer>x</answer>")


def test_invalid_action_is_shown_to_the_model_and_costs_a_turn():
    env, _ = make()
    env.reset(options={"task_id": "up"})
    obs, reward, terminated, truncated, info = env.step("   ")
    assert obs.startswith("Invalid action:") and info["action"].kind == "invalid"
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert info["messages"][-1] == {"role": "user", "content": obs}


def test_tool_failure_is_an_observation_flagged_as_infra_error():
    env, _ = make()
    env.reset(options={"task_id": "up"})
    obs, _, terminated, _, info = env.step("<shout>boom</shout>")
    assert not terminated
    assert info["tool_results"][0].status == "infra_error"
    assert "backend down" in obs


def test_verifier_crash_is_reported_not_scored_silently():
    def broken(task, answer):
        raise ZeroDivisionError("oops")

    env = toolgym.make_env(TASKS, [Shout()], broken)
    env.reset(options={"task_id": "up"})
    _, reward, terminated, _, info = env.step("<answer>HELLO</answer>")
    assert terminated and reward == 0.0
    assert "ZeroDivisionError" in info["verdict"].error


def test_long_observations_keep_head_and_tail():
    env, _ = make(max_observation_chars=200)
    env.reset(options={"task_id": "up"})
    obs, *_ = env.step("<shout>" + "a" * 5000 + "z</shout>")
    assert len(obs) <= 200
    assert obs.startswith("<output>") and obs.rstrip().endswith("</output>")
    assert "characters cut" in obs


def test_pinning_a_task_by_object_or_dict():
    env, _ = make()
    task = toolgym.Task(id="custom", prompt="Shout 'x'.", answer="X")
    assert env.reset(options={"task": task})[1]["task_id"] == "custom"
    assert env.reset(options={"task": task.model_dump()})[0] == "Shout 'x'."
    with pytest.raises(ValueError, match="unknown reset options"):
        env.reset(options={"taskid": "up"})
    with pytest.raises(ValueError, match="not both"):
        env.reset(options={"task": task, "task_id": "up"})
    with pytest.raises(KeyError):
        env.reset(options={"task_id": "nope"})


def test_seeding_reproduces_tasks_without_touching_global_rngs():
    py_state, np_state = random.getstate(), np.random.get_state()
    env_a, _ = make()
    env_b, _ = make()
    ids_a = [env_a.reset(seed=s)[1]["task_id"] for s in range(10)]
    ids_b = [env_b.reset(seed=s)[1]["task_id"] for s in range(10)]
    assert ids_a == ids_b and len(set(ids_a)) > 1
    env_a.reset(seed=5)
    follow_a = [env_a.reset()[1]["task_id"] for _ in range(5)]
    env_b.reset(seed=5)
    assert follow_a == [env_b.reset()[1]["task_id"] for _ in range(5)]
    assert random.getstate() == py_state
    assert np.array_equal(np.random.get_state()[1], np_state[1])


def test_tool_lifecycle_follows_episodes():
    env, tool = make()
    env.reset(options={"task_id": "up"})
    env.reset(options={"task_id": "up"})
    env.step("<answer>HELLO</answer>")
    env.close()
    assert tool.events == ["start", "end", "start", "end", "close"]


def test_hermes_format_records_one_tool_message_per_result():
    env, _ = make(action_format="hermes")
    env.reset(options={"task_id": "up"})
    action = (
        '<tool_call>\n{"name": "shout", "arguments": {"text": "a"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "shout", "arguments": {"text": "b"}}\n</tool_call>'
    )
    _, _, _, _, info = env.step(action)
    assert [r.output for r in info["tool_results"]] == ["A", "B"]
    tool_msgs = [m for m in info["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in tool_msgs] == ["A", "B"]


def test_render_ansi_shows_the_transcript():
    env, _ = make(render_mode="ansi")
    env.reset(options={"task_id": "up"})
    env.step("<shout>hi</shout>")
    text = env.render()
    assert "[system]" in text and "[assistant]\n<shout>hi</shout>" in text and "HI" in text
    with pytest.raises(ValueError, match="render_mode"):
        make(render_mode="human")


def test_bad_construction_is_rejected():
    with pytest.raises(ValueError, match="max_turns"):
        make(max_turns=0)
    with pytest.raises(ValueError, match="unique"):
        toolgym.make_env(TASKS, [Shout(), Shout()], exact)
    with pytest.raises(TypeError, match="verifier"):
        toolgym.make_env(TASKS, [Shout()], verifier="exact")


def test_function_verifier_return_types():
    def returns_str(task, answer):
        return "yes"

    env = toolgym.make_env(TASKS, [Shout()], returns_str)
    env.reset(options={"task_id": "up"})
    _, _, _, _, info = env.step("<answer>HELLO</answer>")
    assert "returned str" in info["verdict"].error

    env = toolgym.make_env(TASKS, [Shout()], lambda t, a: 0.5)
    env.reset(options={"task_id": "up"})
    _, reward, _, _, info = env.step("<answer>HELLO</answer>")
    assert reward == 0.5 and not info["verdict"].passed


def test_info_messages_is_each_steps_own_snapshot():
    env, _ = make(max_turns=10)
    _, first = env.reset(options={"task_id": "up"})
    observation, *_, second = env.step("<shout>a</shout>")
    *_, third = env.step("<shout>b</shout>")
    messages = env.unwrapped.trajectory.messages
    # later steps appended to the chat; the infos already handed out still hold their own step's chat
    assert len(first["messages"]) == 2 and len(second["messages"]) == 4 and len(third["messages"]) == 6
    assert first["messages"] == messages[:2] and second["messages"] == messages[:4]
    assert third["messages"] == messages and messages == third["messages"] and first["messages"] != messages
    assert second["messages"][-2:] == [
        {"role": "assistant", "content": "<shout>a</shout>"},
        {"role": "user", "content": observation},
    ]
    assert second["messages"][-1] == second["messages"][3] == {"role": "user", "content": observation}
    with pytest.raises(IndexError):
        second["messages"][4]
    # a caller that changes what it read changes neither the trajectory nor what the next reader sees
    second["messages"][0]["content"] = "changed"
    for message in second["messages"]:
        message["role"] = "changed"
    assert messages[0]["content"] != "changed" and second["messages"] == messages[:4]
    # what callers do with a list works: concatenate, compare, serialize, pickle, validate
    chat = list(first["messages"])
    chat += third["messages"][2:]
    assert chat == third["messages"] == first["messages"] + third["messages"][2:]
    assert [*first["messages"], *messages[2:]] == messages
    assert messages[:0] + first["messages"] == messages[:2] == () + first["messages"]
    assert json.loads(json.dumps(list(second["messages"]))) == messages[:4]
    assert pickle.loads(pickle.dumps(second["messages"])) == messages[:4]
    assert repr(first["messages"]) == repr(messages[:2])


def test_a_long_episode_costs_the_same_per_step_at_turn_500_as_at_turn_1():
    """Nothing in a step reads the whole chat (``info["messages"]`` used to copy it: a step at turn 500 cost
    5x one at turn 1 here, and the episode grew quadratically). CPU time, best of a few tries, no wall-clock
    bound: mean per step over turns 451-500 against turns 1-50, and ten times the turns against the time."""
    env, _ = make(max_turns=100_000)
    action = "<shout>hello</shout>"

    def episode(turns: int) -> list[int]:
        env.reset(options={"task_id": "up"})
        costs = []
        for _ in range(turns):
            started = time.thread_time_ns()
            env.step(action)
            costs.append(time.thread_time_ns() - started)
        return costs

    collecting = gc.isenabled()
    gc.disable()
    try:
        growth = math.inf
        for _ in range(5):
            costs = episode(500)
            growth = min(growth, statistics.mean(costs[450:]) / max(statistics.mean(costs[:50]), 1))
            if growth <= 3:
                break
    finally:
        if collecting:
            gc.enable()
    assert growth <= 3, f"a step at turns 451-500 costs {growth:.1f}x one at turns 1-50"
    assert cost_ratio(episode, 100, 1000) <= 20  # linear ~10x; the copying version showed ~50x
