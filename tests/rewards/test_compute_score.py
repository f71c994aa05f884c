"""The scorer table and verl's compute_score: dispatch by type or data_source; errors are never zeros."""

from __future__ import annotations

import numpy as np
import pytest

from toolgym.core.types import Verdict
from toolgym.rewards.compute_score import compute_score, scorer_name_for
from toolgym.rewards.scorers import (
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
        ("#### 42", {"type": "math", "ground_truth": "42"}, 1.0),
        (
            "Final Answer: The final answer is $x^2$. I hope it is correct.",
            {"type": "math", "ground_truth": "x^2"},
            1.0,
        ),
        ("I am not sure, maybe 42", {"type": "math", "ground_truth": "42"}, 1.0),  # numeric gold: last number
        ("I am not sure, maybe 42", {"type": "numeric", "ground_truth": 42}, 1.0),
        (
            "I am not sure, maybe x^2",
            {"type": "math", "ground_truth": "x^2"},
            0.0,
        ),  # no marker, no number gold
        ("I am not sure, maybe 41", {"type": "math", "ground_truth": "42"}, 0.0),
        (
            "It was built in 1889",
            {"type": "exact_match", "ground_truth": ["1889"]},
            0.0,
        ),  # QA: never a number
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


@pytest.mark.parametrize(
    ("response", "gold"),
    [
        ("I think x^2 + 1", "x^2+1"),  # the gold is not a number: the last number is no guess at it
        ("so the answer is \\boxed{42", "42"),  # a cut-off box: no answer, and no last number either
        ("", "42"),
    ],
)
def test_a_response_without_an_answer_says_so(response, gold):
    verdict = score(response, {"type": "math", "ground_truth": gold})
    assert verdict.reward == 0.0 and verdict.error is None
    assert "no final answer" in verdict.details["reason"]


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
    # verl scores these with DAPO's math rule
    assert scorer_name_for("aime2024") == scorer_name_for("math_dapo_reasoning") == "math"
    assert scorer_name_for("f1") == "f1"


# -- rows exported by toolgym for verl: extra_info carries the pinned task --------------------------------


@pytest.fixture(scope="module")
def env_tasks():
    """A real task of each built-in env, as ``toolgym export verl`` pins it (``env.unwrapped.task``)."""
    import gymnasium as gym

    import toolgym  # noqa: F401 - registers the envs

    tasks = {}
    for env_id in ("toolgym/Math-v0", "toolgym/Calculator-v0", "toolgym/Search-v0", "toolgym/PythonCode-v0"):
        env = gym.make(env_id)
        try:
            env.reset(seed=0)
            tasks[env_id] = env.unwrapped.task
        finally:
            env.close()
    return tasks


def exported_row_extra(env_id, task, **more):
    """``extra_info`` as the export writes it: the task as JSON text, env kwargs as JSON text."""
    return {
        "index": 0,
        "split": "train",
        "env_id": env_id,
        "env_kwargs": "{}",
        "task": task.model_dump_json(),
        "task_id": task.id,
        "seed": 0,
        **more,
    }


def score_row(env_id, task, solution, ground_truth="stale column", **more):
    result = compute_score(env_id, solution, ground_truth, exported_row_extra(env_id, task, **more))
    assert set(result) == {"score", "passed", "error"} and result["error"] == "", result
    return result


def test_an_exported_math_task_is_judged_against_its_own_answer(env_tasks):
    task = env_tasks["toolgym/Math-v0"]
    gold = str(task.answer)  # a fraction like \frac{146}{27}: judged by math-verify, in any equivalent form
    assert score_row("toolgym/Math-v0", task, f"So $x = \\boxed{{{gold}}}$.")["passed"]
    assert score_row("toolgym/Math-v0", task, f"<answer>{gold}</answer>")["passed"]
    assert score_row(
        "toolgym/Math-v0", task, f"Final Answer: The final answer is ${gold}$. I hope it is correct."
    )["passed"]
    assert score_row("toolgym/Math-v0", task, "\\boxed{0}") == {"score": 0.0, "passed": False, "error": ""}
    # without the task, the (here deliberately stale) ground_truth column is what is compared
    assert not compute_score("toolgym/Math-v0", f"\\boxed{{{gold}}}", "stale column")["passed"]


def test_an_exported_calculator_task_keeps_its_exact_integer_and_tolerance(env_tasks):
    task = env_tasks["toolgym/Calculator-v0"]
    gold = int(task.answer)
    assert score_row("toolgym/Calculator-v0", task, f"The steps give {gold - 7} and then... #### {gold:,}")[
        "passed"
    ]
    assert score_row("toolgym/Calculator-v0", task, f"Multiplying out, the total is {gold}.")["passed"]
    near = f"#### {gold + gold // 10_000}"  # off by about 1e-4 of the gold
    assert not score_row("toolgym/Calculator-v0", task, near)["passed"]
    tolerant = task.model_copy(update={"data": {**task.data, "rel_tol": 1e-3}})
    assert score_row("toolgym/Calculator-v0", tolerant, near)["passed"]
    # verification_info in extra_info wins over the task's data
    assert not score_row("toolgym/Calculator-v0", tolerant, near, verification_info={"rel_tol": 0})["passed"]


def test_an_exported_search_task_brings_all_its_gold_answers(env_tasks):
    task = env_tasks["toolgym/Search-v0"]
    assert task.data["golden_answers"]
    assert score_row("toolgym/Search-v0", task, f"<answer>{task.answer}</answer>")["passed"]
    assert not score_row("toolgym/Search-v0", task, "<answer>Paris</answer>")["passed"]
    aliases = task.model_copy(update={"data": {**task.data, "golden_answers": [task.answer, "The Alias"]}})
    assert score_row("toolgym/Search-v0", aliases, "<answer>the alias</answer>")["passed"]
    # a QA gold never comes from "the last number": a response that merely mentions it is not an answer
    numeric = task.model_copy(update={"answer": "1889", "data": {**task.data, "golden_answers": ["1889"]}})
    assert not score_row("toolgym/Search-v0", numeric, "I searched 3 times; it opened in 1889")["passed"]


def test_an_exported_python_task_runs_its_hidden_tests(env_tasks):
    task = env_tasks["toolgym/PythonCode-v0"]
    solution = f"Here is my solution:\n```python\n{task.answer}\n```"  # the reference solution
    assert score_row("toolgym/PythonCode-v0", task, solution, ground_truth="") == {
        "score": 1.0,
        "passed": True,
        "error": "",
    }
    stub = f"<answer>def {task.data['entry_point']}(*args):\n    raise NotImplementedError</answer>"
    assert score_row("toolgym/PythonCode-v0", task, stub) == {"score": 0.0, "passed": False, "error": ""}
    # the tests are the task's: one more that nothing passes makes the reference score n/(n+1)
    tests = [*task.data["tests"], "assert False, 'impossible'"]
    harder = task.model_copy(update={"data": {**task.data, "tests": tests}})
    result = score_row("toolgym/PythonCode-v0", harder, solution)
    assert not result["passed"] and result["score"] == pytest.approx((len(tests) - 1) / len(tests))


def test_the_task_may_come_as_a_mapping_or_a_task_and_a_broken_one_raises(env_tasks):
    task = env_tasks["toolgym/Math-v0"]
    response = f"\\boxed{{{task.answer}}}"
    for carried in (task, task.model_dump()):
        assert compute_score("toolgym/Math-v0", response, "stale", {"task": carried})["passed"]
    for broken in ('{"id": "x"', '{"prompt": "no id"}', 42):
        with pytest.raises(ValueError, match="extra_info\\['task'\\] is not a toolgym Task"):
            compute_score("toolgym/Math-v0", response, "stale", {"task": broken})
