"""The Verifier protocol: a pure function from (task, answer, trajectory) to a Verdict.

Verifiers are deterministic and bounded in time. A verifier that cannot reach a judgement (it timed out, its
backend crashed) returns a Verdict with ``error`` set, so a trainer can tell "the policy was wrong" from
"the reward is unknown"; ``safe_verify`` enforces that for any verifier.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

from toolgym.core.task import Task
from toolgym.core.types import Trajectory, Verdict


class Verifier(ABC):
    name: str = "verifier"
    #: False for a verifier that judges what the episode did (a repository's tests on its changes, SWE-v0's
    #: judge) and reads the final answer only as the signal that the work is done: then the oracle's work with
    #: any answer earns the maximum (the check kit tests exactly that), and an answer alone the minimum
    judges_answer: bool = True

    @abstractmethod
    def verify(self, task: Task, answer: str, trajectory: Trajectory | None = None) -> Verdict:
        """Judge ``answer`` (the final answer text the parser extracted) for ``task``."""


def safe_verify(verifier: Verifier, task: Task, answer: str, trajectory: Trajectory | None = None) -> Verdict:
    """Run a verifier; an exception, or a result that is not a Verdict, becomes a Verdict with ``error`` set
    (reward 0, not passed), so a broken custom verifier is reported, never mistaken for a wrong answer."""
    try:
        verdict = verifier.verify(task, answer, trajectory)
    except Exception as exc:
        return Verdict(reward=0.0, passed=False, error=f"{verifier.name} failed: {type(exc).__name__}: {exc}")
    if not isinstance(verdict, Verdict):
        return Verdict(
            reward=0.0,
            passed=False,
            error=f"{verifier.name}.verify returned {type(verdict).__name__}, not a Verdict: return "
            "Verdict(reward=..., passed=...), or wrap a function returning a float/bool in FunctionVerifier",
        )
    return verdict


class BadVerificationInfo(ValueError):
    """A scorer's ``verification_info`` is malformed (no ``type``, no ground truth, not an object, tests in no
    known layout): the request's fault, never a score. Here, beside ``Verifier``, so the scorer table
    (``toolgym.rewards.scorers``) and the scorers it lists both raise it without importing each other."""


class FunctionVerifier(Verifier):
    """Wrap a plain function ``fn(task, answer) -> float | bool | Verdict`` as a Verifier (custom envs)."""

    def __init__(self, fn: Callable[[Task, str], object], name: str | None = None):
        self.fn = fn
        fn_name: str = getattr(fn, "__name__", "function")
        self.name = name or fn_name

    def verify(self, task: Task, answer: str, trajectory: Trajectory | None = None) -> Verdict:
        out = self.fn(task, answer)
        if isinstance(out, Verdict):
            return out
        if isinstance(out, bool):
            return Verdict(reward=float(out), passed=out)
        if isinstance(out, int | float):
            return Verdict(reward=float(out), passed=float(out) >= 1.0)
        raise TypeError(
            f"verifier {self.name!r} returned {type(out).__name__}; expected float, bool or Verdict"
        )
