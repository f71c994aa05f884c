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

import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel, computed_field

from toolgym.testing import checks as kit
from toolgym.testing.checks.context import CheckResult, Context, EnvTarget, Target

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


class EnvCheckReport(BaseModel):
    """The kit's verdict on one env: ``ok`` when no check failed (passed and n/a both count as fine)."""

    env: str
    formats: list[str] = []
    checks: list[CheckResult] = []
    #: latency percentiles in milliseconds per kind of step (``tool``, ``verify``, ``invalid``, ``all``)
    timing: dict[str, dict[str, int | float]] = {}
    duration_s: float = 0.0

    # serialized: a JSON reader sees it (mypy does not take a decorator over @property; pydantic's docs use
    # this ignore)
    @computed_field  # type: ignore[prop-decorator]
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


__all__ = ["CHECKS", "CheckResult", "EnvCheckError", "EnvCheckReport", "check_toolenv"]
