"""toolgym/SQL-v0 end to end: the tool's observations, execution match (equivalent queries 1.0, wrong ones
0.0), the SkyRL reward, and Spider, BIRD and verl files read with db_dir."""

from __future__ import annotations

import gymnasium as gym
import pytest

import toolgym
from toolgym.core.task import Task
from toolgym.rewards.sql import SqlExecutionVerifier
from toolgym.sql.databases import DirectoryCatalog
from toolgym.testing.scripted import oracle_script, play_script

from .conftest import CONCERT_QUESTIONS


@pytest.fixture(scope="module")
def verifier(db_dir):
    return SqlExecutionVerifier(DirectoryCatalog(db_dir))


def concert_task(gold: str, db_id: str = "concert_singer") -> Task:
    return Task(id="t", prompt="", answer=gold, data={"db_id": db_id})


JOIN_2014 = CONCERT_QUESTIONS[1][1]


@pytest.mark.parametrize(
    "answer",
    [
        JOIN_2014,
        # other aliases, the join the other way round
        "SELECT s.name FROM singer s JOIN concert c ON s.singer_id = c.singer_id WHERE c.year = 2014",
        # a subquery for the join
        "SELECT name FROM singer WHERE singer_id IN (SELECT singer_id FROM concert WHERE year = 2014)",
        # an implicit join in a fence, with a semicolon
        "```sql\nSELECT singer.name FROM singer, concert WHERE singer.singer_id = concert.singer_id "
        "AND concert.year = 2014;\n```",
    ],
)
def test_equivalent_queries_score_one(verifier, answer):
    verdict = verifier.verify(concert_task(JOIN_2014), answer)
    assert (verdict.reward, verdict.passed, verdict.error) == (1.0, True, None), verdict


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (
            "SELECT DISTINCT T2.name FROM concert AS T1 JOIN singer AS T2 ON T1.singer_id = T2.singer_id "
            "WHERE T1.year = 2015",
            "different values",
        ),
        ("SELECT name, age FROM singer", "expected 3 row(s), got 5"),
        ("SELECT name FROM singer WHERE country = 'France'", "different values"),
        ("SELECT nam FROM singer", "no such column: nam"),
        ("SELEC name FROM singer", "syntax error"),
        ("DROP TABLE singer", "not authorized"),
        ("", "no SQL in the answer"),
    ],
)
def test_wrong_queries_score_zero(verifier, answer, reason):
    verdict = verifier.verify(concert_task(JOIN_2014), answer)
    assert (verdict.reward, verdict.passed, verdict.error) == (0.0, False, None), verdict
    assert reason in verdict.details["reason"]


def test_order_counts_only_when_the_gold_sorts(verifier):
    by_age = concert_task("SELECT name FROM singer ORDER BY age DESC")
    assert verifier.verify(by_age, "SELECT name FROM singer ORDER BY age DESC").reward == 1.0
    wrong = verifier.verify(by_age, "SELECT name FROM singer ORDER BY age")
    assert wrong.reward == 0.0 and wrong.details["reason"] == "the right rows in the wrong order"
    unordered = concert_task("SELECT name FROM singer WHERE age > 40")
    assert (
        verifier.verify(unordered, "SELECT name FROM singer WHERE age > 40 ORDER BY name DESC").reward == 1.0
    )


def test_skyrl_reward_is_minus_one_only_without_parsable_sql(db_dir):
    skyrl = SqlExecutionVerifier(DirectoryCatalog(db_dir), reward="skyrl")
    task = concert_task(JOIN_2014)
    assert skyrl.verify(task, JOIN_2014).reward == 1.0
    assert skyrl.verify(task, "SELECT name FROM singer").reward == 0.0
    assert skyrl.verify(task, "SELECT nam FROM singer").reward == 0.0  # parsable, but fails
    assert skyrl.verify(task, "I think the answer is Joe").reward == -1.0
    assert skyrl.verify(task, "").reward == -1.0


def test_a_failing_gold_query_or_missing_database_is_a_verdict_error(verifier):
    broken = verifier.verify(concert_task("SELECT nothing FROM singer"), "SELECT 1")
    assert broken.error and "the gold query failed" in broken.error and broken.reward == 0.0
    missing = verifier.verify(concert_task("SELECT 1", db_id="nope"), "SELECT 1")
    assert missing.error and "no database 'nope'" in missing.error


def test_the_tool_shows_a_table_the_row_count_and_errors(db_dir, task_files):
    env = gym.make("toolgym/SQL-v0", tasks=task_files["spider"], db_dir=db_dir, max_rows=2)
    env.reset(seed=0)
    obs = env.step("<sql>SELECT name, age FROM singer ORDER BY age</sql>")[0]
    assert obs == (
        "<output>\nname          age\n------------  ---\nJustin Brown  29\nTimbaland     32\n"
        "(5 rows; showing the first 2)\n</output>"
    )
    obs, _, terminated, _, info = env.step("<sql>DELETE FROM singer</sql>")
    assert "Error: not authorized (the database is read-only" in obs and not terminated
    assert info["tool_results"][0].status == "error"
    obs = env.step("<sql>SELECT 1; SELECT 2</sql>")[0]
    assert "one statement per call" in obs
    env.close()


