"""The scorer table and verl's compute_score: dispatch by type or data_source; errors are never zeros."""

from __future__ import annotations

import numpy as np
import pytest

from toolgym.core.types import Verdict
from toolgym.rewards.compute_score import compute_score, scorer_name_for
from toolgym.rewards.registry import (
    BadVerificationInfo,
    UnknownScorer,
    get_scorer,
    register_scorer,
    score,
    scorer_names,
    unregister_scorer,
)


def test_builtin_types_are_registered():
    names = scorer_names()
    for name in ("math", "math_verifiable", "numeric", "exact_match", "f1"):
        assert name in names
    assert get_scorer("math_verifiable") is get_scorer("math")


@pytest.mark.parametrize(
    ("response", "info", "expected"),
    [
        ("... so \\boxed{\\frac{1}{2}}", {"type": "math", "ground_truth": "0.5"}, 1.0),
        ("<answer>\\{3, 2\\}</answer>", {"type": "math_verifiable", "ground_truth": "\\{2, 3\\}"}, 1.0),
        ("\\boxed{7}", {"type": "math", "answer": "8"}, 0.0),
        ("I am not sure, maybe 42", {"type": "math", "ground_truth": "42"}, 0.0),  # no box, no answer tag
        ("<answer>1,234</answer>", {"type": "numeric", "ground_truth": 1234}, 1.0),
        ("<answer>1000.9</answer>", {"type": "numeric", "ground_truth": 1000, "rel_tol": 1e-3}, 1.0),
        ("<answer>The Eiffel Tower</answer>", {"type": "exact_match", "ground_truth": ["eiffel tower"]}, 1.0),
        ("<answer>Eiffel</answer>", {"type": "exact_match", "ground_truth": ["eiffel tower"]}, 0.0),
        ("<answer>Eiffel</answer>", {"type": "f1", "ground_truth": ["eiffel tower"]}, 2 / 3),
    ],
)
def test_score_dispatches_on_type(response, info, expected):
    verdict = score(response, info)
    assert verdict.error is None
    assert verdict.reward == pytest.approx(expected)


def test_a_response_without_an_answer_says_so():
    verdict = score("I think 42", {"type": "math", "ground_truth": "42"})
    assert verdict.reward == 0.0 and "no final answer" in verdict.details["reason"]


@pytest.mark.parametrize(
    ("info", "error"),
    [
        ({"type": "no_such_type", "ground_truth": "1"}, UnknownScorer),
        ({"ground_truth": "1"}, BadVerificationInfo),
        ({"type": "math"}, BadVerificationInfo),
        ("math", BadVerificationInfo),
    ],
)
def test_malformed_requests_raise_instead_of_scoring(info, error):
    with pytest.raises(error):
        score("\\boxed{1}", info)


def test_unknown_type_message_lists_the_known_ones():
    with pytest.raises(UnknownScorer) as info:
        get_scorer("no_such_scorer")
    assert "no_such_scorer" in str(info.value)
    assert "code_tests" in str(info.value) and "math" in str(info.value)


def test_register_and_unregister():
    def always(response: str, info) -> Verdict:
        return Verdict(reward=1.0, passed=True)

    register_scorer("test_always", always, aliases=("test_always_alias",))
    try:
        assert score("x", {"type": "test_always_alias"}).passed
        with pytest.raises(ValueError, match="already registered"):
            register_scorer("test_always", always)
    finally:
        unregister_scorer("test_always")
    assert "test_always" not in scorer_names() and "test_always_alias" not in scorer_names()


@pytest.mark.parametrize(
    ("data_source", "solution", "ground_truth", "expected"),
    [
        ("openai/gsm8k", "Natalia sold 72 clips. \\boxed{72}", "72", 1.0),
        ("openai/gsm8k", "\\boxed{71}", "72", 0.0),
        ("lighteval/MATH", "The answer is $\\boxed{\\dfrac{\\sqrt{3}}{2}}$.", "\\frac{\\sqrt{3}}{2}", 1.0),
        ("DigitalLearningGmbH/MATH-lighteval", "\\boxed{(4,\\infty)}", "x>4", 1.0),
        ("toolgym/Math-v0", "<answer>\\{-20, -34\\}</answer>", "\\{-34, -20\\}", 1.0),
        ("toolgym/Calculator-v0", "<answer>93,388,581</answer>", 93388581, 1.0),
        ("math", "\\boxed{2}", "2", 1.0),
        ("searchR1_nq", "<answer>Paris</answer>", {"target": np.array(["Paris", "City of Paris"])}, 1.0),
        ("hotpotqa", "<answer>London</answer>", np.array(["Paris"]), 0.0),
    ],
)
def test_compute_score_for_verl(data_source, solution, ground_truth, expected):
    result = compute_score(data_source, solution, ground_truth, extra_info={"index": 3, "split": "train"})
    assert set(result) == {"score", "passed", "error"}  # the same keys every call: verl lists them per sample
    assert result["score"] == expected and result["passed"] is (expected == 1.0) and result["error"] == ""


def test_compute_score_takes_options_from_extra_info():
    extra = {"verification_info": {"rel_tol": 0.01}}
    assert compute_score("numeric", "\\boxed{100.5}", 100, extra)["score"] == 1.0
    assert compute_score("numeric", "\\boxed{100.5}", 100)["score"] == 0.0


def test_compute_score_reports_verifier_failures():
    def broken(response: str, info) -> Verdict:
        return Verdict(reward=0.0, passed=False, error="backend down")

    register_scorer("test_broken", broken)
    try:
        result = compute_score("test_broken", "\\boxed{1}", "1")
    finally:
        unregister_scorer("test_broken")
    assert result == {"score": 0.0, "passed": False, "error": "backend down"}


def test_unknown_data_source_raises():
    with pytest.raises(UnknownScorer, match="no toolgym scorer for data_source 'my/dataset'"):
        compute_score("my/dataset", "\\boxed{1}", "1")
    assert scorer_name_for("searchR1_hotpotqa") == "exact_match"
    assert scorer_name_for("f1") == "f1"
