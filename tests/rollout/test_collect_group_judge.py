"""The collector judges a GRPO group's answers together: one ``verify_group`` call per group (no pointwise
call first), each sample's verdict and reward the judge's. The judge is the scripted one
(``reference_overlap``: 10 per criterion when the answer has every word of the reference, else 2)."""

import asyncio

import gymnasium as gym
import pytest

from toolgym.core.types import Verdict
from toolgym.rollout import EnvRequest
from toolgym.rollout.collect import collect
from toolgym.rollout.group_judge import AWAITING, GroupGathering, judge_alone, judge_group
from toolgym.rollout.models import make_renderer
from toolgym.testing.judge_server import scripted_judge
from toolgym.testing.scripted import ScriptedClient, oracle_script, script_texts

ENV = "toolgym/Report-v0"
GROUP = 3


@pytest.fixture(scope="module")
def renderer():
    return make_renderer("tiny")


@pytest.fixture()
def judge():
    with scripted_judge(mode="reference_overlap") as server:
        yield server


def _policy(judge_kwargs):
    """Sample 0 of every group answers with the reference (10s), sample 1 with one fact (2s), sample 2 with
    none (the gate's 0, never sent to the judge)."""
    env = gym.make(ENV, judge=judge_kwargs)

    def policy(request_id, turn, prompt_text):
        sample = int(request_id.rsplit("-s", 1)[1])
        task = _task_of(env, prompt_text)
        *calls, reference = script_texts(env, oracle_script(ENV, task))
        if turn < len(calls):
            return calls[turn]
        parser = env.unwrapped.parser
        answers = [reference, parser.format_answer(f"{task.data['name']}: {task.data['facts'][0][0]}.")]
        answers.append(parser.format_answer("I do not know."))
        return answers[sample]

    return policy


_TASKS = {}


def _task_of(env, prompt_text):
    for seed in range(100):
        if seed not in _TASKS:
            env.reset(seed=seed)
            _TASKS[seed] = env.unwrapped.task
        if _TASKS[seed].prompt in prompt_text:
            return _TASKS[seed]
    raise LookupError("no task of seeds 0-99 in the conversation")


def _collect(renderer, judge_kwargs, *, tasks=2, group_size=GROUP):
    client = ScriptedClient(renderer, _policy(judge_kwargs))
    envs = [EnvRequest(id=ENV, kwargs={"judge": judge_kwargs})]
    trajs, _ = asyncio.run(
        collect(envs, client, renderer, tasks_per_env=tasks, group_size=group_size, progress=False)
    )
    return sorted(trajs, key=lambda t: (t.group, t.sample))


def test_a_group_is_judged_in_one_call_with_the_judges_verdicts(renderer, judge):
    trajs = _collect(renderer, {"base_url": judge.url, "model": "scripted", "group": True})
    assert judge.count == 2  # one request per group, no pointwise request first
    for request in judge.requests:  # the two answers that passed the gate, numbered in one prompt
        assert request["messages"][-1]["content"].count('<answer_to_judge index="') == 2
    assert len(trajs) == 2 * GROUP
    for traj in trajs:
        assert traj.verdict.error is None and traj.trainable
        assert traj.reward == traj.verdict.reward == traj.turns[-1].reward
    rewards = [[t.reward for t in trajs if t.group == g] for g in sorted({t.group for t in trajs})]
    assert rewards == [[1.0, pytest.approx(0.2), 0.0]] * 2
    best, partial, gated = trajs[:3]
    assert best.verdict.details["group_size"] == 2 and best.verdict.details["rank"] == 1
    assert best.verdict.details["scores"] == {"accuracy": 10, "coverage": 10, "grounding": 10}
    assert partial.verdict.details["rank"] == 2 and gated.verdict.details["gate_failed"]


def test_a_pointwise_judge_is_called_per_answer_and_a_group_of_one_is_not_gathered(renderer, judge):
    _collect(renderer, {"base_url": judge.url, "model": "scripted"})
    assert judge.count == 4  # two groups, two answers each past the gate: one call each
    trajs = _collect(renderer, {"base_url": judge.url, "model": "scripted", "group": True}, group_size=1)
    assert [t.reward for t in trajs] == [1.0, 1.0]
    assert all(t.verdict.details["group_size"] == 1 for t in trajs)


