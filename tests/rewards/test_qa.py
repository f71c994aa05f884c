"""QA answers: SQuAD normalisation, EM and F1 over gold lists, the last <answer>, the verifier's modes."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolgym.core.task import Task
from toolgym.rewards.base import safe_verify
from toolgym.rewards.qa import (
    QAVerifier,
    exact_match,
    extract_answer,
    f1_score,
    golden_answers,
    normalize_answer,
)


@pytest.mark.parametrize(
    ("text", "normalized"),
    [
        ("The Eiffel Tower!", "eiffel tower"),
        ("  a  CAT,   an apple and the   dog. ", "cat apple and dog"),
        ("1,843", "1843"),
        ("Theatre of the Absurd", "theatre of absurd"),  # only whole-word articles go
        ("O'Neill-Smith", "oneillsmith"),
        ("", ""),
    ],
)
def test_normalize_answer_is_squads(text, normalized):
    assert normalize_answer(text) == normalized


def test_exact_match_against_any_gold():
    assert exact_match("the drelmar institute", ["Drelmar Institute", "DI"]) == 1.0
    assert exact_match("DI.", ["Drelmar Institute", "DI"]) == 1.0
    assert exact_match("Drelmar", ["Drelmar Institute"]) == 0.0
    assert exact_match("anything", []) == 0.0


def test_f1_is_the_best_token_overlap():
    assert f1_score("Drelmar Institute", ["Drelmar Institute"]) == 1.0
    assert f1_score("Drelmar", ["Drelmar Institute"]) == pytest.approx(2 / 3)
    assert f1_score("the Drelmar thing", ["Drelmar Institute", "Drelmar"]) == pytest.approx(2 / 3)
    assert f1_score("nothing in common", ["Drelmar"]) == 0.0
    assert f1_score("the", ["a"]) == 1.0  # both empty after normalisation, as in SQuAD
    assert f1_score("the", ["Drelmar"]) == 0.0
    assert f1_score("x", []) == 0.0


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("<answer>first</answer> then <answer> second </answer>", "second"),
        ("<think>hmm</think><answer>Paris</answer>", "Paris"),
        ("<answer>done</answer><answer>cut off at the stop", "cut off at the stop"),
        ("<answer>multi\nline</answer>", "multi\nline"),
        ("  no tags here ", "no tags here"),
    ],
)
def test_the_last_answer_is_extracted(text, answer):
    assert extract_answer(text) == answer


def test_gold_answers_come_from_data_or_the_answer():
    assert golden_answers(Task(id="a", prompt="q", answer="x", data={"golden_answers": ["y", "z"]})) == [
        "y",
        "z",
    ]
    assert golden_answers(Task(id="b", prompt="q", answer=["x", 1843])) == ["x", "1843"]
    assert golden_answers(Task(id="c", prompt="q", answer=1843)) == ["1843"]
    assert golden_answers(Task(id="d", prompt="q")) == []


TASK = Task(id="t", prompt="Who founded Drelmar Institute?", answer="Vara Gaidos",
            data={"golden_answers": ["Vara Gaidos"]})  # fmt: skip


def test_em_mode_rewards_only_an_exact_answer():
    verifier = QAVerifier()
    right = verifier.verify(TASK, "vara gaidos.")
    assert (right.reward, right.passed) == (1.0, True)
    assert right.details == {
        "mode": "em", "em": 1.0, "f1": 1.0, "prediction": "vara gaidos.", "golden_answers": ["Vara Gaidos"],
    }  # fmt: skip
    partial = verifier.verify(TASK, "Gaidos")
    assert (partial.reward, partial.passed) == (0.0, False) and partial.details["f1"] == pytest.approx(2 / 3)


def test_f1_mode_gives_partial_credit_and_passes_only_on_exact():
    verdict = QAVerifier("f1").verify(TASK, "<answer>Gaidos</answer>")
    assert verdict.reward == pytest.approx(2 / 3) and not verdict.passed
    assert QAVerifier("f1").verify(TASK, "<answer>x</answer><answer>Vara Gaidos</answer>").passed


def test_a_task_without_gold_answers_is_a_verifier_error_not_a_zero():
    verdict = safe_verify(QAVerifier(), Task(id="empty", prompt="q"), "x")
    assert verdict.error is not None and "no gold answers" in verdict.error


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="'em' or 'f1'"):
        QAVerifier("bleu")


@given(st.text(max_size=200), st.lists(st.text(max_size=50), min_size=1, max_size=4))
def test_metric_invariants(prediction, golds):
    assert normalize_answer(normalize_answer(prediction)) == normalize_answer(prediction)
    assert exact_match(prediction, [prediction]) == 1.0 and f1_score(prediction, [prediction]) == 1.0
    em, f1 = exact_match(prediction, golds), f1_score(prediction, golds)
    assert 0.0 <= f1 <= 1.0 and em in (0.0, 1.0)
    assert em <= f1  # an exact match has F1 1
