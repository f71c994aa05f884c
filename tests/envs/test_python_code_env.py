"""toolgym/PythonCode-v0: HumanEval tasks and their split tests, multi-turn write/test/fix episodes in every
format, rewards, MBPP/AceCoder-style files, and the oracle."""

from __future__ import annotations

import ast
import json

import gymnasium as gym
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import toolgym
from toolgym.core.types import ToolCall
from toolgym.envs.code_tasks import code_file_source, humaneval_source, split_check
from toolgym.envs.python_code import python_code_oracle
from toolgym.parsers import PARSERS
from toolgym.testing.scripted import play_script

ENV_ID = "toolgym/PythonCode-v0"
HE0 = "HumanEval/0"


def python(code: str) -> ToolCall:
    return ToolCall(name="python", arguments={"code": code})


def test_registered_with_the_python_tool():
    spec = toolgym.ENVS[ENV_ID]
    assert spec.tools == ("python",) and spec.oracle is python_code_oracle
    env = gym.make(ENV_ID)
    assert env.unwrapped.max_turns == 6 and list(env.unwrapped.tools) == ["python"]


def test_humaneval_tasks_come_from_the_package_and_are_split_into_asserts():
    source = humaneval_source()
    assert len(source) == 164 and source.get(HE0).id == HE0
    tasks = list(source)
    loops = {f"HumanEval/{i}" for i in (32, 38, 44, 50, 53)}  # asserts inside a loop: check stays whole
    assert all(len(source.get(i).data["tests"]) == 1 for i in loops)
    assert sum(len(t.data["tests"]) for t in tasks) == 1117 + len(loops)  # one test per candidate assert
    for task in tasks:
        assert task.data["entry_point"] in task.data["setup"] and task.answer.startswith(task.data["setup"])
        assert "```python" in task.prompt and "def check(" not in task.prompt
        for test in task.data["tests"]:
            ast.parse(test)


def test_split_check_keeps_setup_statements_in_every_test():
    source = """
METADATA = {}

def check(candidate):
    import math
    eps = 1e-9
    assert True
    assert candidate(1) == 1
    assert math.fabs(candidate(2) - 4) < eps
"""
    tests = split_check(source)
    assert len(tests) == 2
    for test in tests:
        assert "METADATA = {}" in test and "import math" in test and "eps = 1e-09" in test
        assert test.rstrip().endswith("check(candidate)")
    assert "candidate(1)" in tests[0] and "candidate(2)" not in tests[0]
    looped = "def check(candidate):\n    for i in range(3):\n        assert candidate(i) == i\n"
    assert split_check(looped) == [looped.rstrip() + "\n\ncheck(candidate)\n"]
    with pytest.raises(ValueError):
        split_check("assert f(1) == 1")


@pytest.mark.parametrize("fmt", sorted(PARSERS))
def test_write_test_fix_submit(fmt):
    """A multi-turn episode: a buggy draft, a failing self-test, a fix in the same session, a submission."""
    env = gym.make(ENV_ID, action_format=fmt)
    task = humaneval_source().get(HE0)  # has_close_elements(numbers, threshold)
    buggy = "def has_close_elements(numbers, threshold):\n    return False\n"
    fixed = (
        "def has_close_elements(numbers, threshold):\n"
        "    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1 :])\n"
    )
    probe = "print(has_close_elements([1.0, 2.8, 3.0], 0.3))"
    script = [python(buggy), python(probe), python(fixed), python(probe), fixed]
    tool_env = env.unwrapped
    env.reset(options={"task": task})
    outputs = []
    for step in script[:-1]:
        _, reward, terminated, truncated, info = env.step(tool_env.parser.format_call(step))
        outputs.append(info["tool_results"][0].output)
        assert reward == 0.0 and not terminated and not truncated
    assert outputs[1] == "False" and outputs[3] == "True"  # the session kept the definitions
    _, reward, terminated, _, info = env.step(tool_env.parser.format_answer(f"```python\n{fixed}```"))
    assert terminated and reward == 1.0 and info["verdict"].passed
    env.close()


def test_fraction_and_all_or_nothing_rewards():
    task = humaneval_source().get(HE0)
    partly = "def has_close_elements(numbers, threshold):\n    return False\n"
    fraction = play_script(gym.make(ENV_ID), [partly], options={"task": task})
    n = fraction.verdict.details["tests_total"]
    assert 0.0 < fraction.reward < 1.0 and fraction.reward == fraction.verdict.details["tests_passed"] / n
    strict = play_script(gym.make(ENV_ID, reward="all_or_nothing"), [partly], options={"task": task})
    assert strict.reward == 0.0 and not strict.verdict.passed


