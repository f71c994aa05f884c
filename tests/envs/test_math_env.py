"""toolgym/Math-v0: procedural families, tool-integrated episodes in every format, and GSM8K/MATH files."""

from __future__ import annotations

import itertools
import json
import re
from collections import Counter

import gymnasium as gym
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import toolgym
from toolgym.core.types import ToolCall
from toolgym.envs.math_tasks import FAMILIES, generate_math_task, latex_number, math_file_source
from toolgym.parsers import PARSERS
from toolgym.rewards.math import MathVerifier, math_equal
from toolgym.testing.scripted import oracle_script, play_script
from toolgym.tools.calculator import Calculator

ENV_ID = "toolgym/Math-v0"
FORMATS = sorted(PARSERS)


@pytest.fixture(scope="module")
def tasks():
    return [generate_math_task(seed) for seed in range(400)]


def test_registered_and_listed():
    assert ENV_ID in toolgym.ENVS and "toolgym/ReasoningGym-v0" in toolgym.ENVS
    assert toolgym.ENVS[ENV_ID].tools == ("calculator",)


def test_tasks_are_seeded_and_cover_every_family(tasks):
    assert generate_math_task(7) == generate_math_task(7)
    assert len({t.prompt for t in tasks}) >= 0.99 * len(tasks)
    families = Counter(t.data["family"] for t in tasks)
    assert set(families) == set(FAMILIES) and min(families.values()) >= 25
    for task in tasks:
        json.dumps(task.model_dump())  # JSON-plain, for rollouts and parquet export
        assert isinstance(task.answer, str) and task.answer


def test_steps_replay_to_the_gold(tasks):
    """Every calculator step succeeds, and its last result is the gold's value (or one root of a set)."""
    calc = Calculator()
    verifier = MathVerifier()
    for task in tasks:
        outputs = []
        for expression in task.data["steps"]:
            result = calc({"expression": expression})
            assert result.ok, (task.id, expression, result.output)
            outputs.append(result.output.split(" ≈ ")[0])
        final = outputs[-1]
        if task.data["family"] == "quadratic_roots":
            roots = re.findall(r"-?\d+", task.answer)
            assert sorted(outputs[1:], key=int) == sorted(roots, key=int), task.id
        elif task.data["family"] == "linear_inequality":
            left, right = task.answer[1:-1].split(", ")
            assert math_equal(right if left == "-\\infty" else left, final).passed, (task.id, final)
        else:
            assert verifier.verify(task, final).passed, (task.id, final, task.answer)


def test_gold_answers_pass_and_near_misses_fail(tasks):
    verifier = MathVerifier()
    for task, other in itertools.pairwise(tasks[:81]):
        assert verifier.verify(task, task.answer).passed, task.id
        assert verifier.verify(task, f"\\boxed{{{task.answer}}}").passed, task.id
        if other.answer != task.answer:
            assert not verifier.verify(task, other.answer).passed, (task.id, other.answer)


@pytest.mark.parametrize("fmt", FORMATS)
def test_tool_integrated_episodes_score_one_in_every_format(fmt, tasks):
    """For one task of each family: compute with the calculator, then answer; reward 1.0."""
    env = gym.make(ENV_ID, action_format=fmt)
    by_family = {t.data["family"]: t for t in reversed(tasks)}
    for task in by_family.values():
        summary = play_script(env, oracle_script(ENV_ID, task), options={"task": task})
        assert summary.reward == 1.0 and summary.verdict.passed, (fmt, task.id, summary)
        assert summary.tool_calls == len(task.data["steps"]) and summary.tool_errors == 0
    env.close()


def test_an_answer_in_free_text_with_a_box_scores(tasks):
    """hermes/markdown turns without calls are the answer: a boxed result inside prose is what counts."""
    task = next(t for t in tasks if t.data["family"] == "fraction_sum")
    env = gym.make(ENV_ID, action_format="hermes")
    env.reset(options={"task": task})
    call = {"name": "calculator", "arguments": {"expression": task.data["steps"][0]}}
    env.step(f"<tool_call>{json.dumps(call)}</tool_call>")
    _, reward, terminated, _, info = env.step(f"The sum simplifies to \\boxed{{{task.answer}}}.")
    assert terminated and reward == 1.0 and info["verdict"].details["answer"] == task.answer


