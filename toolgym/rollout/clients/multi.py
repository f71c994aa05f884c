"""Several engines behind one :class:`~toolgym.rollout.clients.base.LLMClient`: whole episodes are spread over
them, so ``collect``, ``evaluate`` and the episode runner work unchanged on one engine or many.

Routing is by session: the runner sends every turn of an episode with the same ``request_id``, and the first
turn of a new episode goes to the least-loaded engine, where its later turns follow. Keeping an episode on one
engine keeps its prefix cache warm (each turn's prompt is the previous one plus a few tokens), which is worth
more than balancing single turns.

Load is the number of requests in flight on an engine: a slower or busier engine holds more of them. Ties
go to the engine with fewer live sessions (a session is live until it has been idle for ``session_idle_s``:
the runner does not say when an episode ends, so a quiet one is taken as finished and forgotten; should it
come back, it is routed as a new one and only loses its warm cache), then to the lowest index, so a fresh
batch is dealt out round-robin.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from toolgym.rollout.clients.base import Generation, LLMClient, Sampling

__all__ = ["MultiClient"]


@dataclass
class _Engine:
    client: LLMClient
    in_flight: int = 0
    #: live session id -> time of its last request (or of its request in flight)
    sessions: dict[str, float] = field(default_factory=dict)
    #: sessions this engine was given since the start (kept for reports and tests)
    episodes: int = 0


class MultiClient:
    """Route each episode (``request_id``) to one of ``clients``, the least-loaded when it starts.

    ``on_close`` runs after every client is closed (e.g. to stop a Ray instance the engines were started on).
    """

    def __init__(
        self,
        clients: Sequence[LLMClient],
        *,
        session_idle_s: float = 120.0,
        on_close: Callable[[], Awaitable[None] | None] | None = None,
    ):
        if not clients:
            raise ValueError("MultiClient needs at least one client")
        self._engines = [_Engine(c) for c in clients]
        self._route: dict[str, _Engine] = {}
        self.session_idle_s = session_idle_s
        self._on_close = on_close

    @property
    def clients(self) -> list[LLMClient]:
        return [e.client for e in self._engines]

    @property
    def episodes_per_engine(self) -> list[int]:
        """How many episodes (sessions) each engine was given, in the order of ``clients``."""
        return [e.episodes for e in self._engines]

    async def generate(self, prompt_ids: list[int], sampling: Sampling, request_id: str) -> Generation:
        engine = self._engine_for(request_id)
        engine.in_flight += 1
        engine.sessions[request_id] = time.monotonic()
        try:
            return await engine.client.generate(prompt_ids, sampling, request_id)
        finally:
            engine.in_flight -= 1
            engine.sessions[request_id] = time.monotonic()

    def _engine_for(self, request_id: str) -> _Engine:
        engine = self._route.get(request_id)
        if engine is not None:
            return engine
        self._forget_idle_sessions()
        engine = min(self._engines, key=lambda e: (e.in_flight, len(e.sessions)))
        self._route[request_id] = engine
        engine.episodes += 1
        return engine

    def _forget_idle_sessions(self) -> None:
        horizon = time.monotonic() - self.session_idle_s
        for engine in self._engines:
            idle = [s for s, last in engine.sessions.items() if last < horizon]
            for session in idle:
                del engine.sessions[session]
                self._route.pop(session, None)

    async def close(self) -> None:
        try:
            await asyncio.gather(*(e.client.close() for e in self._engines))
        finally:
            if self._on_close is not None:
                done = self._on_close()
                if done is not None:
                    await done
