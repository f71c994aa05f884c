"""Runs inside a sandboxed session (``toolgym.sql.engine``): read-only SQLite with every guard SQLite offers.

This file is executed as the session's first snippet, so it imports nothing but the standard library and is
never imported by toolgym itself. Each later snippet is one call, ``_toolgym_sql_call(<request JSON>)``, which
prints one JSON reply: the query's columns, the rows kept and the total row count, or the error.

The guards, in the order a query meets them (the sandbox around the process is the last line: no network, a
read-only view of the file system, an unprivileged user, seccomp, memory and CPU limits):

- the file is opened read-only (``mode=ro``), with ``query_only`` on: SQLite itself refuses every write;
- an authorizer that allows only what a read-only query needs (``SELECT``, reading columns, calling
  functions, recursive CTEs) and denies everything else: writes, DDL, ``ATTACH`` (so ``VACUUM INTO``, which
  attaches its target, too), ``PRAGMA``, transactions, ``load_extension`` and ``fts3_tokenizer``;
- ``trusted_schema`` off, so a database file cannot smuggle functions into views or triggers;
- limits on string length, query length, expression depth, compound selects and function arguments, and a
  heap limit, so a query fails cleanly ("string or blob too big", "out of memory") instead of exhausting
  memory;
- a progress handler that interrupts a query past its deadline (a runaway recursive CTE, a cross join);
- caps on the rows and bytes a reply carries; a long reply is fetched in chunks.
"""

import json
import sqlite3
import time
from urllib.parse import quote

