"""A toolgym env as an OpenEnv ``Environment``: the models and the per-session wrapper behind
``toolgym serve openenv`` (the app and the command are in ``toolgym.server.openenv``).

The wire types are OpenEnv's own base classes, so OpenEnv's server and its ``GenericEnvClient`` speak them
unchanged:

- action ``{"message": "<the model's turn>"}``, as OpenEnv's text envs;
- observation: ``text`` (the env's observation string: the task prompt after ``reset``, a tool's output or
  the reason an action was invalid after ``step``, empty after the final answer), ``messages`` (the chat
  messages this call added: system + user at ``reset``; then the assistant's turn and the observation
  messages, so concatenating them gives the env's ``info["messages"]``), ``tools`` (OpenAI schemas, at
  ``reset``), ``task_id``, ``turn``, ``terminated``/``truncated``, ``action`` (what the parser understood),
  ``tool_results`` and ``verdict`` (the verifier's, on the last step); ``reward`` and ``done`` are OpenEnv's
  top-level fields (``done`` = terminated or truncated).

OpenEnv puts only the observation's own fields on the wire (its ``metadata`` is dropped by the server), so
everything useful is a field here. Each session is an :class:`~toolgym.rollout.host.EnvSession` of the
server's episode host: its own env instance, borrowed from the host's pool at the session's first reset (or
first MCP call) and given back when the session closes (OpenEnv's stateless HTTP ``/reset`` and ``/step``
borrow one per request, so they stay cheap).

Threads: OpenEnv runs an env's constructor and ``close`` (and a sync ``reset``/``step``) on a thread pool of
its own per session, one new thread per WebSocket session, unless the env class sets its
``REQUIRES_SINGLE_THREAD_EXECUTOR`` flag, when all sessions share one such thread. Here resets and steps are
``reset_async``/``step_async`` (the event loop or the host's shared threads), the constructor only records
the source (the env is leased at reset, on the host's threads) and ``close`` only gives the env back to the
pool, so nothing of a session waits on that one shared thread, and no session starts a thread of its own.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State
from pydantic import Field

from toolgym.core.types import ToolCall
from toolgym.rollout.host import EpisodeHost
from toolgym.rollout.session import EnvSession, SessionClosed


class SessionError(RuntimeError):
    """A call the session cannot take in its state (step before reset, after the end, after expiry)."""


class RequestError(ValueError):
    """A reset the env cannot take: unknown parameters, an unknown task id, bad options."""


class TextAction(Action):
    """The model's turn, as text: what ``env.step`` takes."""

    message: str = Field(
        ..., description="the model's turn (tool calls or the final answer, in the env's format)"
    )


class ToolgymObservation(Observation):
    """What ``reset`` and ``step`` return (``reward`` and ``done`` are OpenEnv's own fields)."""

    text: str = Field("", description="the env's observation: the task prompt, a tool's output, or ''")
    messages: list[dict[str, Any]] = Field(
        default_factory=list, description="chat messages this call added (their concatenation is the chat)"
    )
    tools: list[dict[str, Any]] = Field(default_factory=list, description="OpenAI tool schemas (at reset)")
    task_id: str = ""
    turn: int = 0
    terminated: bool = False
    truncated: bool = False
    action: dict[str, Any] | None = Field(
        None, description="the parsed action: kind, tool_calls, answer, reason"
    )
    tool_results: list[dict[str, Any]] = Field(default_factory=list)
    verdict: dict[str, Any] | None = Field(None, description="reward, passed, details, error (last step)")


class ToolgymState(State):
    """OpenEnv's state (``episode_id``, ``step_count``) plus the env id, task and progress."""

    env_id: str = ""
    task_id: str | None = None
    turn: int = 0
    done: bool = False


@dataclass
class EnvSource:
    """What every session's env is made from: one env id and kwargs, one host to lease instances from."""

    env_id: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    host: EpisodeHost = field(default_factory=lambda: EpisodeHost(name="openenv"))
    description: str = ""
    version: str = ""


