"""Tools from an MCP server: ``mcp_tools(server)`` makes each tool an MCP server lists a toolgym ``Tool``.

Why: MCP is how tools are shared now (verl's MCP tools, OpenEnv's ``/mcp`` route, verifiers' ``MCPEnv``,
ART's MCP-RL). With this, an env can train on any MCP server's tools in every action format::

    env = toolgym.make_env(tasks, mcp_tools(["python", "my_server.py"]), verifier)
    env = gym.make("toolgym/Search-v0", extra_tools=mcp_tools("http://127.0.0.1:8000/mcp"))

``server`` is a command list (the server runs as a child process and speaks over stdio) or an
``http(s)://…/mcp`` URL (streamable HTTP). Each MCP tool keeps its name, description and input schema (the
schema the model sees, and what the call's arguments are validated against with ``jsonschema`` before they
are sent). A result the server marks ``isError`` is an error observation (the parser writes the error
marker once); a call that outlives ``timeout`` is an error observation too. A transport failure is an
``infra_error`` result (our failure, not the model's) and the next call reconnects.

All tools of one ``mcp_tools`` call share one connection (one MCP session), opened on the first call and
closed when the last of them is closed (``env.close()``). ``per_episode=True`` opens a new session at each
episode instead, for servers that keep state per session (an interpreter), so one episode never sees
another's state.

The official ``mcp`` SDK (1.x or 2.x; the ``mcp`` extra) runs on an event loop in a daemon thread owned by
the connection; the tools' synchronous ``run`` waits on it.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from pydantic import BaseModel, ConfigDict

from toolgym.core.types import ToolCall, ToolResult
from toolgym.tools.base import Tool

#: seconds a tool call may take (the server's work included) before it is an error observation
DEFAULT_TIMEOUT_S = 30.0
#: seconds to start the server / open the session
CONNECT_TIMEOUT_S = 60.0


class MCPConnectionError(RuntimeError):
    """The MCP server could not be reached, or the session broke."""


class MCPConnection:
    """One MCP client session (stdio child process or streamable HTTP) on a private event loop thread.

    The session lives inside one task for its whole life (the SDK's transports are anyio task groups, which
    must be entered and left by the same task); calls are scheduled on the same loop."""

    def __init__(
        self, server: str | Sequence[str], *, env: dict[str, str] | None = None, cwd: str | None = None
    ):
        self.url: str | None
        self.command: list[str] | None
        if isinstance(server, str):
            if not server.startswith(("http://", "https://")):
                raise ValueError(
                    f"an MCP server is a command list (stdio) or an http(s)://.../mcp URL, got {server!r}"
                )
            self.url, self.command = server, None
        else:
            command = [str(part) for part in server]
            if not command:
                raise ValueError("the MCP server command is empty")
            self.url, self.command = None, command
        self.env, self.cwd = env, cwd
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._session: Any = None
        self._stop: asyncio.Event | None = None
        self._runner: Any = None
        self.users = 0

    def __repr__(self) -> str:
        return f"MCPConnection({self.url or self.command!r})"

    # -- lifecycle

    def session(self) -> Any:
        """The live session, connecting (or reconnecting after a failure) first."""
        with self._lock:
            if self._session is not None and self._runner is not None and not self._runner.done():
                return self._session
            self._disconnect_locked()
            loop = self._ensure_loop()
            ready: Any = asyncio.run_coroutine_threadsafe(self._open(), loop)
            try:
                self._runner = ready.result(CONNECT_TIMEOUT_S)
            except FutureTimeout:
                ready.cancel()
                raise MCPConnectionError(f"{self}: no session within {CONNECT_TIMEOUT_S:.0f} s") from None
            except Exception as exc:
                raise MCPConnectionError(f"{self}: cannot open a session: {_reason(exc)}") from exc
            return self._session

    def reconnect(self) -> None:
        """Drop the session; the next call opens a new one (a new MCP session: fresh server-side state)."""
        with self._lock:
            self._disconnect_locked()

    def close(self) -> None:
        with self._lock:
            self._disconnect_locked()
            loop, self._loop = self._loop, None
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="toolgym-mcp", daemon=True).start()
            self._loop = loop
        return self._loop

    def _disconnect_locked(self) -> None:
        runner, stop, loop = self._runner, self._stop, self._loop
        self._session = self._runner = self._stop = None
        if runner is None or loop is None or stop is None:
            return
        loop.call_soon_threadsafe(stop.set)
        done = asyncio.run_coroutine_threadsafe(asyncio.wait([runner], timeout=10), loop)
        try:
            done.result(15)
        except Exception:  # a server that hangs on shutdown is left to the loop thread
            runner.cancel()

    async def _open(self) -> Any:
        """Start the session task; returns it once the session is initialised (or raises its failure)."""
        ready: asyncio.Future = asyncio.get_running_loop().create_future()
        self._stop = asyncio.Event()
        task = asyncio.ensure_future(self._hold(ready, self._stop))
        await ready
        return task

    async def _hold(self, ready: asyncio.Future, stop: asyncio.Event) -> None:
        from mcp import ClientSession

        try:
            async with self._transport() as streams, ClientSession(streams[0], streams[1]) as session:
                await session.initialize()
                self._session = session
                ready.set_result(None)
                await stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))
            elif not isinstance(exc, Exception | asyncio.CancelledError):
                raise

    def _transport(self) -> Any:
        if self.url is not None:
            from mcp.client import streamable_http

            client = (
                getattr(streamable_http, "streamable_http_client", None)
                or streamable_http.streamablehttp_client
            )
            return client(self.url)
        from mcp.client.stdio import StdioServerParameters, stdio_client

        assert self.command is not None
        params = StdioServerParameters(
            command=self.command[0], args=self.command[1:], env=self.env, cwd=self.cwd
        )
        return stdio_client(params)

    # -- requests

    def run(self, coro_fn: Any, timeout: float) -> Any:
        """Run ``coro_fn(session)`` on the loop; ``TimeoutError`` past ``timeout``, ``MCPConnectionError``
        when the transport failed (the session is dropped: the next call reconnects)."""
        session = self.session()
        assert self._loop is not None
        future = asyncio.run_coroutine_threadsafe(coro_fn(session), self._loop)
        try:
            return future.result(timeout)
        except FutureTimeout:
            future.cancel()
            raise TimeoutError from None
        except Exception as exc:
            if _is_transport_failure(exc):
                self.reconnect()
                raise MCPConnectionError(f"{self}: {_reason(exc)}") from exc
            raise

    def list_tools(self) -> list[Any]:
        async def listing(session: Any) -> list[Any]:
            tools, cursor = [], None
            while True:
                page = await (session.list_tools(cursor) if cursor else session.list_tools())
                tools.extend(page.tools)
                cursor = getattr(page, "next_cursor", None) or getattr(page, "nextCursor", None)
                if not cursor:
                    return tools

        return self.run(listing, CONNECT_TIMEOUT_S)


class _Arguments(BaseModel):
    """Whatever object the model sent: the MCP tool's own JSON schema validates it (``MCPTool.validate``)."""

    model_config = ConfigDict(extra="allow")


