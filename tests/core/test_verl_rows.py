"""verl-format Parquet as a task source for every env: ``prompt`` messages, ``reward_model.ground_truth``,
``data_source``, ``extra_info``, read once in the task layer, and ``toolgym export verl`` reading back."""

from __future__ import annotations

import json

import gymnasium as gym
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import toolgym  # noqa: F401 - registers the envs
from toolgym.envs.qa_tasks import qa_source
from toolgym.envs.task_files import verl_file_source
from toolgym.trainers.verl_adapter.export import export_verl


def verl_row(question: str, gold, data_source: str, **extra) -> dict:
    return {
        "data_source": data_source,
        "prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": question}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": gold},
        "extra_info": {"index": 0, "split": "train", **extra},
    }


def write(tmp_path, row: dict):
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pylist([row]), path)
    return path


def play(env_id: str, path, answer: str, **kwargs) -> float:
    env = gym.make(env_id, tasks=str(path), **kwargs)
    try:
        env.reset(seed=0)
        _, reward, terminated, _, info = env.step(f"<answer>{answer}</answer>")
        assert terminated, info
        return reward
    finally:
        env.close()


def test_dapo_math_rows_play_in_math_and_calculator(tmp_path):
    path = write(tmp_path, verl_row("What is 17 + 17? Put the answer in \\boxed{}.", "34", "math_dapo"))
    task = verl_file_source(path).task_at(0)
    assert task.prompt.startswith("What is 17 + 17") and task.answer == "34"
    assert task.data["data_source"] == "math_dapo" and task.data["split"] == "train"
    for env_id in ("toolgym/Math-v0", "toolgym/Calculator-v0"):
        assert play(env_id, path, "34") == 1.0
        assert play(env_id, path, "35") == 0.0


def test_search_r1_rows_with_targets_play_in_search(tmp_path):
    path = write(
        tmp_path, verl_row("Where is the Eiffel Tower?", {"target": ["Paris", "Paris, France"]}, "nq")
    )
    task = qa_source(path).task_at(0)
    assert task.answer == "Paris" and task.data["golden_answers"] == ["Paris", "Paris, France"]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": "1", "contents": '"Eiffel Tower"\nThe tower is in Paris.'}) + "\n")
    assert play("toolgym/Search-v0", path, "Paris, France", corpus=str(corpus)) == 1.0
    assert play("toolgym/Search-v0", path, "London", corpus=str(corpus)) == 0.0


def test_deepcoder_rows_play_in_python_code(tmp_path):
    tests = [{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}, {"input": "5 5\n", "output": "10\n"}]
    path = write(
        tmp_path, verl_row("Print the sum of two integers read from stdin.", json.dumps(tests), "deepcoder")
    )
    programs = {
        "honest": "a, b = map(int, input().split())\nprint(a + b)\n",
        "wrong": "print(0)\n",
        "crashing": "raise RuntimeError('no')\n",
        "hanging": "while True:\n    pass\n",
        "faking": "import os\nprint('3')\nprint('10')\nos._exit(0)\n",
    }
    for name, program in programs.items():
        reward = play("toolgym/PythonCode-v0", path, f"```python\n{program}```", timeout=1.0)
        assert reward == (1.0 if name == "honest" else 0.0), name


def test_a_row_without_a_user_message_or_a_gold_is_named(tmp_path):
    row = verl_row("q", "1", "math_dapo")
    row["prompt"] = [{"role": "system", "content": "only a system message"}]
    with pytest.raises(ValueError, match="no user message"):
        verl_file_source(write(tmp_path, row))


@pytest.mark.parametrize(
    ("env_id", "kwargs"),
    [("toolgym/Math-v0", {}), ("toolgym/Calculator-v0", {}), ("toolgym/PythonCode-v0", {})],
)
def test_toolgym_export_verl_reads_back_as_the_same_tasks(tmp_path, env_id, kwargs):
    path = export_verl([env_id], n=3, split="val", out=tmp_path)
    exported = [json.loads(row["task"]) for row in pq.read_table(path).column("extra_info").to_pylist()]
    source = verl_file_source(path)
    assert [source.task_at(i).model_dump(mode="json") for i in range(3)] == exported
    env = gym.make(env_id, tasks=str(path), **kwargs)
    try:
        env.reset(seed=0)  # the env reads its own export as a task file
    finally:
        env.close()
