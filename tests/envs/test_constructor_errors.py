"""The registered envs' constructor arguments: a bad value fails in ``gym.make``, naming the choices."""

import gymnasium as gym
import pytest

import toolgym  # noqa: F401  (registers the envs)


def make(name, **kwargs):
    return gym.make(f"toolgym/{name}-v0", **kwargs)


@pytest.mark.parametrize(
    ("name", "kwargs", "error", "match"),
    [
        ("Calculator", {"action_format": "yaml"}, ValueError, r"no action format named 'yaml'"),
        ("Calculator", {"level": 7}, ValueError, r"level must be 1, 2 or 3, got 7"),
        (
            "Calculator",
            {"max_turns": "8"},
            TypeError,
            r"max_turns must be an int >= 1, got str '8'",
        ),
        (
            "Math",
            {"families": ["algebra"]},
            ValueError,
            r"unknown math families \['algebra'\]; known",
        ),
        ("Math", {"tools": ["calc"]}, ValueError, r"no tool named 'calc'.*registered tools"),
        (
            "PythonCode",
            {"reward": "half"},
            ValueError,
            r"'fraction' or 'all_or_nothing', got 'half'",
        ),
        ("PythonCode", {"timeout": 0}, ValueError, r"> 0 seconds, got timeout=0"),
        (
            "PythonCode",
            {"tasks": "mbpp"},
            FileNotFoundError,
            r"tasks= takes 'humaneval', a .jsonl",
        ),
        ("Search", {"hops": 5}, ValueError, r"hops must be 1, 2 or 3, or a list of them.*got 5"),
        ("Search", {"hops": [1, 4]}, ValueError, r"hops must be 1, 2 or 3.*got \[1, 4\]"),
        ("SearchMultiHop", {"hops": 0}, ValueError, r"hops must be 1, 2 or 3"),
        (
            "Search",
            {"reward": "exact"},
            ValueError,
            r"reward must be 'em' \(exact match\) or 'f1'",
        ),
        ("ReasoningGym", {"dataset": "chain_sums"}, ValueError, r"did you mean 'chain_sum'\?"),
    ],
)
def test_a_bad_argument_is_named_with_its_choices(name, kwargs, error, match):
    with pytest.raises(error, match=match):
        make(name, **kwargs)


def test_math_families_takes_one_family_name():
    env = make("Math", families="power_mod")
    try:
        assert env.unwrapped.tasks.name == "math-power_mod"
    finally:
        env.close()


def test_a_missing_math_task_file_says_what_to_pass(tmp_path):
    env = make("Math", tasks=str(tmp_path / "gsm8k.jsonl"))  # read on the first draw, not at construction
    with pytest.raises(FileNotFoundError, match=r"no math task file at .*: pass tasks= a .jsonl or .parquet"):
        env.reset(seed=0)


def test_a_math_task_file_without_an_answer_column_names_its_columns(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text('{"id": "a", "question": "1 + 1?", "result": "2"}\n')
    env = make("Math", tasks=str(path))
    with pytest.raises(ValueError, match=r"no answer column \(looked for answer, solution; columns"):
        env.reset(seed=0)