class MCPTool(Tool):
    """One tool of an MCP server, called over the shared connection."""

    Args = _Arguments

    def __init__(self, connection: MCPConnection, info: Any, *, timeout: float, per_episode: bool):
        self.connection = connection
        # instance attributes shadow the class-level protocol fields (one class, a tool per server tool)
        self.name = info.name  # type: ignore[misc]
        self.description = (getattr(info, "description", None) or info.name).strip()  # type: ignore[misc]
        schema = getattr(info, "input_schema", None) or getattr(info, "inputSchema", None) or {}
        self._schema: dict[str, Any] = dict(schema) or {"type": "object", "properties": {}}
        self._schema.setdefault("type", "object")
        self.primary_arg = _primary_arg(self._schema)  # type: ignore[misc]
        self.timeout = float(timeout)
        self.per_episode = per_episode
        self._validator: Any = None
        self._closed = False
        connection.users += 1

    @property
    def parameters(self) -> dict[str, Any]:
        return json.loads(json.dumps(self._schema))

    def parameters_view(self) -> dict[str, Any]:
        return self._schema

    def validate(self, call: ToolCall | dict[str, Any] | str) -> BaseModel:
        """The arguments, checked against the server's JSON schema (jsonschema) before anything is sent."""
        arguments = self.arguments_object(call)
        problems = [_problem(e) for e in self._schema_validator().iter_errors(arguments)]
        if problems:
            raise ValueError(f"{self.name}: invalid arguments ({'; '.join(sorted(problems))})")
        return _Arguments(**arguments)

    def run(self, args: Any) -> ToolResult:
        arguments = args.model_dump()
        try:
            result = self.connection.run(
                lambda session: session.call_tool(self.name, arguments), self.timeout
            )
        except TimeoutError:
            return ToolResult(name=self.name, status="error", output=f"timed out after {self.timeout:g} s")
        except MCPConnectionError as exc:
            return ToolResult(name=self.name, status="infra_error", output=str(exc))
        is_error = bool(getattr(result, "is_error", None) or getattr(result, "isError", False))
        return ToolResult(name=self.name, status="error" if is_error else "ok", output=_result_text(result))

    def start_episode(self, episode_id: str) -> None:
        if self.per_episode:
            self.connection.reconnect()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.connection.users -= 1
        if self.connection.users <= 0:
            self.connection.close()

    def _schema_validator(self) -> Any:
        if self._validator is None:
            from jsonschema import validators

            cls = validators.validator_for(self._schema)
            self._validator = cls(self._schema)
        return self._validator


