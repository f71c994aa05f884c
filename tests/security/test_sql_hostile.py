"""Hostile SQL against the sql tool and the SQL verifier: no query, from the tool or as an answer, changes the
database file or writes anywhere; every one ends as a query error (the model's), never as an infrastructure
error or a crash, in bounded time; and the engine keeps answering honest queries afterwards.

Each case runs through the env (the tool's observation) and through the verifier (the answer's verdict). The
red-team ``audit`` (conftest) also checks after each test that no file named with the test's ``marker`` was
planted in the host's usual places.
"""

from __future__ import annotations

import hashlib
import os
import signal
import sqlite3

import gymnasium as gym
import pytest

import toolgym
from toolgym.core.task import Task
from toolgym.rewards.sql import SqlExecutionVerifier
from toolgym.sql.databases import DirectoryCatalog
from toolgym.sql.engine import SqlEngine

GOLD = "SELECT name FROM singer WHERE age > 40"
FOREVER = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r)"


@pytest.fixture(scope="module")
def victim(tmp_path_factory):
    """A database directory with one database, and the file's hash."""
    root = tmp_path_factory.mktemp("sqlvictim")
    root.chmod(0o755)  # readable by the sandbox's unprivileged user, as a database folder must be
    path = root / "victim" / "victim.sqlite"
    path.parent.mkdir()
    con = sqlite3.connect(path)
    con.executescript(
        "CREATE TABLE singer (id INTEGER PRIMARY KEY, name TEXT, age INTEGER);"
        "INSERT INTO singer (name, age) VALUES ('Joe', 52), ('Ann', 29), ('Rose', 41);"
        "CREATE TABLE secret (token TEXT); INSERT INTO secret VALUES ('s3cr3t');"
    )
    con.commit()
    con.close()
    return root, path, hashlib.sha256(path.read_bytes()).hexdigest()


def hostile_queries(marker: str, root) -> list[str]:
    escape = [f"/tmp/{marker}.db", f"/var/tmp/{marker}.db", f"{root}/{marker}.db"]
    return [
        "DROP TABLE singer",
        "DELETE FROM singer",
        "UPDATE singer SET age = 0",
        "INSERT INTO singer (name, age) VALUES ('x', 1)",
        "REPLACE INTO singer (id, name, age) VALUES (1, 'x', 1)",
        "CREATE TABLE t (x)",
        "CREATE TEMP TABLE t (x)",
        "CREATE TEMP VIEW v AS SELECT 1",
        "CREATE INDEX i ON singer (age)",
        "CREATE TRIGGER tr AFTER INSERT ON singer BEGIN DELETE FROM singer; END",
        "ALTER TABLE singer RENAME TO s",
        "REINDEX",
        "ANALYZE",
        "VACUUM",
        *(f"VACUUM INTO '{target}'" for target in escape),
        *(f"ATTACH DATABASE '{target}' AS evil" for target in escape),
        "ATTACH DATABASE ':memory:' AS evil",
        "PRAGMA writable_schema = ON",
        "PRAGMA query_only = OFF",
        "PRAGMA journal_mode = DELETE",
        "SELECT * FROM pragma_table_info('singer')",
        "BEGIN",
        "SAVEPOINT s",
        "SELECT load_extension('/lib/x86_64-linux-gnu/libc.so.6')",
        "SELECT fts3_tokenizer('simple')",
        "SELECT 1; DROP TABLE singer",
        "SELECT 1 -- ; \n; DELETE FROM singer",
        f"{FOREVER} SELECT count(*) FROM r",
        f"{FOREVER} SELECT n FROM r ORDER BY n DESC LIMIT 1",
        "SELECT count(*) FROM " + ", ".join(f"singer s{i}" for i in range(18)),
        "SELECT randomblob(2000000000)",
        "SELECT zeroblob(2000000000)",
        "SELECT printf('%.*c', 2000000000, 'x')",
        "WITH RECURSIVE r(s) AS (SELECT 'xx' UNION ALL SELECT s || s FROM r LIMIT 40) "
        "SELECT length(max(s)) FROM r",
        "SELECT " + "(" * 5000 + "1" + ")" * 5000,
        "SELECT 1 " + "UNION SELECT 1 " * 200,
        "SELECT '" + "x" * 200_000 + "'",
    ]


#: memory bombs the SQLite library itself bounds, differently by version: 3.40 refuses this width ("string or
#: blob too big"), the newer SQLite of the lent GPU hosts' image returns NULL; neither builds the string
BOUNDED_BY_SQLITE = frozenset({"SELECT printf('%.*c', 2000000000, 'x')"})


def _unchanged(victim):
    _, path, digest = victim
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest
    assert sorted(p.name for p in path.parent.iterdir()) == ["victim.sqlite"]


def test_hostile_queries_from_the_tool_are_errors_and_change_nothing(victim, marker):
    root, _, _ = victim
    task = Task(id="v", prompt="Who is over 40?", answer=GOLD, data={"db_id": "victim"})
    env = gym.make(
        "toolgym/SQL-v0", tasks=toolgym.ListSource([task]), db_dir=root, tool_timeout=0.5, max_turns=100
    )
    env.reset(seed=0)
    for query in hostile_queries(marker, root):
        obs, _, terminated, truncated, info = env.step(f"<sql>{query}</sql>")
        if info["action"].kind == "invalid":  # over the env's action size: it never reaches the tool
            assert len(query) > 100_000 and "characters long; the limit is" in obs, (query[:50], obs)
            continue
        (result,) = info["tool_results"]
        if query in BOUNDED_BY_SQLITE and result.status == "ok":  # no 2 GB string either way
            assert len(obs) < 1_000 and "NULL" in obs and not (terminated or truncated), (query, obs)
            _unchanged(victim)
            continue
        assert result.status == "error", (query, result)  # the model's mistake, never infrastructure
        assert obs.startswith("<output>\nError: ") and not (terminated or truncated), (query, obs)
        _unchanged(victim)
    # the engine still answers, and reading what the database holds is allowed
    obs = env.step("<sql>SELECT token FROM secret</sql>")[0]
    assert "s3cr3t" in obs
    obs = env.step("<answer>SELECT name FROM singer WHERE age > 40</answer>")[1]
    assert obs == 1.0
    env.close()
    assert not [p for p in os.listdir(root) if marker in p]


def test_hostile_answers_score_zero_and_change_nothing(victim, marker):
    root, _, _ = victim
    verifier = SqlExecutionVerifier(DirectoryCatalog(root), timeout=0.5)
    task = Task(id="v", prompt="", answer=GOLD, data={"db_id": "victim"})
    for query in hostile_queries(marker, root):
        verdict = verifier.verify(task, query)
        assert (verdict.reward, verdict.passed, verdict.error) == (0.0, False, None), (query, verdict)
        _unchanged(victim)
    assert verifier.verify(task, "SELECT name FROM singer WHERE age >= 41").reward == 1.0


def test_a_killed_session_is_replaced_and_the_query_still_answers(victim):
    root, path, _ = victim
    engine = SqlEngine(root, workers=1)
    try:
        assert engine.query(path, "SELECT count(*) FROM singer").rows == ((3,),)
        (session,) = engine._idle
        os.kill(session.session._proc.host_pid, signal.SIGKILL)
        result = engine.query(path, "SELECT count(*) FROM singer")
        assert result.ok and result.rows == ((3,),)
        assert engine._idle and engine._idle[0] is not session
    finally:
        engine.close()
    _unchanged(victim)
