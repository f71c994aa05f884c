"""Read-only SQL on SQLite files, run in sandboxed interpreter sessions: what the sql tool and the SQL
verifier share.

Why a sandbox for SQL: the query is model-written code, and SQLite is a C library with a history of memory
bugs reachable from SQL; a runaway query can also eat memory or a core. So queries never run in the trainer's
process. An engine keeps a few long-lived sessions of its own ``LocalSandbox`` (the same layers as the python
tool: namespaces or Landlock, seccomp, an unprivileged user, rlimits), each a Python interpreter that has
executed ``toolgym/sql/harness.py`` once and keeps its read-only connections open. A query is one small
call into one of them (a fraction of a millisecond, where a fresh process would cost several), and the guards
inside (read-only open, an allowlist authorizer, limits, a deadline) are described in the harness. The sandbox
exposes only the engine's ``root`` directory (where the database files are) besides the interpreter,
read-only.

A session that dies (a query it could not interrupt ran into the hard timeout, memory, a crash) is replaced;
the query is reported as the query's failure (timeout, out of memory), never as an empty result. A failure of
the sandbox itself raises ``SqlInfraError``: the caller reports it as infrastructure, never as the model's
mistake (a tool ``infra_error``, a verdict ``error``).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolgym.sandbox import ExecResult, Limits, LocalSandbox, SandboxUnavailable
from toolgym.sandbox.limits import MiB

HARNESS = Path(__file__).with_name("harness.py")
#: calls a session serves before it is replaced (its CPU budget is for its whole life)
RECYCLE_AFTER = 2_000
#: how much longer than a query's own deadline a session may take before it is killed
HARD_TIMEOUT_MARGIN = 5.0
DEFAULT_LIMITS = Limits(
    timeout_s=60,
    cpu_s=120,
    memory_bytes=768 * MiB,
    disk_bytes=16 * MiB,
    file_size_bytes=0,
    processes=4,
)


class SqlInfraError(RuntimeError):
    """The sandbox could not run the query: not the query's fault."""


@dataclass(frozen=True)
class QueryResult:
    """A query's outcome. ``ok``: ``columns``, the ``rows`` kept and ``total`` (all rows, unless ``complete``
    is False: counting stopped at the cap). Otherwise ``error`` and its ``kind``: ``sql`` (the database's
    error message), ``timeout``, ``too_large`` or ``memory``."""

    ok: bool
    columns: tuple[str, ...] = ()
    rows: tuple[tuple[Any, ...], ...] = field(default=(), repr=False)
    total: int = 0
    complete: bool = True
    error: str = ""
    kind: str = ""
    seconds: float = 0.0


class _SqlSession:
    """One sandboxed interpreter with the harness loaded."""

    def __init__(self, sandbox: LocalSandbox, limits: Limits, root: Path):
        self.session = sandbox.session(limits=limits)
        self.calls = 0
        loaded = self.session.run(HARNESS.read_text(), timeout=30)
        if not loaded.ok:
            self.session.close()
            raise SqlInfraError(f"the SQL sandbox did not start: {_describe(loaded)}")
        check = self.session.run(f"_toolgym_sql_check({str(root)!r})", timeout=30)
        if not (check.ok and json.loads(check.stdout).get("readable")):
            self.session.close()
            raise SqlInfraError(
                f"the SQL sandbox cannot read {root}: its queries run as another, unprivileged user, so the "
                "folder of the databases (and the files in it) must be readable by others (chmod o+rX)"
            )

    def whole_reply(self, res: ExecResult) -> ExecResult:
        """The call's reply, with a long one fetched in chunks (see the harness's ``_reply``)."""
        if not res.ok or not res.stdout.startswith('{"pending": '):
            return res
        try:
            header = json.loads(res.stdout)
            length, chunk = int(header["pending"]), int(header["chunk"])
        except (ValueError, KeyError, TypeError) as exc:
            raise SqlInfraError(f"malformed reply from the SQL sandbox: {exc}") from None
        parts = []
        for start in range(0, length, chunk):
            part = self.session.run(f"_toolgym_sql_chunk({start})", timeout=30)
            if not part.ok:
                raise SqlInfraError(f"the SQL sandbox failed mid-reply: {_describe(part)}")
            parts.append(part.stdout.removesuffix("\n"))
        return res.model_copy(update={"stdout": "".join(parts)})

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.session.close()


