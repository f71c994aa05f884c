"""Per-trajectory tool state on the tool server: one instance of each stateful tool per trajectory.

A stateful tool (one that overrides ``start_episode``/``end_episode``, like ``python`` with its interpreter
session) keeps one episode at a time, so the server gives every trajectory (``session_id``) its own
instances, made from the same factory with the same options, and serialises that trajectory's calls (a
session runs one snippet at a time, in order). Stateless tools are shared by everyone.

State is freed when the client says so (verl-tool's ``finish``/``is_last_step``, ``DELETE /sessions/{id}``,
a final answer) or when a trajectory has been idle for ``idle_timeout`` seconds (a trainer that crashed
never says goodbye). ``max_sessions`` bounds the live trajectories: a new one beyond it is refused
(``TooManySessions``, answered 503 with Retry-After) rather than evicting someone's state.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from toolgym.tools.base import Tool
from toolgym.tools.remote import is_stateful


class TooManySessions(RuntimeError):
    """Every session slot holds a live trajectory; retry later or raise ``max_sessions``."""


@dataclass
class _Session:
    tools: dict[str, Tool] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    last_used: float = field(default_factory=time.monotonic)
    busy: int = 0
    closed: bool = False


class ToolSessions:
    """The trajectories' tool instances. Used from one event loop; closing tools runs in worker threads
    because a tool's ``close`` may block (killing a sandbox process)."""

    def __init__(
        self,
        factories: dict[str, Callable[[], Tool]],
        shared: dict[str, Tool],
        *,
        idle_timeout: float,
        max_sessions: int,
    ):
        self._factories = factories  # stateful tools: a new instance per trajectory
        self._shared = shared  # stateless tools: one instance for everyone
        self.idle_timeout = idle_timeout
        self.max_sessions = max_sessions
        self._sessions: dict[str, _Session] = {}
        self.opened = 0
        self.closed = 0
        self.expired = 0

    def __len__(self) -> int:
        return len(self._sessions)

    @contextlib.asynccontextmanager
    async def use(self, name: str, session_id: str | None) -> AsyncIterator[Tool]:
        """The instance of tool ``name`` for ``session_id``, held exclusively for one call.

        A stateful tool without a session id gets a throwaway instance (one call, then closed)."""
        if name in self._shared:
            yield self._shared[name]
            return
        if session_id is None:
            tool = self._factories[name]()
            tool.start_episode("oneshot")
            try:
                yield tool
            finally:
                await asyncio.to_thread(_release, tool, "oneshot")
            return
        while True:  # a session closed while this call waited for it is replaced by a fresh one
            session = self._open(session_id)
            session.busy += 1
            try:
                async with session.lock:
                    if session.closed:
                        continue
                    held = session.tools.get(name)
                    if held is None:
                        held = session.tools[name] = self._factories[name]()
                        held.start_episode(session_id)
                    yield held
                    return
            finally:
                session.busy -= 1
                session.last_used = time.monotonic()

    def _open(self, session_id: str) -> _Session:
        session = self._sessions.get(session_id)
        if session is None:
            if len(self._sessions) >= self.max_sessions:
                raise TooManySessions(
                    f"{len(self._sessions)} trajectories hold state (max_sessions={self.max_sessions}); "
                    "finish some, or raise --max-sessions"
                )
            session = self._sessions[session_id] = _Session()
            self.opened += 1
        return session

    async def close(self, session_id: str) -> bool:
        """Free a trajectory's state (after its running call, if any); False if it held none."""
        session = self._sessions.pop(session_id, None)
        if session is None:
            return False
        self.closed += 1
        session.closed = True
        async with session.lock:
            await asyncio.to_thread(_release_all, session.tools, session_id)
        return True

    async def sweep(self, now: float | None = None) -> int:
        """Free the trajectories idle for longer than ``idle_timeout``; returns how many."""
        now = time.monotonic() if now is None else now
        stale = [
            sid for sid, s in self._sessions.items() if s.busy == 0 and now - s.last_used > self.idle_timeout
        ]
        for sid in stale:
            if await self.close(sid):
                self.expired += 1
        return len(stale)

    async def close_all(self) -> None:
        for sid in list(self._sessions):
            await self.close(sid)
        for tool in self._shared.values():
            await asyncio.to_thread(tool.close)


def _release(tool: Tool, episode_id: str) -> None:
    try:
        tool.end_episode(episode_id)
    finally:
        tool.close()


def _release_all(tools: dict[str, Tool], episode_id: str) -> None:
    for tool in tools.values():
        with contextlib.suppress(Exception):  # one tool failing to close must not keep the others' state
            _release(tool, episode_id)


__all__ = ["TooManySessions", "ToolSessions", "is_stateful"]
