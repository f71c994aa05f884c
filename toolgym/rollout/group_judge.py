"""Judging a GRPO group's answers together: one ``verify_group`` call for the samples of one task.

An env whose verifier has ``verify_group`` (``toolgym.rewards.judge.GroupJudgeVerifier``: an LLM judge that
ranks a group's answers relative to each other) is judged per group where the caller plays a whole group:
the collector (``collect(..., group_size=N)``) and verl's agent loop (the samples of one ``uid``). While a
sample plays, its env's verifier is swapped for :class:`DeferredJudge`, so the env pays for no pointwise judge
call; its verdict says "awaiting the group judge" as an *error* (an untrainable episode), so a sample that
never gets its group's verdict is never a silent 0. Once the group is done, :func:`judge_group` calls
``verify_group`` once with every answer and puts each verdict and reward on its trajectory (the last turn's
reward too). A group judge that fails gives every sample an error verdict.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym

from toolgym.core.task import Task
from toolgym.core.types import Trajectory, Verdict
from toolgym.envs.base import ToolEnv
from toolgym.rewards.base import Verifier
from toolgym.rollout.chat import ChatRenderer
from toolgym.rollout.clients.base import LLMClient
from toolgym.rollout.episode import RolloutConfig
from toolgym.rollout.host import EpisodeHost
from toolgym.rollout.keys import EpisodeKey

#: the error of a sample whose verdict waits for its group's (it stays only if the group judge never ran)
AWAITING = "awaiting the group judge: this sample's answer is judged with the other samples of its group"


@runtime_checkable
class GroupVerifier(Protocol):
    """A verifier that judges the answers of a group in one call (``GroupJudgeVerifier``)."""

    def verify_group(
        self, task: Task, answers: Sequence[str], trajectories: Sequence[Any] | None = None
    ) -> list[Verdict]: ...


class DeferredJudge(Verifier):
    """The verifier of an env whose group judges its answers later: an error verdict, no call."""

    name = "deferred-group-judge"

    def verify(self, task: Task, answer: str, trajectory: Trajectory | None = None) -> Verdict:
        return Verdict(reward=0.0, passed=False, details={"group_judge": "deferred"}, error=AWAITING)


def group_verifier(env: gym.Env) -> GroupVerifier | None:
    """The env's verifier when it judges groups (has ``verify_group``), else None."""
    verifier = getattr(env.unwrapped, "verifier", None)
    return verifier if callable(getattr(verifier, "verify_group", None)) else None


@contextmanager
def deferring(env: gym.Env, defer: bool = True) -> Iterator[None]:
    """While inside, the (leased, so this episode's own) env's verifier is :class:`DeferredJudge`."""
    inner = env.unwrapped
    if not defer or not isinstance(inner, ToolEnv):
        yield
        return
    original = inner.verifier
    inner.verifier = DeferredJudge()
    try:
        yield
    finally:
        inner.verifier = original


def final_answer(traj: Trajectory) -> str | None:
    """The final answer the episode gave (None when it did not answer: truncated, failed, out of tokens)."""
    if traj.error is not None or traj.stop_reason != "answer" or not traj.turns:
        return None
    parsed = traj.turns[-1].parsed
    return parsed.answer if parsed.kind == "answer" else None


def with_verdict(traj: Trajectory, verdict: Verdict) -> Trajectory:
    """The trajectory with ``verdict``: its reward, and its last turn's reward."""
    turns = list(traj.turns)
    if turns:
        turns[-1] = turns[-1].model_copy(update={"reward": verdict.reward})
    return traj.model_copy(update={"verdict": verdict, "reward": verdict.reward, "turns": turns})