def mcp_tools(
    server: str | Sequence[str],
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    per_episode: bool = False,
    names: Sequence[str] | None = None,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
) -> list[Tool]:
    """The tools ``server`` lists, as toolgym tools sharing one connection (see the module docstring).

    ``names`` keeps only those tools (in that order; an unknown name is an error naming what the server
    has); ``env``/``cwd`` are the child process's for a stdio server."""
    connection = MCPConnection(server, env=env, cwd=cwd)
    try:
        listed = {info.name: info for info in connection.list_tools()}
    except Exception:
        connection.close()
        raise
    if names is not None:
        unknown = [n for n in names if n not in listed]
        if unknown:
            connection.close()
            raise ValueError(f"{server!r} has no tools {unknown}; it lists {sorted(listed)}")
        listed = {n: listed[n] for n in names}
    if not listed:
        connection.close()
        raise ValueError(f"{server!r} lists no tools")
    return [MCPTool(connection, info, timeout=timeout, per_episode=per_episode) for info in listed.values()]


def _result_text(result: Any) -> str:
    """The text parts of a ``CallToolResult``, or its structured content as JSON when it has no text."""
    parts = []
    for block in getattr(result, "content", None) or ():
        kind = getattr(block, "type", None)
        if kind == "text":
            parts.append(block.text)
        elif kind is not None:
            parts.append(f"[{kind} content]")
    if parts:
        return "\n".join(parts)
    structured = getattr(result, "structured_content", None) or getattr(result, "structuredContent", None)
    return json.dumps(structured) if structured is not None else ""


def _primary_arg(schema: dict[str, Any]) -> str | None:
    """The argument a bare text body fills (``<tool>body</tool>``): the only string property, or the only
    required one."""
    props = schema.get("properties") or {}
    strings = [name for name, p in props.items() if isinstance(p, dict) and p.get("type") == "string"]
    required = [name for name in schema.get("required") or () if name in strings]
    if len(strings) == 1:
        return strings[0]
    return required[0] if len(required) == 1 else None


def _problem(error: Any) -> str:
    where = ".".join(str(p) for p in error.absolute_path) or "arguments"
    return f"{where}: {error.message}"


#: the SDK's JSON-RPC error code for a session whose transport closed (``CONNECTION_CLOSED``, 1.x and 2.x)
_CONNECTION_CLOSED = -32000


def _is_transport_failure(exc: BaseException) -> bool:
    """The session is unusable (the server died, the socket broke): as opposed to a refused request."""
    import anyio

    if isinstance(exc, OSError | EOFError | anyio.ClosedResourceError | anyio.BrokenResourceError):
        return True
    if type(exc).__name__ in {"ConnectError", "RemoteProtocolError", "ReadError", "WriteError"}:
        return True
    error = getattr(exc, "error", None)  # the SDK's MCPError (McpError in 1.x) carries ErrorData
    return getattr(error, "code", None) == _CONNECTION_CLOSED or "connection closed" in str(exc).lower()


def _reason(exc: BaseException) -> str:
    inner = getattr(exc, "exceptions", None)  # an ExceptionGroup from the transport's task group
    if inner:
        return "; ".join(_reason(e) for e in inner)
    return f"{type(exc).__name__}: {exc}"


__all__ = ["DEFAULT_TIMEOUT_S", "MCPConnection", "MCPConnectionError", "MCPTool", "mcp_tools"]
