"""Mistakes a user can make building an env fail at once, naming the bad value, the choices and the fix."""

import pytest

import toolgym
from toolgym.core.errors import UnknownNameError
from toolgym.tools.calculator import Calculator

TASK = {"id": "t1", "prompt": "What is 6 * 7?", "answer": "42"}


def agree(task, answer):
    return answer.strip() == task.answer


def test_an_unknown_name_is_a_value_error_and_still_a_key_error():
    with pytest.raises(UnknownNameError) as excinfo:
        toolgym.make_env([TASK], ["calculater"], agree)
    error = excinfo.value
    assert isinstance(error, ValueError) and isinstance(error, KeyError)
    message = str(error)
    assert not message.startswith(("'", '"'))  # not KeyError's quoted repr
    assert "'calculater'" in message and "did you mean 'calculator'?" in message
    registered = message.split("registered tools: ", 1)[1].split(";")[0].split(", ")
    assert {"bash", "calculator", "python"} <= set(registered) and registered == sorted(registered)
    assert "@register_tool" in message


def test_an_unknown_action_format_names_the_formats_and_the_argument():
    with pytest.raises(ValueError, match=r"no action format named 'xlm' \(did you mean 'xml'\?\)") as excinfo:
        toolgym.make_env([TASK], ["calculator"], agree, action_format="xlm")
    assert "hermes, json, markdown, react, xml" in str(excinfo.value)
    assert "action_format" in str(excinfo.value)


@pytest.mark.parametrize("tools", ["calculator", Calculator(), ["calculator"], ("calculator",)])
def test_tools_takes_one_name_or_instance_as_well_as_a_list(tools):
    env = toolgym.make_env([TASK], tools, agree)
    assert list(env.tools) == ["calculator"]


def test_tools_takes_one_typed_function():
    def shout(text: str) -> str:
        """Shout the text.

        Args:
            text: what to shout.
        """
        return text.upper()

    assert list(toolgym.make_env([TASK], shout, agree).tools) == ["shout"]


def test_tasks_takes_one_task_as_well_as_a_list():
    env = toolgym.make_env(TASK, "calculator", agree)
    assert env.reset()[1]["task_id"] == "t1"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"tools": None}, r"make_env: tools takes a registered tool name, a Tool, .* got NoneType"),
        ({"tasks": 3}, r"make_env: tasks takes a task file path, a TaskSource, .* got int"),
        ({"tasks": ["What is 6 * 7?"]}, r"make_env: task 0 must be a Task or a dict, got str"),
    ],
)
def test_wrong_types_are_type_errors_saying_what_is_taken(kwargs, match):
    arguments = {"tasks": [TASK], "tools": ["calculator"], "verifier": agree, **kwargs}
    with pytest.raises(TypeError, match=match):
        toolgym.make_env(**arguments)


def test_an_invalid_task_dict_names_its_index_the_problem_and_the_fields():
    with pytest.raises(
        ValueError, match=r"task 1 \(\{'prompt': 'q'\}\) is not a valid task: id: Field required"
    ):
        toolgym.make_env([TASK, {"prompt": "q"}], ["calculator"], agree)


def test_a_missing_task_file_says_what_to_pass(tmp_path):
    """Making the env reads nothing (an episode that pins its task never needs the file): the first draw
    says what is missing."""
    env = toolgym.make_env(tmp_path / "nope.jsonl", ["calculator"], agree)
    with pytest.raises(FileNotFoundError, match=r"no task file or dataset at .*nope.jsonl: pass a .jsonl"):
        env.reset(seed=0)


def test_a_task_file_without_the_prompt_column_names_the_columns_and_the_fix(tmp_path):
    path = tmp_path / "qa.jsonl"
    path.write_text('{"id": "a", "question": "q", "answer": "1"}\n')
    env = toolgym.make_env(path, ["calculator"], agree)
    with pytest.raises(ValueError, match=r"no 'prompt' column \(columns: \['answer', 'id', 'question'\]\)"):
        env.reset(seed=0)


@pytest.mark.parametrize("name", ["max_turns", "max_action_chars", "max_observation_chars"])
@pytest.mark.parametrize(
    ("value", "error"), [("3", TypeError), (2.5, TypeError), (True, TypeError), (0, ValueError)]
)
def test_budgets_must_be_positive_ints_and_the_error_names_the_argument(name, value, error):
    with pytest.raises(error, match=rf"^{name} must be"):
        toolgym.make_env([TASK], ["calculator"], agree, **{name: value})
