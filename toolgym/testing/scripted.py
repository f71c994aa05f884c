"""Scripted episodes: drive an env with a fixed list of tool calls and a final answer.

The tiny local model produces nonsense, so tests and the demo prove each verifier's reward paths with scripted
policies: an env's *oracle* (registered with the env) gives a correct solution, and ``wrong_script`` a wrong
one. Actions are written in the env's own action format by its parser, so the same script exercises every
format.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from toolgym.core.env import ToolEnv
from toolgym.core.registry import ENVS
from toolgym.core.task import Task
from toolgym.core.types import ToolCall, Verdict


@dataclass(frozen=True)
class EpisodeSummary:
    env_id: str
    task_id: str
    reward: float
    turns: int
    tool_calls: int
    tool_errors: int
    terminated: bool
    truncated: bool
    verdict: Verdict | None


def play_script(
    env: gym.Env,
    script: Sequence[ToolCall | str],
    *,
    seed: int | None = None,
    options: dict[str, Any] | None = None,
) -> EpisodeSummary:
    """Reset ``env`` and play ``script`` (ToolCalls, then answer strings) until the episode ends.

    If the script runs out before the episode ends, the episode is reported as it stands (not terminated).
    """
    tool_env = _tool_env(env)
    env.reset(seed=seed, options=options)
    reward, terminated, truncated, info = 0.0, False, False, {}
    tool_calls = tool_errors = 0
    for step in script:
        text = (
            tool_env.parser.format_call(step)
            if isinstance(step, ToolCall)
            else tool_env.parser.format_answer(step)
        )
        _, reward, terminated, truncated, info = env.step(text)
        results = info.get("tool_results", [])
        tool_calls += len(results)
        tool_errors += sum(not r.ok for r in results)
        if terminated or truncated:
            break
    assert tool_env.task is not None
    return EpisodeSummary(
        env_id=env.spec.id if env.spec else type(tool_env).__name__,
        task_id=tool_env.task.id,
        reward=float(reward),
        turns=info.get("turn", 0),
        tool_calls=tool_calls,
        tool_errors=tool_errors,
        terminated=terminated,
        truncated=truncated,
        verdict=info.get("verdict"),
    )


def oracle_script(env_id: str, task: Task) -> Sequence[ToolCall | str]:
    """The registered oracle's correct solution for ``task``."""
    spec = ENVS[env_id]
    if spec.oracle is None:
        raise LookupError(f"env {env_id!r} registered no oracle")
    return spec.oracle(task)


def wrong_script(env_id: str, task: Task) -> Sequence[ToolCall | str]:
    """The oracle's tool calls followed by a wrong final answer."""
    *calls, _answer = oracle_script(env_id, task)
    return [*calls, "I do not know."]


def _tool_env(env: gym.Env) -> ToolEnv:
    inner = env.unwrapped
    if not isinstance(inner, ToolEnv):
        raise TypeError(f"expected a toolgym ToolEnv, got {type(inner).__name__}")
    return inner
