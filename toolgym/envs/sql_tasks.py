"""Text-to-SQL task files for toolgym/SQL-v0: Spider, BIRD, and SkyRL-SQL/OmniSQL or other verl-format rows,
each naming its database by ``db_id`` under a ``db_dir``.

=========  ===================================================================================================
style      columns
=========  ===================================================================================================
``spider`` ``db_id``, ``question``, ``query`` (Spider's ``train_spider.json``/``dev.json``, a JSON array)
``bird``   ``db_id``, ``question``, ``SQL``, ``evidence``? (BIRD's ``train.json``/``dev.json``)
``verl``   ``prompt`` (chat messages; the question is the last user message), ``reward_model`` (or
           SkyRL-gym's ``reward_spec``) with ``ground_truth`` = the gold SQL, ``db_id`` as a column or in
           ``extra_info``
=========  ===================================================================================================

The layout is detected from the columns (``style=`` forces one). The file is read once per process and a task
is built when drawn (``LazyFileSource``); its prompt is the question, BIRD's evidence as a hint, and the
database's schema (read once per process per database, ``describe_database``). A verl row whose prompt already
shows the schema (SkyRL-SQL's does) is kept as it is. ``Task.answer`` is the gold SQL; ``Task.data`` holds
``db_id`` and whether the gold's order matters.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from toolgym.core.task import RowSource, Task
from toolgym.envs.task_files import LazyFileSource, file_columns, is_verl_layout, task_rows, verl_row_task
from toolgym.sql.compare import has_outer_order_by
from toolgym.sql.databases import DirectoryCatalog, describe_database
from toolgym.sql.world import sql_prompt

#: style -> (question column, gold SQL column)
SQL_STYLES: dict[str, tuple[str, str]] = {"spider": ("question", "query"), "bird": ("question", "SQL")}
STYLES = (*SQL_STYLES, "verl")


def sql_style(columns: list[str]) -> str | None:
    """The layout these columns are, or None."""
    if is_verl_layout(columns):
        return "verl"
    if "db_id" in columns and "question" in columns:
        return "bird" if "SQL" in columns else "spider" if "query" in columns else None
    return None


def sql_file_source(
    path: str | Path, db_dir: str | Path, style: str | None = None, sample_rows: int = 0
) -> LazyFileSource:
    """The tasks of a Spider, BIRD or verl-format file whose databases are under ``db_dir``, read on the
    first draw, once per process (see the module docstring)."""
    if style is not None and style not in STYLES:
        raise ValueError(f"unknown SQL task style {style!r}; known: {', '.join(STYLES)}")
    path = Path(path)
    catalog = DirectoryCatalog(db_dir)

    def build(resolved: Path) -> RowSource:
        columns = file_columns(resolved)
        layout = style or sql_style(columns)
        if layout is None:
            raise ValueError(
                f"{resolved.name}: not a text-to-SQL file (columns: {sorted(columns)}); expected Spider "
                "(db_id, question, query), BIRD (db_id, question, SQL, evidence) or verl rows (prompt, "
                "reward_model.ground_truth, db_id); pass style= to force one"
            )
        name = resolved.stem

        def to_task(row: Mapping[str, Any], index: int) -> Task:
            return sql_row_task(row, index, layout, name, catalog, sample_rows)

        return RowSource(task_rows(resolved), to_task, name=name)

    return LazyFileSource(
        path,
        "sql",
        build,
        style=style,
        db_dir=str(catalog.root),
        sample_rows=sample_rows,
    )


def sql_row_task(
    row: Mapping[str, Any], index: int, style: str, name: str, catalog: DirectoryCatalog, sample_rows: int
) -> Task:
    """One row as an SQL task (its database must exist under the catalog)."""
    if style == "verl":
        base = verl_row_task(row, index, name)
        if "db_id" in base.data and "order_matters" in base.data:  # a row toolgym exported: the task itself
            return base
        db_id = row.get("db_id") or base.data.get("db_id")
        gold, question, evidence = str(base.answer), base.prompt, None
        task_id, source = base.id, base.source
    else:
        question_column, gold_column = SQL_STYLES[style]
        missing = [c for c in ("db_id", question_column, gold_column) if not row.get(c)]
        if missing:
            raise ValueError(f"row {index} of {name!r} has no {', '.join(missing)}")
        db_id, question, gold = row["db_id"], str(row[question_column]), str(row[gold_column])
        evidence = row.get("evidence")
        task_id = str(row.get("question_id", f"{name}/{index}"))
        source = style
    if not db_id:
        raise ValueError(f"row {index} of {name!r} names no database (db_id)")
    path = catalog.path(str(db_id))
    if "CREATE TABLE" in question.upper():
        prompt = question
    else:
        prompt = sql_prompt(question, describe_database(path, sample_rows), evidence)
    return Task(
        id=task_id,
        prompt=prompt,
        answer=gold,
        data={"db_id": str(db_id), "order_matters": has_outer_order_by(gold)},
        source=source,
    )
