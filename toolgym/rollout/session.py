"""A text-level episode: one env leased from an episode host, stepped with text by a loop that calls the
model itself (TRL's ``environment_factory``, SkyRL, verifiers, the OpenEnv server).

Such loops need the same few things and used to slice ``info["messages"]`` by hand: what a step added to the
chat (all of it for OpenEnv, the part after the model's own turn for SkyRL and verifiers), a clear error for
a step before reset or after the end, a close that is safe while a step runs (a server's idle reaper), and,
for loops that parse tool calls themselves, running one tool outside ``env.step`` and judging a final answer
with the env's own parser and verifier. :class:`EnvSession` is that, once.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import gymnasium as gym

from toolgym.core.types import ParsedAction, ToolCall, ToolResult, Trajectory, Turn, Verdict
from toolgym.envs.base import ToolEnv
from toolgym.parsers.base import strip_reasoning
from toolgym.rewards.base import safe_verify
from toolgym.rollout.keys import EpisodeKey
from toolgym.util.text import clip_middle

if TYPE_CHECKING:
    from toolgym.rollout.pool import EnvPool


@dataclass
class SessionStep:
    """What one ``EnvSession.step`` did: the env's own returns, and the chat messages it added."""

    observation: str
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]
    #: every message this step added to the chat: the model's turn, then the observation's messages
    added: list[dict[str, Any]] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated

    @property
    def observations(self) -> list[dict[str, Any]]:
        """The messages after the model's own turn (a tool's output, in the role the action format uses);
        none once the episode is over."""
        return [] if self.done else self.added[1:]


class EnvSession:
    """One env leased from a host's pool, stepped with text: ``reset`` (or ``start`` on an episode key), then
    ``step(text)`` until ``done``; ``close`` gives the env back (once; safe from another thread, e.g. a
    server's idle reaper, while a step runs). Not for two episodes at once: one session, one episode."""

    def __init__(self, pool: EnvPool, env_id: str, env_kwargs: dict[str, Any]):
        self.pool, self.env_id, self.env_kwargs = pool, env_id, env_kwargs
        env = pool.acquire(env_id, env_kwargs)
        if not isinstance(env.unwrapped, ToolEnv):
            pool.release(env)
            raise TypeError(f"{env_id} is not a toolgym env ({type(env.unwrapped).__name__})")
        self._env: gym.Env | None = env
        self.inner: ToolEnv = env.unwrapped
        self.started = False
        self.done = False
        self._seen = 0  # messages of the chat already handed out
        self._lock = threading.Lock()

    @property
    def env(self) -> gym.Env:
        env = self._env
        if env is None:
            raise SessionClosed(f"this {self.env_id} session is closed; open a new one")
        return env

    @property
    def trajectory(self) -> Trajectory | None:
        return self.inner.trajectory

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        """``env.reset``: the observation text and info (``info["messages"]`` is the whole first chat)."""
        text, info = self.env.reset(seed=seed, options=options)
        self.started, self.done = True, False
        self._seen = len(info["messages"])
        return text, info

    def start(self, key: EpisodeKey) -> tuple[str, dict]:
        """Reset on the episode ``key`` pins (its task and seed); the key must be for this session's env."""
        if key.env_id != self.env_id:
            raise ValueError(f"the episode key is for {key.env_id!r}, but this session plays {self.env_id!r}")
        return self.reset(seed=key.seed, options={"task": key.task})

    def step(self, text: str) -> SessionStep:
        """``env.step(text)``, and the messages it added to the chat."""
        env = self.env
        if not self.started:
            raise SessionStateError("reset before step: this session has no episode")
        if self.done:
            raise SessionStateError("the episode is over; reset to start another")
        observation, reward, terminated, truncated, info = env.step(text)
        self.done = bool(terminated or truncated)
        messages = info["messages"]
        added, self._seen = messages[self._seen :], len(messages)
        return SessionStep(observation, float(reward), bool(terminated), bool(truncated), info, added)

    # -- for loops that parse tool calls themselves (TRL's environment_factory, an agent program) ----------

    def call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        """Run the env's tool ``name`` outside ``env.step`` and return its observation text (the env's own
        result format and ``max_observation_chars``); the call joins the episode's trajectory as a turn.
        After ``max_turns - 1`` calls every further call is an error telling the model to answer."""
        traj, inner = self.trajectory, self.inner
        if not self.started or traj is None:
            raise SessionStateError(f"{self.env_id}: reset before calling {name}")
        call = ToolCall(name=name, arguments=arguments)
        budget = inner.max_turns - 1
        if traj.tool_calls >= budget:
            message = f"the episode's {budget} tool calls are used up: reply with your final answer"
            result = ToolResult(name=name, status="error", output=message)
        else:
            result = inner.tools[name](call)
        text = clip_middle(inner.parser.result_text(result), inner.max_observation_chars)
        action = json.dumps(call.model_dump(mode="json"))
        traj.turns.append(
            Turn(action=action, parsed=ParsedAction.calls(call), tool_results=(result,), observation=text)
        )
        return text

    def judge(self, final_text: str | None) -> Verdict:
        """The env's verdict on a final message (``None``: the episode ended without one, a 0), read as the
        env's parser reads an answer (``<answer>…</answer>`` in the tag formats, else the text without its
        reasoning); it ends the episode. A verifier that fails gives a verdict with ``error`` set, never 0."""
        traj, task = self.trajectory, self.inner.task
        if not self.started or traj is None or task is None:
            raise SessionStateError(f"{self.env_id}: reset before judging an answer")
        if final_text is None:
            verdict = Verdict(reward=0.0, passed=False, details={"reason": "no final answer after the tools"})
        else:
            parsed = self.inner.parser.parse(final_text)
            answered = parsed.kind == "answer" and parsed.answer is not None
            answer = parsed.answer if answered else strip_reasoning(final_text).strip()
            verdict = safe_verify(self.inner.verifier, task, answer or "", traj)
        traj.verdict, traj.reward = verdict, float(verdict.reward)
        traj.stop_reason = "answer" if final_text is not None else "max_turns"
        self.done = True
        return verdict

    def close(self) -> None:
        with self._lock:
            env, self._env = self._env, None
        if env is not None:
            self.pool.release(env)

    def __enter__(self) -> EnvSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SessionStateError(RuntimeError):
    """A call the session cannot take in its state (step before reset, or after the episode ended)."""


class SessionClosed(SessionStateError):
    """The session gave its env back (closed by its owner, or expired by a server)."""


__all__ = ["EnvSession", "SessionClosed", "SessionStateError", "SessionStep"]
