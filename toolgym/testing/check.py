"""The env check kit: ``check_toolenv`` tells whether an env is fit for RL training.

Gymnasium's ``check_env`` checks the API. What breaks RL runs is different: observations the model cannot use,
rewards that do not match the verdict, verifiers that crash or can be gamed, task draws that ignore the seed,
``info`` keys that change between steps. ``check_toolenv`` runs one named check for each
(``toolgym.testing.checks`` says what each does) on a registered id, an env instance (wrapped or not:
it acts through the outermost wrapper and introspects ``env.unwrapped``) or a factory, in every action
format the env supports, and returns an :class:`EnvCheckReport`::

    report = toolgym.testing.check_toolenv("mypkg/WordCount-v0")
    assert report.ok, report.summary()

``toolgym check ID`` prints the same report as a table; ``env_check_tests("mypkg/*")`` is the one line that
runs it under pytest (see ``toolgym.testing.pytest_kit``).
"""

from __future__ import annotations

import inspect
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import gymnasium as gym
from pydantic import BaseModel, computed_field

#: Every check, in the order they run and report.
CHECKS = (
    "api",
    "determinism",
    "actions",
    "observations",
    "rewards",
    "info",
    "verifier_errors",
    "tokens",
    "timing",
)
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


class EnvCheckReport(BaseModel):
    """The kit's verdict on one env: ``ok`` when no check failed (passed and n/a both count as fine)."""

    env: str
    formats: list[str] = []
    checks: list[CheckResult] = []
    #: latency percentiles in milliseconds per kind of step (``tool``, ``verify``, ``invalid``, ``all``)
    timing: dict[str, dict[str, int | float]] = {}
    duration_s: float = 0.0

    @computed_field  # serialized: a JSON reader sees it
    @property
    def ok(self) -> bool:
        return all(c.status != "failed" for c in self.checks)

    @property
    def failures(self) -> list[CheckResult]:
        return [c for c in self.checks if c.status == "failed"]

    def __getitem__(self, name: str) -> CheckResult:
        for check in self.checks:
            if check.name == name:
                return check
        raise KeyError(f"no check named {name!r}; checks: {', '.join(c.name for c in self.checks)}")

    def rows(self) -> list[list[str]]:
        """``[check, result, detail]`` per check, for a table."""
        return [[c.name, c.status, c.why] for c in self.checks]

    def summary(self) -> str:
        """A readable account: the verdict, then every failure with its problems and example."""
        head = f"{self.env}: {'passed' if self.ok else 'FAILED'} ({', '.join(self.formats) or 'its format'})"
        return "\n".join([head, *(c.describe() for c in self.failures)])

    def raise_for_failures(self) -> None:
        if not self.ok:
            raise EnvCheckError(self)


class EnvCheckError(AssertionError):
    """Raised by ``check_toolenv(..., strict=True)``: lists every failed check."""

    def __init__(self, report: EnvCheckReport):
        super().__init__(report.summary())
        self.report = report


def check_toolenv(
    env_or_id: EnvTarget,
    *,
    episodes: int = 8,
    seed: int = 0,
    tokenizer: Any = None,
    strict: bool = False,
    formats: Sequence[str] | None = None,
    env_kwargs: dict[str, Any] | None = None,
    oracle: Callable[[Any], Sequence[Any]] | None = None,
    reward_range: tuple[float, float] = (0.0, 1.0),
    checks: Sequence[str] | None = None,
) -> EnvCheckReport:
    """Run the env check kit.

    Args:
        env_or_id: a registered env id; an env instance (not closed by the kit; checks that patch it restore
            it); or a factory returning a fresh env, called with ``action_format=`` when it takes one.
        episodes: seeded episodes for the determinism and oracle checks (other formats play fewer).
        seed: the first seed.
        tokenizer: a model path or ``"tiny"``, an HF tokenizer or a ``ChatRenderer``: enables the ``tokens``
            check (the chat template's prefix property over the env's own conversations).
        strict: raise ``EnvCheckError`` listing every failure instead of returning a failing report.
        formats: check only these action formats (default: every registered format the env accepts).
        env_kwargs: ``gym.make`` kwargs for an id.
        oracle: ``task -> [ToolCall..., answer]`` for an env without a registered oracle.
        reward_range: the minimum and maximum reward (wrong answers must get the first, the oracle the
            second).
        checks: run only these checks (default: all of ``CHECKS``).
    """
    from toolgym.testing import checks as kit

    unknown = sorted(set(checks or ()) - set(CHECKS))
    if unknown:
        raise ValueError(f"unknown checks {unknown}; checks: {', '.join(CHECKS)}")
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    started = time.perf_counter()
    target = Target.resolve(env_or_id, env_kwargs or {}, formats)
    ctx = Context(
        target=target,
        episodes=episodes,
        seed=seed,
        renderer=_renderer(tokenizer),
        oracle=oracle or target.registered_oracle(),
        reward_range=reward_range,
    )
    results = []
    for name in CHECKS:
        if checks is not None and name not in checks:
            continue
        try:
            results.append(getattr(kit, f"check_{name}")(ctx))
        except Exception as exc:  # an unexpected crash is that check's failure, with where it happened
            why = f"the check crashed: {type(exc).__name__}: {exc}"
            tail = "".join(traceback.format_exception(exc)[-3:]).strip()
            results.append(CheckResult(name=name, status="failed", why=why, problems=[why], example=tail))
    report = EnvCheckReport(
        env=target.label,
        formats=[f for f in target.formats if f],
        checks=results,
        timing=ctx.recorder.timing(),
        duration_s=round(time.perf_counter() - started, 3),
    )
    if strict:
        report.raise_for_failures()
    return report


# -- what the checks share -----------------------------------------------------------------------------------


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
        if isinstance(env_or_id, str):
            env_id = env_or_id
            gym.spec(env_id)  # an unknown id fails here, with gymnasium's suggestions

            def make(fmt: str | None) -> gym.Env:
                return gym.make(env_id, **env_kwargs, **({"action_format": fmt} if fmt else {}))

            fixed = env_kwargs.get("action_format")
            all_formats = [fixed] if fixed else wanted or _accepted_formats(make, sorted(PARSERS))
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
            env_id = probe.spec.id if probe.spec is not None else None
            probe.close()
            all_formats: list[str | None] = [None]
            if takes_format:
                all_formats = list(wanted or _accepted_formats(make, sorted(PARSERS)))
            return cls(label, make, _default_first(make, all_formats), env_id=env_id)
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


def _renderer(tokenizer: Any) -> Any:
    if tokenizer is None:
        return None
    from toolgym.rollout.chat import ChatRenderer

    if isinstance(tokenizer, ChatRenderer):
        return tokenizer
    if isinstance(tokenizer, str):
        from toolgym.rollout.models import make_renderer

        return make_renderer(tokenizer)
    return ChatRenderer(tokenizer)


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


__all__ = ["CHECKS", "CheckResult", "EnvCheckError", "EnvCheckReport", "check_toolenv"]
