"""The procedural database world: deterministic databases and questions, every template answerable, the
oracle solving every level, databases built once and shared."""

from __future__ import annotations

import collections
import hashlib
import os
import subprocess
import sys

import pytest

from toolgym.sql.world import SqlWorld, check_levels
from toolgym.sql.world_questions import TEMPLATES


@pytest.fixture(scope="module")
def world() -> SqlWorld:
    return SqlWorld(num_databases=16, seed=3)


def test_databases_have_3_to_8_connected_tables_closed_under_foreign_keys(world):
    for index in range(world.num_databases):
        spec = world.spec(index)
        keys = {t.key for t in spec.tables}
        assert 3 <= len(spec.tables) <= 8, spec
        assert all(parent.key in keys for _, _, parent in spec.links())
        # connected: every table reaches every other through foreign keys
        seen, todo = set(), [spec.tables[0].key]
        while todo:
            key = todo.pop()
            if key not in seen:
                seen.add(key)
                todo += [p.key for c, _, p in spec.links() if c.key == key]
                todo += [c.key for c, _, p in spec.links() if p.key == key]
        assert seen == keys, spec.db_id


def test_the_same_seed_gives_the_same_bytes_and_questions_in_another_process(world, tmp_path):
    """The world is a pure function of its seed: another interpreter (another hash seed) builds the same file
    and draws the same task."""
    path = world.path(world.db_id(5))
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    task = world.tasks().task_for_seed(11)
    code = (
        "import hashlib, sys; from toolgym.sql.world import SqlWorld\n"
        f"w = SqlWorld(16, 3, cache_dir={str(tmp_path)!r})\n"
        "print(hashlib.sha256(w.path(w.db_id(5)).read_bytes()).hexdigest())\n"
        "print(w.tasks().task_for_seed(11).model_dump_json())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONHASHSEED": "7"},
        check=True,
    )
    other_digest, other_task = out.stdout.splitlines()
    assert other_digest == digest
    assert other_task == task.model_dump_json()


def test_every_template_yields_answerable_questions(world):
    """Over many seeds each level draws each of its templates, and every gold query answers with 1-20 rows."""
    seen = collections.defaultdict(set)
    for level in (1, 2, 3):
        source = world.tasks(level)
        for seed in range(120):
            task = source.task_for_seed(seed)
            seen[level].add(task.data["template"])
            rows = world.connection(task.data["db_id"]).rows(task.answer)
            assert 1 <= len(rows) <= 20 and rows != [(0,)], (task.prompt, task.answer, rows)
            assert task.data["level"] == level
    for level, templates in TEMPLATES.items():
        assert {t.__name__ for t in templates} <= seen[level], (level, seen[level])


def test_task_ids_rebuild_the_task(world):
    source = world.tasks((2, 3), sample_rows=2)
    task = source.task_for_seed(42)
    assert task.id == "sqlworld-s3-n16-L23-r2/42"
    assert source.get(task.id) == task
    assert "example row(s) of" in task.prompt  # sample_rows shows rows under each CREATE TABLE


def test_databases_are_built_once_into_the_cache(tmp_path):
    world = SqlWorld(4, 0, cache_dir=tmp_path)
    first = world.path("w0-2")
    mtime = first.stat().st_mtime_ns
    assert SqlWorld(4, 0, cache_dir=tmp_path).path("w0-2").stat().st_mtime_ns == mtime
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w0-2.sqlite"]  # no temporary file left


@pytest.mark.parametrize("bad", [0, 4, (1, 5), ()])
def test_bad_levels_are_refused(bad):
    with pytest.raises(ValueError, match="level must be 1, 2 or 3"):
        check_levels(bad)


def test_unknown_database_ids_are_refused(world):
    for bad in ("w3-16", "w4-1", "nothing", "w3-x"):
        with pytest.raises(FileNotFoundError, match="no database"):
            world.path(bad)


def test_an_unwritable_cache_says_what_to_set(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(OSError, match="set TOOLGYM_CACHE to a writable folder"):
        SqlWorld(4, 0, cache_dir=blocker / "sql").path("w0-1")