class SqlEngine:
    """Runs read-only queries on the SQLite files under ``root`` in ``workers`` sandboxed sessions."""

    def __init__(self, root: str | Path, workers: int = 2, limits: Limits | None = None):
        self.root = Path(root).resolve()
        self._prefix = str(self.root).rstrip("/") + "/"
        if not self.root.is_dir():
            raise FileNotFoundError(f"no database directory at {self.root}")
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.workers = workers
        self.limits = limits or DEFAULT_LIMITS
        self._sandbox: LocalSandbox | None = None
        self._idle: list[_SqlSession] = []
        self._live = 0
        self._closed = False
        self._cond = threading.Condition()

    @property
    def sandbox(self) -> LocalSandbox:
        with self._cond:
            if self._sandbox is None:
                if self._closed:
                    raise SqlInfraError("the SQL engine is closed")
                try:
                    self._sandbox = LocalSandbox(
                        limits=self.limits,
                        workers=1,
                        preload=("sqlite3", "json", "urllib.parse"),
                        max_sessions=self.workers,
                        extra_paths=[str(self.root)],
                    )
                except SandboxUnavailable as exc:
                    raise SqlInfraError(f"no sandbox to run SQL in: {exc}") from exc
            return self._sandbox

    def query(
        self,
        db: str | Path,
        sql: str,
        *,
        timeout: float = 5.0,
        keep_rows: int = 100_000,
        count_rows: int = 100_000,
        max_bytes: int = 16 * MiB,
        exact: bool = True,
    ) -> QueryResult:
        """Run one query on the database file ``db`` (under ``root``) and return its outcome.

        ``keep_rows`` rows are returned, counting goes on to ``count_rows``; ``exact`` keeps cells whole (for
        comparing results), otherwise long cells are cut (for showing them). Raises ``SqlInfraError`` only
        when the sandbox failed; a bad, slow or huge query is a ``QueryResult`` with ``ok=False``.
        """
        path = str(db)
        if not path.startswith(self._prefix):  # (a catalog's paths are under the resolved root already)
            path = os.path.realpath(path)
            if not path.startswith(self._prefix):
                raise ValueError(f"database {path} is not under this engine's root {self.root}")
        request = {
            "db": path,
            "query": sql,
            "timeout": float(timeout),
            "keep_rows": int(keep_rows),
            "count_rows": int(count_rows),
            "max_bytes": int(max_bytes),
            "exact": bool(exact),
        }
        code = f"_toolgym_sql_call({json.dumps(request)!r})"
        for attempt in range(2):
            session = self._acquire()
            healthy = False
            try:
                res = session.session.run(code, timeout=timeout + HARD_TIMEOUT_MARGIN)
                session.calls += 1
                lost = res.session_reset or res.status == "killed"
                if lost and attempt == 0:  # the process was gone or died: once more, on a fresh one
                    continue
                if res.status == "killed":  # twice: the query itself brings the process down
                    return QueryResult(False, error="the query crashed the database engine", kind="crash")
                result = _result(session.whole_reply(res), timeout)
                healthy = res.ok
                return result
            finally:
                self._release(session, healthy)
        raise SqlInfraError("the SQL session was lost twice in a row")  # (not reached)

    # -- sessions ------------------------------------------------------------------------------------------

    def _acquire(self) -> _SqlSession:
        with self._cond:
            while True:
                if self._closed:
                    raise SqlInfraError("the SQL engine is closed")
                if self._idle:
                    return self._idle.pop()
                if self._live < self.workers:
                    self._live += 1
                    break
                self._cond.wait()
        try:
            return _SqlSession(self.sandbox, self.limits, self.root)
        except BaseException:
            with self._cond:
                self._live -= 1
                self._cond.notify()
            raise

    def _release(self, session: _SqlSession, healthy: bool) -> None:
        keep = healthy and session.calls < RECYCLE_AFTER
        with self._cond:
            if keep and not self._closed:
                self._idle.append(session)
                session = None  # type: ignore[assignment]
            else:
                self._live -= 1
            self._cond.notify()
        if session is not None:
            session.close()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            sandbox, self._sandbox = self._sandbox, None
            self._cond.notify_all()
        for session in idle:
            session.close()
        if sandbox is not None:
            sandbox.close()


