"""Tools that run on a ``toolgym serve tools`` server: ``RemoteTool`` and its ``ToolServerClient``.

Why: a trainer with hundreds of rollout workers should not start a sandbox in each; one tool server (or a
Ray Serve deployment of them) runs the code for all. An env takes the server's URL and behaves exactly as
with local tools::

    env = gym.make("toolgym/PythonCode-v0", tool_server="http://127.0.0.1:8002")

``RemoteTool`` wraps the tool the env built: the name, description, argument schema, validation and
text-body rule stay the local tool's (so the parser and the prompt are unchanged), only ``run`` goes over
HTTP, and the server returns the same ``ToolResult`` the local tool would. A stateful tool's episode hooks
become a server-side session (``session_id``), freed on ``end_episode`` (``DELETE /sessions/{id}``).

The client sends every call through ``POST /batch``: calls made at the same time from many threads or
tasks (envs stepping in parallel) go out together, up to ``batch_size`` per request on at most
``max_workers`` connections, at least ``request_interval`` seconds apart. Transport failures, 429 and 5xx
are retried ``retries`` times with the shared backoff (``toolgym.util.retry``, honouring
``Retry-After``); a refused request (other 4xx) raises at once. A call that finally fails raises
``ToolServerError``, which the tool turns into an ``infra_error`` result: our failure, not the model's.

Why one module of this length: it holds both ends of one wire format (the bodies, which the server imports
too), the batching client and the tool over it, so that the client and the server cannot drift apart.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, ClassVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from toolgym.core.types import ToolCall, ToolResult
from toolgym.tools.base import Tool
from toolgym.util.http import RetryingJsonClient

log = logging.getLogger("toolgym.tools.remote")


# -- the typed API's bodies (the server imports these) -------------------------------------------------------


class CallItem(BaseModel):
    """One call in ``POST /batch``. ``session_id`` names the trajectory whose state a stateful tool uses;
    without it a stateful tool runs on fresh state that is dropped after the call."""

    model_config = ConfigDict(extra="forbid")

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    session_id: str | None = None


class BatchCalls(BaseModel):
    model_config = ConfigDict(extra="forbid")

    calls: list[CallItem]


class BatchResults(BaseModel):
    results: list[ToolResult]


class ToolInfo(BaseModel):
    """What ``GET /tools`` says about each tool: its OpenAI schema parts and whether it keeps state."""

    name: str
    description: str
    parameters: dict[str, Any]
    primary_arg: str | None = None
    stateful: bool = False


def is_stateful(tool: Tool) -> bool:
    """A tool with per-episode state: it overrides the episode hooks of ``Tool``."""
    if isinstance(tool, RemoteTool):
        return is_stateful(tool.local)
    cls = type(tool)
    return cls.start_episode is not Tool.start_episode or cls.end_episode is not Tool.end_episode


class ToolServerError(RuntimeError):
    """The tool server could not run the call (after retries, or because it refused the request)."""


# -- the client ----------------------------------------------------------------------------------------------


class _Pending:
    __slots__ = ("future", "item")

    def __init__(self, item: CallItem):
        self.item = item
        self.future: Future[ToolResult] = Future()


class ToolServerClient(RetryingJsonClient):
    """Thread-safe client of one tool server (see the module docstring for batching and retries).

    Args:
        url: the server's base address, ``http://host:port``.
        timeout: seconds for one HTTP attempt (a python call may take the tool's own timeout, so keep this
            above it).
        retries: extra attempts after the first for a retryable failure.
        backoff: the first wait between attempts, doubled after each (with jitter), at most 30 s.
        max_workers: requests in flight at once.
        request_interval: the least time between two requests this client starts (0: none).
        batch_size: the most calls in one request.
        transport: replaces the network (tests, proxies).
    """

    error = ToolServerError
    _shared: ClassVar[dict[str, ToolServerClient]] = {}
    _shared_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 60.0,
        retries: int = 3,
        backoff: float = 0.5,
        max_workers: int = 16,
        request_interval: float = 0.0,
        batch_size: int = 64,
        transport: httpx.BaseTransport | None = None,
    ):
        if timeout <= 0 or retries < 0 or backoff < 0 or max_workers < 1 or batch_size < 1:
            raise ValueError(
                "need timeout > 0, retries >= 0, backoff >= 0, max_workers >= 1, batch_size >= 1"
            )
        if request_interval < 0:
            raise ValueError(f"request_interval must be >= 0, got {request_interval}")
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"a tool server URL looks like http://host:8002, got {url!r}")
        super().__init__(
            url,
            timeout=timeout,
            retries=retries,
            backoff=backoff,
            max_workers=max_workers,
            transport=transport,
        )
        self.batch_size = batch_size
        self.max_workers = max_workers
        self.request_interval = request_interval
        #: prefixes this client's session ids, so trajectories of different processes never collide
        self.instance = uuid.uuid4().hex[:12]
        self._queue: queue.SimpleQueue[_Pending | None] = queue.SimpleQueue()
        self._slots = threading.BoundedSemaphore(max_workers)
        self._pool = ThreadPoolExecutor(max_workers, thread_name_prefix="toolgym-tool-client")
        self._dispatcher: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._tools: dict[str, ToolInfo] | None = None
        self._closed = False

    @classmethod
    def shared(cls, url: str) -> ToolServerClient:
        """One client per URL in this process (default settings), so many envs share its connections."""
        key = url.rstrip("/")
        with cls._shared_lock:
            client = cls._shared.get(key)
            if client is None or client._closed:
                client = cls._shared[key] = cls(key)
            return client

    def __repr__(self) -> str:
        return f"ToolServerClient({self.url!r})"

    # -- calls

    def call(self, name: str, arguments: dict[str, Any], session_id: str | None = None) -> ToolResult:
        """Run one call on the server (batched with concurrent calls); raises ``ToolServerError``."""
        return self._submit(CallItem(name=name, arguments=arguments, session_id=session_id)).result()

    async def acall(self, name: str, arguments: dict[str, Any], session_id: str | None = None) -> ToolResult:
        """``call`` without blocking the event loop."""
        item = CallItem(name=name, arguments=arguments, session_id=session_id)
        return await asyncio.wrap_future(self._submit(item))

    def call_batch(self, items: Sequence[CallItem]) -> list[ToolResult]:
        """Run ``items`` (in chunks of ``batch_size``, in parallel); the results come back in order."""
        futures = [self._submit(item) for item in items]
        return [f.result() for f in futures]

    def tools(self) -> dict[str, ToolInfo]:
        """The server's tools (fetched once)."""
        if self._tools is None:
            body = self._request("GET", "/tools", None)
            try:
                self._tools = {t.name: t for t in (ToolInfo.model_validate(x) for x in body["tools"])}
            except (ValidationError, KeyError, TypeError) as exc:
                raise ToolServerError(f"{self.url}/tools sent a malformed tool list: {exc}") from None
        return self._tools

    def close_session(self, session_id: str) -> bool:
        """Free a trajectory's state on the server; True if it held some."""
        return bool(self._request("DELETE", f"/sessions/{quote(session_id, safe='')}", None).get("closed"))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._queue.put(None)
        self._pool.shutdown(wait=False, cancel_futures=True)
        super().close()

    # -- batching

    def _submit(self, item: CallItem) -> Future[ToolResult]:
        if self._closed:
            raise ToolServerError(f"the client of {self.url} is closed")
        pending = _Pending(item)
        self._ensure_dispatcher()
        self._queue.put(pending)
        return pending.future

    def _ensure_dispatcher(self) -> None:
        if self._dispatcher is None:
            with self._start_lock:
                if self._dispatcher is None:
                    self._dispatcher = threading.Thread(
                        target=self._dispatch, name="toolgym-tool-client-dispatch", daemon=True
                    )
                    self._dispatcher.start()

    def _dispatch(self) -> None:
        """Take calls off the queue: wait for a free connection (and the request interval), then send
        everything queued meanwhile, up to ``batch_size``, as one request."""
        last_start = 0.0
        while True:
            first = self._queue.get()
            if first is None:
                return
            self._slots.acquire()
            wait = last_start + self.request_interval - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            batch = [first]
            while len(batch) < self.batch_size:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    self._queue.put(None)  # shut down after this batch
                    break
                batch.append(nxt)
            last_start = time.monotonic()
            try:
                self._pool.submit(self._send, batch)
            except RuntimeError as exc:  # the pool was shut down (close): fail what is left
                self._slots.release()
                for pending in batch:
                    pending.future.set_exception(ToolServerError(f"the client is closed: {exc}"))

    def _send(self, batch: list[_Pending]) -> None:
        try:
            body = self._request("POST", "/batch", {"calls": [p.item.model_dump() for p in batch]})
            try:
                results = BatchResults.model_validate(body).results
            except ValidationError as exc:
                raise ToolServerError(f"{self.url}/batch sent a malformed reply: {exc}") from None
            if len(results) != len(batch):
                raise ToolServerError(f"{self.url}/batch sent {len(results)} results for {len(batch)} calls")
        except Exception as exc:
            for pending in batch:
                pending.future.set_exception(exc)
        else:
            for pending, result in zip(batch, results):
                pending.future.set_result(result)
        finally:
            self._slots.release()