def judge_group(verifier: GroupVerifier, task: Task, trajectories: Sequence[Trajectory]) -> list[Trajectory]:
    """Judge the group's answers with one ``verify_group`` call; each answered trajectory gets its verdict.

    A sample that gave no answer (truncated, failed) keeps its own verdict and is not sent. A call that
    raises, or returns other than one ``Verdict`` per answer, gives every answered sample an error verdict.
    """
    answered = [i for i, t in enumerate(trajectories) if final_answer(t) is not None]
    out = list(trajectories)
    if not answered:
        return out
    answers = [final_answer(trajectories[i]) or "" for i in answered]
    try:
        verdicts = verifier.verify_group(task, answers, [trajectories[i] for i in answered])
        if len(verdicts) != len(answers) or not all(isinstance(v, Verdict) for v in verdicts):
            raise TypeError(f"verify_group returned {len(verdicts)} items for {len(answers)} answers")
    except Exception as exc:  # never a silent 0: every sample of the group is an error
        error = f"the group judge failed: {type(exc).__name__}: {exc}"
        verdicts = [Verdict(reward=0.0, passed=False, error=error) for _ in answers]
    for i, verdict in zip(answered, verdicts, strict=True):
        details = {"group_size": len(answers), **verdict.details}
        out[i] = with_verdict(trajectories[i], verdict.model_copy(update={"details": details}))
    return out


def judge_alone(verifier: Any, task: Task, traj: Trajectory, why: str) -> Trajectory:
    """The pointwise fallback for a sample whose group cannot be judged together: ``verifier.verify`` on its
    answer, with ``why`` in the verdict's details (``group_judge``)."""
    answer = final_answer(traj)
    if answer is None:
        return traj
    try:
        verdict = verifier.verify(task, answer, traj)
        if not isinstance(verdict, Verdict):
            raise TypeError(f"verify returned {type(verdict).__name__}, not a Verdict")
    except Exception as exc:
        verdict = Verdict(reward=0.0, passed=False, error=f"the judge failed: {type(exc).__name__}: {exc}")
    return with_verdict(traj, verdict.model_copy(update={"details": {**verdict.details, "group_judge": why}}))


async def play_for_group(
    host: EpisodeHost,
    key: EpisodeKey,
    client: LLMClient,
    renderer: ChatRenderer,
    config: RolloutConfig,
    *,
    group: bool,
    request_id: str | None = None,
    sampling_seed: int | None = None,
) -> tuple[Trajectory, GroupVerifier | None, Task | None]:
    """``host.play`` for a sample of a group: with ``group`` and an env whose verifier judges groups, the
    env's judge is deferred (:func:`deferring`) and returned with the task played, for the group's one
    ``verify_group`` call; otherwise the episode is judged as usual and the verifier returned is None."""
    played: dict[str, Any] = {"judge": None, "task": key.task}

    @contextmanager
    def around(env: gym.Env) -> Iterator[None]:
        judge = group_verifier(env) if group else None
        with deferring(env, judge is not None):
            yield
        played.update(judge=judge, task=getattr(env.unwrapped, "task", None) or key.task)

    traj = await host.play(
        key, client, renderer, config, request_id=request_id, sampling_seed=sampling_seed, around=around
    )
    return traj, played["judge"], played["task"]


#: how long the first finished sample of a group waits for the rest before each is judged alone
DEFAULT_GROUP_TIMEOUT_S = 600.0


@dataclass
class _Group:
    started: int = 0
    arrived: list[tuple[Trajectory, asyncio.Future[Trajectory | None]]] = field(default_factory=list)
    timer: asyncio.TimerHandle | None = None
    expired: bool = False


