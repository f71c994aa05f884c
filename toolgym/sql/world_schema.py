"""One database of the SQL world as the generator and the question templates see it: its tables and columns
under their names there (``WorldTable``, ``WorldColumn``, ``DatabaseSpec``), and a read-only connection that
threads take turns on (``SharedConnection``).

``toolgym.sql.world`` draws and builds the databases; ``toolgym.sql.world_questions`` writes questions over
them. Both read these types, which is why they live in neither.
"""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import dataclass

from toolgym.sql.world_domains import Column

_TYPES = {"label": "TEXT", "category": "TEXT", "date": "TEXT", "int": "INTEGER", "year": "INTEGER"}
_TYPES["real"] = "REAL"


@dataclass(frozen=True)
class WorldColumn:
    """A column of one database: its name there and its template."""

    name: str
    spec: Column

    @property
    def kind(self) -> str:
        return self.spec.kind

    @property
    def phrase(self) -> str:
        return self.spec.phrase

    @property
    def role(self) -> str:
        """For a foreign key: how a question names the row it points at ("author", "home team")."""
        return self.spec.role


@dataclass(frozen=True)
class WorldTable:
    """A table of one database: its names there (table, singular, plural), columns and row count."""

    key: str
    name: str
    singular: str
    plural: str
    columns: tuple[WorldColumn, ...]
    rows: int

    def of_kind(self, *kinds: str) -> list[WorldColumn]:
        return [c for c in self.columns if c.kind in kinds]

    @property
    def label(self) -> WorldColumn | None:
        found = self.of_kind("label")
        return found[0] if found else None


@dataclass(frozen=True)
class DatabaseSpec:
    """What database ``index`` of a world is: its id, domain and tables (the values are drawn when built)."""

    db_id: str
    domain: str
    tables: tuple[WorldTable, ...]
    seed: int

    def table(self, key: str) -> WorldTable:
        return next(t for t in self.tables if t.key == key)

    def links(self) -> list[tuple[WorldTable, WorldColumn, WorldTable]]:
        """Every foreign key as (child table, its fk column, parent table)."""
        return [(t, c, self.table(c.spec.ref)) for t in self.tables for c in t.of_kind("fk")]

    def create_statements(self) -> list[str]:
        statements = []
        for table in self.tables:
            lines = ["    id INTEGER PRIMARY KEY"]
            lines += [f"    {c.name} {_TYPES.get(c.kind, 'INTEGER')} NOT NULL" for c in table.columns]
            lines += [
                f"    FOREIGN KEY ({c.name}) REFERENCES {self.table(c.spec.ref).name}(id)"
                for c in table.of_kind("fk")
            ]
            statements.append(f"CREATE TABLE {table.name} (\n" + ",\n".join(lines) + "\n)")
        return statements


class SharedConnection:
    """A read-only connection that threads take turns on (``execute(sql).fetchall()`` as one step)."""

    def __init__(self, con: sqlite3.Connection):
        self._con = con
        self._lock = threading.Lock()

    def rows(self, sql: str) -> list[tuple]:
        with self._lock:
            return self._con.execute(sql).fetchall()
