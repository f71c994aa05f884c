"""safe_verify is the one guard around every verifier: failures are verdict errors, never a silent 0."""

from toolgym.core.task import Task
from toolgym.core.types import Verdict
from toolgym.rewards.base import FunctionVerifier, Verifier, safe_verify

TASK = Task(id="t", prompt="2+2?", answer="4")


class ReturnsFloat(Verifier):
    name = "returns_float"

    def verify(self, task, answer, trajectory=None):
        return 1.0  # a common mistake: a reward instead of a Verdict


class Raises(Verifier):
    name = "raises"

    def verify(self, task, answer, trajectory=None):
        raise RuntimeError("index missing")


def test_a_verifier_returning_a_non_verdict_is_an_error_naming_the_fix():
    verdict = safe_verify(ReturnsFloat(), TASK, "4")
    assert (verdict.reward, verdict.passed) == (0.0, False)
    assert "returns_float.verify returned float, not a Verdict" in verdict.error
    assert "FunctionVerifier" in verdict.error


def test_an_exception_is_an_error_with_its_message():
    verdict = safe_verify(Raises(), TASK, "4")
    assert verdict.error == "raises failed: RuntimeError: index missing" and verdict.reward == 0.0


def test_good_verdicts_and_function_verifiers_pass_through():
    exact = FunctionVerifier(lambda task, answer: answer == task.answer, name="exact")
    assert safe_verify(exact, TASK, "4") == Verdict(reward=1.0, passed=True)
    assert safe_verify(exact, TASK, "5") == Verdict(reward=0.0, passed=False)
    bad = FunctionVerifier(lambda task, answer: "yes", name="bad")
    assert "expected float, bool or Verdict" in safe_verify(bad, TASK, "4").error
