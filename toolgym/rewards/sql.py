"""Execution match for text-to-SQL: run the gold and the submitted query on the task's database and compare
their results (``toolgym.sql.compare``: multisets of rows, ordered when the gold sorts, numbers with a
tolerance), as Spider's and BIRD's execution accuracy do.

Both queries run in the SQL sandbox (``toolgym.sql.engine``), so nothing submitted can change the database
every later episode is judged against. A submitted query that fails, runs past ``timeout`` or returns too much
scores 0 (``reward="skyrl"``: -1 when there is no parsable SQL at all, as SkyRL-SQL scores a format error). A
gold query that fails, a missing database or a failed sandbox is a verdict ``error``: the reward is unknown,
never a silent 0. The gold result of a task is computed once per process (a GRPO group judges the same task
many times).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path
from typing import Literal

from toolgym.core.task import Task
from toolgym.core.types import Trajectory, Verdict
from toolgym.rewards.base import Verifier
from toolgym.sql.compare import DEFAULT_REL_TOL, extract_sql, has_outer_order_by, results_match
from toolgym.sql.databases import DatabaseCatalog
from toolgym.sql.engine import QueryResult, SqlInfraError

SqlReward = Literal["binary", "skyrl"]
DEFAULT_TIMEOUT = 10.0
#: rows a result may have to be compared (a bigger gold result is a verdict error, a bigger answer is wrong)
MAX_RESULT_ROWS = 100_000
_GOLD_CACHE_SIZE = 1024
_UNPARSABLE = ("syntax error", "incomplete input", "unrecognized token")


class SqlExecutionVerifier(Verifier):
    """Reward 1.0 when the submitted query's result matches the gold query's (see the module docstring)."""

    name = "sql_execution"

    def __init__(
        self,
        catalog: DatabaseCatalog,
        reward: SqlReward = "binary",
        timeout: float = DEFAULT_TIMEOUT,
        rel_tol: float = DEFAULT_REL_TOL,
    ):
        if reward not in ("binary", "skyrl"):
            raise ValueError(f"reward must be 'binary' (1/0) or 'skyrl' (1/0/-1), got {reward!r}")
        self.catalog = catalog
        self.reward = reward
        self.timeout = float(timeout)
        self.rel_tol = rel_tol

    def verify(self, task: Task, answer: str, trajectory: Trajectory | None = None) -> Verdict:
        gold_sql = str(task.answer or "")
        try:
            path = self.catalog.path(str(task.data["db_id"]))
            gold = self._gold_result(path, gold_sql)
            if not gold.ok:
                return Verdict(reward=0.0, passed=False, error=f"the gold query failed: {gold.error}")
            if not gold.complete:
                too_big = f"the gold result has over {MAX_RESULT_ROWS:,} rows"
                return Verdict(reward=0.0, passed=False, error=too_big)
            submitted = extract_sql(answer)
            if not submitted:
                return self._wrong("no SQL in the answer", unparsable=True)
            pred = self._run(path, submitted)
        except (SqlInfraError, OSError, KeyError) as exc:
            return Verdict(reward=0.0, passed=False, error=f"{type(exc).__name__}: {exc}")
        if not pred.ok:
            unparsable = any(marker in pred.error for marker in _UNPARSABLE)
            return self._wrong(f"the query failed: {pred.error}", unparsable=unparsable, kind=pred.kind)
        if not pred.complete:
            return self._wrong(f"the result has over {MAX_RESULT_ROWS:,} rows")
        ordered = bool(task.data.get("order_matters", has_outer_order_by(gold_sql)))
        match, why = results_match(gold.rows, pred.rows, ordered=ordered, rel_tol=self.rel_tol)
        details = {"rows": pred.total, "gold_rows": gold.total, "ordered": ordered}
        if match:
            return Verdict(reward=1.0, passed=True, details=details)
        return Verdict(reward=0.0, passed=False, details={**details, "reason": why})

    def _wrong(self, reason: str, *, unparsable: bool = False, kind: str = "") -> Verdict:
        reward = -1.0 if unparsable and self.reward == "skyrl" else 0.0
        details = {"reason": reason, **({"kind": kind} if kind else {})}
        return Verdict(reward=reward, passed=False, details=details)

    def _run(self, path: Path, sql: str) -> QueryResult:
        return self.catalog.engine().query(
            path, sql, timeout=self.timeout, keep_rows=MAX_RESULT_ROWS, count_rows=MAX_RESULT_ROWS + 1
        )

    def _gold_result(self, path: Path, sql: str) -> QueryResult:
        """The gold query's result, computed once per process per (database version, query, time limit):
        every env of a trainer makes its own verifier, and a GRPO group judges one task many times."""
        stat = path.stat()
        key = (str(path), stat.st_size, stat.st_mtime_ns, sql, self.timeout)
        with _GOLD_LOCK:
            found = _GOLD.get(key)
            if found is not None:
                _GOLD.move_to_end(key)
                return found
        result = self._run(path, sql)
        if result.ok:  # a failure is not kept: it may be the sandbox's passing trouble
            with _GOLD_LOCK:
                _GOLD[key] = result
                while len(_GOLD) > _GOLD_CACHE_SIZE:
                    _GOLD.popitem(last=False)
        return result


_GOLD: OrderedDict[tuple, QueryResult] = OrderedDict()
_GOLD_LOCK = threading.Lock()
