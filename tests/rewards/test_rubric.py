"""Rubric: weighted parts, a gate in front, errors that propagate (never a silent 0), and a judge as a part
through an env's ``verifier=``."""

from __future__ import annotations

import pytest

import toolgym
from toolgym.core.task import Task
from toolgym.core.types import Verdict
from toolgym.rewards.base import Verifier
from toolgym.rewards.judge import JudgeVerifier, clear_memory_cache, reset_endpoints
from toolgym.rewards.rubric import Rubric
from toolgym.testing.judge_server import scripted_judge

TASK = Task(id="capital", prompt="What is the capital of France?", answer="Paris")
CRITERIA = [{"name": "correct", "description": "The answer names the right city."}]


@pytest.fixture(autouse=True)
def _fresh_judge_state():
    yield
    clear_memory_cache()
    reset_endpoints()


class Fixed(Verifier):
    def __init__(self, reward: float, passed: bool, name: str = "fixed", error: str | None = None):
        self.verdict = Verdict(reward=reward, passed=passed, error=error, details={"why": name})
        self.name = name
        self.calls = 0

    def verify(self, task, answer, trajectory=None):
        self.calls += 1
        return self.verdict


class Raises(Verifier):
    name = "raises"

    def verify(self, task, answer, trajectory=None):
        raise RuntimeError("boom")


def test_weighted_mean_and_details():
    a, b = Fixed(1.0, True, "a"), Fixed(0.5, False, "b")
    verdict = Rubric([(a, 3), (b, 1)]).verify(TASK, "x")
    assert verdict.error is None and verdict.reward == pytest.approx((3 * 1.0 + 0.5) / 4)
    assert not verdict.passed  # b did not pass
    parts = verdict.details["parts"]
    assert [(p["name"], p["weight"]) for p in parts] == [("a", 3.0), ("b", 1.0)]
    assert parts[1]["verdict"] == {"reward": 0.5, "passed": False, "details": {"why": "b"}, "error": None}
    assert "gate" not in verdict.details


def test_all_passed_or_a_threshold():
    assert Rubric([(Fixed(1.0, True), 1), (Fixed(0.9, True), 1)]).verify(TASK, "x").passed
    with_threshold = Rubric([(Fixed(1.0, True), 1), (Fixed(0.5, False), 1)], pass_threshold=0.75)
    verdict = with_threshold.verify(TASK, "x")
    assert verdict.reward == pytest.approx(0.75) and verdict.passed


def test_plain_functions_are_parts_and_gates():
    rubric = Rubric([(lambda t, a: a == t.answer, 1), (lambda t, a: 0.5, 1)], gate=lambda t, a: bool(a))
    assert rubric.verify(TASK, "Paris").reward == pytest.approx(0.75)
    assert rubric.verify(TASK, "").details["gate_failed"] is True


def test_a_closed_gate_gives_0_and_runs_no_part():
    part = Fixed(1.0, True)
    verdict = Rubric([(part, 1)], gate=Fixed(0.0, False, "format")).verify(TASK, "x")
    assert verdict.reward == 0.0 and not verdict.passed and verdict.error is None
    assert verdict.details["gate_failed"] is True and verdict.details["gate"]["name"] == "format"
    assert verdict.details["parts"] == [] and part.calls == 0
    opened = Rubric([(part, 1)], gate=Fixed(1.0, True)).verify(TASK, "x")
    assert opened.reward == 1.0 and opened.details["gate_failed"] is False and part.calls == 1


@pytest.mark.parametrize(
    ("rubric", "message"),
    [
        (
            Rubric([(Fixed(1.0, True), 1)], gate=Raises()),
            "rubric: the gate raises failed: raises failed: RuntimeError",
        ),
        (
            Rubric([(Fixed(1.0, True), 1), (Raises(), 1)]),
            "rubric: part raises failed: raises failed: RuntimeError",
        ),
        (
            Rubric([(Fixed(0.0, False, "sandbox", error="sandbox down"), 1)], name="mine"),
            "mine: part sandbox failed: sandbox down",
        ),
    ],
)
def test_an_error_anywhere_is_the_rubrics_error(rubric, message):
    verdict = rubric.verify(TASK, "x")
    assert verdict.error is not None and verdict.error.startswith(message)
    assert verdict.reward == 0.0 and not verdict.passed


def test_parts_after_an_error_do_not_run():
    later = Fixed(1.0, True)
    Rubric([(Raises(), 1), (later, 1)]).verify(TASK, "x")
    assert later.calls == 0


@pytest.mark.parametrize(
    ("parts", "error"),
    [
        ([], ValueError),
        ([(Fixed(1, True), 0)], ValueError),
        ([(Fixed(1, True), -1)], ValueError),
        ([(Fixed(1, True), "1")], TypeError),
        ([Fixed(1, True)], TypeError),
        ([(42, 1)], TypeError),
    ],
)
def test_bad_parts_are_refused(parts, error):
    with pytest.raises(error):
        Rubric(parts)


def test_judges_answer_follows_the_parts():
    class Work(Fixed):
        judges_answer = False

    assert Rubric([(Work(1, True), 1)]).judges_answer is False
    assert Rubric([(Work(1, True), 1), (Fixed(1, True), 1)]).judges_answer is True


def test_a_judge_behind_a_gate_in_an_env():
    with scripted_judge("reference_overlap") as judge:
        judged = JudgeVerifier(CRITERIA, judge.url, "scripted", backoff=0.001)
        rubric = Rubric(
            [(judged, 0.8), (lambda t, a: a.strip() == t.answer, 0.2)], gate=lambda t, a: len(a) < 40
        )
        env = toolgym.make_env(tasks=[TASK], tools=["calculator"], verifier=rubric)
        rewards = {}
        for answer in ("Paris", "It is Paris.", "Lyon", "Paris " * 10):
            env.reset(seed=0)
            _, rewards[answer], terminated, _, info = env.step(f"<answer>{answer}</answer>")
            assert terminated and info["verdict"].error is None
        assert rewards == pytest.approx({"Paris": 1.0, "It is Paris.": 0.8, "Lyon": 0.16, "Paris " * 10: 0.0})
        assert judge.count == 3  # the gate kept the judge from the long answer
        judge.set_mode("garbage")
        env.reset(seed=0)
        _, reward, _, _, info = env.step("<answer>Marseille</answer>")
        assert reward == 0.0 and info["verdict"].error.startswith("rubric: part judge failed: judge scripted")
        assert env.unwrapped.trajectory.trainable is False