_ALLOWED_ACTIONS = frozenset(
    {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
)
_DENIED_FUNCTIONS = frozenset({"load_extension", "fts3_tokenizer", "readfile", "writefile", "edit"})
_LIMITS = {
    sqlite3.SQLITE_LIMIT_LENGTH: 1_000_000,
    sqlite3.SQLITE_LIMIT_SQL_LENGTH: 100_000,
    sqlite3.SQLITE_LIMIT_EXPR_DEPTH: 200,
    sqlite3.SQLITE_LIMIT_COMPOUND_SELECT: 64,
    sqlite3.SQLITE_LIMIT_FUNCTION_ARG: 32,
    sqlite3.SQLITE_LIMIT_ATTACHED: 0,
    sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH: 1_000,
    sqlite3.SQLITE_LIMIT_TRIGGER_DEPTH: 1,
    sqlite3.SQLITE_LIMIT_WORKER_THREADS: 0,
}
_HEAP_LIMIT = 256 * 1024 * 1024
_MAX_OPEN = 8
_PROGRESS_EVERY = 2_000  # virtual machine instructions between deadline checks
_CELL_CHARS = 10_000  # a kept cell longer than this is cut (the row count and comparison stay exact)

_CHUNK = 30_000  # characters of a reply per call: a call's output stays far below the session's output cap

_toolgym_sql_connections: dict[str, sqlite3.Connection] = {}
_toolgym_sql_deadline = [float("inf")]
_toolgym_sql_pending = [""]


def _authorize(action, arg1, arg2, db_name, trigger):
    if action == sqlite3.SQLITE_FUNCTION:
        return sqlite3.SQLITE_DENY if str(arg2).lower() in _DENIED_FUNCTIONS else sqlite3.SQLITE_OK
    return sqlite3.SQLITE_OK if action in _ALLOWED_ACTIONS else sqlite3.SQLITE_DENY


def _past_deadline():
    return time.monotonic() > _toolgym_sql_deadline[0]


def _open(path):
    con = _toolgym_sql_connections.pop(path, None)
    if con is None:
        con = sqlite3.connect(f"file:{quote(path)}?mode=ro", uri=True, isolation_level=None)
        for pragma in ("query_only=1", "trusted_schema=0", "temp_store=MEMORY", "mmap_size=0"):
            con.execute(f"PRAGMA {pragma}")
        con.execute(f"PRAGMA hard_heap_limit={_HEAP_LIMIT}")
        for limit, value in _LIMITS.items():
            con.setlimit(limit, value)
        con.set_authorizer(_authorize)
        con.set_progress_handler(_past_deadline, _PROGRESS_EVERY)
        if len(_toolgym_sql_connections) >= _MAX_OPEN:
            oldest = next(iter(_toolgym_sql_connections))
            _toolgym_sql_connections.pop(oldest).close()
    _toolgym_sql_connections[path] = con  # most recently used last
    return con


def _plain(value):
    if isinstance(value, bytes):
        return {"blob": value.hex()}
    return value


def _cut(value):
    if isinstance(value, str) and len(value) > _CELL_CHARS:
        return value[:_CELL_CHARS] + "…"
    return value


def _run(con, query, timeout, keep_rows, count_rows, max_bytes, exact):
    """One query: its columns, the first ``keep_rows`` rows, and how many rows it has (counting stops at
    ``count_rows``). ``exact`` keeps cells whole (comparison); otherwise long cells are cut (display)."""
    started = time.monotonic()
    _toolgym_sql_deadline[0] = started + timeout
    cursor = None
    try:
        cursor = con.execute(query)
        if cursor.description is None:
            return {"ok": False, "kind": "sql", "error": "not a query: nothing to select (write one SELECT)"}
        columns = [d[0] for d in cursor.description]
        rows, total, size, complete = [], 0, 0, True
        while True:
            batch = cursor.fetchmany(256)
            if not batch:
                break
            for row in batch:
                if total < keep_rows:
                    cells = [_plain(v) if exact else _cut(_plain(v)) for v in row]
                    size += sum(len(c) if isinstance(c, str) else 16 for c in cells)
                    rows.append(cells)
                total += 1
            if size > max_bytes:
                return {"ok": False, "kind": "too_large", "error": f"the result is over {max_bytes:,} bytes"}
            if total >= count_rows:
                complete = False
                break
            if _past_deadline():
                raise sqlite3.OperationalError("interrupted")
        elapsed = time.monotonic() - started
        return {
            "ok": True,
            "columns": columns,
            "rows": rows,
            "total": total,
            "complete": complete,
            "s": elapsed,
        }
    except (sqlite3.Error, MemoryError, OverflowError, ValueError) as exc:
        interrupted = str(exc) == "interrupted" and _past_deadline()
        return {"ok": False, "kind": "timeout" if interrupted else "sql", "error": str(exc)}
    finally:
        _toolgym_sql_deadline[0] = float("inf")
        if cursor is not None:
            cursor.close()


def _toolgym_sql_call(request_json):
    request = json.loads(request_json)
    try:
        con = _open(request["db"])
    except sqlite3.Error as exc:
        _reply({"open_error": str(exc)})
        return
    _reply(
        _run(
            con,
            request["query"],
            request["timeout"],
            request["keep_rows"],
            request["count_rows"],
            request["max_bytes"],
            request["exact"],
        )
    )


def _reply(message):
    """Print the reply, or, if it is long, keep it and say how long: the caller fetches it in chunks
    (``_toolgym_sql_chunk``), so no call's output comes near the session's output cap."""
    text = json.dumps(message)
    if len(text) <= _CHUNK:
        _toolgym_sql_pending[0] = ""
        print(text)
    else:
        _toolgym_sql_pending[0] = text
        print(json.dumps({"pending": len(text), "chunk": _CHUNK}))


def _toolgym_sql_check(root):
    """Whether this process can read the database directory (it runs as another user than the host). Tried,
    not asked with ``os.access``: that answers for the real uid, while files are opened with the file-system
    uid (uid 0 without capabilities in a container, see the sandbox's ``unprivileged_user``)."""
    import os

    try:
        with os.scandir(root) as entries:
            next(entries, None)
        ok = True
    except OSError:
        ok = False
    print(json.dumps({"readable": ok}))


def _toolgym_sql_chunk(start):
    print(_toolgym_sql_pending[0][start : start + _CHUNK])
