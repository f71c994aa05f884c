"""The ``sql`` tool: one read-only query on the episode's database, answered with a compact table.

The env binds each episode's task (``Tool.bind_task``), whose ``data["db_id"]`` names the database; the tool's
catalog turns that into a file and its process-wide SQL engine runs the query in the SQL sandbox
(``toolgym.sql.engine``: read-only, an allowlist authorizer, a deadline; nothing the model writes can change
the file). What the model sees: the header and the first ``max_rows`` rows, then how many rows there are; or
the database's error message (a mistake the model can fix, ``status="error"``). A sandbox failure is an
``infra_error``: not the model's fault.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from toolgym.core.task import Task
from toolgym.core.types import ToolResult
from toolgym.sql.compare import extract_sql
from toolgym.sql.databases import DatabaseCatalog
from toolgym.sql.engine import QueryResult, SqlInfraError
from toolgym.tools.base import Tool, register_tool
from toolgym.util.table import format_table

DEFAULT_TIMEOUT = 5.0
#: rows counted past the ones shown (beyond, the count says "more than")
COUNT_CAP = 100_000
_CELL = 60
_HINTS = {
    "not authorized": "the database is read-only: write one SELECT (or WITH ... SELECT) query; writes, "
    "PRAGMA and ATTACH are refused",
    "You can only execute one statement at a time.": "one statement per call",
}


@register_tool
class SqlTool(Tool):
    """Runs one read-only query on the current task's database (see the module docstring)."""

    name = "sql"
    description = (
        "Run one read-only SQL query (SQLite) on the task's database and see the first rows of its result "
        "and how many rows it has."
    )
    primary_arg = "query"

    class Args(BaseModel):
        query: str = Field(description="One SQLite SELECT (or WITH ... SELECT) statement.")

    def __init__(
        self,
        catalog: DatabaseCatalog | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        max_rows: int = 10,
        max_chars: int = 3_000,
    ):
        """``catalog``: where the task's ``db_id`` is (the env passes its own); ``timeout``: seconds per
        query; ``max_rows``/``max_chars``: how much of a result the model sees."""
        if max_rows < 1:
            raise ValueError(f"max_rows must be >= 1, got {max_rows}")
        self.catalog = catalog
        self.timeout = float(timeout)
        self.max_rows = max_rows
        self.max_chars = max_chars
        self._db_id: str | None = None

    def bind_task(self, task: Task) -> None:
        self._db_id = task.data.get("db_id")

    def run(self, args: Args) -> ToolResult:
        if self.catalog is None or not self._db_id:
            return self._infra("no database: this tool queries the database of an SQL env's current task")
        query = extract_sql(args.query)
        if not query:
            return ToolResult(name=self.name, status="error", output="empty query: write a SELECT statement")
        try:
            path = self.catalog.path(self._db_id)
            result = self.catalog.engine().query(
                path, query, timeout=self.timeout, keep_rows=self.max_rows, count_rows=COUNT_CAP, exact=False
            )
        except (SqlInfraError, OSError) as exc:
            return self._infra(str(exc))
        if not result.ok:
            hint = next((h for key, h in _HINTS.items() if result.error.startswith(key)), "")
            output = f"{result.error} ({hint})" if hint else result.error
            return ToolResult(name=self.name, status="error", output=output, metadata={"kind": result.kind})
        return ToolResult(
            name=self.name,
            output=render_result(result, self.max_rows, self.max_chars),
            metadata={"rows": result.total},
        )

    def _infra(self, message: str) -> ToolResult:
        return ToolResult(name=self.name, status="infra_error", output=message)


def render_result(result: QueryResult, max_rows: int, max_chars: int) -> str:
    """The header, the first rows (fewer if the table would pass ``max_chars``) and the row count."""
    rows = [[_cell(v) for v in row] for row in result.rows[:max_rows]]
    shown = len(rows)
    table = format_table(result.columns, rows)
    while len(table) > max_chars and shown > 1:
        shown = max(1, shown // 2)
        table = format_table(result.columns, rows[:shown])
    total = f"{result.total:,}" if result.complete else f"more than {result.total - 1:,}"
    if not result.total:
        return f"{table}\n(0 rows)"
    count = f"({total} row{'s' if result.total != 1 else ''}"
    return f"{table}\n{count}; showing the first {shown})" if shown < result.total else f"{table}\n{count})"


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    text = f"x'{value.hex()}'" if isinstance(value, bytes) else str(value)
    text = text.replace("\n", " ")
    return text if len(text) <= _CELL else text[: _CELL - 1] + "…"