def test_families_and_tools_kwargs():
    env = gym.make(ENV_ID, families=["power_mod"])
    prompts = [env.reset(seed=s)[0] for s in range(5)]
    assert all("remainder" in p for p in prompts)
    assert env.unwrapped.task.id.startswith("math-power_mod/")
    with pytest.raises(ValueError, match="unknown math families"):
        gym.make(ENV_ID, families=["nope"])
    if "python" in toolgym.TOOLS:  # the sandbox's python tool: one name in the tools list enables it
        env = gym.make(ENV_ID, tools=("calculator", "python"))
        assert set(env.unwrapped.tools) == {"calculator", "python"}
    else:
        with pytest.raises(KeyError, match="no tool named 'python'"):
            gym.make(ENV_ID, tools=("calculator", "python"))
    no_tools = gym.make(ENV_ID, tools=())
    assert no_tools.unwrapped.tools == {}


def test_task_ids_rebuild_the_task():
    env = gym.make(ENV_ID)
    env.reset(seed=3)
    task = env.unwrapped.task
    env.reset(options={"task_id": task.id})
    assert env.unwrapped.task == task


def test_latex_number():
    from fractions import Fraction

    assert latex_number(Fraction(7)) == "7"
    assert latex_number(Fraction(-3, 4)) == "-\\frac{3}{4}"


GSM8K_ROWS = [
    {
        "question": "Natalia sold clips to 48 friends in April, and half as many in May. How many in all?",
        "answer": "In May she sold 48/2 = <<48/2=24>>24 clips.\nAltogether 48+24 = <<48+24=72>>72.\n#### 72",
    },
    {"question": "A shop sells 1,200 pens a day. How many in 3 days?", "answer": "1200*3 = 3600\n#### 3,600"},
]
MATH_ROWS = {
    "problem": ["What is $\\frac{1}{2} + \\frac{1}{3}$?", "Solve $x^2 = 4$."],
    "solution": [
        "We get $\\frac{3}{6}+\\frac{2}{6} = \\boxed{\\frac{5}{6}}$.",
        "So $x \\in \\boxed{\\{-2, 2\\}}$.",
    ],
    "level": ["Level 1", "Level 2"],
}


def test_gsm8k_jsonl_file(tmp_path):
    path = tmp_path / "gsm8k.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in GSM8K_ROWS))
    source = math_file_source(path)
    assert [t.answer for t in source] == ["72", "3600"]
    assert source.task_at(0).data["answer"].endswith("#### 72")  # the full solution is kept
    env = gym.make(ENV_ID, tasks=str(path))
    for task, answer in zip(source, ["72", "3,600"]):
        summary = play_script(
            env,
            [ToolCall(name="calculator", arguments={"expression": "48+24"}), answer],
            options={"task_id": task.id},
        )
        assert summary.reward == 1.0, summary
    assert play_script(env, ["71"], options={"task_id": source.task_at(0).id}).reward == 0.0


def test_math_parquet_file(tmp_path):
    path = tmp_path / "math.parquet"
    pq.write_table(pa.table(MATH_ROWS), path)
    source = math_file_source(path)
    assert [t.answer for t in source] == ["\\frac{5}{6}", "\\{-2, 2\\}"]
    assert source.task_at(1).data["level"] == "Level 2"
    env = gym.make(ENV_ID, tasks=path, action_format="react")
    assert play_script(env, ["0.83"], options={"task_id": source.task_at(0).id}).reward == 0.0
    assert play_script(env, ["5/6"], options={"task_id": source.task_at(0).id}).reward == 1.0
    assert play_script(env, ["2, -2"], options={"task_id": source.task_at(1).id}).reward == 1.0


def test_file_column_choice_and_errors(tmp_path):
    path = tmp_path / "custom.jsonl"
    path.write_text(json.dumps({"id": "q1", "prompt": "2+2?", "final": "4"}) + "\n")
    with pytest.raises(KeyError, match="no answer column"):
        math_file_source(path)
    source = math_file_source(path, answer_field="final")
    assert source.get("q1").answer == "4"
    with pytest.raises(ValueError, match=r"\.jsonl or \.parquet"):
        math_file_source(tmp_path / "tasks.csv")
    with pytest.raises(ValueError, match="families only applies"):
        gym.make(ENV_ID, tasks=str(path), families=["power_mod"])
