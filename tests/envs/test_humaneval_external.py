"""External check of the HumanEval verifier against the dataset's own ground truth, on all 164 problems.

Every canonical solution must score 1.0; the prompt alone (a function whose body is its docstring) and a
body of ``pass`` must score 0.0 (all-or-nothing, i.e. pass@1). Both return None, so under the fraction
reward they pass exactly the same asserts: the few that accept None (``assert not candidate(...)``).

3 x 164 verifications (about 3,400 test runs) go through the shared sandbox's async front end.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from toolgym.core.task import Task
from toolgym.envs.code_tasks import humaneval_source
from toolgym.rewards.code import CodeTestsVerifier
from toolgym.sandbox import shared_sandbox

TASKS = list(humaneval_source())


def verify_all(verifier: CodeTestsVerifier, answers: list[tuple[Task, str]]):
    async def main():
        return await asyncio.gather(*(verifier.averify(task, answer) for task, answer in answers))

    t0 = time.monotonic()
    verdicts = asyncio.run(main())
    print(f"{len(answers)} verifications in {time.monotonic() - t0:.1f} s")
    assert not [v.error for v in verdicts if v.error]
    return verdicts


@pytest.fixture(scope="module")
def verifier():
    shared_sandbox()  # started outside the timing
    return CodeTestsVerifier(reward="all_or_nothing")


# 164 tasks' worth of the same verifier path, the same on every Python: once per CI, in the main suite (the
# core suites on the other Pythons run the code verifier's own tests)
@pytest.mark.main_suite_only
def test_every_canonical_solution_scores_one(verifier):
    assert len(TASKS) == 164
    verdicts = verify_all(verifier, [(t, t.answer) for t in TASKS])
    failing = {t.id: v.details for t, v in zip(TASKS, verdicts) if v.reward != 1.0 or not v.passed}
    assert not failing


@pytest.mark.main_suite_only
def test_the_prompt_alone_and_a_pass_body_score_zero_everywhere(verifier):
    prompt_only = verify_all(verifier, [(t, t.data["setup"]) for t in TASKS])
    pass_body = verify_all(verifier, [(t, t.data["setup"] + "    pass\n") for t in TASKS])
    for task, a, b in zip(TASKS, prompt_only, pass_body):
        assert a.reward == b.reward == 0.0 and not a.passed and not b.passed, task.id
        assert a.details["tests_passed"] == b.details["tests_passed"] < a.details["tests_total"], task.id
    # e.g. HumanEval/12 `assert candidate([]) == None`, HumanEval/52 `assert not candidate([1, 20, 4, 10], 5)`
    partial = {t.id for t, v in zip(TASKS, prompt_only) if v.details["tests_passed"] > 0}
    assert partial == {f"HumanEval/{i}" for i in (12, 52, 56, 61, 90, 128, 137, 162)}
