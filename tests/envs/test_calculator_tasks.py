"""Calculator word problems: deterministic, solvable by replaying their steps, not answerable by copying."""

from __future__ import annotations

import re
from collections import Counter
from functools import partial

import pytest

from toolgym.core.task import ProceduralSource
from toolgym.envs.calculator_tasks import LEVELS, generate_calculator_task
from toolgym.rewards.numeric import NumericVerifier
from toolgym.tools.calculator import Calculator

SEEDS = range(2000)
STEP = re.compile(r"\d+(?:\*|\+|-|/|//)\d+(?:/100)?")


@pytest.fixture(scope="module")
def tasks() -> dict[int, list]:
    return {level: [generate_calculator_task(seed, level) for seed in SEEDS] for level in LEVELS}


def test_same_seed_same_task_and_seeds_differ(tasks):
    for level in LEVELS:
        assert generate_calculator_task(7, level) == generate_calculator_task(7, level)
        assert generate_calculator_task(7, level).model_dump() == tasks[level][7].model_dump()
        prompts = {t.prompt for t in tasks[level]}
        assert len(prompts) == len(SEEDS)  # every seed gives a different problem
    assert generate_calculator_task(7, 1).prompt != generate_calculator_task(7, 2).prompt


def test_steps_replay_to_the_gold(tasks):
    calc = Calculator()
    for level in LEVELS:
        for task in tasks[level]:
            outputs = []
            for expression in task.data["steps"]:
                assert STEP.fullmatch(expression), expression  # literal numbers only
                result = calc({"expression": expression})
                assert result.ok, (expression, result.output)
                assert re.fullmatch(r"\d+", result.output), result.output  # every intermediate is an integer
                outputs.append(result.output)
            assert outputs[-1] == str(task.answer), task.id
            # results are carried forward: every intermediate result is an operand of a later step
            steps = task.data["steps"]
            for i, out in enumerate(outputs[:-1]):
                assert any(re.search(rf"(?<!\d){out}(?!\d)", later) for later in steps[i + 1 :]), task.id


def test_levels_scale_steps_and_sizes(tasks):
    expected_steps = {1: {2}, 2: {3}, 3: {4, 5}}
    for level in LEVELS:
        counts = Counter(len(t.data["steps"]) for t in tasks[level])
        assert set(counts) == expected_steps[level]
        for task in tasks[level]:
            assert task.data["level"] == level
            assert type(task.answer) is int and task.answer > 0
            if level >= 2:
                assert task.answer >= 10_000, task.prompt
        biggest = [max(int(n) for n in re.findall(r"\d+", t.prompt)) for t in tasks[level]]
        low, high = {1: (100, 10**4), 2: (1000, 10**6), 3: (10**4, 10**7)}[level]
        assert all(b >= low for b in biggest)
        assert max(biggest) >= high // 10  # the top of the level's range does occur
    assert len(Counter(len(t.data["steps"]) for t in tasks[3])) == 2


def test_prompts_are_clean_questions_without_the_answer(tasks):
    for level in LEVELS:
        for task in tasks[level]:
            prompt = task.prompt
            assert "{" not in prompt and "}" not in prompt, prompt
            assert prompt.endswith("?") and prompt.count("?") == 1
            assert "  " not in prompt and prompt == prompt.strip()
            assert not re.search(rf"(?<!\d){task.answer}(?!\d)", prompt), prompt
            assert not re.search(r"\d,\d", prompt)  # numbers are written to be copied into the calculator


def test_every_template_is_used(tasks):
    for level in LEVELS:
        templates = Counter(t.data["template"] for t in tasks[level])
        assert len(templates) == 6 and min(templates.values()) > len(SEEDS) / 12


def test_gold_passes_the_numeric_verifier(tasks):
    verifier = NumericVerifier()
    for task in tasks[3][:200]:
        assert verifier.verify(task, f"{task.answer:,}").passed
        assert not verifier.verify(task, str(task.answer + 1)).passed


def test_works_as_a_procedural_source():
    source = ProceduralSource("calculator-L2", partial(generate_calculator_task, level=2))
    task = source.get("calculator-L2/12")
    assert task.id == "calculator-L2/12"
    assert task.prompt == generate_calculator_task(12, 2).prompt


@pytest.mark.parametrize("level", [0, 4, "1"])
def test_rejects_unknown_levels(level):
    with pytest.raises(ValueError, match="level"):
        generate_calculator_task(0, level)
