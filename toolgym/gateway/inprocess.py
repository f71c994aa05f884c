"""The gateway in process: the same app served on the running event loop, on a free local port, in front of
an engine the caller already has (a trainer's vLLM, its server manager).

Trainers run one per event loop (:func:`gateway_for_loop`): an agent program's HTTP calls land on the loop
that owns the trainer's engine client, so no call crosses threads.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

from toolgym.gateway.app import create_app
from toolgym.gateway.core import GatewayConfig, GatewayCore
from toolgym.rollout.chat import ChatRenderer
from toolgym.rollout.clients.base import LLMClient
from toolgym.rollout.host import EpisodeHost

#: seconds an idle keep-alive connection stays open (uvicorn's default is 5): an agent's connection idles
#: while its tools run and while other sessions' calls are served, and a client that reuses it just as the
#: server closes it gets a connection error (under load, 256 sessions on two cores, every few runs)
KEEP_ALIVE_S = 120


class Gateway:
    """``async with Gateway(config, client=..., renderer=...) as gateway:`` — ``gateway.url`` serves the
    gateway's HTTP API (``toolgym serve gateway``'s) until the block ends; ``gateway.core`` is its work."""

    def __init__(
        self,
        config: GatewayConfig,
        *,
        client: LLMClient | None = None,
        renderer: ChatRenderer | None = None,
        host: EpisodeHost | None = None,
        bind: str = "127.0.0.1",
        port: int = 0,
    ):
        self.core = GatewayCore(config, client, renderer, host)
        self.app = create_app(config, core=self.core)
        self.bind, self.port = bind, port
        self._server: Any = None
        self._task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("the gateway is not started: use it as `async with Gateway(...)`")
        return f"http://{self.bind}:{self.port}"

    def session_url(self, session_id: str) -> str:
        """The OpenAI base URL of one session (``.../sessions/{id}/v1``)."""
        return f"{self.url}/sessions/{session_id}/v1"

    async def start(self) -> Gateway:
        import uvicorn

        config = uvicorn.Config(
            self.app,
            host=self.bind,
            port=self.port,
            log_level="warning",
            lifespan="on",
            backlog=4096,
            timeout_keep_alive=KEEP_ALIVE_S,
        )
        server = uvicorn.Server(config)
        self._task = asyncio.create_task(server.serve())
        while not server.started:
            if self._task.done():  # it failed to start: say why
                self._task.result()
                raise RuntimeError("the in-process gateway stopped before it started")
            await asyncio.sleep(0.01)
        self.port = server.servers[0].sockets[0].getsockname()[1]
        self._server = server
        return self

    async def stop(self) -> None:
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            await self._task
        self._server = self._task = None

    async def __aenter__(self) -> Gateway:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


_PER_LOOP: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Task[Gateway]]] = (
    weakref.WeakKeyDictionary()
)


async def gateway_for_loop(
    name: str, config: GatewayConfig, *, client: LLMClient, renderer: ChatRenderer, host: EpisodeHost
) -> Gateway:
    """The running loop's gateway called ``name`` (started on first use, for the loop's lifetime): what a
    trainer's agent loop, made once per sample, shares with every sample on its loop. Samples that ask
    while it is starting wait for the same start (verl starts a whole chunk of samples at once)."""
    loop = asyncio.get_running_loop()
    starts = _PER_LOOP.setdefault(loop, {})
    start = starts.get(name)
    if start is None or (start.done() and start.exception() is not None):  # first use, or a failed start
        gateway = Gateway(config, client=client, renderer=renderer, host=host)
        start = starts[name] = loop.create_task(gateway.start())
    return await asyncio.shield(start)


__all__ = ["Gateway", "gateway_for_loop"]
