"""Admission control for a service under load: bounded work, a bounded queue, fast refusals, body limits.

Why: a tool server behind a few hundred rollout workers sees bursts far beyond what its sandbox can run. An
unbounded server accepts everything, every request waits, every client times out and retries, and the pile
grows (the retry storm). Here at most ``max_concurrency`` requests are processed at once, at most
``max_queue`` wait for a slot (each at most ``queue_timeout`` seconds), and anything beyond that is refused
at once with **503 and ``Retry-After``**, which the shared retry policy (``toolgym.util.retry``) backs off
on. A body over ``max_request_bytes`` is refused with 413 before it is read further.

A pure ASGI middleware (no per-request task or thread), applied only to the work endpoints
(``guarded(path)``), so ``/health`` and ``/metrics`` answer even when the work is saturated. It also times
every request into ``Metrics``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from toolgym.server.metrics import Metrics

# as starlette.types spells them (FastAPI's __call__ takes these)
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class Admission:
    def __init__(
        self,
        app: ASGIApp,
        *,
        metrics: Metrics,
        guarded: Callable[[str], bool],
        max_concurrency: int,
        max_queue: int,
        queue_timeout: float,
        retry_after: int,
        max_request_bytes: int,
        endpoint: Callable[[str], str] = lambda path: path,
    ):
        self.app = app
        self.metrics = metrics
        self.guarded = guarded
        self.max_concurrency = max_concurrency
        self.max_queue = max_queue
        self.queue_timeout = queue_timeout
        self.retry_after = retry_after
        self.max_request_bytes = max_request_bytes
        self.endpoint = endpoint  # the metrics label of a path (per-tool paths, not per session id)
        self.running = 0
        self.queued = 0
        self.refused = 0
        self._slots: asyncio.Semaphore | None = None  # made in the serving loop, on first use

    def gauges(self) -> dict[str, int]:
        return {
            "in_flight": self.running,
            "queue_depth": self.queued,
            "refused_overload": self.refused,
            "max_concurrency": self.max_concurrency,
            "max_queue": self.max_queue,
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        endpoint = self.endpoint(scope["path"])
        status = {"code": 500}

        async def timed_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            if self.guarded(scope["path"]):
                await self._admit(scope, receive, timed_send)
            else:
                await self.app(scope, receive, timed_send)
        finally:
            self.metrics.observe(endpoint, status["code"], time.perf_counter() - started)

    async def _admit(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.max_concurrency)
        waiting = self.running + self.queued >= self.max_concurrency
        if waiting and self.queued >= self.max_queue:
            self.refused += 1
            await _refuse(send, 503, "overloaded: every slot and queue place is taken", self.retry_after)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_request_bytes:
            await _refuse(send, 413, self._too_large(declared), None)
            return
        self.queued += 1
        try:
            if self._slots.locked():  # wait in the queue, at most queue_timeout
                await asyncio.wait_for(self._slots.acquire(), self.queue_timeout)
            else:  # a free slot: no timer (wait_for's task and timer cost more than the request's own work)
                await self._slots.acquire()
        except TimeoutError:
            self.refused += 1
            await _refuse(send, 503, f"overloaded: no slot within {self.queue_timeout:g} s", self.retry_after)
            return
        finally:
            self.queued -= 1
        self.running += 1
        try:
            body = await self._read_body(receive)
            if body is None:
                await _refuse(send, 413, self._too_large(None), None)
                return
            await self.app(scope, _replay(body, receive), send)
        finally:
            self.running -= 1
            self._slots.release()

    async def _read_body(self, receive: Receive) -> bytes | None:
        """The whole body, or None once it passes the limit (a chunked upload has no Content-Length)."""
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_request_bytes:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)

    def _too_large(self, size: int | None) -> str:
        got = f"{size:,} bytes" if size is not None else "more than that"
        return (
            f"request body too large: {got}; the limit is {self.max_request_bytes:,} bytes (split the batch)"
        )


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # after the body: wait for the disconnect, as the server would

    return replay


async def _refuse(send: Send, status: int, detail: str, retry_after: int | None) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if retry_after is not None:
        headers.append((b"retry-after", str(retry_after).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


__all__ = ["Admission"]