class GroupGathering:
    """Gathers the samples of each group (a key: verl's ``uid``) that one event loop plays, and judges each
    group with one ``verify_group`` call once all of them are done.

    A sample calls :meth:`start` when it begins (before its first ``await``, so that every sample of a batch
    has started before any finishes: verl starts a worker's whole chunk at once), then :meth:`finish` with its
    trajectory, or :meth:`abandon` if it raised. The group is judged when every started sample has finished
    and they are the ``size`` samples of the group; fewer (the group was split across workers, or a
    validation step plays fewer samples per prompt) are judged alone, pointwise, and the verdict's details
    say so (``group_judge``), as are the samples still waiting after ``timeout_s``. ``call`` runs the
    (blocking) judge off the event loop.
    """

    def __init__(
        self,
        call: Callable[..., Awaitable[Any]],
        timeout_s: float = DEFAULT_GROUP_TIMEOUT_S,
        remembered: int = 4096,
    ):
        self.call, self.timeout_s, self.remembered = call, float(timeout_s), remembered
        self.groups: dict[str, _Group] = {}
        #: groups that gave up gathering (timed out): their late samples are judged alone
        self.expired: OrderedDict[str, None] = OrderedDict()
        #: one verify_group call per judged group (its size), for tests and metrics
        self.judged: list[int] = []

    def start(self, key: str) -> None:
        self.groups.setdefault(key, _Group()).started += 1

    def abandon(self, key: str) -> None:
        """A started sample that will not finish (it raised): the group stops waiting for it."""
        group = self.groups.get(key)
        if group is not None:
            group.started -= 1
            if group.started <= 0 and not group.arrived:
                del self.groups[key]
            else:
                self._maybe_complete(key, group, None)

    async def finish(self, key: str, size: int, traj: Trajectory, verifier: Any, task: Task) -> Trajectory:
        """This sample's trajectory with its verdict: the group's, or its own where the group cannot be
        judged together in this process."""
        group = self.groups.get(key)
        if group is None or key in self.expired:
            why = f"judged alone: its group {key} was not gathered here (or stopped waiting for its samples)"
            return await self.call(judge_alone, verifier, task, traj, why)
        future: asyncio.Future[Trajectory | None] = asyncio.get_running_loop().create_future()
        group.arrived.append((traj, future))
        done = self._maybe_complete(key, group, (size, verifier, task))
        if done is not None:
            await done
        elif group.timer is None:
            group.timer = asyncio.get_running_loop().call_later(self.timeout_s, self._expire, key)
        result = await future
        if result is None:
            reached = f"{len(group.arrived)} of the {size} samples of its group reached this worker"
            why = (
                f"judged alone: its group {key} stopped waiting for its samples after {self.timeout_s:g} s"
                if group.expired
                else f"judged alone: {reached}"
            )
            return await self.call(judge_alone, verifier, task, traj, why)
        return result

    def _maybe_complete(
        self, key: str, group: _Group, judge: tuple[int, Any, Task] | None
    ) -> asyncio.Future[None] | None:
        if not group.arrived or len(group.arrived) < group.started:
            return None
        del self.groups[key]
        if group.timer is not None:
            group.timer.cancel()
        if judge is None or len(group.arrived) != judge[0]:  # a partial group: each judged alone
            for _, future in group.arrived:
                if not future.done():
                    future.set_result(None)
            return None
        _, verifier, task = judge
        return asyncio.ensure_future(self._judge(group, verifier, task))

    async def _judge(self, group: _Group, verifier: Any, task: Task) -> None:
        trajectories = [t for t, _ in group.arrived]
        self.judged.append(len(trajectories))
        try:
            judged = await self.call(judge_group, verifier, task, trajectories)
        except BaseException:
            judged = [None] * len(trajectories)
            raise
        finally:
            for (_, future), traj in zip(group.arrived, judged, strict=True):
                if not future.done():
                    future.set_result(traj)

    def _expire(self, key: str) -> None:
        group = self.groups.pop(key, None)
        if group is None:
            return
        group.expired = True
        self.expired[key] = None
        while len(self.expired) > self.remembered:
            self.expired.popitem(last=False)
        for _, future in group.arrived:
            if not future.done():
                future.set_result(None)


__all__ = [
    "AWAITING",
    "DEFAULT_GROUP_TIMEOUT_S",
    "DeferredJudge",
    "GroupGathering",
    "GroupVerifier",
    "deferring",
    "final_answer",
    "group_verifier",
    "judge_alone",
    "judge_group",
    "play_for_group",
    "with_verdict",
]
