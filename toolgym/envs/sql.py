"""toolgym/SQL-v0: answer a question about a database with one SQL query, exploring it with a sql tool.

The model reads the question and the schema, may run read-only queries (``<sql>SELECT ...</sql>`` in the xml
format) to look at the data, and answers with one query. ``SqlExecutionVerifier`` runs the gold and the
submitted query and compares their results (execution match, as Spider and BIRD score it). Every query runs
in the SQL sandbox on a read-only database (``toolgym.sql.engine``): a ``DROP TABLE`` from the policy changes
nothing that a later episode is judged against.

By default the tasks come from a procedural database world (``toolgym.sql.world``: seeded databases of 3-8
related tables of invented data, questions from templates by level), so no question is answerable from
memory. Or point it at Spider, BIRD or verl-format files with ``tasks=`` and their databases with ``db_dir=``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from toolgym.core.registry import register_env
from toolgym.core.task import Task, TaskSource
from toolgym.core.types import ToolCall
from toolgym.envs.base import ToolEnv
from toolgym.envs.sql_tasks import sql_file_source
from toolgym.rewards.sql import DEFAULT_TIMEOUT, SqlExecutionVerifier, SqlReward
from toolgym.sql.databases import DatabaseCatalog, DirectoryCatalog
from toolgym.sql.world import DEFAULT_NUM_DATABASES, LEVELS, SqlWorld
from toolgym.tools.sql import DEFAULT_TIMEOUT as DEFAULT_TOOL_TIMEOUT
from toolgym.tools.sql import SqlTool

SYSTEM_PROMPT = (
    "You answer questions about a SQLite database by writing SQL. Look at the data with the sql tool when it "
    "helps (the values, how names are spelled), check that your query returns what the question asks for, "
    "then give the final query as your answer. It is judged by running it: its result must hold exactly the "
    "rows and the columns the question asks for, nothing more."
)


def sql_oracle(task: Task) -> Sequence[ToolCall | str]:
    """A correct solution: run the gold query with the tool, then submit it."""
    return [ToolCall(name="sql", arguments={"query": str(task.answer)}), str(task.answer)]


@register_env(
    "toolgym/SQL-v0",
    tools=["sql"],
    task_source="procedural database world (seeded SQLite databases, 3 levels), or Spider/BIRD/verl files",
    description="Text-to-SQL on real SQLite, read-only and sandboxed; execution match with the gold query.",
    oracle=sql_oracle,
)
def make_sql_env(
    level: int | Sequence[int] = LEVELS,
    num_databases: int = DEFAULT_NUM_DATABASES,
    world_seed: int = 0,
    tasks: str | Path | TaskSource | None = None,
    db_dir: str | Path | None = None,
    style: str | None = None,
    sample_rows: int = 0,
    reward: SqlReward = "binary",
    timeout: float = DEFAULT_TIMEOUT,
    tool_timeout: float = DEFAULT_TOOL_TIMEOUT,
    max_rows: int = 10,
    action_format: str = "xml",
    max_turns: int = 6,
    **env_kwargs: Any,
) -> ToolEnv:
    """An SQL env.

    Args:
        level, num_databases, world_seed: the procedural world's questions (1, 2, 3 or several) and
            databases, used without ``tasks``.
        tasks: a Spider, BIRD or verl-format file (or a ``TaskSource`` whose tasks name a ``db_id``), with
            ``db_dir`` the folder of their databases; ``style`` forces the file's layout.
        sample_rows: rows of each table shown under its ``CREATE TABLE`` in the prompt (0: none).
        reward: ``"binary"`` (1/0) or ``"skyrl"`` (1/0/-1, -1 for an answer with no parsable SQL).
        timeout: seconds per query when judging; tool_timeout: per sql tool call; max_rows: rows the tool
            shows.
    """
    catalog: DatabaseCatalog
    source: TaskSource
    if tasks is None:
        if db_dir is not None:
            raise ValueError("db_dir= goes with tasks= (a Spider, BIRD or verl file); the world has its own")
        world = SqlWorld(num_databases, world_seed)
        catalog, source = world, world.tasks(level if isinstance(level, int) else tuple(level), sample_rows)
    else:
        if db_dir is None:
            raise ValueError("SQL task files need db_dir=: the folder holding <db_id>/<db_id>.sqlite files")
        catalog = DirectoryCatalog(db_dir)
        if isinstance(tasks, TaskSource):
            source = tasks
        else:
            source = sql_file_source(tasks, db_dir, style, sample_rows)
    env_kwargs.setdefault("system_prompt", SYSTEM_PROMPT)
    return ToolEnv(
        source,
        [SqlTool(catalog, timeout=tool_timeout, max_rows=max_rows)],
        SqlExecutionVerifier(catalog, reward=reward, timeout=timeout),
        action_format,
        max_turns=max_turns,
        **env_kwargs,
    )