@pytest.mark.parametrize("layout", ["spider", "bird", "verl", "skyrl"])
def test_task_files_load_with_db_dir_and_the_oracle_scores_one(db_dir, task_files, layout):
    env = gym.make("toolgym/SQL-v0", tasks=task_files[layout], db_dir=db_dir)
    source = env.unwrapped.tasks
    assert len(source) == len(CONCERT_QUESTIONS)
    for index, (question, gold) in enumerate(CONCERT_QUESTIONS):
        task = source.task_at(index)
        assert task.answer == gold and question in task.prompt
        assert "CREATE TABLE singer" in task.prompt
        if layout == "bird":
            assert "Hint: a singer's country is its nationality" in task.prompt
        assert task.data["order_matters"] is ("ORDER BY" in gold)
        result = play_script(env, oracle_script("toolgym/SQL-v0", task), options={"task": task})
        assert result.reward == 1.0 and result.verdict.passed, result
    env.close()


def test_exported_verl_rows_read_back_as_the_same_tasks(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    env = gym.make("toolgym/SQL-v0", level=2)
    env.reset(seed=3)
    task = env.unwrapped.task
    row = {
        "data_source": "toolgym/SQL-v0",
        "prompt": [{"role": "user", "content": task.prompt}],
        "reward_model": {"ground_truth": task.answer},
        "extra_info": {"task": task.model_dump_json()},
    }
    pq.write_table(pa.Table.from_pylist([row]), tmp_path / "rows.parquet")
    from toolgym.envs.sql_tasks import sql_file_source

    world_dir = env.unwrapped.verifier.catalog.root
    assert sql_file_source(tmp_path / "rows.parquet", world_dir).task_at(0) == task


def test_constructor_errors_say_what_to_pass(db_dir, task_files):
    with pytest.raises(ValueError, match="need db_dir="):
        gym.make("toolgym/SQL-v0", tasks=task_files["spider"])
    with pytest.raises(ValueError, match="db_dir= goes with tasks="):
        gym.make("toolgym/SQL-v0", db_dir=db_dir)
    with pytest.raises(FileNotFoundError, match="is not a directory"):
        gym.make("toolgym/SQL-v0", tasks=task_files["spider"], db_dir=db_dir / "nope")
    with pytest.raises(ValueError, match="reward must be 'binary'"):
        gym.make("toolgym/SQL-v0", reward="partial")
    with pytest.raises(ValueError, match="unknown SQL task style"):
        gym.make("toolgym/SQL-v0", tasks=task_files["spider"], db_dir=db_dir, style="nonsense")


def test_a_file_in_no_sql_layout_is_refused_when_drawn(db_dir, tmp_path):
    (tmp_path / "qa.jsonl").write_text('{"question": "q", "answer": "a"}\n')
    env = gym.make("toolgym/SQL-v0", tasks=tmp_path / "qa.jsonl", db_dir=db_dir)
    with pytest.raises(ValueError, match="not a text-to-SQL file"):
        env.reset(seed=0)


def test_world_episodes_play_through_the_tool_and_verifier():
    env = gym.make("toolgym/SQL-v0", level=(1, 2, 3))
    for seed in range(6):
        env.reset(seed=seed)
        task = env.unwrapped.task
        result = play_script(env, oracle_script("toolgym/SQL-v0", task), options={"task": task})
        assert result.reward == 1.0 and result.tool_errors == 0, (task.prompt, result)
    env.close()


def test_a_folder_the_sandbox_cannot_read_gives_infra_errors_not_zeros(tmp_path):
    """A 0700 database folder: where the sandbox's unprivileged user cannot enter it (the full-namespace
    mode), the tool says infra_error with the advice and the verdict is an error; where the sandbox reads
    files as uid 0 (a container's Landlock mode) it simply works. Never a plain wrong answer."""
    from .conftest import make_concert_db

    root = tmp_path / "closed"
    make_concert_db(root / "concert_singer.sqlite")
    root.chmod(0o700)
    task = Task(id="c", prompt="q", answer="SELECT count(*) FROM singer", data={"db_id": "concert_singer"})
    env = gym.make("toolgym/SQL-v0", tasks=toolgym.ListSource([task]), db_dir=root)
    env.reset(seed=0)
    obs, _, _, _, info = env.step("<sql>SELECT count(*) FROM singer</sql>")
    (result,) = info["tool_results"]
    verdict = env.step("<answer>SELECT count(*) FROM singer</answer>")[4]["verdict"]
    env.close()
    if result.status == "ok":
        assert "5" in obs and verdict.reward == 1.0 and verdict.error is None
    else:
        assert result.status == "infra_error" and "chmod o+rX" in result.output
        assert verdict.error and "chmod o+rX" in verdict.error