# -- the tool ------------------------------------------------------------------------------------------------


class RemoteTool(Tool):
    """``local`` (the tool the env built) with its ``run`` on a tool server; everything the model sees
    (name, description, schema, validation, the text-body rule) stays ``local``'s."""

    local: Tool

    def __init__(self, local: Tool, client: ToolServerClient):
        if isinstance(local, RemoteTool):
            local = local.local
        self.local = local
        self.client = client
        # instance attributes shadow the class-level protocol fields, so the parser sees the local tool
        self.name = local.name  # type: ignore[misc]
        self.description = local.description  # type: ignore[misc]
        self.Args = local.Args  # type: ignore[misc]
        self.primary_arg = local.primary_arg  # type: ignore[misc]
        self.stateful = is_stateful(local)
        self._session: str | None = None
        self._session_used = False
        self._checked = False

    def __repr__(self) -> str:
        return f"RemoteTool({self.name!r}, {self.client.url!r})"

    @property
    def parameters(self) -> dict[str, Any]:
        return self.local.parameters

    def schema(self) -> dict[str, Any]:
        return self.local.schema()

    def validate(self, call: ToolCall | dict[str, Any] | str) -> BaseModel:
        return self.local.validate(call)

    def _from_text(self, text: str) -> dict[str, Any]:
        return self.local._from_text(text)

    # -- calls

    def run(self, args: BaseModel) -> ToolResult:
        self._check()
        return self.client.call(self.name, args.model_dump(mode="json"), self._use_session())

    async def arun(self, args: BaseModel) -> ToolResult:
        if not self._checked:
            await asyncio.to_thread(self._check)
        return await self.client.acall(self.name, args.model_dump(mode="json"), self._use_session())

    def _use_session(self) -> str | None:
        if self._session is not None:
            self._session_used = True
        return self._session

    def _check(self) -> None:
        """Once: the server serves this tool with the same arguments (else every call would differ)."""
        if self._checked:
            return
        info = self.client.tools().get(self.name)
        if info is None:
            served = ", ".join(self.client.tools()) or "none"
            raise ToolServerError(
                f"the tool server {self.client.url} does not serve {self.name!r} (it serves: {served}); "
                f"start it with --tools including {self.name}"
            )
        if info.parameters != self.parameters:
            raise ToolServerError(
                f"the tool server's {self.name!r} takes other arguments than this env's "
                f"({info.parameters} vs {self.parameters}); serve the same tool version"
            )
        self._checked = True

    # -- episodes: a server-side session per episode

    def start_episode(self, episode_id: str) -> None:
        self._end_session()
        if self.stateful:
            self._session = f"{self.client.instance}:{episode_id}"

    def end_episode(self, episode_id: str) -> None:
        if self._session is not None and self._session.endswith(f":{episode_id}"):
            self._end_session()

    def close(self) -> None:
        self._end_session()
        self.local.close()

    def _end_session(self) -> None:
        session, used = self._session, self._session_used
        self._session, self._session_used = None, False
        if session is None or not used:
            return
        try:
            self.client.close_session(session)
        except ToolServerError as exc:  # the server frees it after its idle timeout anyway
            log.warning("could not free tool-server session %s: %s", session, exc)


def remote_tools(tools: Sequence[Tool], server: str | ToolServerClient) -> list[Tool]:
    """``tools`` running on ``server`` (a URL, using the process-wide client for it, or a client)."""
    client = server if isinstance(server, ToolServerClient) else ToolServerClient.shared(server)
    return [RemoteTool(tool, client) for tool in tools]


__all__ = [
    "BatchCalls",
    "BatchResults",
    "CallItem",
    "RemoteTool",
    "ToolInfo",
    "ToolServerClient",
    "ToolServerError",
    "is_stateful",
    "remote_tools",
]
