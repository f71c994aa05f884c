"""Report-v0's judges: ``JudgeVerifier`` / ``GroupJudgeVerifier`` behind a deterministic gate.

An answer that states none of the entity's facts (no name, year, number or word of its profile that the
task's prompt does not already give) earns 0 without a judge call: "I do not know.", an empty answer, the
prompt echoed, filler. The judge is paid for only the answers that try, and a confident answer with no fact
in it cannot talk the judge into a score. The env's verdicts keep what the judge said of the answer (scores,
reasoning, rank) and leave out what it cost (usage, cost, cached, attempts): a cached reply would make the
same episode's info differ. Here, apart from ``report.py``, because it imports the judge's HTTP
client, which building the env without a judge never needs.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from toolgym.core.task import Task
from toolgym.core.types import Trajectory, Verdict
from toolgym.rewards.judge import GroupJudgeVerifier, JudgeVerifier

GATE_FAILED = "the answer states none of the entity's facts (a name, year or number of its profile)"
#: what a judge verdict's details say about the call rather than the answer: a cached reply has other values
#: (no usage, no attempts), so they are left out of the env's verdicts, which the env contract keeps the same
#: for the same episode (``toolgym check``'s determinism); error verdicts keep them, for diagnosis
CALL_DETAILS = frozenset({"cached", "usage", "cost", "attempts", "wait_s"})


def states_a_fact(task: Task, answer: str) -> bool:
    """Whether ``answer`` states one of the task's facts (``task.data["facts"]``: each a list of the ways it
    is written), as a whole word or phrase, in any case. A task without facts listed passes."""
    facts: list[list[str]] = (task.data or {}).get("facts") or []
    if not facts:
        return True
    text = str(answer).lower()
    return any(
        re.search(rf"(?<!\w){re.escape(form.lower())}(?!\w)", text) for fact in facts for form in fact if form
    )


def answer_only(verdict: Verdict) -> Verdict:
    """``verdict`` without the details of the judge call (``CALL_DETAILS``), unless it is an error."""
    if verdict.error is not None:
        return verdict
    details = {k: v for k, v in verdict.details.items() if k not in CALL_DETAILS}
    return verdict.model_copy(update={"details": details})


def gate(task: Task, answer: str) -> Verdict | None:
    """The verdict of an answer the gate refuses (reward 0), or None to send it to the judge."""
    if states_a_fact(task, answer):
        return None
    return Verdict(reward=0.0, passed=False, details={"gate_failed": True, "why": GATE_FAILED})


class ReportJudge(JudgeVerifier):
    """A ``JudgeVerifier`` whose answers must first state one of the entity's facts (see the module)."""

    def verify(self, task: Task, answer: str, trajectory: Trajectory | None = None) -> Verdict:
        return gate(task, answer) or answer_only(super().verify(task, answer, trajectory))


class ReportGroupJudge(GroupJudgeVerifier):
    """A ``GroupJudgeVerifier`` that sends only the answers that pass the gate, in one call (``verify`` is
    the group of one, as in the base class)."""

    def verify_group(
        self,
        task: Task,
        answers: Sequence[str],
        trajectories: Sequence[Trajectory | None] | None = None,
    ) -> list[Verdict]:
        gated: list[Verdict | None] = [gate(task, a) for a in answers]
        sent = [i for i, g in enumerate(gated) if g is None]
        judged = iter(
            super().verify_group(
                task,
                [answers[i] for i in sent],
                None if trajectories is None else [trajectories[i] for i in sent],
            )
            if sent
            else []
        )
        return [g if g is not None else answer_only(next(judged)) for g in gated]


def judge_class(group: bool) -> Any:
    return ReportGroupJudge if group else ReportJudge
