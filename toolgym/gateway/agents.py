"""A user's agent program as a source of training episodes: ``async def agent(task, base_url, api_key) ->
answer`` played against a gateway on one toolgym task, its recorded tokens and the env's verdict back.

The agent gets an :class:`AgentTask` (the task's messages, the env's tools as OpenAI functions, and
``call_tool`` to run one of them in the env's sandbox through the gateway) and an OpenAI base URL that is its
own session; whatever it returns is the final answer the env's verifier judges (``None``: it gave none).
Trainers (verl's agent loop, TRL's ``rollout_func``) call :func:`play_agent` per row and train on the
returned Trajectory, the session's last segment (see ``docs/gateway.md`` for what happens to earlier ones).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from toolgym.core.types import Trajectory
from toolgym.gateway.core import GatewayError
from toolgym.gateway.inprocess import Gateway
from toolgym.gateway.protocol import FinishBody, OpenSession
from toolgym.rollout.keys import EpisodeKey

#: what every gateway session's OpenAI client may send as its key (the gateway checks none)
API_KEY = "toolgym"


@dataclass
class AgentTask:
    """What an agent program is given: the task as chat messages and the env's tools."""

    session_id: str
    env_id: str
    task_id: str
    #: the env's preamble (system) and the task (user)
    messages: list[dict[str, Any]]
    #: the env's tools as OpenAI function schemas (``tools=`` of a chat request)
    tools: list[dict[str, Any]]
    #: ``POST`` here + ``/{name}`` with ``{"arguments": {...}}`` runs the env's tool ``name``
    tools_url: str
    metadata: dict[str, Any] = field(default_factory=dict)
    #: the in-process gateway the session is on (``play_agent`` sets it), which ``run_tool`` calls
    gateway: Gateway | None = field(default=None, repr=False, compare=False)

    @property
    def prompt(self) -> str:
        """The task's text (the last message)."""
        return str(self.messages[-1]["content"])

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        """Run the env's tool in its sandbox, through the gateway; its output text (the observation)."""
        return str((await self.run_tool(name, arguments))["output"])

    async def run_tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Run the env's tool in its sandbox: what ``POST {tools_url}/{name}`` answers (``ToolRun``'s fields:
        ``output``, ``status``, ``exit_code``, ``timed_out``, ``command_output``). The gateway is on this
        process's loop, so it runs through the gateway's own work, not an HTTP hop to itself (a refusal is
        a ``RuntimeError`` with the gateway's message, as over HTTP)."""
        if self.gateway is None:
            raise RuntimeError("this task was not made by play_agent: post to its tools_url instead")
        core = self.gateway.core
        try:
            return (await core.run_tool(core.get(self.session_id), name, arguments)).body()
        except GatewayError as exc:
            raise RuntimeError(exc.message) from None


AgentFn = Callable[[AgentTask, str, str], Awaitable[str | None]]


@dataclass
class AgentEpisode:
    """One played agent episode: the Trajectory a trainer trains on (the last segment, with the verdict)
    and what the whole session held."""

    trajectory: Trajectory
    segments: int
    session: dict[str, Any]


def load_agent(spec: str | AgentFn) -> AgentFn:
    """``module:function`` (or the function), checked to be ``async def f(task, base_url, api_key)``."""
    fn: Any
    if callable(spec):
        fn = spec
    else:
        module, _, name = str(spec).partition(":")
        if not module or not name:
            raise ValueError(f"name the agent as 'module:function', got {spec!r}")
        fn = getattr(importlib.import_module(module), name, None)
        if fn is None:
            raise ValueError(f"{module} has no {name!r}")
    if not inspect.iscoroutinefunction(fn):
        raise TypeError(f"the agent {spec!r} must be `async def agent(task, base_url, api_key) -> answer`")
    return fn


async def play_agent(gateway: Gateway, agent: AgentFn, key: EpisodeKey) -> AgentEpisode:
    """Open a session on ``key``'s task, run ``agent`` against it, judge its answer, end the session.

    A failure of the agent (it raised) comes back as a Trajectory with ``error`` set (untrainable), as the
    episode runner returns a failed episode; so does an agent that never called the model."""
    core = gateway.core
    session = await core.open(
        OpenSession(env_id=key.env_id, env_kwargs=key.env_kwargs, seed=key.seed, task=key.task)
    )
    task = AgentTask(
        session_id=session.id,
        env_id=key.env_id,
        task_id=session.task_id or key.task.id,
        messages=session.prompt,
        tools=session.tools,
        tools_url=f"{gateway.url}/sessions/{session.id}/tools",
        gateway=gateway,
    )
    failure: str | None = None
    try:
        answer = await agent(task, gateway.session_url(session.id), API_KEY)
        await core.finish(session, FinishBody(answer=answer, no_answer=answer is None))
    except Exception as exc:  # the agent failed: the episode does, the batch goes on
        failure = f"the agent failed: {type(exc).__name__}: {exc}"
    record = await core.end(session.id, "was ended by the trainer")
    last = session.record.last
    if last is None:
        traj = Trajectory(task_id=task.task_id, env_id=key.env_id, stop_reason="error")
        traj.error = failure or "the agent made no model call"
    else:
        traj = last.model_copy()
        if failure is not None:
            traj.error, traj.stop_reason = failure, "error"
    return AgentEpisode(traj, len(session.record.segments), record)


__all__ = ["API_KEY", "AgentEpisode", "AgentFn", "AgentTask", "load_agent", "play_agent"]
