"""The final answer in a response: <answer>, \\boxed{}, ####, Answer: lines; the last number on request."""

from __future__ import annotations

import pytest

from toolgym.rewards.extract import (
    clean_answer_text,
    extract_final_answer,
    has_answer_marker,
    last_answer_tag,
    last_boxed,
    last_number,
)
from toolgym.testing.complexity import cost_ratio


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
        ("I computed 41 then 42", None),  # the last number only when asked for (below)
        ("", None),
        (None, None),
        # GSM8K: what follows the last ####, on its line
        ("Natalia sold 48/2 = 24 clips in May.\n#### 72", "72"),
        ("#### 1,234", "1,234"),
        ("#### $18.00", "$18.00"),
        ("#### 72.", "72"),
        ("#### 12,", "12"),
        ("#### 72 apples", "72"),
        ("#### -5", "-5"),
        ("#### 72\n\nI hope this helps!", "72"),
        ("#### 71 #### 72", "72"),
        ("####", ""),  # a marker with nothing after it: an empty answer, which is wrong
        # answer lines: DAPO, markdown, Minerva / lm-eval
        ("Adding up the cases gives 34.\nAnswer: 34", "34"),
        ("answer: 34", "34"),
        ("**Answer:** 34", "34"),
        ("**Final Answer**: $18", "$18"),
        ("Answer:\n\n42", "42"),
        ("Answer: $34$ apples.", "34"),
        ("Answer: an 8", "8"),
        ("Answer: \\(x^2\\)", "x^2"),
        ("Answer: 34 dollars", "34"),
        ("Answer: 5 or six", "5 or six"),  # a hedge is not trimmed to its first number
        ("Answer: 5 million", "5 million"),  # nor is a word that changes the value
        ("Answer: 1 then Answer: 2", "2"),
        ("Final Answer: The final answer is $\\frac{2}{3}$. I hope it is correct.", "\\frac{2}{3}"),
        ("Final Answer: The final answer is 72. I hope it is correct.", "72"),
        ("Final Answer: The final answer is $\\boxed{5}$. I hope it is correct.", "5"),
        # precedence: <answer> > \boxed > #### > Answer: line, whatever the order in the text
        ("<answer>5</answer> #### 6", "5"),
        ("#### 6\n\\boxed{5}", "5"),
        ("So \\boxed{7}. Let me know if this answer: helps", "7"),
        ("Answer: 8\n#### 7", "7"),
        ("\\boxed{72", None),  # a cut-off box stops here: no #### or Answer: line behind it
        ("Answer: 72 \\boxed{7", None),
    ],
)
def test_extract_final_answer(response, expected):
    assert extract_final_answer(response) == expected


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("Janet makes 9 * 2 = $18 every day at the farmer's market", "18"),
        ("He has 5 apples. 5 * 3 = 15. The answer is 15.", "15"),
        ("So the total is 1,234", "1,234"),
        ("The total is $1,234.50.", "1,234.50"),
        ("It fell to -5 degrees", "-5"),
        ("10-5", "5"),  # a minus between numbers is not a sign
        ("It is 3/4 of the cake", "3/4"),
        ("the probability is \\frac{1}{2}.", "\\frac{1}{2}"),
        ("No numbers here.", None),
        ("The answer is \\boxed{72", None),  # cut off: the marker says the answer was lost
        ("<answer>72", None),
        ("Answer: seventy-two, not 71", "seventy-two, not 71"),  # a marker wins, even a bad answer
    ],
)
def test_the_last_number_on_request(response, expected):
    assert extract_final_answer(response, last_number_fallback=True) == expected


def test_last_number_is_none_when_there_is_a_marker():
    assert last_number("I counted 41 then 42") == "42"
    for marked in ("\\boxed{4", "\\fbox{4}", "<answer>4", "#### 4", "Answer: 4"):
        assert has_answer_marker(f"It is 41 and {marked}")
        assert last_number(f"It is 41 and {marked}") is None
    assert not has_answer_marker("the answer is 4") and not has_answer_marker("final_answer: 4")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The final answer is $\\frac{2}{3}$. I hope it is correct.", "\\frac{2}{3}"),
        ("$18 and $20", "$18 and $20"),  # two prices, not a math span
        ("\\$18", "\\$18"),
        ("$x = 3$ cm.", "x = 3"),
        ("\\[ 5 \\]", "5"),
        ("72 apples.", "72"),
        ("10 meters", "10"),
        ("3 and a half", "3 and a half"),
        ("2 squared", "2 squared"),
        ("x = 5", "x = 5"),
        ("", ""),
    ],
)
def test_clean_answer_text(text, expected):
    assert clean_answer_text(text) == expected


#: (prefix, repeated unit, repeats at full size, suffix): shapes a careless scan would take quadratic time on
HOSTILE = {
    "open boxes": ("", "\\boxed{", 200_000, ""),
    "braces, then a box": ("", "{", 500_000, "\\boxed{"),
    "answer tags": ("", "<answer>", 100_000, ""),
    "backslashes, then a box": ("", "\\\\", 300_000, "\\boxed{1"),
    "answer markers": ("", "Answer: ", 100_000, ""),
    "spaces after 'answer'": ("answer", " ", 500_000, "x"),
    "#### and commas": ("#### ", "1,", 300_000, ""),
    "commas": ("", "1,", 300_000, ""),
    "dashes": ("", "-", 500_000, "1"),
    "dollars": ("", "$", 500_000, ""),
    "dollar numbers": ("Answer: ", "$1 ", 200_000, ""),
    "whitespace inside an answer line": ("Answer: 1", " ", 200_000, "x"),
    "open inline maths": ("Answer: ", "\\(", 100_000, ""),
    "exclamation marks": ("Answer: 5", "!", 200_000, ""),
    "words between numbers": ("Answer: 5 ", "apples ", 100_000, "7"),
}


@pytest.mark.parametrize("shape", sorted(HOSTILE))
def test_hostile_responses_are_linear(shape):
    """Ten times the text (up to half a megabyte) costs at most ~20x the time, measured in this run."""
    prefix, unit, count, suffix = HOSTILE[shape]
    big, small = prefix + unit * count + suffix, prefix + unit * (count // 10) + suffix
    ratio = cost_ratio(lambda text: extract_final_answer(text, last_number_fallback=True), small, big)
    assert ratio <= 20, f"10x the text cost {ratio:.0f}x the time on {shape!r}"
