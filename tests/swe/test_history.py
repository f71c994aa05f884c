"""`toolgym swe mine --history`: rows from a repository's real fix commits, each validated in the repository's
environment (built once, its recipe inferred and recorded), and an issue written by an endpoint."""

from __future__ import annotations

import json
import subprocess
import sys

import gymnasium as gym
import pytest

import toolgym  # noqa: F401 - registers the envs
from toolgym.envs.swe import swe_oracle, swe_wrong
from toolgym.swe.environments import EnvironmentStore
from toolgym.swe.history import mine_history
from toolgym.testing.judge_server import scripted_judge
from toolgym.testing.scripted import script_texts
from toolgym.testing.swe_layouts import TALLY_FIXES, history_repo, open_to_sandbox


@pytest.fixture(scope="module")
def mined(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = open_to_sandbox(tmp_path_factory.mktemp("history"))
    source = history_repo(root / "tally")
    report = mine_history(source, root / "rows.jsonl", root / "repos", envs=root / "envs")
    return {"root": root, "source": source, "report": report}


def test_each_real_fix_becomes_a_row_and_nothing_else_does(mined):
    rows = mined["report"].rows
    messages = [m.split("\n")[0] for *_, m in TALLY_FIXES]
    assert [r["problem_statement"].split("\n")[0] for r in rows] == messages[::-1]  # newest first
    for row, (_, _, test, _) in zip(rows, TALLY_FIXES[::-1]):
        name = test.split("(")[0].removeprefix("def ")
        assert json.loads(row["FAIL_TO_PASS"]) == [f"tests/test_stats.py::{name}"]
        assert "tests/test_stats.py::test_mean" in json.loads(row["PASS_TO_PASS"])
        assert row["patch"].startswith("diff --git a/tally/stats.py") and "tests/" not in row["patch"]
        assert row["test_patch"].startswith("diff --git a/tests/test_stats.py")
    # four commits change source and tests (3 fixes, 1 that fixes nothing); the README one does not
    assert mined["report"].commits == 4


def test_the_environment_is_built_once_its_inferred_recipe_recorded_and_the_rows_play_in_it(mined):
    root = mined["root"]
    (manifest,) = EnvironmentStore(root / "envs").manifests()
    assert manifest["recipe_source"].startswith("inferred: python -m pip install -e .[test]")
    rows = mined["report"].rows
    assert {r["install_config"]["install"] for r in rows} == {"python -m pip install -e .[test]"}
    env = gym.make(
        "toolgym/SWE-v0", tasks=str(root / "rows.jsonl"), repos=str(root / "repos"), envs=str(root / "envs")
    )
    try:
        for row in rows:  # each validates here: gold passes, the bare parent fails
            env.unwrapped.tasks.get(row["instance_id"])
        for policy, expected in ((swe_oracle, 1.0), (swe_wrong, 0.0)):
            env.reset(options={"task_id": rows[0]["instance_id"]})
            for action in script_texts(env, policy(env.unwrapped.task)):
                _, reward, _, _, info = env.step(action)
            assert (reward, info["verdict"].error) == (expected, None)
    finally:
        env.close()


def test_a_writer_endpoint_rewrites_the_statement_as_an_issue(mined, tmp_path):
    from toolgym.swe.history import endpoint_writer

    issue = "Calling clamp(12, 0, 10) gives 11, but the docs say the range is 0 to 10."
    with scripted_judge(mode="reply", reply=issue) as judge:
        report = mine_history(
            mined["source"], tmp_path / "rows.jsonl", mined["root"] / "repos", envs=mined["root"] / "envs",
            max_tasks=1, writer=endpoint_writer(judge.url, "scripted"),
        )  # fmt: skip
        prompt = judge.last_request["messages"][0]["content"]
    assert [r["problem_statement"] for r in report.rows] == [issue]
    assert "clamp: the upper bound is inclusive" in prompt and "test_clamp_above" in prompt


def test_the_command_mines_history_and_names_what_it_wrote(mined, tmp_path):
    toolgym_cli = [sys.executable, "-m", "toolgym.cli"]  # (a setup's venv may have no console script)
    out = subprocess.run(
        [*toolgym_cli, "swe", "mine", str(mined["source"]), "--history", "--out",
         str(tmp_path / "rows.jsonl"), "--repos", str(mined["root"] / "repos"), "--envs",
         str(mined["root"] / "envs"), "--max-tasks", "2"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "4 commits change source and tests" in out.stdout and "2 rows written" in out.stdout
    assert len((tmp_path / "rows.jsonl").read_text().splitlines()) == 2
