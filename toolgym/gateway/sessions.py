"""The gateway's sessions: each one's token record, its env (when it plays a toolgym task), its verdict, and
the store that caps how many are open and expires idle ones.

A session serialises its own calls (one lock each), so the concurrent requests of many sessions never cross
records, and two requests of one session are recorded one after the other. Ended sessions (deleted or
expired) leave a short note behind, so a client that asks about one hears why it is gone instead of a bare
404.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from toolgym.core.types import Verdict
from toolgym.rollout.token_record import TokenRecord

if TYPE_CHECKING:
    from toolgym.rollout.session import EnvSession

#: notes kept about ended sessions (oldest dropped first)
ENDED_NOTES = 100_000


@dataclass
class GatewaySession:
    id: str
    record: TokenRecord
    env: EnvSession | None = None
    env_id: str | None = None
    task_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    #: the messages and tools ``POST /sessions`` handed out (the task's prompt)
    prompt: list[dict[str, Any]] = field(default_factory=list)
    tools: list[dict[str, Any]] = field(default_factory=list)
    verdict: Verdict | None = None
    #: tool calls the gateway ran for the agent (the env's tools), with their seconds
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    created: float = field(default_factory=time.time)
    last_used: float = field(default_factory=time.monotonic)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def touch(self) -> None:
        self.last_used = time.monotonic()

    def last_reply_text(self) -> str | None:
        last = self.record.last
        if last is None or not last.messages:
            return None
        content = last.messages[-1].get("content")
        return content if isinstance(content, str) else None

    def trajectory(self, status: str) -> dict[str, Any]:
        """The session as the rollout JSONL records an episode (its last segment, which the verdict is for),
        with every segment, the env's tool calls and the verdict."""
        last = self.record.last
        body: dict[str, Any] = {
            "session_id": self.id,
            "status": status,
            "env_id": self.env_id,
            "task_id": self.task_id,
            "metadata": self.metadata,
        }
        if last is not None:
            body.update(last.model_dump(mode="json"))
            body["env_id"], body["task_id"] = self.env_id, self.task_id
        body.update(self.record.dump())
        body["num_segments"] = len(self.record.segments)
        body["tool_runs"] = self.tool_calls
        body["verdict"] = self.verdict.model_dump(mode="json") if self.verdict is not None else None
        body["reward"] = float(self.verdict.reward) if self.verdict is not None else None
        return body


class SessionGone(KeyError):
    """A session that ended (deleted or expired): the message says which and when."""


class SessionsFull(RuntimeError):
    """Every session place is taken."""


class SessionStore:
    """Open sessions by id, at most ``max_sessions``; those idle over ``idle_timeout_s`` expire."""

    def __init__(self, *, max_sessions: int, idle_timeout_s: float):
        self.max_sessions = max_sessions
        self.idle_timeout_s = idle_timeout_s
        self.open: dict[str, GatewaySession] = {}
        self.ended: OrderedDict[str, str] = OrderedDict()
        self.expired_count = 0
        self.opened_count = 0

    def add(self, session_id: str | None, make: Any) -> GatewaySession:
        """Register the session ``make(id)`` builds; raises ``SessionsFull`` or ``ValueError`` (id in use)."""
        if len(self.open) >= self.max_sessions:
            raise SessionsFull(
                f"{len(self.open)} sessions are open, the gateway's limit (--max-sessions "
                f"{self.max_sessions}): end one (DELETE /sessions/{{id}}) or retry later"
            )
        sid = session_id or uuid.uuid4().hex
        if sid in self.open or sid in self.ended:
            raise ValueError(f"the session id {sid!r} is already used")
        session: GatewaySession = make(sid)
        self.open[sid] = session
        self.opened_count += 1
        return session

    def get(self, session_id: str) -> GatewaySession:
        session = self.open.get(session_id)
        if session is not None:
            return session
        why = self.ended.get(session_id)
        if why is not None:
            raise SessionGone(f"the session {session_id!r} {why}")
        raise KeyError(f"no session {session_id!r}: open one with POST /sessions")

    def end(self, session_id: str, why: str) -> GatewaySession | None:
        session = self.open.pop(session_id, None)
        if session is not None:
            self.ended[session_id] = why
            while len(self.ended) > ENDED_NOTES:
                self.ended.popitem(last=False)
        return session

    def idle(self) -> list[GatewaySession]:
        """The sessions idle past the timeout, not in a call."""
        cutoff = time.monotonic() - self.idle_timeout_s
        return [s for s in self.open.values() if s.last_used < cutoff and not s.lock.locked()]

    def expire(self) -> list[GatewaySession]:
        """End every idle session (the caller closes their envs); says so to whoever asks later."""
        gone = []
        for session in self.idle():
            stamp = time.strftime("%H:%M:%S", time.gmtime())
            why = f"expired at {stamp} UTC after {self.idle_timeout_s:g} s idle (--idle-timeout)"
            if self.end(session.id, why) is not None:
                gone.append(session)
        self.expired_count += len(gone)
        return gone


__all__ = ["GatewaySession", "SessionGone", "SessionStore", "SessionsFull"]