def _describe(res: ExecResult) -> str:
    text = (res.stderr or res.stdout or "").strip().splitlines()
    return f"{res.status}: {res.detail or (text[-1] if text else '')}"


def _result(res: ExecResult, timeout: float) -> QueryResult:
    """The query's outcome from the session's reply. The reply is untrusted text (it comes from a process
    that ran the query), so it is parsed strictly; anything unexpected is the sandbox's failure."""
    too_slow = f"the query ran past the {timeout:g} s limit"
    if res.status == "timeout":
        return QueryResult(False, error=too_slow, kind="timeout")
    if res.status == "memory":
        return QueryResult(False, error="out of memory", kind="memory")
    if res.status != "ok":
        raise SqlInfraError(f"the SQL sandbox failed: {_describe(res)}")
    try:
        reply = json.loads(res.stdout)
        if "open_error" in reply:
            raise SqlInfraError(f"cannot open the database: {reply['open_error']}")
        if not reply["ok"]:
            kind = str(reply["kind"])
            error = too_slow if kind == "timeout" else str(reply["error"])
            return QueryResult(False, error=error, kind=kind)
        rows = tuple(tuple(_value(v) for v in row) for row in reply["rows"])
        return QueryResult(
            True,
            columns=tuple(str(c) for c in reply["columns"]),
            rows=rows,
            total=int(reply["total"]),
            complete=bool(reply["complete"]),
            seconds=float(reply["s"]),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise SqlInfraError(f"malformed reply from the SQL sandbox: {type(exc).__name__}: {exc}") from None


def _value(value: Any) -> Any:
    if isinstance(value, dict):
        return bytes.fromhex(value["blob"])
    if value is None or isinstance(value, int | float | str):
        return value
    raise TypeError(f"unexpected cell {value!r:.50}")


# ------------------------------------------------------------------------------------------ one per root

_ENGINES: dict[tuple[int, str], SqlEngine] = {}
_ENGINES_LOCK = threading.Lock()


def sql_engine(root: str | Path) -> SqlEngine:
    """The process's engine for the databases under ``root`` (created on first use, closed at exit). Every
    env, tool and verifier on the same directory shares it: its sessions and its sandbox start once."""
    pid = os.getpid()
    engine = _ENGINES.get((pid, str(root)))  # the path as given: every query asks, resolving costs
    if engine is not None:
        return engine
    resolved = str(Path(root).resolve())
    with _ENGINES_LOCK:
        engine = _ENGINES.get((pid, resolved))
        if engine is None:
            engine = _ENGINES[(pid, resolved)] = SqlEngine(resolved)
        _ENGINES[(pid, str(root))] = engine
        return engine


def close_sql_engines() -> None:
    """Close every engine of this process (the next use starts new ones)."""
    with _ENGINES_LOCK:
        engines = {id(e): e for (pid, _), e in _ENGINES.items() if pid == os.getpid()}.values()
        _ENGINES.clear()
    for engine in engines:
        engine.close()


atexit.register(close_sql_engines)
