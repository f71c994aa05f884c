"""What the checks share: ``Findings`` (a check's problems and coverage), playing episodes through the
kit's recorder, and short readable renderings of offending examples."""

from __future__ import annotations

import json
import re
import traceback
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
from pydantic import BaseModel

from toolgym.core.types import Verdict
from toolgym.envs.base import ToolEnv
from toolgym.testing.checks.context import CheckResult, Context

PLANTED = "planted by toolgym check"
GARBAGE = "zq~ 0xDEADBEEF ☃ ¿¿ }{ NaN -Infinity"


class Findings:
    """Collects a check's problems (the first example kept) and what it covered."""

    def __init__(self, name: str):
        self.name = name
        self.problems: list[str] = []
        self.covered: list[str] = []
        self.example: str | None = None

    def fail(self, problem: str, example: Any = None) -> None:
        self.problems.append(problem)
        if self.example is None and example is not None:
            self.example = short(example)

    def result(self) -> CheckResult:
        if self.problems:
            more = f" (+{len(self.problems) - 1} more)" if len(self.problems) > 1 else ""
            return CheckResult(
                name=self.name,
                status="failed",
                why=self.problems[0] + more,
                problems=list(self.problems),
                example=self.example,
            )
        return CheckResult(name=self.name, status="passed", why="; ".join(self.covered))


def not_applicable(name: str, why: str) -> CheckResult:
    return CheckResult(name=name, status="n/a", why=why)


def final(ctx: Context, env: gym.Env, texts: Sequence[str], seed: int) -> tuple[float, bool, Any, dict]:
    """Play ``texts`` (the last repeated until the episode ends); the last step's reward, terminated,
    verdict and info."""
    steps = episode(ctx, env, texts, seed=seed, check="rewards", until_done=True)
    reward, terminated, _truncated, info = steps[-1][1], steps[-1][2], steps[-1][3], steps[-1][4]
    return reward, terminated, info.get("verdict"), info


def verdict_agrees(verdict: Any, reward: float) -> bool:
    return isinstance(verdict, Verdict) and float(verdict.reward) == float(reward)


def tool_env(env: gym.Env) -> ToolEnv | None:
    inner = env.unwrapped
    return inner if isinstance(inner, ToolEnv) else None


def turns_taken(inner: ToolEnv | None) -> int | None:
    if inner is None or inner.trajectory is None:
        return None
    return len(inner.trajectory.turns)


def action_kind(info: Any) -> str | None:
    parsed = info.get("action") if isinstance(info, dict) else None
    return getattr(parsed, "kind", None)


def oracle_texts(ctx: Context, env: gym.Env, seed: int) -> list[str]:
    """The oracle's solution for the task ``seed`` draws, written in the env's format."""
    from toolgym.testing.scripted import script_texts

    inner = tool_env(env)
    assert inner is not None and ctx.oracle is not None
    env.reset(seed=seed)
    return script_texts(env, ctx.oracle(inner.task))


def episode(
    ctx: Context,
    env: gym.Env,
    texts: Sequence[str],
    *,
    seed: int,
    check: str,
    until_done: bool = False,
    comparable: bool = False,
) -> list[tuple[Any, ...]]:
    """Reset with ``seed`` and play ``texts`` (with ``until_done`` the last text repeats until the end): each
    step's observation, reward, terminated, truncated and info (``comparable``: info as JSON text)."""
    ctx.reset(check, env, seed=seed)
    inner = tool_env(env)
    limit = len(texts) + ((inner.max_turns if inner else 32) if until_done else 0)
    steps = []
    for i in range(limit):
        text = texts[min(i, len(texts) - 1)]
        obs, reward, terminated, truncated, info = ctx.step(check, env, text)
        steps.append((obs, reward, terminated, truncated, info))
        if terminated or truncated:
            break
    if comparable:  # infos hold pydantic objects and the messages so far
        return [(*s[:4], json.dumps(without_timings(s[4]), default=str, sort_keys=True)) for s in steps]
    return steps


def without_timings(value: Any) -> Any:
    """``value`` as plain data without what was timed: keys ending in ``_s`` (seconds: a tool result's
    ``wait_s`` for a sandbox slot, a trajectory's ``env_s``), which differ between two plays of the same
    episode on a busy machine while everything the policy sees stays the same."""
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    if isinstance(value, dict):
        return {
            k: without_timings(v) for k, v in value.items() if not (isinstance(k, str) and k.endswith("_s"))
        }
    if isinstance(value, list | tuple):
        return [without_timings(v) for v in value]
    return value


def diff(a: Any, b: Any) -> str:
    return f"first:  {short(a, 140)}\nsecond: {short(b, 140)}"


def exc_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {short(str(exc), 160)}"


def exc_tail(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc)[-3:]).strip()


def plain(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def short(value: Any, limit: int = 300) -> str:
    text = value if isinstance(value, str) else repr(value)
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return (
        text
        if len(text) <= limit
        else text[: limit // 2] + f" ...[{len(text) - limit:,} chars]... " + text[-limit // 2 :]
    )
