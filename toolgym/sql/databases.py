"""Where a task's database file is, and what the model is told about it.

A task names its database by ``db_id`` (``Task.data["db_id"]``); a catalog turns that into a file.
Datasets lay their files out as ``<db_dir>/<db_id>/<db_id>.sqlite`` (Spider, BIRD, SynSQL) or
``<db_dir>/<db_id>.sqlite``; the procedural world (``toolgym.sql.world``) builds its own in the cache.
Every database of a catalog lives under its ``root``, the one directory the SQL sandbox exposes.

``describe_database`` is the schema the prompt shows: the ``CREATE`` statements, and on request a few rows of
each table. It is read once per process and file version, however many envs and tasks use the database.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from abc import ABC, abstractmethod
from pathlib import Path
from urllib.parse import quote

from toolgym.sql.engine import SqlEngine, sql_engine
from toolgym.util.table import format_table

SUFFIXES = (".sqlite", ".db", ".sqlite3")


class DatabaseCatalog(ABC):
    """Maps a task's ``db_id`` to its SQLite file; every file is under ``root``."""

    @property
    @abstractmethod
    def root(self) -> Path:
        """The directory holding every database of the catalog."""

    @abstractmethod
    def path(self, db_id: str) -> Path:
        """The database file of ``db_id``; ``FileNotFoundError`` saying where it looked if there is none."""

    def engine(self) -> SqlEngine:
        """The process's SQL engine for this catalog's directory (shared by every tool and verifier)."""
        return sql_engine(self.root)  # (self.root is resolved: the engine is found without resolving it)


class DirectoryCatalog(DatabaseCatalog):
    """Dataset databases under ``db_dir``: ``<db_id>/<db_id>.sqlite`` or ``<db_id>.sqlite`` (or ``.db``)."""

    def __init__(self, db_dir: str | Path):
        self.db_dir = Path(db_dir)
        if not self.db_dir.is_dir():
            raise FileNotFoundError(
                f"db_dir {self.db_dir} is not a directory: pass the folder holding the databases "
                "(<db_id>/<db_id>.sqlite or <db_id>.sqlite)"
            )
        self._root = self.db_dir.resolve()

    @property
    def root(self) -> Path:
        return self._root

    def path(self, db_id: str) -> Path:
        if not db_id or "/" in db_id or "\\" in db_id or db_id in (".", ".."):
            raise ValueError(f"db_id must be a plain name, got {db_id!r}")
        nested = [self._root / db_id / f"{db_id}{s}" for s in SUFFIXES]
        for candidate in [*nested, *(self._root / f"{db_id}{s}" for s in SUFFIXES)]:
            if candidate.is_file():
                return candidate
        raise FileNotFoundError(
            f"no database {db_id!r} under {self.db_dir}: looked for {db_id}/{db_id}.sqlite and "
            f"{db_id}.sqlite (or .db, .sqlite3)"
        )


# ------------------------------------------------------------------------------------------ schemas

_SCHEMAS: dict[tuple, str] = {}
_SCHEMAS_LOCK = threading.Lock()
MAX_CACHED_SCHEMAS = 4096


def open_read_only(path: str | Path) -> sqlite3.Connection:
    """A read-only connection to a database file, for toolgym's own fixed queries (schemas, task generation);
    queries a model wrote never run here, only in the SQL engine's sandbox."""
    con = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True, check_same_thread=False)
    con.execute("PRAGMA query_only=1")
    return con


def describe_database(path: str | Path, sample_rows: int = 0) -> str:
    """The database's ``CREATE TABLE``/``CREATE VIEW`` statements, each followed by its first ``sample_rows``
    rows when asked for. Read once per (file, size, modification time, ``sample_rows``) per process."""
    stat = os.stat(path)
    key = (str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns, sample_rows)
    with _SCHEMAS_LOCK:
        found = _SCHEMAS.get(key)
    if found is not None:
        return found
    con = open_read_only(path)
    try:
        objects = con.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE type IN ('table', 'view') AND sql IS NOT NULL "
            "AND name NOT LIKE 'sqlite_%' ORDER BY rowid"
        ).fetchall()
        parts = []
        for kind, name, sql in objects:
            text = sql.strip().rstrip(";") + ";"
            if sample_rows > 0 and kind == "table":
                quoted = '"' + name.replace('"', '""') + '"'
                cursor = con.execute(f"SELECT * FROM {quoted} LIMIT {int(sample_rows)}")
                headers = [d[0] for d in cursor.description]
                rows = [[_cell(v) for v in row] for row in cursor.fetchall()]
                if rows:
                    text += f"\n/* {len(rows)} example row(s) of {name}:\n{format_table(headers, rows)}\n*/"
            parts.append(text)
    finally:
        con.close()
    described = "\n\n".join(parts)
    with _SCHEMAS_LOCK:
        if len(_SCHEMAS) >= MAX_CACHED_SCHEMAS:
            _SCHEMAS.clear()
        _SCHEMAS[key] = described
    return described


def _cell(value: object) -> str:
    text = repr(value) if isinstance(value, bytes) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."
