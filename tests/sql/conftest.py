"""A small Spider-style database directory (two databases) that the SQL tests share, and its task files in
each layout SQL-v0 reads."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

CONCERT_SCHEMA = """
CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT, country TEXT, age INTEGER);
CREATE TABLE concert (concert_id INTEGER PRIMARY KEY, concert_name TEXT, year INTEGER, singer_id INTEGER,
                      ticket_price REAL, FOREIGN KEY (singer_id) REFERENCES singer(singer_id));
"""
SINGERS = [
    (1, "Joe Sharp", "Netherlands", 52),
    (2, "Timbaland", "United States", 32),
    (3, "Justin Brown", "France", 29),
    (4, "Rose White", "France", 41),
    (5, "John Nizinik", "France", 43),
]
CONCERTS = [
    (1, "Auditions", 2014, 1, 12.5),
    (2, "Super bootcamp", 2014, 2, 30.0),
    (3, "Home Visits", 2015, 2, 45.25),
    (4, "Week 1", 2014, 3, 8.0),
    (5, "Week 2", 2015, 3, 9.75),
    (6, "Final", 2015, 5, 99.0),
]
#: (question, gold) pairs over the concert database
CONCERT_QUESTIONS = [
    ("How many singers are from France?", "SELECT count(*) FROM singer WHERE country = 'France'"),
    (
        "List the names of singers in concerts of 2014.",
        "SELECT T2.name FROM concert AS T1 JOIN singer AS T2 ON T1.singer_id = T2.singer_id "
        "WHERE T1.year = 2014",
    ),
    ("List singer names from oldest to youngest.", "SELECT name FROM singer ORDER BY age DESC"),
]


def make_concert_db(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(path)
    con.executescript(CONCERT_SCHEMA)
    con.executemany("INSERT INTO singer VALUES (?, ?, ?, ?)", SINGERS)
    con.executemany("INSERT INTO concert VALUES (?, ?, ?, ?, ?)", CONCERTS)
    con.commit()
    con.close()
    return path


@pytest.fixture(scope="session")
def db_dir(tmp_path_factory) -> Path:
    """``<db_id>/<db_id>.sqlite`` (Spider's layout) for ``concert_singer``; ``<db_id>.sqlite`` for ``flat``
    (the same data)."""
    root = tmp_path_factory.mktemp("sql") / "databases"
    make_concert_db(root / "concert_singer" / "concert_singer.sqlite")
    make_concert_db(root / "flat.sqlite")
    return root


@pytest.fixture(scope="session")
def task_files(db_dir) -> dict[str, Path]:
    """One file per layout over the concert database: Spider (a JSON array), BIRD (JSON lines, with
    evidence), verl Parquet and SkyRL-gym's reward_spec rows (JSON lines)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = db_dir.parent
    spider = [{"db_id": "concert_singer", "question": q, "query": sql} for q, sql in CONCERT_QUESTIONS]
    (out / "spider.json").write_text(json.dumps(spider, indent=1))
    evidence = "a singer's country is its nationality"
    bird = [
        {"question_id": i, "db_id": "flat", "question": q, "evidence": evidence, "SQL": sql}
        for i, (q, sql) in enumerate(CONCERT_QUESTIONS)
    ]
    (out / "bird.jsonl").write_text("".join(json.dumps(r) + "\n" for r in bird))
    verl = [
        {
            "data_source": "spider",
            "prompt": [{"role": "user", "content": q}],
            "reward_model": {"style": "rule", "ground_truth": sql},
            "extra_info": {"db_id": "concert_singer", "index": i},
        }
        for i, (q, sql) in enumerate(CONCERT_QUESTIONS)
    ]
    pq.write_table(pa.Table.from_pylist(verl), out / "verl.parquet")
    skyrl = [
        {
            "data_source": "synsql",
            "prompt": [{"role": "user", "content": q}],
            "env_class": "text2sql",
            "reward_spec": {"method": "rule", "ground_truth": sql},
            "db_id": "flat",
            "data": "spider",
        }
        for q, sql in CONCERT_QUESTIONS
    ]
    (out / "skyrl.jsonl").write_text("".join(json.dumps(r) + "\n" for r in skyrl))
    return {
        "spider": out / "spider.json",
        "bird": out / "bird.jsonl",
        "verl": out / "verl.parquet",
        "skyrl": out / "skyrl.jsonl",
    }
