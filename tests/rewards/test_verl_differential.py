"""compute_score against verl's own scorer: wherever verl calls an answer correct, toolgym does too.

verl's ``default_compute_score`` is the reference a verl user starts from: GSM8K's strict ``#### 72``,
lm-eval's ``\\boxed{}`` string match for the MATH datasets, DAPO's ``Answer:`` line for ``math_dapo`` /
``math`` / ``aime*``. Every response of the table is scored under every one of those data sources, by verl
and by toolgym. toolgym may accept more (math-verify equivalence, the formats of the other recipes, the last
number), never less; and each row also states toolgym's own verdict, so wrong answers are asserted wrong.
"""

from __future__ import annotations

import pytest
from verl.utils.reward_score import default_compute_score
from verl.utils.reward_score import gsm8k as verl_gsm8k

from toolgym.rewards.compute_score import compute_score
from toolgym.rewards.extract import has_answer_marker

GSM8K_SOURCES = ["openai/gsm8k"]
MATH_SOURCES = ["lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500"]
DAPO_SOURCES = ["math_dapo", "math", "aime2024"]
SOURCES = GSM8K_SOURCES + MATH_SOURCES + DAPO_SOURCES

# (response, gold, toolgym's verdict). Golds are what verl's preprocessing scripts store: GSM8K's number
# after "####" with commas removed, MATH's last \boxed{} of the solution, DAPO's integer.
TABLE = [
    # GSM8K, strict: the answer after ####
    (
        "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
        "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72",
        "72",
        True,
    ),
    ("Weng earns 12/60 = $0.2 a minute; in 50 minutes she earned 0.2 x 50 = $10.\n#### 10", "10", True),
    ("She needs 1,200 + 34 = 1,234 dollars in total.\n#### 1,234", "1234", True),
    ("The temperature fell by 12 degrees to -5 degrees.\n#### -5", "-5", True),
    ("So 5 / 2 = 2.5 liters are left.\n#### 2.5", "2.5", True),
    ("Half of it: 0.5\n#### 0.5", "0.5", True),
    ("#### 72.", "72", True),
    ("#### $18", "18", True),
    ("#### 18 dollars", "18", True),
    ("#### 5000.00", "5000", True),
    ("#### 1/2", "0.5", True),
    ("#### 5,000", "5000", True),
    ("#### 1,234.5", "1234.5", True),
    ("#### 12,", "12", True),
    ("#### 72\n\nI hope this helps!", "72", True),
    ("The answer is 72.\n#### 72", "72", True),
    ("The two sums are 30 and 42.\n#### 42", "42", True),
    ("#### 70", "72", False),
    ("She has 9 left, not 8.\n#### 8", "9", False),
    ("#### -5", "5", False),
    ("It is either 41 or 42.\n#### 41", "42", False),
    ("I could not solve it.\n####", "42", False),
    # GSM8K, flexible: no marker, the last number
    (
        "Janet sells 16 - 3 - 4 = 9 duck eggs a day. She makes 9 * 2 = $18 every day at the farmer's market",
        "18",
        True,
    ),
    ("She makes 9 * 2 = 18 dollars per day", "18", True),
    ("He has 5 apples. 5 * 3 = 15. The answer is 15.", "15", True),
    ("So the total is 1,234", "1234", True),
    ("In total, 5 + 7 = 12 cookies", "12", True),
    ("After the refund her balance is -3", "-3", True),
    ("The answer is 17", "18", False),
    ("3 + 4 = 7, and 7 + 9 = 16 so far", "20", False),
    ("I don't know.", "18", False),
    ("", "18", False),
    # a cut-off answer is no answer, even if its number is right
    ("The answer is \\boxed{72", "72", False),
    # \boxed{} (verl's MATH datasets)
    ("Therefore the answer is $\\boxed{\\frac{2}{3}}$.", "\\frac{2}{3}", True),
    ("So the probability is $\\boxed{\\dfrac{2}{3}}$.", "\\frac{2}{3}", True),
    ("\\boxed{2/3}", "\\frac{2}{3}", True),
    ("\\boxed{0.5}", "\\frac{1}{2}", True),
    ("\\boxed{-\\frac{1}{2}}", "-\\frac{1}{2}", True),
    ("\\boxed{\\tfrac14}", "\\frac{1}{4}", True),
    ("\\boxed{\\frac12}", "0.5", True),
    ("\\boxed{.5}", "\\frac{1}{2}", True),
    ("\\boxed{3\\sqrt2}", "3\\sqrt{2}", True),
    ("\\boxed{\\sqrt{2}}", "\\sqrt2", True),
    ("\\boxed{6 \\pi}", "6\\pi", True),
    ("\\boxed{y=2x+3}", "y = 2x + 3", True),
    ("\\boxed{x^2 + 7x + 10}", "x^2+7x+10", True),
    ("\\boxed{k=3}", "3", True),
    ("\\boxed{[-2, 7]}", "[-2,7]", True),
    ("\\boxed{10}", "10\\%", True),
    ("\\boxed{5 \\text{ inches}}", "5", True),
    ("\\boxed{12\\text{ square units}}", "12", True),
    ("\\boxed{\\text{Monday}}", "\\text{Monday}", True),
    ("\\boxed{\\$18.90}", "\\$18.90", True),
    ("The height is $\\boxed{\\frac{\\sqrt{3}}{2}}$.", "\\frac{\\sqrt{3}}{2}", True),
    ("The height is $\\boxed{\\frac{\\sqrt3}{2}}$.", "\\frac{\\sqrt{3}}{2}", True),
    ("The solution set is $\\boxed{(4,\\infty)}$.", "(4,\\infty)", True),
    ("The solution set is $\\boxed{(4, \\infty)}$.", "(4,\\infty)", True),
    ("\\boxed{x = 5}", "5", True),
    ("\\boxed{5\\%}", "5", True),
    ("\\boxed{90^\\circ}", "90", True),
    ("\\boxed{10\\text{ cm}}", "10", True),
    ("\\boxed{\\$18}", "18", True),
    ("\\boxed{10,\\!000}", "10,\\!000", True),
    ("\\boxed{10000}", "10,\\!000", True),
    ("\\boxed{\\text{(C)}}", "\\text{(C)}", True),
    ("\\boxed{3, 5}", "3, 5", True),
    ("\\boxed{\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}}", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", True),
    ("First \\boxed{3}, but that was wrong; the answer is \\boxed{4}.", "4", True),
    ("$\\boxed 5$", "5", True),
    ("\\fbox{12}", "12", True),
    ("The answer is $\\boxed{72}$.", "72", True),
    ("\\boxed{\\frac{3}{2}}", "\\frac{2}{3}", False),
    ("\\boxed{[4,\\infty)}", "(4,\\infty)", False),
    ("\\boxed{4}, no wait: \\boxed{3}", "4", False),
    ("\\boxed{}", "5", False),
    # Minerva / lm-eval: "Final Answer: The final answer is X. I hope it is correct."
    ("Final Answer: The final answer is $\\frac{2}{3}$. I hope it is correct.", "\\frac{2}{3}", True),
    ("We find x = 3.\nFinal Answer: The final answer is $3$. I hope it is correct.", "3", True),
    ("Final Answer: The final answer is 72. I hope it is correct.", "72", True),
    ("Final Answer: The final answer is $(4,\\infty)$. I hope it is correct.", "(4,\\infty)", True),
    ("Final Answer: The final answer is $\\boxed{5}$. I hope it is correct.", "5", True),
    ("Final Answer: The final answer is $5$ cm. I hope it is correct.", "5", True),
    ("Final Answer: The final answer is $\\frac{1}{3}$. I hope it is correct.", "\\frac{2}{3}", False),
    # DAPO: "Answer: $Answer" as the last line
    ("Adding up the cases gives 34.\nAnswer: 34", "34", True),
    ("Answer: $34$", "34", True),
    ("**Answer:** 34", "34", True),
    ("answer: 3,400", "3400", True),
    ("Answer: 34 dollars", "34", True),
    ("Answer: 34 students", "34", True),
    ("Answer: $34$ apples.", "34", True),
    ("Answer: \\$34", "34", True),
    ("Answer:\n34", "34", True),
    ("Answer: an 8", "8", True),
    ("Answer: -34", "-34", True),
    ("Answer: 1,000,000", "1000000", True),
    ("Answer: 5^\\circ", "5", True),
    ("Answer: 2 + 3 = 5", "5", True),
    ("Answer: n = 5", "5", True),
    ("Answer: \\frac12", "\\frac{1}{2}", True),
    ("Answer: x = 34", "34", True),
    ("Answer: $\\frac{2}{3}$", "\\frac{2}{3}", True),
    ("Answer: 33", "34", False),
    ("Answer: 33 or 34", "34", False),
    # <answer> tags
    ("<think>48 + 24 = 72</think>\n<answer>72</answer>", "72", True),
    ("<answer>\\frac{2}{3}</answer>", "\\frac{2}{3}", True),
    ("<answer>71</answer>", "72", False),
]


def verl_says_correct(data_source: str, response: str, gold: str) -> bool:
    result = default_compute_score(data_source, response, gold)
    value = result["score"] if isinstance(result, dict) else result
    return value > 0  # DAPO's rule scores a wrong answer -1.0


def toolgym_says_correct(data_source: str, response: str, gold: str) -> bool:
    result = compute_score(data_source, response, gold, extra_info={"index": 0, "split": "train"})
    assert result["error"] == "", result
    assert result["score"] == (1.0 if result["passed"] else 0.0)
    return result["passed"]


@pytest.mark.parametrize(("response", "gold", "expected"), TABLE)
def test_toolgym_accepts_whatever_verl_accepts(response, gold, expected):
    for data_source in SOURCES:
        ours = toolgym_says_correct(data_source, response, gold)
        assert ours is expected, (data_source, ours)
        if verl_says_correct(data_source, response, gold):
            assert ours, f"verl's {data_source!r} scorer accepts this and toolgym does not"


@pytest.mark.parametrize(
    ("response", "gold", "expected"),
    [row for row in TABLE if not has_answer_marker(row[0]) and row[1].lstrip("-").replace(".", "").isdigit()],
)
def test_toolgym_accepts_whatever_verls_flexible_gsm8k_mode_accepts(response, gold, expected):
    """verl's gsm8k "flexible" mode (the last number) on responses with no marker at all."""
    ours = toolgym_says_correct("openai/gsm8k", response, gold)
    assert ours is expected
    if verl_gsm8k.compute_score(response, gold, method="flexible") > 0:
        assert ours


def test_the_table_covers_every_format_both_ways():
    """Enough rows verl accepts under each family, some it misses that toolgym gets, and wrong answers."""
    for sources in (GSM8K_SOURCES, MATH_SOURCES, DAPO_SOURCES):
        verl_correct = [r for r, g, _ in TABLE if verl_says_correct(sources[0], r, g)]
        assert len(verl_correct) >= 5, sources
    only_toolgym = [r for r, g, ok in TABLE if ok and not any(verl_says_correct(s, r, g) for s in SOURCES)]
    assert len(only_toolgym) >= 5, only_toolgym  # e.g. "#### 72." and "#### $18" (verl: 0)
    wrong = [r for r, _, ok in TABLE if not ok]
    assert len(wrong) >= 15


def test_where_toolgym_departs_from_verls_flexible_mode_on_purpose():
    """Flexible mode reads the last number of any response; toolgym not once a response marked its answer."""
    cut_off = "48 + 24 = 72, so the answer is \\boxed{72"  # the length limit cut the answer off: no answer
    hedge = "Answer: 71 or 72"  # the marked answer is a hedge; its last number is not a fair reading of it
    for response, gold in ((cut_off, "72"), (hedge, "72")):
        assert verl_gsm8k.compute_score(response, gold, method="flexible") == 1.0
        assert not verl_says_correct("openai/gsm8k", response, gold)
        assert not toolgym_says_correct("openai/gsm8k", response, gold)