def test_running_out_of_turns_truncates_with_zero():
    env = gym.make(ENV_ID, max_turns=2)
    summary = play_script(env, [python("print(1)"), python("print(2)")], seed=0)
    assert summary.truncated and not summary.terminated and summary.reward == 0.0


MBPP_ROWS = [
    {
        "task_id": 11,
        "text": "Write a function to remove the first and last occurrence of a character from the string.",
        "code": "def remove_Occ(s, ch):\n    i = s.find(ch)\n"
        "    if i != -1:\n        s = s[:i] + s[i + 1 :]\n"
        "    j = s.rfind(ch)\n    if j != -1:\n        s = s[:j] + s[j + 1 :]\n"
        "    return s",
        "test_list": [
            'assert remove_Occ("hello","l") == "heo"',
            'assert remove_Occ("abcda","a") == "bcd"',
            'assert remove_Occ("PHP","P") == "H"',
        ],
        "test_setup_code": "",
        "challenge_test_list": [],
    },
    {
        "task_id": 17,
        "text": "Write a function to find the perimeter of a square.",
        "code": "def square_perimeter(a):\n    return SIDES * a",
        "test_list": ["assert square_perimeter(10) == 40", "assert square_perimeter(5) == 20"],
        "test_setup_code": "SIDES = 4",
        "challenge_test_list": [],
    },
]
ACECODER_ROWS = [
    {
        "id": "oss_1",
        "question": "Implement `count_vowels(s: str) -> int` returning the number of vowels in s.",
        "test_cases": ["assert count_vowels('hello') == 2", "assert count_vowels('') == 0"],
        "inferences": [],
    }
]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_mbpp_jsonl_and_parquet(tmp_path):
    jsonl = code_file_source(write_jsonl(tmp_path / "mbpp.jsonl", MBPP_ROWS))
    parquet_path = tmp_path / "mbpp.parquet"
    pq.write_table(pa.Table.from_pylist(MBPP_ROWS), parquet_path)
    parquet = code_file_source(parquet_path)
    assert [t.model_dump() for t in jsonl] == [t.model_dump() for t in parquet]
    task = jsonl.get("17")
    assert task.data == {
        "tests": MBPP_ROWS[1]["test_list"],
        "setup": "SIDES = 4",
        "entry_point": None,
    }
    assert "perimeter of a square" in task.prompt and "square_perimeter(10) == 40" in task.prompt
    assert "square_perimeter(5)" not in task.prompt  # one example shown, the rest hidden
    env = gym.make(ENV_ID, tasks=str(parquet_path))
    for task in parquet:
        good = play_script(env, python_code_oracle(task), options={"task": task})
        assert good.reward == 1.0 and good.tool_errors == 0, good
        bad = play_script(env, ["def nothing():\n    pass"], options={"task": task})
        assert bad.reward == 0.0


def test_acecoder_jsonl_without_reference(tmp_path):
    source = code_file_source(write_jsonl(tmp_path / "ace.jsonl", ACECODER_ROWS))
    task = source.get("oss_1")
    assert task.answer is None and task.data["tests"] == ACECODER_ROWS[0]["test_cases"]
    with pytest.raises(LookupError):
        python_code_oracle(task)
    env = gym.make(ENV_ID, tasks=source)
    answer = "def count_vowels(s):\n    return sum(c in 'aeiou' for c in s)"
    assert play_script(env, [answer], options={"task": task}).reward == 1.0


def test_bad_task_files_fail_loudly(tmp_path):
    with pytest.raises(ValueError, match="no test column"):
        code_file_source(write_jsonl(tmp_path / "x.jsonl", [{"prompt": "p", "answer": "a"}]))
    with pytest.raises(ValueError, match="list of test strings"):
        code_file_source(write_jsonl(tmp_path / "y.jsonl", [{"prompt": "p", "tests": []}]))
    env = gym.make(ENV_ID, tasks=str(tmp_path / "missing.jsonl"))  # read on the first draw
    with pytest.raises(FileNotFoundError, match=r"no task file at .*missing\.jsonl"):
        env.reset(seed=0)
