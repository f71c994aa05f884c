"""What the check kit's checks are given and what they return: ``Context`` (how to open the env in each action
format, the seeds, the oracle, the recorder of every step taken) and ``CheckResult``.

``toolgym.testing.check`` builds a ``Context`` and runs the checks (``toolgym.testing.checks``); the checks
read it. Both import these from here, so neither imports the other's module back.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import gymnasium as gym
from pydantic import BaseModel

CheckStatus = Literal["passed", "failed", "n/a"]
EnvTarget = str | gym.Env | Callable[..., gym.Env]


class CheckResult(BaseModel):
    """One named check: ``why`` says what was checked (passed), the first problem (failed) or why it does not
    apply (n/a); ``problems`` lists every problem, ``example`` shows the offending input or output."""

    name: str
    status: CheckStatus
    why: str = ""
    problems: list[str] = []
    example: str | None = None

    def describe(self) -> str:
        lines = [f"{self.name}: {self.status.upper()}: {self.why}"]
        lines += [f"  - {p}" for p in self.problems[1:]]
        if self.example:
            lines.append("  example: " + self.example.replace("\n", "\n           "))
        return "\n".join(lines)


class Target:
    """How the kit gets envs: fresh ones per action format from an id or factory, or the one given."""

    def __init__(
        self,
        label: str,
        factory: Callable[[str | None], gym.Env] | None,
        formats: list[str | None],
        instance: gym.Env | None = None,
        env_id: str | None = None,
    ):
        self.label, self._factory, self.formats = label, factory, formats
        self.instance, self.env_id = instance, env_id

    @classmethod
    def resolve(
        cls, env_or_id: EnvTarget, env_kwargs: dict[str, Any], formats: Sequence[str] | None
    ) -> Target:
        from toolgym.parsers import PARSERS

        wanted = list(formats) if formats else None
        unknown = sorted(set(wanted or ()) - set(PARSERS))
        if unknown:
            raise ValueError(f"unknown action formats {unknown}; formats: {', '.join(sorted(PARSERS))}")
        all_formats: list[str | None]
        if isinstance(env_or_id, str):
            env_id = env_or_id
            gym.spec(env_id)  # an unknown id fails here, with gymnasium's suggestions

            def make(fmt: str | None) -> gym.Env:
                chosen: dict[str, Any] = {"action_format": fmt} if fmt else {}
                return gym.make(env_id, **env_kwargs, **chosen)

            fixed = env_kwargs.get("action_format")
            all_formats = [fixed] if fixed else list(wanted or _accepted_formats(make, sorted(PARSERS)))
            return cls(env_id, make, _default_first(make, all_formats), env_id=env_id)
        if env_kwargs:
            raise ValueError("env_kwargs only apply to an env id")
        if isinstance(env_or_id, gym.Env):
            spec = env_or_id.spec
            label = spec.id if spec is not None else type(env_or_id.unwrapped).__name__
            name = getattr(getattr(env_or_id.unwrapped, "parser", None), "name", None)
            return cls(label, None, [name], instance=env_or_id, env_id=spec.id if spec else None)
        if callable(env_or_id):
            factory = env_or_id
            takes_format = _accepts(factory, "action_format")

            def make(fmt: str | None) -> gym.Env:
                return factory(action_format=fmt) if fmt and takes_format else factory()

            probe = make(None)
            label = probe.spec.id if probe.spec is not None else getattr(factory, "__name__", "env factory")
            spec_id = probe.spec.id if probe.spec is not None else None
            probe.close()
            all_formats = [None]
            if takes_format:
                all_formats = list(wanted or _accepted_formats(make, sorted(PARSERS)))
            return cls(label, make, _default_first(make, all_formats), env_id=spec_id)
        raise TypeError(f"expected an env id, a gymnasium Env or a factory, got {type(env_or_id).__name__}")

    @property
    def fresh(self) -> bool:
        """Whether ``open`` gives a new env each time (an id or a factory) rather than the given instance."""
        return self._factory is not None

    @contextmanager
    def open(self, fmt: str | None = None) -> Iterator[gym.Env]:
        """An env in format ``fmt`` (the default one for None), closed afterwards unless it is the user's."""
        if self._factory is None:
            assert self.instance is not None
            yield self.instance
            return
        env = self._factory(fmt)
        try:
            yield env
        finally:
            env.close()

    def registered_oracle(self) -> Callable[[Any], Sequence[Any]] | None:
        from toolgym.core.registry import ENVS

        spec = ENVS.get(self.env_id or "")
        return spec.oracle if spec is not None else None


@dataclass
class Step:
    """One ``env.step`` the kit made: what it sent and got, and how long it took."""

    check: str
    action: Any
    observation: Any
    reward: Any
    terminated: Any
    truncated: Any
    info: dict[str, Any]
    kind: str
    seconds: float


@dataclass
class Recorder:
    steps: list[Step] = field(default_factory=list)
    reset_infos: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def timing(self) -> dict[str, dict[str, int | float]]:
        groups: dict[str, list[float]] = {"all": []}
        for step in self.steps:
            groups["all"].append(step.seconds)
            groups.setdefault(step.kind, []).append(step.seconds)
        return {kind: _percentiles(times) for kind, times in groups.items() if times}


@dataclass
class Context:
    target: Target
    episodes: int
    seed: int
    renderer: Any
    oracle: Callable[[Any], Sequence[Any]] | None
    reward_range: tuple[float, float]
    recorder: Recorder = field(default_factory=Recorder)
    #: a finished episode's messages per format (the oracle's where there is one), for the tokens check
    conversations: dict[str | None, list[dict[str, Any]]] = field(default_factory=dict)

    def reset(self, check: str, env: gym.Env, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        obs, info = env.reset(**kwargs)
        self.recorder.reset_infos.append((check, info))
        return obs, info

    def step(self, check: str, env: gym.Env, action: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """``env.step`` through the outermost wrapper, timed and recorded (exceptions propagate)."""
        started = time.perf_counter()
        out = env.step(action)
        seconds = time.perf_counter() - started
        obs, reward, terminated, truncated, info = out
        parsed = info.get("action") if isinstance(info, dict) else None
        kind = {"tool_calls": "tool", "answer": "verify"}.get(getattr(parsed, "kind", ""), "invalid")
        if parsed is None:
            kind = "step"
        self.recorder.steps.append(
            Step(check, action, obs, reward, terminated, truncated, info, kind, seconds)
        )
        return out


def _accepts(fn: Callable[..., Any], name: str) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == name or p.kind is p.VAR_KEYWORD for p in params)


def _accepted_formats(make: Callable[[str | None], gym.Env], names: list[str]) -> list[str | None]:
    """Every format, if ``make`` takes ``action_format`` (probed with one); else just the env's own."""
    try:
        make(names[0]).close()
    except TypeError:
        return [None]
    return list(names)


def _default_first(make: Callable[[str | None], gym.Env], formats: list[str | None]) -> list[str | None]:
    """The env's default format first (the checks run their full episodes there)."""
    if formats == [None]:
        return formats
    env = make(None)
    default = getattr(getattr(env.unwrapped, "parser", None), "name", None)
    env.close()
    return sorted(formats, key=lambda f: f != default)


def _percentiles(seconds: list[float]) -> dict[str, int | float]:
    import numpy as np

    ms = np.asarray(seconds) * 1000.0
    p50, p90, p99 = np.percentile(ms, [50, 90, 99])
    return {
        "n": len(ms),
        "p50": round(float(p50), 3),
        "p90": round(float(p90), 3),
        "p99": round(float(p99), 3),
        "max": round(float(ms.max()), 3),
    }
