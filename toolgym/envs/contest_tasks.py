"""Contest tasks for toolgym/PythonCode-v0: the stdin/stdout and call-based data code RL trains on today.

Layouts, detected from a file's columns (``style=`` forces one):

=================  ==========================================================================================
style              columns
=================  ==========================================================================================
``apps``           ``question``, ``input_output`` (JSON: ``inputs``, ``outputs``, ``fn_name``? = call-based,
                   whose inputs are argument lists), ``solutions``?, ``starter_code``? (APPS, TACO)
``codecontests``   ``description``, ``public_tests`` / ``private_tests`` / ``generated_tests``
                   (``{input: [...], output: [...]}``)
``livecodebench``  ``question_content``, ``starter_code``, ``public_test_cases`` / ``private_test_cases``
                   (JSON, or LiveCodeBench's base64 + zlib + pickle string), ``metadata.func_name`` for
                   ``testtype: functional`` (one JSON value per input line)
``deepcoder``      ``problem``, ``tests`` (JSON list of ``{input, output, testtype}``)
``primeintellect`` ``prompt``, ``verification_info`` (``test_cases``: ``{input, output, type, fn_name?}``)
=================  ==========================================================================================

Every layout becomes one of the two shapes ``CodeTestsVerifier`` judges: stdin/stdout tests
(``data["io_tests"]``: the program runs once per test with the input on stdin,
``toolgym.rewards.code.io_tests``) or, for call-based tests, assert tests on ``candidate``
(``data["tests"]`` and ``entry_point``: the function, or ``Solution`` for LeetCode-style ``class Solution``
methods), run by the hidden-test harness. The same parsing reads a verl row's ``reward_model.ground_truth``
(``ground_truth_tests``), so ``compute_score`` and the reward server judge these datasets the same way
(scorer ``code_io``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from toolgym.core.task import Task
from toolgym.rewards.code.layouts import decode_tests, first_solution, ground_truth_tests, longest_io

STDIN_INSTRUCTIONS = (
    "Write a complete Python program that reads the input from standard input and prints the answer to "
    "standard output. Test it with the python tool, then give the complete program as your final answer."
)
CALL_INSTRUCTIONS = (
    "Complete the code below. Test it with the python tool, then give the complete code as your final answer."
)

#: style -> (prompt columns tried in order, the column whose presence identifies the layout)
CONTEST_STYLES: dict[str, tuple[tuple[str, ...], str]] = {
    "apps": (("question", "prompt", "problem"), "input_output"),
    "codecontests": (("description", "prompt"), "private_tests"),
    "livecodebench": (("question_content", "prompt"), "public_test_cases"),
    "primeintellect": (("prompt", "problem"), "verification_info"),
    "deepcoder": (("problem", "prompt", "question"), "tests"),
}
_ID_COLUMNS = ("problem_id", "task_id", "question_id", "id", "name")


def contest_style(columns: Sequence[str], first_row: Mapping[str, Any] | None = None) -> str | None:
    """The contest layout these columns are, or None. ``tests`` is DeepCoder's only when its entries are
    ``{input, output}`` objects (a list of assert strings is the plain assert layout)."""
    for style, (_, key) in CONTEST_STYLES.items():
        if key == "tests":
            if key in columns and first_row is not None and _is_io_list(first_row.get(key)):
                return style
        elif key in columns or (style == "codecontests" and "public_tests" in columns):
            return style
    return None


def _is_io_list(value: Any) -> bool:
    value = decode_tests(value)
    return isinstance(value, list) and bool(value) and isinstance(value[0], Mapping) and "input" in value[0]


def contest_task(task: Task, style: str, max_tests: int | None = None) -> Task:
    """A row read with its prompt column as ``Task.prompt`` and every other column in ``Task.data``,
    turned into a PythonCode task of that layout."""
    data = task.data
    starter = str(data.get("starter_code") or "")
    fn_name: str | None = None
    metadata = decode_tests(data.get("metadata")) if data.get("metadata") else None
    if isinstance(metadata, Mapping):
        fn_name = metadata.get("func_name") or metadata.get("fn_name")
    if style == "apps":
        tests = ground_truth_tests(data["input_output"], starter_code=starter, max_tests=max_tests)
    elif style == "codecontests":
        io: list[dict[str, str]] = []
        for column in ("public_tests", "private_tests", "generated_tests"):
            found = decode_tests(data.get(column))
            if isinstance(found, Mapping) and found.get("input") is not None:
                io += ground_truth_tests(found)["io_tests"]
        if not io:
            raise ValueError(f"task {task.id}: no tests in public_tests/private_tests/generated_tests")
        tests = {"io_tests": longest_io(io, max_tests)}
    elif style == "livecodebench":
        cases = [
            *(decode_tests(data.get("public_test_cases")) or []),
            *(decode_tests(data.get("private_test_cases")) or []),
        ]
        tests = ground_truth_tests(cases, fn_name=fn_name, starter_code=starter, max_tests=max_tests)
    elif style == "primeintellect":
        tests = ground_truth_tests(data["verification_info"], starter_code=starter, max_tests=max_tests)
    elif style == "deepcoder":
        tests = ground_truth_tests(data["tests"], fn_name=fn_name, starter_code=starter, max_tests=max_tests)
    else:
        raise ValueError(f"unknown contest style {style!r}; known: {', '.join(CONTEST_STYLES)}")
    prompt = task.prompt.strip()
    if "io_tests" in tests:
        prompt += f"\n\n{STDIN_INSTRUCTIONS}"
    else:
        code = starter.strip() or f"def {tests['entry_point']}(...):"
        prompt += f"\n\n{CALL_INSTRUCTIONS}\n\n```python\n{code}\n```"
    return task.model_copy(
        update={
            "prompt": prompt,
            "answer": first_solution(data.get("solutions")),
            "data": tests,
            "source": style,
        }
    )


def id_column(columns: Sequence[str]) -> str | None:
    return next((c for c in _ID_COLUMNS if c in columns), None)
