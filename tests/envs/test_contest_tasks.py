"""Contest data in PythonCode-v0: one-row files of each layout load with ``tasks=`` and judge honest, wrong,
crashing, hanging and output-faking programs (stdin/stdout and call-based), and verl rows score alike."""

from __future__ import annotations

import base64
import json
import pickle
import zlib

import gymnasium as gym
import pytest

import toolgym  # noqa: F401 - registers the envs
from toolgym.envs.code_tasks import code_tasks
from toolgym.rewards.code import CodeTestsVerifier
from toolgym.rewards.code.io_tests import outputs_match
from toolgym.rewards.compute_score import compute_score
from toolgym.sandbox import LocalSandbox, local

STDIN = {
    "honest": "a, b = map(int, input().split())\nprint(a + b)\n",
    "wrong": "a, b = map(int, input().split())\nprint(a - b)\n",
    "crashing": "raise SystemExit('no')\n",
    "hanging": "while True:\n    pass\n",
    # prints every expected output it could know of, and tries to read the tests from disk and /proc
    "faking": (
        "import glob, os\nfor p in glob.glob('/proc/*/cmdline') + glob.glob('*'):\n    try:\n"
        "        open(p).read()\n    except Exception:\n        pass\nprint('3')\nprint('30')\n"
    ),
}
CALL = {
    "honest": "def add(a, b):\n    return a + b\n",
    "wrong": "def add(a, b):\n    return a - b\n",
    "crashing": "def add(a, b):\n    raise ValueError('no')\n",
    "hanging": "def add(a, b):\n    while True:\n        pass\n",
    "faking": (
        "class Yes:\n    def __eq__(self, other):\n        return True\n\ndef add(a, b):\n    return Yes()\n"
    ),
}
CLASS_CALL = {
    "honest": "class Solution:\n    def add(self, a, b):\n        return a + b\n",
    "wrong": "class Solution:\n    def add(self, a, b):\n        return a - b\n",
    "crashing": "class Solution:\n    def add(self, a, b):\n        raise ValueError('no')\n",
    "hanging": "class Solution:\n    def add(self, a, b):\n        while True:\n            pass\n",
    "faking": CALL["faking"]
    .replace("def add(a, b):", "class Solution:\n    def add(self, a, b):\n    ")
    .replace("    return Yes()", "        return Yes()"),
}
IO = [("1 2\n", "3\n"), ("10 20\n", "30\n")]


def lcb_compressed(cases: list[dict]) -> str:
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(cases)))).decode()


ROWS = {
    "apps": (
        {
            "problem_id": 7,
            "question": "Read two integers and print their sum.",
            "input_output": json.dumps({"inputs": [i for i, _ in IO], "outputs": [o for _, o in IO]}),
            "solutions": json.dumps([STDIN["honest"]]),
            "starter_code": "",
        },
        STDIN,
    ),
    "apps-call": (
        {
            "problem_id": 8,
            "question": "Return the sum of a and b.",
            "input_output": json.dumps(
                {"inputs": [[1, 2], [10, 20]], "outputs": [[3], [30]], "fn_name": "add"}
            ),
            "solutions": json.dumps([CALL["honest"]]),
            "starter_code": "def add(a, b):",
        },
        CALL,
    ),
    "codecontests": (
        {
            "name": "sum",
            "description": "Read two integers and print their sum.",
            "public_tests": {"input": [IO[0][0]], "output": [IO[0][1]]},
            "private_tests": {"input": [IO[1][0]], "output": [IO[1][1]]},
            "generated_tests": {"input": [], "output": []},
        },
        STDIN,
    ),
    "livecodebench": (
        {
            "question_id": "lcb-1",
            "question_content": "Read two integers and print their sum.",
            "starter_code": "",
            "public_test_cases": json.dumps([{"input": IO[0][0], "output": IO[0][1], "testtype": "stdin"}]),
            "private_test_cases": lcb_compressed(
                [{"input": IO[1][0], "output": IO[1][1], "testtype": "stdin"}]
            ),
            "metadata": "{}",
        },
        STDIN,
    ),
    "livecodebench-functional": (
        {
            "question_id": "lcb-2",
            "question_content": "Return the sum of a and b.",
            "starter_code": "class Solution:\n    def add(self, a: int, b: int) -> int:\n        ",
            "public_test_cases": json.dumps([{"input": "1\n2", "output": "3", "testtype": "functional"}]),
            "private_test_cases": json.dumps([{"input": "10\n20", "output": "30", "testtype": "functional"}]),
            "metadata": json.dumps({"func_name": "add"}),
        },
        CLASS_CALL,
    ),
    "deepcoder": (
        {
            "problem": "Read two integers and print their sum.",
            "tests": json.dumps([{"input": i, "output": o, "testtype": "stdin"} for i, o in IO]),
        },
        STDIN,
    ),
    "primeintellect": (
        {
            "problem_id": "pi-1",
            "prompt": "Read two integers and print their sum.",
            "verification_info": json.dumps(
                {"test_cases": [{"input": i, "output": o, "type": "stdin_stdout"} for i, o in IO]}
            ),
        },
        STDIN,
    ),
}


@pytest.fixture(scope="module")
def verifier():
    return CodeTestsVerifier(timeout=1.0, total_timeout=20.0)


def write(tmp_path, row: dict, suffix: str = ".jsonl"):
    path = tmp_path / f"one{suffix}"
    if suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist([row]), path)
    else:
        path.write_text(json.dumps(row) + "\n")
    return path