def test_a_failing_group_judge_gives_every_sample_an_error_verdict(renderer, judge):
    judge.set_mode("garbage")
    trajs = _collect(
        renderer, {"base_url": judge.url, "model": "scripted", "group": True, "retries": 0}, tasks=1
    )
    assert judge.count == 1
    sent, gated = trajs[:2], trajs[2]
    assert all(t.verdict.error and not t.trainable and t.reward == 0.0 for t in sent)
    assert AWAITING not in sent[0].verdict.error
    assert gated.verdict.error is None and gated.reward == 0.0  # refused by the gate, never sent


class _Counting:
    """A group verifier that records its calls and scores each answer by its length."""

    def __init__(self):
        self.groups, self.alone = [], []

    def verify_group(self, task, answers, trajectories=None):
        self.groups.append(list(answers))
        return [Verdict(reward=len(a) / 10, passed=True) for a in answers]

    def verify(self, task, answer, trajectory=None):
        self.alone.append(answer)
        return Verdict(reward=0.5, passed=False)


def _answered(text):
    from toolgym.core.types import ParsedAction, Trajectory, Turn

    turn = Turn(action=text, parsed=ParsedAction.final(text))
    return Trajectory(task_id="t", turns=[turn], stop_reason="answer")


def test_the_gathering_judges_a_whole_group_once_and_a_partial_group_alone():
    from toolgym.core.task import Task

    task = Task(id="t", prompt="p", answer="a")
    verifier = _Counting()

    async def call(fn, *args):
        return fn(*args)

    async def main():
        gathering = GroupGathering(call, timeout_s=30)
        for key in ("whole", "whole", "split", "split"):
            gathering.start(key)
        whole = [gathering.finish("whole", 2, _answered(t), verifier, task) for t in ("a", "bbb")]
        # this worker plays 2 samples of a group of 3 (the third went to another worker): each alone
        split = [gathering.finish("split", 3, _answered(t), verifier, task) for t in ("cc", "d")]
        return await asyncio.gather(*whole, *split), gathering

    (a, b, c, d), gathering = asyncio.run(main())
    assert verifier.groups == [["a", "bbb"]] and gathering.judged == [2]
    assert (a.reward, b.reward) == (0.1, pytest.approx(0.3)) and a.turns[-1].reward == 0.1
    assert sorted(verifier.alone) == ["cc", "d"] and c.reward == d.reward == 0.5
    why = "judged alone: 2 of the 3 samples of its group reached this worker"
    assert c.verdict.details["group_judge"] == why
    assert gathering.groups == {}


def test_a_sample_that_raised_does_not_hold_its_group_and_a_late_one_is_judged_alone():
    from toolgym.core.task import Task

    task = Task(id="t", prompt="p", answer="a")
    verifier = _Counting()

    async def call(fn, *args):
        return fn(*args)

    async def main():
        gathering = GroupGathering(call, timeout_s=0.05)
        gathering.start("g")
        gathering.start("g")
        gathering.abandon("g")  # its episode raised: the group is one sample short of 2
        alone = await gathering.finish("g", 2, _answered("x"), verifier, task)
        gathering.start("h")
        gathering.start("h")
        waited = await gathering.finish("h", 2, _answered("y"), verifier, task)  # the other never comes
        return alone, waited

    alone, waited = asyncio.run(main())
    assert verifier.groups == [] and verifier.alone == ["x", "y"]
    assert "1 of the 2 samples" in alone.verdict.details["group_judge"]
    assert "stopped waiting" in waited.verdict.details["group_judge"]


def test_judge_group_and_judge_alone_leave_an_unanswered_sample_as_it_was():
    from toolgym.core.task import Task
    from toolgym.core.types import Trajectory

    truncated = Trajectory(task_id="t", stop_reason="max_turns", verdict=Verdict(reward=0.0, passed=False))
    verifier = _Counting()
    task = Task(id="t", prompt="p", answer="a")
    assert judge_group(verifier, task, [truncated]) == [truncated] and verifier.groups == []
    assert judge_alone(verifier, task, truncated, "why") is truncated
