"""``Rubric``: several verifiers as one, a weighted mean of their rewards, optionally behind a gate.

A typical use puts a cheap deterministic check in front of an LLM judge: the gate (the answer parses, the
code runs, the format is right) must pass before the judge is paid for, and the reward mixes the judge's
score with an exact-match part::

    Rubric([(JudgeVerifier(criteria, url, model), 0.7), (ExactMatch(), 0.3)], gate=FormatCheck())
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from toolgym.core.task import Task
from toolgym.core.types import Trajectory, Verdict
from toolgym.rewards.base import FunctionVerifier, Verifier, safe_verify


def _as_verifier(part: Verifier | Callable[[Task, str], Any]) -> Verifier:
    if isinstance(part, Verifier):
        return part
    if callable(part):
        return FunctionVerifier(part)
    raise TypeError(f"a rubric part is a Verifier or a function (task, answer), got {type(part).__name__}")


def _record(verifier: Verifier, verdict: Verdict, weight: float | None = None) -> dict[str, Any]:
    record: dict[str, Any] = {"name": verifier.name}
    if weight is not None:
        record["weight"] = weight
    record["verdict"] = verdict.model_dump()
    return record


class Rubric(Verifier):
    """A verifier made of weighted parts: reward = Σ weight·reward ÷ Σ weight.

    ``parts`` are ``(verifier, weight)`` pairs (a verifier may be a plain function ``(task, answer) ->
    float | bool | Verdict``; weights > 0). Each runs through ``safe_verify``, in order.

    ``gate``, when given, runs first: if it does not pass, the reward is 0 and ``passed`` False, with
    ``details["gate_failed"]`` True, and no part runs (a judge is not called for an answer the gate
    refused). A gate that errs is an error, as below.

    An error of the gate or of any part makes the rubric's verdict an error (``Verdict.error`` names the
    part; reward 0, never a silent 0): the parts after it are not run.

    ``passed``: every part passed, or, with ``pass_threshold``, ``reward >= pass_threshold`` instead.

    ``details``: ``parts``, one ``{"name", "weight", "verdict"}`` per part run (the verdict as a dict), and
    ``gate`` (the gate's, when there is one).
    """

    def __init__(
        self,
        parts: Sequence[tuple[Verifier | Callable[[Task, str], Any], float]],
        *,
        gate: Verifier | Callable[[Task, str], Any] | None = None,
        name: str = "rubric",
        pass_threshold: float | None = None,
    ):
        if not parts:
            raise ValueError("a rubric needs at least one (verifier, weight) part")
        built: list[tuple[Verifier, float]] = []
        for part in parts:
            if not (isinstance(part, tuple | list) and len(part) == 2):
                raise TypeError(f"a rubric part is a (verifier, weight) pair, got {part!r}")
            verifier, weight = part
            if isinstance(weight, bool) or not isinstance(weight, int | float) or not math.isfinite(weight):
                raise TypeError(f"a rubric part's weight is a number, got {weight!r}")
            if weight <= 0:
                raise ValueError(f"a rubric part's weight is > 0, got {weight}")
            built.append((_as_verifier(verifier), float(weight)))
        if pass_threshold is not None and not 0.0 <= pass_threshold <= 1.0:
            raise ValueError(f"pass_threshold is a reward in [0, 1], got {pass_threshold}")
        self.parts = tuple(built)
        self.gate = _as_verifier(gate) if gate is not None else None
        self.name = name
        self.pass_threshold = pass_threshold
        verifiers = [v for v, _ in self.parts] + ([self.gate] if self.gate is not None else [])
        # the answer matters as soon as one part judges it (see Verifier.judges_answer)
        self.judges_answer = any(v.judges_answer for v in verifiers)

    def verify(self, task: Task, answer: str, trajectory: Trajectory | None = None) -> Verdict:
        details: dict[str, Any] = {}
        if self.gate is not None:
            gate = safe_verify(self.gate, task, answer, trajectory)
            details["gate"] = _record(self.gate, gate)
            if gate.error is not None:
                return Verdict(
                    reward=0.0,
                    passed=False,
                    details={**details, "parts": []},
                    error=f"{self.name}: the gate {self.gate.name} failed: {gate.error}",
                )
            if not gate.passed:
                return Verdict(
                    reward=0.0, passed=False, details={**details, "gate_failed": True, "parts": []}
                )
        records = []
        total = weighted = 0.0
        all_passed = True
        for verifier, weight in self.parts:
            verdict = safe_verify(verifier, task, answer, trajectory)
            records.append(_record(verifier, verdict, weight))
            if verdict.error is not None:
                return Verdict(
                    reward=0.0,
                    passed=False,
                    details={**details, "parts": records},
                    error=f"{self.name}: part {verifier.name} failed: {verdict.error}",
                )
            total += weight
            weighted += weight * verdict.reward
            all_passed = all_passed and verdict.passed
        reward = round(weighted / total, 12)
        passed = all_passed if self.pass_threshold is None else reward >= self.pass_threshold
        if self.gate is not None:
            details["gate_failed"] = False
        return Verdict(reward=reward, passed=passed, details={**details, "parts": records})