@pytest.mark.parametrize("layout", sorted(ROWS))
def test_a_one_row_file_of_each_layout_judges_programs(tmp_path, verifier, layout):
    row, programs = ROWS[layout]
    task = code_tasks(write(tmp_path, row)).task_at(0)
    assert len(task.data.get("io_tests") or task.data["tests"]) == 2
    for name, program in programs.items():
        verdict = verifier.verify(task, f"```python\n{program}```")
        assert verdict.error is None, (layout, name, verdict)
        assert verdict.reward == (1.0 if name == "honest" else 0.0), (layout, name, verdict)
        if name == "hanging":  # each test ended at its own limit, not at the verification's total budget
            reasons = [f["reason"] for f in verdict.details["failures"]]
            assert len(reasons) == 2 and all("timeout" in r or "timed out" in r for r in reasons), reasons


@pytest.fixture
def slow_setup_sandbox(monkeypatch):
    """A sandbox whose every child takes 1.5 s to set up: a loaded CI runner, and more than a test's 1 s."""
    monkeypatch.setattr(local, "_SETUP_DELAY_S", 1.5)
    with LocalSandbox(workers=2) as box:
        yield box


@pytest.mark.parametrize("layout", ["codecontests", "apps-call"])
def test_a_tests_limit_is_the_programs_time_not_the_sandbox_setup(tmp_path, slow_setup_sandbox, layout):
    row, programs = ROWS[layout]
    task = code_tasks(write(tmp_path, row)).task_at(0)
    verifier = CodeTestsVerifier(sandbox=slow_setup_sandbox, timeout=1.0, total_timeout=20.0)
    honest = verifier.verify(task, programs["honest"])
    assert honest.error is None and honest.reward == 1.0, honest
    hanging = verifier.verify(task, programs["hanging"])  # past its limit: still a time-out, nothing else
    assert hanging.error is None and hanging.reward == 0.0, hanging
    reasons = [f["reason"] for f in hanging.details["failures"]]
    assert len(reasons) == 2 and all(r.startswith(("timeout", "timed out")) for r in reasons), reasons


def test_parquet_and_a_forced_style(tmp_path, verifier):
    row, programs = ROWS["deepcoder"]
    path = write(tmp_path, row, ".parquet")
    task = code_tasks(path, style="deepcoder").task_at(0)
    assert task.data["io_tests"][1] == {"input": "10 20\n", "output": "30\n"}
    assert verifier.verify(task, programs["honest"]).reward == 1.0
    with pytest.raises(ValueError, match="unknown style 'nope'"):
        code_tasks(path, style="nope")


def test_max_tests_keeps_the_longest_inputs(tmp_path):
    io = [
        {"input": "1 2\n", "output": "3\n"},
        {"input": "100000 2\n", "output": "100002\n"},
        {"input": "10 2\n"},
    ]
    io[2]["output"] = "12\n"
    row = {"problem": "sum", "tests": json.dumps(io)}
    task = code_tasks(write(tmp_path, row), max_tests=2).task_at(0)
    assert [t["input"] for t in task.data["io_tests"]] == ["100000 2\n", "10 2\n"]  # in their original order


def test_the_prompt_says_how_to_answer_and_shows_no_hidden_test(tmp_path):
    stdin_task = code_tasks(write(tmp_path, ROWS["codecontests"][0])).task_at(0)
    assert "standard input" in stdin_task.prompt and "20" not in stdin_task.prompt
    call_task = code_tasks(write(tmp_path, ROWS["livecodebench-functional"][0], ".parquet")).task_at(0)
    assert "class Solution" in call_task.prompt and call_task.data["entry_point"] == "Solution"


def test_the_env_plays_a_contest_task_with_its_oracle(tmp_path):
    env = gym.make("toolgym/PythonCode-v0", tasks=str(write(tmp_path, ROWS["apps"][0])), timeout=2.0)
    obs, _ = env.reset(seed=0)
    assert "Read two integers" in obs and "standard input" in obs
    obs, reward, terminated, _, info = env.step(f"<answer>\n{STDIN['honest']}</answer>")
    assert terminated and reward == 1.0, (obs, info)
    env.close()


@pytest.mark.parametrize(
    ("got", "expected", "same"),
    [
        ("3\n", "3", True),
        ("3  \n\n\n", "3\n", True),
        ("1 2\n3", "1 2\n3\n", True),
        ("0.3333333", "0.333333333", True),
        ("0.34", "0.33", False),
        ("3\n4", "3", False),
        ("a b", "a  b", True),
        ("YES", "yes", False),
    ],
)
def test_the_checker(got, expected, same):
    assert outputs_match(got, expected) is same


def test_exact_comparison_on_request():
    assert not outputs_match("0.3333333", "0.333333333", float_tolerance=None)


@pytest.mark.parametrize("source", ["apps", "deepcoder", "primeintellect", "codecontests", "livecodebench"])
def test_verl_rows_score_with_compute_score(source):
    truth = {
        "apps": json.dumps({"inputs": [i for i, _ in IO], "outputs": [o for _, o in IO]}),
        "deepcoder": json.dumps([{"input": i, "output": o, "testtype": "stdin"} for i, o in IO]),
        "primeintellect": json.dumps(
            {"test_cases": [{"input": i, "output": o, "type": "stdin"} for i, o in IO]}
        ),
        "codecontests": json.dumps({"input": [i for i, _ in IO], "output": [o for _, o in IO]}),
        "livecodebench": json.dumps([{"input": i, "output": o, "testtype": "stdin"} for i, o in IO]),
    }[source]
    right = compute_score(source, f"<answer>\n{STDIN['honest']}</answer>", truth)
    wrong = compute_score(source, f"<answer>\n{STDIN['wrong']}</answer>", truth)
    assert (right["score"], right["error"]) == (1.0, "") and (wrong["score"], wrong["error"]) == (0.0, "")