class ToolgymEnvironment(Environment[TextAction, ToolgymObservation, ToolgymState]):
    """One OpenEnv session over one toolgym env instance (a session of the source's host, leased at the first
    reset or MCP call and given back on ``close``). The env's tools are also served on OpenEnv's MCP route
    (``mcp_server``)."""

    SUPPORTS_CONCURRENT_SESSIONS = True
    # OpenEnv's flag: every session's constructor and close on one shared thread of OpenEnv's, instead of a
    # thread made per WebSocket session (both are cheap here: see the module docstring)
    REQUIRES_SINGLE_THREAD_EXECUTOR = True

    def __init__(self, source: EnvSource):
        super().__init__()
        self.source = source
        self._session: EnvSession | None = None  # leased on first use, off OpenEnv's shared thread
        self._closed = False
        self._lock = threading.Lock()
        self._episode_id: str | None = None
        self._steps = 0
        self._task_id: str | None = None
        self._turn = 0
        self._mcp: Any = None

    # -- OpenEnv API ---------------------------------------------------------------------------------------

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        task_id: str | None = None,
        options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> ToolgymObservation:
        """``seed`` as ``env.reset``'s; ``task_id`` (or ``options={"task_id": ...}`` / ``{"task": {...}}``)
        pins a task, so the samples of a GRPO group play the same one."""
        if kwargs:
            raise RequestError(
                f"unknown reset parameters {sorted(kwargs)}; known: seed, episode_id, task_id, options"
            )
        options = dict(options or {})
        if task_id is not None:
            options["task_id"] = task_id
        session = self._live()
        try:
            text, info = session.reset(seed=seed, options=options or None)
        except (LookupError, ValueError) as exc:  # an unknown task id or option: the request's fault
            message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
            raise RequestError(f"reset: {message}") from None
        self._steps = 0
        self._episode_id = episode_id or f"{info['task_id']}#seed={seed}"
        self._task_id, self._turn = info["task_id"], info["turn"]
        return ToolgymObservation(
            text=text, messages=info["messages"], tools=info["tools"], task_id=info["task_id"], turn=0
        )

    def step(self, action: TextAction, timeout_s: float | None = None, **kwargs: Any) -> ToolgymObservation:
        # no env leased yet (no reset): nothing to lease for the error; closed: _live says so
        session = self._live() if self._session is not None or self._closed else None
        if session is None or not session.started:
            raise SessionError(
                "reset before step: this session has no episode. (OpenEnv's HTTP POST /step is stateless, "
                "a fresh env per request; play episodes over a WebSocket session: /ws, e.g. GenericEnvClient)"
            )
        if session.done:
            raise SessionError("the episode is over; reset to start another")
        step = session.step(action.message)
        self._steps += 1
        info = step.info
        self._turn = info["turn"]
        verdict = info.get("verdict")
        parsed = info.get("action")
        return ToolgymObservation(
            text=step.observation,
            messages=step.added,
            task_id=info["task_id"],
            turn=info["turn"],
            terminated=step.terminated,
            truncated=step.truncated,
            action=parsed.model_dump(mode="json") if parsed is not None else None,
            tool_results=[r.model_dump(mode="json") for r in info.get("tool_results", [])],
            verdict=verdict.model_dump(mode="json") if verdict is not None else None,
            reward=step.reward,
            done=step.done,
        )

    # OpenEnv awaits these when an env defines them, instead of running reset/step on a thread of its own per
    # session (256 sessions: 256 threads contending for the GIL). A step that is cheap and never waits (its
    # tools are all ``inline``: ``ToolEnv.step_is_inline``) runs on the event loop; the rest run on the
    # host's shared threads.

    async def reset_async(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        task_id: str | None = None,
        options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> ToolgymObservation:
        return await self.source.host.call(lambda: self.reset(seed, episode_id, task_id, options, **kwargs))

    async def step_async(
        self, action: TextAction, timeout_s: float | None = None, **kwargs: Any
    ) -> ToolgymObservation:
        session = self._session
        if (
            session is not None
            and session.started
            and not session.done
            and session.inner.step_is_inline(action.message)
        ):
            return self.step(action, timeout_s, **kwargs)
        return await self.source.host.call(lambda: self.step(action, timeout_s, **kwargs))

    @property
    def state(self) -> ToolgymState:
        return ToolgymState(
            episode_id=self._episode_id,
            step_count=self._steps,
            env_id=self.source.env_id,
            task_id=self._task_id,
            turn=self._turn,
            done=self._session is not None and self._session.done,
        )

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(
            name=self.source.env_id,
            description=self.source.description or f"toolgym env {self.source.env_id}",
            version=self.source.version or None,
            author="toolgym",
        )

    def close(self) -> None:
        """Give the env back to the host (once; safe while a step runs). A session the server expired for
        idleness ends here too; its client's next call gets a clear error rather than another session's
        env."""
        with self._lock:
            self._closed = True
            session = self._session
        if session is not None:
            session.close()

    # -- MCP: the env's tools, listed and called directly (outside the episode's turns) ---------------------

    @property
    def mcp_server(self) -> Any:
        """A FastMCP server with the env's tools (built on first use: OpenEnv's ``/mcp`` route reads it)."""
        if self._mcp is None:
            self._mcp = _mcp_server(self, self._live().inner.tools)
        return self._mcp

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Run one of the env's tools on this session's instance; an MCP ``tools/call`` result."""
        tool = self._live().inner.tools[name]
        result = await tool.acall(ToolCall(name=name, arguments=arguments))
        return {
            "content": [{"type": "text", "text": result.output}],
            "isError": not result.ok,
            "structuredContent": result.model_dump(mode="json"),
        }

    # -- internals -----------------------------------------------------------------------------------------

    def _live(self) -> EnvSession:
        """This session's env session, leased from the host on first use (on the calling thread: the host's
        for a reset)."""
        with self._lock:
            if not self._closed and self._session is None:
                self._session = self.source.host.session(self.source.env_id, self.source.kwargs)
            session = self._session
        try:
            if session is None:
                raise SessionClosed("closed before its first use")
            session.env  # noqa: B018 - raises once the session is closed
        except SessionClosed:
            raise SessionError(
                "this session is closed (the server expires sessions idle longer than its --idle-timeout); "
                "open a new session and reset"
            ) from None
        return session


def _mcp_server(session: ToolgymEnvironment, tools: dict[str, Any]) -> Any:
    from fastmcp import FastMCP
    from fastmcp.tools import FunctionTool

    server = FastMCP(session.source.env_id)
    for name, tool in tools.items():
        server.add_tool(
            FunctionTool(
                name=name, description=tool.description, parameters=tool.parameters, fn=_caller(session, name)
            )
        )
    return server


def _caller(session: ToolgymEnvironment, name: str) -> Any:
    """``fn(**arguments)`` for one tool: what OpenEnv's MCP route calls (and awaits)."""

    async def call(**arguments: Any) -> dict[str, Any]:
        return await session.call_tool(name, arguments)

    return call


__all__ = [
    "EnvSource",
    "RequestError",
    "SessionError",
    "TextAction",
    "ToolgymEnvironment",
    "ToolgymObservation",
    "ToolgymState",
]
