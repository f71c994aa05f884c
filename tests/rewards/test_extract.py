"""The final answer in a whole response: last <answer> scope, then last \\boxed{}; never "the last number"."""

from __future__ import annotations

import time

import pytest

from toolgym.rewards.extract import extract_final_answer, last_answer_tag, last_boxed


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so \\boxed{42}", "42"),
        ("\\boxed{1} then \\boxed{2}", "2"),
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),  # escaped braces do not close the box
        ("\\boxed{ \\left\\{ 3 \\right\\} }", "\\left\\{ 3 \\right\\}"),
        ("\\fbox{7}", "7"),
        ("\\boxed{1} and \\fbox{2}", "2"),
        ("$\\boxed 5$", "5"),
        ("\\boxed{2} \\boxed{3", None),  # the last box is cut off: no answer, not the earlier one
        ("no box here", None),
        ("\\boxed", None),
        ("\\boxed{}", ""),
    ],
)
def test_last_boxed(text, expected):
    assert last_boxed(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<answer>42</answer>", "42"),
        ("<answer>1</answer> wait <answer> 2 </answer>", "2"),
        ("<answer>unclosed", None),
        ("</answer> only", None),
    ],
)
def test_last_answer_tag(text, expected):
    assert last_answer_tag(text) == expected


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("Reasoning... so the answer is \\boxed{12}.", "12"),
        ("<answer>\\boxed{3}</answer>", "3"),
        ("draft \\boxed{1} <answer>2</answer>", "2"),  # the answer tag is the scope
        ("<answer>x = \\boxed{5}</answer> later \\boxed{9}", "5"),
        ("I computed 41 then 42", None),  # no guessing from the last number
        ("", None),
        (None, None),
    ],
)
def test_extract_final_answer(response, expected):
    assert extract_final_answer(response) == expected


@pytest.mark.parametrize(
    "text",
    ["\\boxed{" * 200_000, "{" * 500_000 + "\\boxed{", "<answer>" * 100_000, "\\\\" * 300_000 + "\\boxed{1"],
)
def test_hostile_responses_are_linear(text):
    start = time.perf_counter()
    extract_final_answer(text)
    assert time.perf_counter() - start < 0.5
